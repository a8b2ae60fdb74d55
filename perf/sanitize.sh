#!/usr/bin/env bash
# compute-sanitizer (memcheck, racecheck) over one run of each attention, GEMM and index
# kernel family; kernels are compiled first without the sanitizer (disk cache), then loaded under it.
#   bash perf/sanitize.sh            (on the GPU machine, after setup-gpu-env.sh)
set -u -o pipefail
export CUTE_KERNELS_CACHE_DIR=${CUTE_KERNELS_CACHE_DIR:-/tmp/ck-sanitize-cache}
status=0
probes=("hopper 1000 1111 2 1 128 1" "hopper 1000 777 2 2 64 0" "ampere 1000 777 2 1 128 1"
        "hopper 1000 777 2 2 128 0 colsum 128" "hopper 1000 777 2 2 64 0 colsum"
        "ampere 1000 777 2 2 64 0 colsum")
# column-sparse attention (gather kernels): PATH S_Q S_KV D GROUP [accumulate]
sparse=("hopper 1000 1111 128 192" "hopper 700 333 64 128 accumulate" "hopper 300 500 64 64"
        "ampere 1000 1111 128 192 accumulate")
for p in "${probes[@]}"; do
  # shellcheck disable=SC2086
  python perf/attention_probe.py $p > /dev/null || { echo "probe failed: $p"; status=1; }
done
python perf/race_probe.py 128,192,64 1000 776 1000 m k 0 silu > /dev/null || status=1
for p in "${sparse[@]}"; do
  # shellcheck disable=SC2086
  python perf/column_sparse_probe.py $p > /dev/null || { echo "probe failed: $p"; status=1; }
done
check() {  # tool label command...
  local tool=$1 label=$2; shift 2
  if out=$(timeout 150 compute-sanitizer --tool "$tool" --report-api-errors no --error-exitcode 9 \
           "$@" 2>&1); then
    echo "clean  $tool  $label: $(echo "$out" | grep -m1 -o 'ERROR SUMMARY: [0-9]* error[s]*\|RACECHECK SUMMARY: [0-9]* hazard[s]*.*' || echo ok)"
  else
    echo "FAIL   $tool  $label"; echo "$out" | tail -8; status=1
  fi
}
for p in "${probes[@]}"; do
  for tool in memcheck racecheck; do
    # shellcheck disable=SC2086
    check $tool "attention $p" python perf/attention_probe.py $p
  done
done
for p in "${sparse[@]}"; do
  for tool in memcheck racecheck; do
    # shellcheck disable=SC2086
    check $tool "column-sparse $p" python perf/column_sparse_probe.py $p
  done
done
# block-sparse attention (both paths) and the index kernels (top-k, column lists)
for p in hopper ampere; do
  python perf/block_sparse_probe.py $p > /dev/null || { echo "probe failed: block-sparse $p"; status=1; }
done
python perf/index_probe.py > /dev/null || { echo "probe failed: index kernels"; status=1; }
for tool in memcheck racecheck; do
  for p in hopper ampere; do
    check $tool "block-sparse $p" python perf/block_sparse_probe.py $p
  done
  check $tool "index kernels" python perf/index_probe.py
done
for tool in memcheck racecheck; do
  check $tool "gemm 128x192 1000x776x1000 silu" python perf/race_probe.py 128,192,64 1000 776 1000 m k 0 silu
  check $tool "gemm 128x256 333x520x136" python perf/race_probe.py 128,256,64 333 520 136 k k 0 none
done
exit $status
