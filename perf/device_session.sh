#!/usr/bin/env bash
# One GPU session: run every test (GPU ones included), sanitizers, the perf scripts and the
# demo. On this project's offline device machine it first installs the DSL payload carried as
# .whl/ (docs/gpu.md); elsewhere the package must be installed already. Usage (repo root):
#   bash perf/device_session.sh            # everything
#   SKIP_PERF=1 bash perf/device_session.sh
set -u -o pipefail
OUT=${OUT:-/tmp/ck-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
if [ -f .whl/setup-gpu-env.sh ]; then source .whl/setup-gpu-env.sh .whl . || exit 1; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
status=0
step() { echo; echo "=== $1"; shift; "$@" || { echo "FAILED($?): $*"; status=1; }; }
step "pytest (all)" bash -c "python -m pytest -q -rs tests 2>&1 | tee $OUT/pytest.log | tail -25"
step "memcheck bitpack" bash -c "compute-sanitizer --tool memcheck --error-exitcode 9 python -m pytest -q -x tests/test_bitpack_gpu.py -k 'roundtrip or strided' 2>&1 | tail -6"
step "racecheck bitpack" bash -c "compute-sanitizer --tool racecheck --error-exitcode 9 python -m pytest -q -x tests/test_bitpack_gpu.py -k 'roundtrip and 2049' 2>&1 | tail -4"
step "memcheck gemm" bash -c "CUTE_KERNELS_DISK_CACHE=0 timeout 300 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python -m pytest -q -x tests/test_gemm_gpu.py -k 'skinny and (333 or 129)' 2>&1 | tail -4"
step "racecheck gemm" bash -c "CUTE_KERNELS_DISK_CACHE=0 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 python -m pytest -q -x tests/test_gemm_gpu.py -k 'skinny and 333' 2>&1 | tail -4"
step "memcheck gemm tiles" bash -c "CUTE_KERNELS_DISK_CACHE=0 timeout 300 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python -m pytest -q -x tests/test_gemm_gpu.py -k 'every_hopper_tile and 333' 2>&1 | tail -4"
# racecheck of our kernels alone (the tests' cuBLAS reference kernels report hazards of their own)
step "racecheck gemm 192" bash -c "CUTE_KERNELS_DISK_CACHE=0 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 python perf/race_probe.py 128,192,64 1000 776 1000 m k 0 silu 2>&1 | tail -2"
step "memcheck gated" bash -c "CUTE_KERNELS_DISK_CACHE=0 timeout 300 compute-sanitizer --tool memcheck --report-api-errors no --error-exitcode 9 python -m pytest -q -x tests/test_gated_mlp_gpu.py -k 'matches_reference and swiglu and (7-136 or 333-4104)' 2>&1 | tail -4"
step "racecheck gated" bash -c "CUTE_KERNELS_DISK_CACHE=0 timeout 300 compute-sanitizer --tool racecheck --error-exitcode 9 python -m pytest -q -x tests/test_gated_mlp_gpu.py -k 'matches_reference and swiglu and 333-4104' 2>&1 | tail -4"
# attention (plain, column sums, column-sparse gather) and GEMM under memcheck and racecheck
step "sanitizers (attention, column-sparse, gemm)" bash perf/sanitize.sh
if [ -z "${SKIP_PERF:-}" ]; then
  if [ -z "${SKIP_BITPACK_PERF:-}" ]; then
    step "launch overhead" python perf/launch_overhead.py
    step "perf bitpack" python perf/bitpack.py --out "$OUT"
  fi
  step "first call + host overhead" python perf/first_call.py --out "$OUT"
  # compile times are part of the GEMM report: measure them with the disk cache off
  step "perf gemm hopper" env CUTE_KERNELS_DISK_CACHE=0 python perf/gemm.py --path hopper ${GEMM_QUICK:+--quick} --out "$OUT"
  step "perf gemm ampere" env CUTE_KERNELS_DISK_CACHE=0 python perf/gemm.py --path ampere --quick --out "$OUT"
  step "perf gated hopper" python perf/gated_mlp.py ${GEMM_QUICK:+--quick} --out "$OUT"
  step "perf gated ampere" python perf/gated_mlp.py --path ampere --quick --out "$OUT"
  step "accuracy gated" python perf/gated_accuracy.py --out "$OUT"
  step "perf attention" python perf/attention.py ${GEMM_QUICK:+--quick} --out "$OUT"
  step "perf attention ampere" python perf/attention.py --path ampere --quick --out "$OUT"
  step "perf column-sparse" python perf/column_sparse.py ${GEMM_QUICK:+--quick} --out "$OUT"
  step "tuning attention" python perf/attention_tuning.py
  step "tuning gemm" bash -c "python perf/gemm_tuning.py --path ampere; python perf/gemm_tuning.py --path hopper"
  # the long-K regime where the gated MLP's 405B/64k shape still trails (2x2 measured slower)
  step "tuning gemm long-K" python perf/gemm_tuning.py --path hopper --shape 16384,106496,16384 --rounds 4
  step "demo" python -m cute_kernels demo
fi
exit $status
