#!/usr/bin/env bash
# The first device calls after kernels were written without a GPU: their GPU tests, their
# sanitizer probes, then a quick look at their speed; each step time-boxed so each part fits
# the device tool's 10-minute limit with ~30 s of set-up (logs stay in $OUT). Usage (repo
# root, on the device machine):
#   source .whl/setup-gpu-env.sh .whl . && bash perf/validate_session.sh tests
#   source .whl/setup-gpu-env.sh .whl . && bash perf/validate_session.sh checks
# (one device call each: "tests" 480 s of limits, "checks" 340 s; no argument runs both)
# Covers (2026-11-23): block-sparse attention (both paths, packed small blocks), the
# column-lists kernel, and the paths changed after the last GPU run (top-k with random
# columns, attention's validation cache, split-KV decoding). Prints a summary last.
set -u -o pipefail
OUT=${OUT:-/tmp/ck-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUTE_KERNELS_CACHE_DIR=${CUTE_KERNELS_CACHE_DIR:-/tmp/ck-validate}
summary=()
step() {  # label seconds command...
  local label=$1 limit=$2; shift 2
  echo; echo "=== $label"
  if timeout "$limit" "$@" > "$OUT/${label// /_}.log" 2>&1; then
    summary+=("ok      $label"); tail -3 "$OUT/${label// /_}.log"
  else
    summary+=("FAILED  $label (rc $?)"); tail -30 "$OUT/${label// /_}.log"
  fi
}
PART=${1:-all}
if [ "$PART" = all ] || [ "$PART" = tests ]; then
  step "block-sparse GPU tests" 300 python -m pytest -q -x --tb=short tests/test_block_sparse_gpu.py
  step "column-lists GPU tests" 60 python -m pytest -q -x --tb=short tests/test_column_lists_gpu.py
  step "changed paths: top-k random columns, attention validation cache, split-KV" 120 \
    python -m pytest -q --tb=short tests/test_topk_gpu.py tests/test_attention_gpu.py \
    -k "random_columns or default_output or split_kv or (matches_reference and 64)"
fi
if [ "$PART" = all ] || [ "$PART" = checks ]; then
  step "memcheck block-sparse hopper" 50 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    python perf/block_sparse_probe.py hopper
  step "racecheck block-sparse hopper" 50 compute-sanitizer --tool racecheck --report-api-errors no --error-exitcode 9 \
    python perf/block_sparse_probe.py hopper
  step "memcheck block-sparse ampere" 50 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    python perf/block_sparse_probe.py ampere
  step "memcheck index kernels" 40 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 \
    python perf/index_probe.py
  step "perf block-sparse (quick)" 90 python perf/block_sparse.py --quick --out "$OUT"
  step "topk tuning (fp32 digits)" 60 bash -c "cd perf && python topk_tuning.py \
    --shapes 4104x32768 --dtypes float32 --rounds 6"
fi
echo; printf '%s\n' "${summary[@]}"
