#!/usr/bin/env bash
# Device call for issue 14's index kernels: top-k (kernels/topk.py, radix select and sampled
# candidates) and the column counts / lists (kernels/column_lists.py). One call runs their
# GPU tests, memcheck and racecheck on perf/index_probe.py, then their speed against
# torch.topk and a device copy (logs in $OUT, one per step; a summary last).
# Usage (repo root, on the device machine):
#   source .whl/setup-gpu-env.sh .whl . && CK_COMMIT=<sha> bash perf/index_session.sh [all]
#   ... bash perf/index_session.sh perf      # only the measurements (~4 min)
set -u -o pipefail
export PYTHONUNBUFFERED=1 CUTE_KERNELS_CACHE_DIR=${CUTE_KERNELS_CACHE_DIR:-/tmp/ck-index}
source "$(dirname "$0")/session_lib.sh"
PART=${1:-all}
if [ "$PART" = all ] || [ "$PART" = tests ]; then
  step column-lists-gpu-tests 150 python -m pytest -q -x --tb=short -p no:logging \
    tests/test_column_lists_gpu.py
  step topk-gpu-tests 200 python -m pytest -q -x --tb=short -p no:logging tests/test_topk_gpu.py
  step memcheck-index 90 "${SANITIZE[@]}" --tool memcheck python perf/index_probe.py
  step racecheck-index 90 "${SANITIZE[@]}" --tool racecheck python perf/index_probe.py
fi
if [ "$PART" = all ] || [ "$PART" = perf ]; then
  step lists-and-topk-quick 150 python perf/column_sparse.py --quick --parts lists,topk \
    --out "$OUT"
  step topk-tuning 200 python perf/topk_tuning.py --rounds 5
fi
echo; printf '%s\n' "${summary[@]}"
