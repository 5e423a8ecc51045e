#!/bin/bash
# HASS A/B: the shipped eagle3 continued 200 steps on the mix with human chunk 3, without and with HASS's top-4 term.
cd /work/main
export HF_HUB_OFFLINE=1
while pgrep -f run-moa.sh > /dev/null; do sleep 10; done
for v in a b; do
  extra=""; [ $v = b ] && extra="--hass-top-k 4"
  SPECVIZ_DRAFTS=/work/drafts-hass-$v .venv/bin/specviz train eagle3 --init-from eagle3-start \
    --corpus data/distill/corpus.jsonl,data/distill/human,data/distill/v2/chunk-012.jsonl.gz \
    --max-steps 200 --batch-tokens 2048 --lr 3e-4 --warmup-steps 20 --dtype bfloat16 $extra \
    --checkpoint /work/drafts-hass-$v/run.ckpt --checkpoint-minutes 5 > /work/run-hass-$v.log 2>&1
done
