# Call 2 (as in the round of 2026-11-28, evening; carry .gpu/gguf.part1 and data/drafts/eagle): the second half;
# then, with the engine's attention (cuDNN's off), `ar` and four methods at 64 tokens on the README's six prompts,
# and `ar` with PyTorch's own choice (cuDNN's fused attention on Hopper) at 16 tokens (bf16). The first round's
# `ar` took 61 ms a token; the two `ar` lines say how much of that cuDNN's graph builds were (docs/gpu.md). That
# round ran this as two calls (the first lacked data/drafts/eagle); its figures are in data/bench/cuda/h200-1128/.
set -u; . scripts/device_round/common.sh
[ -f $GGUF ] || cat /tmp/m/gguf.part0 .gpu/gguf.part1 > $GGUF && md5sum $GGUF
B="--device cuda --dtype bfloat16 --per-category 1"
M="ar,sps(draft=suffix),pld(gamma=auto),eagle(merge_suffix=true),eagle"
timeout 150 $SV bench $B --max-new-tokens 64 --methods "$M" --out $OUT/bench 2>&1 | grep -E "^\| |cuDNN|rror"
SPECVIZ_CUDNN_SDPA=1 timeout 100 $SV bench $B --max-new-tokens 16 --methods ar --out $OUT/ar-cudnn 2>&1 \
    | grep -E "^\| ar|cuDNN"
