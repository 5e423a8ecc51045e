#!/usr/bin/env bash
# How the shipped drafters in data/drafts were trained when a GPU was lent: the same project commands as
# on a CPU, with a larger self-distillation corpus (960 prompts, greedy + four sampling temperatures)
# and more epochs than fit the 45-minute CPU budget (docs/training.md, "How they are made", gives step
# counts that fit a 2-core CPU). Usage: scripts/train_drafters_gpu.sh [specviz command]
set -euo pipefail
SPECVIZ=${1:-specviz}
GPU="--device cuda --dtype float32"
$SPECVIZ distill $GPU --per-category 160 --modes greedy,sample@0.7,sample@0.8,sample@0.9,sample@1.0 --batch-size 256
$SPECVIZ train eagle $GPU --epochs 12 --batch-tokens 8192 --lr 1e-3
$SPECVIZ train tiny $GPU --epochs 8 --batch-tokens 8192 --lr 5e-4
$SPECVIZ train ss $GPU --epochs 8 --batch-tokens 8192 --lr 5e-4
$SPECVIZ train exit $GPU --exit-layers 4,8,15 --heads norm,layer --epochs 6 --batch-tokens 8192 --lr 1e-3
$SPECVIZ train cats $GPU --dm-layer 3 --sv-layer 15 --epochs 6 --batch-tokens 8192 --lr 1e-3
