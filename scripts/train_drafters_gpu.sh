#!/usr/bin/env bash
# How the shipped drafters in data/drafts were made when a GPU was lent (one H100; docs/training.md): the same
# project commands as on a CPU, with batches a GPU fills. First the chunked corpus (prompts and answers by the
# target, several chunks per batch), then every drafter family on one teacher pass per batch, each run cut to
# its time budget. The cards' runs were cut by a budget (--max-minutes 4.89, 2.35, 1.71) measured on probe steps
# that still included the warm-up step, so they stopped at 137, 370 and 430 steps; --max-steps repeats those
# counts exactly (the same cosine schedule). Give --max-minutes instead to train for a time.
# Usage: scripts/train_drafters_gpu.sh [specviz command]
set -euo pipefail
SPECVIZ=${1:-specviz}
GPU="--device cuda --dtype bfloat16"
CORPUS="--corpus data/distill/corpus.jsonl,data/distill/v2"
$SPECVIZ corpus $GPU --chunks 0-14 --together 5 --batch-size 2048 --max-batch-tokens 1000000
$SPECVIZ train all $GPU $CORPUS --epochs 2 --batch-tokens 32768 --lr 1e-3 --max-steps 137
$SPECVIZ train eagle,tiny,ss $GPU $CORPUS --epochs 2 --batch-tokens 16384 --lr 1e-3 --max-steps 370
$SPECVIZ train exit --exit-layers 3,4,5,6,8,10,15 --heads norm,layer $GPU $CORPUS --epochs 2 --batch-tokens 16384 \
    --lr 1e-3 --max-steps 430
