#!/usr/bin/env bash
# Device calls for issue 14 (column-sparse attention and its index kernels): GPU tests,
# sanitizers, speed. Logs in $OUT, one per step; a summary last.
# Usage (repo root, on the device machine):
#   source .whl/setup-gpu-env.sh .whl . && CK_COMMIT=<sha> bash perf/column_sparse_session.sh PART
# PART: tests (top-k, column lists, the gather op: ~4 min), checks (memcheck / racecheck on the
# index kernels and the longest-first gather grid: ~3 min), perf (lists + top-k against
# torch, the top-k plans, the gather grid in order and not, even and uneven lists: ~5 min),
# or all.
set -u -o pipefail
export PYTHONUNBUFFERED=1 CUTE_KERNELS_CACHE_DIR=${CUTE_KERNELS_CACHE_DIR:-/tmp/ck-csp}
source "$(dirname "$0")/session_lib.sh"
PART=${1:-all}
if [ "$PART" = all ] || [ "$PART" = tests ]; then
  step column-lists-gpu-tests 120 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_lists_gpu.py
  step topk-gpu-tests 200 python -m pytest -q --tb=short -p no:logging tests/test_topk_gpu.py
  step gather-op-gpu-tests 240 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_op_gpu.py
fi
if [ "$PART" = all ] || [ "$PART" = checks ]; then
  step memcheck-index 90 "${SANITIZE[@]}" --tool memcheck python perf/index_probe.py
  step racecheck-index 90 "${SANITIZE[@]}" --tool racecheck python perf/index_probe.py
  # 40,000 query rows: 836 tiles of 192 (2,508 of 64), the longest-first grid
  step memcheck-ordered-hopper 120 "${SANITIZE[@]}" --tool memcheck \
    python perf/column_sparse_probe.py hopper 40000 777 128 192
  step racecheck-ordered-hopper 120 "${SANITIZE[@]}" --tool racecheck \
    python perf/column_sparse_probe.py hopper 40000 777 128 192
  step memcheck-ordered-ampere 120 "${SANITIZE[@]}" --tool memcheck \
    python perf/column_sparse_probe.py ampere 40000 777 128 64
fi
if [ "$PART" = all ] || [ "$PART" = perf ]; then
  step lists-and-topk-quick 150 python perf/column_sparse.py --quick --parts lists,topk \
    --out "$OUT"
  step gather-order-even 150 python perf/column_sparse_tuning.py --rounds 6 \
    --configs "[dict(), dict(tile_order=True)]" --sparsity 0,0.93
  step gather-order-uneven 150 python perf/column_sparse_tuning.py --rounds 6 \
    --configs "[dict(), dict(tile_order=True)]" --sparsity 0.5,0.93 --uneven 0.9
fi
echo; printf '%s\n' "${summary[@]}"
