# Call 2: the second half; then `ar` and four methods on CUDA (bf16, the README's six prompts, 128 tokens).
set -u; . scripts/device_round/common.sh
cat /tmp/m/gguf.part0 .gpu/gguf.part1 > $GGUF && md5sum $GGUF
# `ar` with PyTorch's own choice of attention first (cuDNN on Hopper from torch 2.11), against the engine's (cuDNN off):
# engines/model/cuda_attention.py
SPECVIZ_CUDNN_SDPA=1 timeout 100 $SV bench --device cuda --dtype bfloat16 --per-category 1 --max-new-tokens 128 \
   --methods ar --out $OUT/bench-cudnn 2>&1 | grep -E "^\| ar|cuDNN"
( time timeout 215 $SV bench --device cuda --dtype bfloat16 --per-category 1 --max-new-tokens 128 \
   --methods "ar,sps(draft=suffix),pld(gamma=auto),eagle(merge_suffix=true),eagle" --out $OUT/bench ) 2>&1 | tail -25
