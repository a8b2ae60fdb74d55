#!/usr/bin/env bash
# The first device calls after kernels were written without a GPU: their GPU tests, their
# sanitizer probes, then a quick look at their speed; each step time-boxed so each part fits
# the device tool's 10-minute limit with ~30 s of set-up (logs stay in $OUT, one per step).
# Usage (repo root, on the device machine):
#   source .whl/setup-gpu-env.sh .whl . && bash perf/validate_session.sh tests
#   source .whl/setup-gpu-env.sh .whl . && bash perf/validate_session.sh checks
#   source .whl/setup-gpu-env.sh .whl . && bash perf/validate_session.sh measure
# (one device call each: "tests" about 520 s of limits, "checks" about 490 s; no argument
# runs both). Covers (2026-11-23, second session): the BCSR stages (kernels/bsr.py: SDDMM,
# sparse softmax, SpMM on both paths), the split-KV combine kernel
# (kernels/attention/split_combine.py), GQA query-head packing for decode (ops/attention.py)
# the Hopper gather kernel's count clamp and the gather kernels' block-list expansion
# (block-sparse PACKED_EXPANSION_IN_KERNEL), written without a GPU. Prints a summary last.
set -u -o pipefail
OUT=${OUT:-/tmp/ck-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 CUTE_KERNELS_CACHE_DIR=${CUTE_KERNELS_CACHE_DIR:-/tmp/ck-validate}
# the device installs the DSL without bytecode: compile it once, or every process pays 1-2 s
SITE=$(python -c 'import site; print(site.getsitepackages()[0])')
python -m compileall -q -j 16 "$SITE/nvidia_cutlass_dsl" "$SITE/tvm_ffi" cute_kernels layouts \
  > /dev/null 2>&1
summary=()
step() {  # label seconds command...  (the label is also the log's file name: no spaces)
  local label=$1 limit=$2; shift 2
  echo; echo "=== $label"
  if timeout "$limit" "$@" > "$OUT/$label.log" 2>&1; then
    summary+=("ok      $label"); tail -3 "$OUT/$label.log"
  else
    summary+=("FAILED  $label (rc $?)"); grep -v DEBUG "$OUT/$label.log" | tail -30
  fi
}
SANITIZE=(compute-sanitizer --report-api-errors no --error-exitcode 9)
PART=${1:-all}
if [ "$PART" = all ] || [ "$PART" = tests ]; then
  step bsr-gpu-tests 240 python -m pytest -q -x --tb=short -p no:logging tests/test_bsr_gpu.py
  step attention-packed-and-combine 150 python -m pytest -q --tb=short -p no:logging \
    tests/test_attention_gpu.py -k "matches_reference or combine or split_kv"
  step column-sparse-count-clamp 120 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_op_gpu.py
  step packed-expansion-in-kernel 90 python -m pytest -q --tb=short -p no:logging \
    tests/test_block_sparse_gpu.py -k "packed or bad_list"
  step offload-gpu-tests 60 python -m pytest -q --tb=short -p no:logging tests/test_offload_gpu.py
fi
if [ "$PART" = all ] || [ "$PART" = checks ]; then
  step memcheck-bsr-hopper 60 "${SANITIZE[@]}" --tool memcheck python perf/bsr_probe.py hopper
  step racecheck-bsr 60 "${SANITIZE[@]}" --tool racecheck python perf/bsr_probe.py hopper
  step memcheck-bsr-ampere 60 "${SANITIZE[@]}" --tool memcheck python perf/bsr_probe.py ampere
  step memcheck-gather-counts 60 "${SANITIZE[@]}" --tool memcheck \
    python perf/column_sparse_probe.py hopper 1000 777 128 128
  step perf-bsr-quick 120 python perf/bsr.py --quick --out "$OUT"
  step perf-decode-quick 130 python perf/decode.py --quick --out "$OUT"
fi
if [ "$PART" = bsr ]; then  # the reworked BCSR kernels (chunked SDDMM, per-row softmax) and the gates
  step bsr-gpu-tests 200 python -m pytest -q -x --tb=short -p no:logging tests/test_bsr_gpu.py
  step gates-gpu-tests 120 python -m pytest -q --tb=short -p no:logging \
    tests/test_attention_gpu.py tests/test_block_sparse_gpu.py -k "combine or split_kv or packed"
  step memcheck-bsr 60 "${SANITIZE[@]}" --tool memcheck python perf/bsr_probe.py hopper
  step racecheck-bsr 60 "${SANITIZE[@]}" --tool racecheck python perf/bsr_probe.py hopper
  step bsr-breakdown 90 python perf/bsr_breakdown.py --n 32768
  step perf-bsr 200 python perf/bsr.py --rounds 5 --out "$OUT"
fi
if [ "$PART" = final ]; then  # the staged SDDMM epilogue, host costs, decode, block-sparse at 64k
  step bsr-gpu-tests 150 python -m pytest -q -x --tb=short -p no:logging tests/test_bsr_gpu.py
  step memcheck-bsr 60 "${SANITIZE[@]}" --tool memcheck python perf/bsr_probe.py hopper
  step racecheck-bsr 60 "${SANITIZE[@]}" --tool racecheck python perf/bsr_probe.py hopper
  step host-profile 40 python perf/host_profile.py
  step bsr-breakdown 60 python perf/bsr_breakdown.py --n 32768
  step perf-bsr 120 python perf/bsr.py --rounds 5 --out "$OUT"
  step perf-decode-quick 80 python perf/decode.py --quick --out "$OUT"
  step block-sparse-64k 200 python perf/block_sparse.py --seq 65536 --rounds 5 --out "$OUT/64k"
fi
if [ "$PART" = defaults ]; then  # the switches' new defaults: auto num_splits, SpMM/SDDMM choice
  step attention-split-tests 150 python -m pytest -q --tb=short -p no:logging \
    tests/test_attention_gpu.py -k "split or combine or packs_query or num_splits"
  step bsr-gpu-tests 120 python -m pytest -q -x --tb=short -p no:logging tests/test_bsr_gpu.py
  step perf-decode-quick 90 python perf/decode.py --quick --out "$OUT"
  step perf-bsr 120 python perf/bsr.py --rounds 5 --out "$OUT"
fi
if [ "$PART" = measure ]; then  # the switches' A/B and where the BCSR time goes
  step bsr-breakdown 150 python perf/bsr_breakdown.py --n 32768
  step ncu-bsr 150 ncu --kernel-name regex:Bsr --launch-count 3 --section SpeedOfLight \
    --section Occupancy --section WarpStateStats --section LaunchStats \
    python perf/bsr_breakdown.py --n 32768 --blocks 64
  step decode-combine-kernel 130 python perf/decode.py --quick --combine kernel --out "$OUT/ck"
  step block-sparse-8k 240 python perf/block_sparse.py --quick --out "$OUT"
fi
echo; printf '%s\n' "${summary[@]}"
