# Call 3 (as in the round of 2026-11-28, evening): `eagle3` and `eagle` refined together on the GPU from the shipped
# heads, on one teacher pass per batch and the whole corpus (issue 39's GPU recipe; MINUTES of training, default 5).
# That round's run had no --epochs, so the default of one epoch ended it after 2,356 steps in 219 s; with --epochs 20
# the time bounds it.
set -u; . scripts/device_round/common.sh
MINUTES=${1:-5}
mkdir -p /tmp/drafts && cp -r data/drafts/eagle3 data/drafts/eagle /tmp/drafts/
( time SPECVIZ_DRAFTS=/tmp/drafts timeout $(( MINUTES * 60 + 150 )) $SV train eagle3,eagle --device cuda \
   --dtype bfloat16 --init-from shipped --corpus data/distill/corpus.jsonl,data/distill/v2,data/distill/human \
   --max-minutes "$MINUTES" --epochs 20 --batch-tokens 8192 --lr 3e-4 --warmup-steps 20 --acceptance-tokens 1 ) 2>&1 \
   | tr '\r' '\n' | grep -vE "^train .*step/s" | tail -8
for d in eagle3 eagle; do mkdir -p $OUT/$d && cp /tmp/drafts/$d/* $OUT/$d/; done
