#!/usr/bin/env bash
# Device calls for the BCSR stages, split-KV decode and block-sparse attention: their GPU
# tests, their sanitizer probes, then their speed; each step time-boxed so each part fits the
# device tool's 10-minute limit with ~30 s of set-up (logs stay in $OUT, one per step).
# Usage (repo root, on the device machine), one device call each:
#   source .whl/setup-gpu-env.sh .whl . && bash perf/validate_session.sh tests    # ~530 s
#   source .whl/setup-gpu-env.sh .whl . && bash perf/validate_session.sh checks   # ~390 s
#   source .whl/setup-gpu-env.sh .whl . && bash perf/validate_session.sh measure  # ~530 s
# Covers kernels/bsr.py (SDDMM, sparse softmax, SpMM on both paths), the split-KV combine
# kernel and num_splits=None (ops/attention.py), GQA query-head packing for decode, the
# gather kernels' count clamp and block-list expansion (packed small blocks), the CPU
# offloader; "measure" runs perf/bsr.py, the BCSR breakdowns, decode and block-sparse at
# S 64k. Prints a summary last.
set -u -o pipefail
export PYTHONUNBUFFERED=1 CUTE_KERNELS_CACHE_DIR=${CUTE_KERNELS_CACHE_DIR:-/tmp/ck-validate}
source "$(dirname "$0")/session_lib.sh"
PART=${1:-all}
if [ "$PART" = all ] || [ "$PART" = tests ]; then
  step bsr-gpu-tests 200 python -m pytest -q -x --tb=short -p no:logging tests/test_bsr_gpu.py
  step attention-split-and-packing 150 python -m pytest -q --tb=short -p no:logging \
    tests/test_attention_gpu.py -k "matches_reference or combine or split or num_splits"
  step column-sparse-count-clamp 120 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_op_gpu.py
  step packed-expansion 60 python -m pytest -q --tb=short -p no:logging \
    tests/test_block_sparse_gpu.py -k "packed or bad_list"
  step offload-gpu-tests 60 python -m pytest -q --tb=short -p no:logging tests/test_offload_gpu.py
fi
if [ "$PART" = all ] || [ "$PART" = checks ]; then
  step memcheck-bsr-hopper 60 "${SANITIZE[@]}" --tool memcheck python perf/bsr_probe.py hopper
  step racecheck-bsr 60 "${SANITIZE[@]}" --tool racecheck python perf/bsr_probe.py hopper
  step memcheck-bsr-ampere 60 "${SANITIZE[@]}" --tool memcheck python perf/bsr_probe.py ampere
  step memcheck-gather-counts 60 "${SANITIZE[@]}" --tool memcheck \
    python perf/column_sparse_probe.py hopper 1000 777 128 128
  step ncu-bsr 150 ncu --kernel-name regex:Bsr --launch-count 3 --section SpeedOfLight \
    --section Occupancy --section WarpStateStats --section LaunchStats \
    python perf/bsr_breakdown.py --n 32768 --blocks 64
fi
if [ "$PART" = measure ]; then
  step host-profile 40 python perf/host_profile.py
  step bsr-breakdown 60 python perf/bsr_breakdown.py --n 32768
  step perf-bsr 120 python perf/bsr.py --rounds 5 --out "$OUT"
  step perf-decode-quick 90 python perf/decode.py --quick --out "$OUT"
  step block-sparse-64k 220 python perf/block_sparse.py --seq 65536 --rounds 5 --out "$OUT/64k"
fi
echo; printf '%s\n' "${summary[@]}"
