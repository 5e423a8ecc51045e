# Call 1: the first half of the model, the machine's facts, and the CUDA tests that need no model (tiny targets).
set -u; . scripts/device_round/common.sh
cp .gpu/gguf.part0 /tmp/m/
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, transformers as t; print(torch.__version__, torch.cuda.get_device_name(0), t.__version__)"
timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py -k "seeded or trainers" 2>&1 \
    | tee $OUT/1-tests.log | tail -5
