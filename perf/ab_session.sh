#!/usr/bin/env bash
# One device call comparing two source trees on the quick perf tables, interleaved per script:
#   bash perf/ab_session.sh BEFORE_TREE
# AB_SPECS="attention.py --path ampere;..." picks the scripts (default: GEMM, gated, attention
# on the Hopper path).
# BEFORE_TREE holds cute_kernels/, layouts/ and the perf scripts of the old commit (e.g.
# `git archive OLD cute_kernels layouts perf | tar -x -C .before`); the current tree is the
# "after". Tables and JSON land in $OUT/before and $OUT/after; ab_compare.py prints the diff.
set -u -o pipefail
BEFORE=${1:?usage: ab_session.sh BEFORE_TREE}
OUT=${OUT:-/tmp/ck-ab}; mkdir -p "$OUT"
run() {  # side tree script...
  local side=$1 tree=$2; shift 2
  ( cd "$tree" && PYTHONPATH="$PWD" CUTE_KERNELS_CACHE_DIR="/tmp/ck-cache-$side" \
      timeout 240 python perf/"$@" --quick --out "$OUT/$side" ) > "$OUT/$side-${1%.py}-$3.log" 2>&1 \
    || echo "FAILED $side $*"
}
SPECS=${AB_SPECS:-"gemm.py --path hopper;gated_mlp.py --path hopper;attention.py --path hopper"}
IFS=';' read -r -a specs <<< "$SPECS"
for spec in "${specs[@]}"; do
  # shellcheck disable=SC2086
  run before "$BEFORE" $spec
  # shellcheck disable=SC2086
  run after . $spec
  echo "done: $spec"
done
python perf/ab_compare.py "$OUT/before" "$OUT/after"
