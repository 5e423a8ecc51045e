#!/usr/bin/env bash
# How the corpus in data/distill/v2 and the drafters of the last GPU round were made (one H100; docs/training.md,
# "GPU rounds on the larger corpus", round 3): the same project commands as on a CPU, with batches a GPU fills.
# First the chunked corpus (prompts and answers by the target, several chunks per batch), then two training runs
# sharing the GPU, each cut to its time budget (--max-minutes 4.2 and 4.0, which stopped them at 1254 and 1310
# steps; --max-steps repeats those counts on the same cosine schedule). Give --max-minutes instead to train for a
# time. The seed-corpus drafters (eagle, tiny, ss, exit@4/8/15, cats@3/15) and the MoA drafters hold their own
# commands in their cards.
# Usage: scripts/train_drafters_gpu.sh [specviz command]
set -euo pipefail
SPECVIZ=${1:-specviz}
GPU="--device cuda --dtype bfloat16"
CORPUS="--corpus data/distill/corpus.jsonl,data/distill/v2"
$SPECVIZ corpus $GPU --chunks 0-4 --together 5 --batch-size 2048 --max-batch-tokens 1000000
$SPECVIZ corpus $GPU --chunks 5-12 --together 4 --batch-size 2048 --max-batch-tokens 1000000
TRAIN="$GPU $CORPUS --epochs 20 --batch-tokens 8192 --lr 1e-3"
$SPECVIZ train eagle,tiny,ss $TRAIN --max-steps 1254 &
$SPECVIZ train exit,cats $TRAIN --max-steps 1310 &
wait
