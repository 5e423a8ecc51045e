# Call 4: the CUDA tests on the real model, with the drafters that travelled (this call's and call 3's eagle3);
# SPECVIZ_DRAFTS names only those, so every drafter a test asks for is present.
set -u; . scripts/device_round/common.sh
mkdir -p /tmp/sub && for d in eagle tiny ss exit@15-norm; do cp -r "data/drafts/$d" /tmp/sub/; done
SPECVIZ_DRAFTS=/tmp/sub timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_cuda.py \
    -k "not seeded and not trainers" 2>&1 | tee $OUT/4-tests.log | tail -5
