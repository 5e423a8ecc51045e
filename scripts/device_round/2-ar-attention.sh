# Call 2 (round of 2026-11-28, evening): the second half; then `ar` with PyTorch's choice of attention (cuDNN's on
# Hopper) against the engine's (cuDNN off), 32 tokens on the README's six prompts, and then, with cuDNN off, `ar`
# and three methods at 64 tokens (bf16). The first round's `ar` took 61 ms a token; this call says whether cuDNN's
# graph builds were why (docs/gpu.md).
set -u; . scripts/device_round/common.sh
cat /tmp/m/gguf.part0 .gpu/gguf.part1 > $GGUF && md5sum $GGUF
B="--device cuda --dtype bfloat16 --per-category 1"
SPECVIZ_CUDNN_SDPA=1 timeout 60 $SV bench $B --max-new-tokens 32 --methods ar --out $OUT/ar-cudnn 2>&1 | grep -E "^\| ar|cuDNN"
timeout 60 $SV bench $B --max-new-tokens 32 --methods ar --out $OUT/ar-engine 2>&1 | grep -E "^\| ar|cuDNN"
( time timeout 100 $SV bench $B --max-new-tokens 64 \
   --methods "ar,sps(draft=suffix),pld(gamma=auto),eagle(merge_suffix=true)" --out $OUT/bench ) 2>&1 | tail -12
