#!/usr/bin/env bash
# Device calls for the small / skinny GEMM schedules (issue 17): GPU tests, sanitizer probes
# and the sweep against cuBLAS, each step time-boxed (logs in $OUT, one per step). Usage:
#   source .whl/setup-gpu-env.sh .whl . && bash perf/gemm_session.sh first
#   source .whl/setup-gpu-env.sh .whl . && bash perf/gemm_session.sh checks
#   source .whl/setup-gpu-env.sh .whl . && bash perf/gemm_session.sh ops
#   source .whl/setup-gpu-env.sh .whl . && bash perf/gemm_session.sh sweep
# Prints a summary last.
set -u -o pipefail
export PYTHONUNBUFFERED=1 CUTE_KERNELS_CACHE_DIR=${CUTE_KERNELS_CACHE_DIR:-/tmp/ck-gemm}
source "$(dirname "$0")/session_lib.sh"
PART=${1:-first}
if [ "$PART" = first ]; then
  step probe 120 python perf/gemm_skinny_probe.py
  step gemm-gpu-tests 200 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "skinny or forced or strided_out or hopper"
  step skinny-quick 240 python perf/gemm_skinny.py --quick --variants --graphs --rounds 10 \
    --out "$OUT"
  step memcheck 120 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
fi
if [ "$PART" = flat ]; then  # 2-D operands straight to the kernel: tests, memcheck, host cost
  step gemm-gpu-tests 300 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    tests/test_dispatch_gpu.py
  step memcheck 90 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step flat-sweep 150 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT" --shapes \
1x14336x4096,13x14336x4096,1x4096x14336,8x4096x14336,1x28672x8192,64x14336x4096,\
128x4096x14336,512x4096x14336,1024x1024x1024,2048x2048x2048,3000x5000x3072
  grep -v DEBUG "$OUT/flat-sweep.log" | tail -16
fi
if [ "$PART" = checks ]; then  # every GEMM-family GPU test (both paths), sanitizers, the sweep
  step gemm-gpu-tests 300 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    tests/test_gated_mlp_gpu.py tests/test_dispatch_gpu.py
  step memcheck 90 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step racecheck 90 "${SANITIZE[@]}" --tool racecheck python perf/gemm_skinny_probe.py
  step sweep 200 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT"
fi
if [ "$PART" = ops ]; then  # every other op's GPU tests (all launch through the same bridge)
  step op-gpu-tests 560 python -m pytest -q -x --tb=short -p no:logging -m gpu tests \
    --ignore=tests/test_gemm_gpu.py --ignore=tests/test_gated_mlp_gpu.py \
    --ignore=tests/test_dispatch_gpu.py
fi
if [ "$PART" = sweep ]; then
  step skinny-sweep 500 python perf/gemm_skinny.py --variants --graphs --out "$OUT"
fi
echo; echo "=== summary"; printf '%s\n' "${summary[@]}"
