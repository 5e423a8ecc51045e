# Call 3: eagle3 refined on the GPU from the shipped head (issue 39's GPU recipe, 1.7 minutes of training).
set -u; . scripts/device_round/common.sh
mkdir -p /tmp/drafts /tmp/sub && cp -r data/drafts/eagle3 /tmp/drafts/ && cp -r data/drafts/eagle3 /tmp/sub/
( time SPECVIZ_DRAFTS=/tmp/drafts timeout 150 $SV train eagle3 --device cuda --dtype bfloat16 --init-from shipped \
   --corpus data/distill/corpus.jsonl,data/distill/v2,data/distill/human --max-minutes 1.7 --batch-tokens 8192 \
   --lr 3e-4 --warmup-steps 20 ) 2>&1 | tail -3
mkdir -p $OUT/eagle3 && cp /tmp/drafts/eagle3/* $OUT/eagle3/
