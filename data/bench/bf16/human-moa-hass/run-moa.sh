#!/bin/bash
cd /work/main
export HF_HUB_OFFLINE=1 SPECVIZ_DRAFTS=/work/drafts-moa
.venv/bin/specviz train moa --tli 0 --control eagle-matched --init-from shipped \
    --corpus data/distill/corpus.jsonl,data/distill/human,data/distill/v2/chunk-012.jsonl.gz \
    --max-minutes 60 --batch-tokens 2048 --lr 3e-4 --warmup-steps 20 --dtype bfloat16 \
    --checkpoint /work/drafts-moa/run.ckpt --checkpoint-minutes 5
