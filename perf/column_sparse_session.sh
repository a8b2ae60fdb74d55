#!/usr/bin/env bash
# Device calls for issue 14 (column-sparse attention and its index kernels): GPU tests,
# sanitizers, speed. Logs in $OUT, one per step; a summary last.
# Usage (repo root, on the device machine):
#   source .whl/setup-gpu-env.sh .whl . && CK_COMMIT=<sha> bash perf/column_sparse_session.sh PART
# PART: tests (top-k, column lists, the gather op: ~4 min), checks (memcheck / racecheck on the
# index kernels and the longest-first gather grid: ~3 min), perf (lists + top-k against
# torch, the top-k plans, the gather grid in order and not, even and uneven lists: ~5 min),
# or all; walks / walks2 / walks3 (the short gather tiles' schedules), blocks / blocks-final
# (packed key blocks of block-sparse attention: TMA block loads, host-dealt walks).
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
if [ "$PART" = walks ]; then  # short lists: the ordered grid against persistent CTAs' walks
  step walks-tests 300 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_op_gpu.py tests/test_block_sparse_gpu.py -k "short or packed or 32"
  SHORT="block_m=64, block_n=64, overlap=True, ctas_per_sm=2"
  step walks-tuning 200 python perf/column_sparse_tuning.py --group 128 --rounds 10 \
    --shape 1,16,8192,128 --sparsity 0.93,0.97 \
    --configs "[dict($SHORT, tile_order=True), dict($SHORT, persistent=True)]"
  for on in True False; do
    step "walks-small-$on" 150 python -c "import runpy, sys
import cute_kernels.ops.column_sparse as cs
cs.SHORT_GATHER_PERSISTENT = $on
sys.argv = ['block_sparse_small.py', '--seq', '8192', '--rounds', '10']
runpy.run_path('perf/block_sparse_small.py', run_name='__main__')"
  done
  step walks-memcheck 150 "${SANITIZE[@]}" --tool memcheck \
    python perf/column_sparse_probe.py hopper 20000 3000 128 128
  step walks-racecheck 200 "${SANITIZE[@]}" --tool racecheck \
    python perf/column_sparse_probe.py hopper 20000 3000 128 128
  for f in "$OUT"/walks-tuning.log "$OUT"/walks-small-*.log; do
    echo "--- $f"; grep -v DEBUG "$f" | tail -8; done
fi
if [ "$PART" = walks2 ]; then  # the packed 32-key op: where the persistent kernel's gain goes
  for on in True False; do
    step "walks-profile-$on" 150 python -c "import runpy, sys
import cute_kernels.ops.column_sparse as cs
cs.SHORT_GATHER_PERSISTENT = $on
sys.argv = ['block_sparse_small.py', '--seq', '8192', '--rounds', '10', '--profile']
runpy.run_path('perf/block_sparse_small.py', run_name='__main__')"
  done
  TUNE="python perf/attention_tuning.py --rounds 6 --causal"
  LP="[dict(overlap=True, longest_first=True), dict(overlap=True, persistent=True)]"
  step walks-c8k 120 $TUNE --shape 4,16,8192,128 --configs "$LP"
  step walks-c16k 120 $TUNE --shape 2,16,16384,128 --configs "$LP"
  step walks-c2k128 120 $TUNE --shape 16,16,2048,128 --configs "[dict(overlap=True, \
persistent=True), dict(block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2, \
persistent=True)]"
  step walks-c4kd64 120 $TUNE --shape 8,32,4096,64 --configs "[dict(), dict(persistent=True), \
dict(block_m=192, persistent=True)]"
  for f in "$OUT"/walks-profile-*.log; do
    echo "--- $f"; grep -v DEBUG "$f" | grep -E "tottime|^ +[0-9]+ +[0-9.]+ +[0-9.]+|Self CUDA|kernel|Kernel|^8192" | head -30; done
  for f in "$OUT"/walks-c*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -5; done
fi
if [ "$PART" = blocks ]; then  # packed key blocks: TMA block loads against the row gather
  step blocks-tests 420 python -m pytest -q --tb=short -p no:logging \
    tests/test_block_sparse_gpu.py -k "packed or loaders or short or bad"
  step blocks-8k 240 python perf/block_sparse_loaders.py --seq 8192 --blocks 32 \
    --configs "[dict(gather_tma=False), dict(), dict(persistent=True), \
dict(short=False, gather_tma=False), dict(short=False)]"
  step blocks-8k-16-64 200 python perf/block_sparse_loaders.py --seq 8192 --blocks 16,64 \
    --configs "[dict(gather_tma=False), dict(), dict(persistent=True)]"
  step blocks-32k 200 python perf/block_sparse_loaders.py --seq 32768 --blocks 32 \
    --configs "[dict(gather_tma=False), dict()]"
  step blocks-op 150 python perf/block_sparse_small.py --seq 8192,32768 --rounds 10
  step blocks-memcheck 150 "${SANITIZE[@]}" --tool memcheck python perf/block_sparse_probe.py
  step blocks-racecheck 200 "${SANITIZE[@]}" --tool racecheck python perf/block_sparse_probe.py
  for f in "$OUT"/blocks-8k*.log "$OUT"/blocks-32k.log "$OUT"/blocks-op.log; do
    echo "--- $f"; grep -v DEBUG "$f" | tail -24; done
fi
if [ "$PART" = walks3 ]; then  # packed key blocks: persistent walks dealt on the host
  step walks3-tests 300 python -m pytest -q --tb=short -p no:logging \
    tests/test_block_sparse_gpu.py -k "packed or loaders or short or bad or walks"
  step walks3-op-tests 300 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_op_gpu.py -k "short or persistent or capture or compile or graph"
  LPT="dict(persistent=True, walks='lpt'"
  step walks3-8k 240 python perf/block_sparse_loaders.py --seq 8192 --blocks 16,32,64 \
    --rounds 12 --configs "[dict(), $LPT, fixed=1), $LPT), $LPT, fixed=4)]"
  step walks3-op 150 python perf/block_sparse_small.py --seq 8192,32768 --rounds 10
  step walks3-memcheck 150 "${SANITIZE[@]}" --tool memcheck python perf/block_sparse_probe.py
  step walks3-racecheck 200 "${SANITIZE[@]}" --tool racecheck python perf/block_sparse_probe.py
  for f in "$OUT"/walks3-8k.log "$OUT"/walks3-op.log; do
    echo "--- $f"; grep -v DEBUG "$f" | tail -20; done
fi
if [ "$PART" = blocks-final ]; then  # packed key blocks: every test, the loaders' table
  step final-block-tests 400 python -m pytest -q --tb=short -p no:logging \
    tests/test_block_sparse_gpu.py
  step final-loaders 240 python perf/block_sparse_loaders.py --seq 8192 --blocks 16,32,64 \
    --rounds 12 --configs "[dict(gather_tma=False), dict(), dict(persistent=True), \
dict(persistent=True, walks='lpt')]"
  cp perf/plots/block_sparse_loaders_*.json "$OUT"/ 2>/dev/null
  step final-op 150 python perf/block_sparse_small.py --seq 8192,32768 --rounds 10
  for f in "$OUT"/final-loaders.log "$OUT"/final-op.log; do
    echo "--- $f"; grep -v DEBUG "$f" | tail -20; done
fi
if [ "$PART" = masked ]; then  # packed key blocks under element masks: tests, memcheck
  step masked-tests 420 python -m pytest -q --tb=short -p no:logging \
    tests/test_block_sparse_gpu.py -k "packed"
  step masked-memcheck 150 "${SANITIZE[@]}" --tool memcheck python perf/block_sparse_probe.py
fi
if [ "$PART" = masked2 ]; then  # the rest: every other block-sparse test, racecheck, perf
  step masked-other-tests 300 python -m pytest -q --tb=short -p no:logging \
    tests/test_block_sparse_gpu.py -k "not packed"
  step masked-memcheck-ampere 150 "${SANITIZE[@]}" --tool memcheck \
    python perf/block_sparse_probe.py ampere
  step masked-racecheck 200 "${SANITIZE[@]}" --tool racecheck python perf/block_sparse_probe.py
  step masked-perf 240 python perf/block_sparse.py --quick --out "$OUT"
  echo "--- masked-perf"; grep -v DEBUG "$OUT/masked-perf.log" | tail -22
fi
if [ "$PART" = ragged ]; then  # packed blocks with S_kv ending inside one, without a sync
  step ragged-tests 420 python -m pytest -q --tb=short -p no:logging \
    tests/test_block_sparse_gpu.py -k "packed or reused or loaders or bad"
  step ragged-memcheck 150 "${SANITIZE[@]}" --tool memcheck python perf/block_sparse_probe.py
  step ragged-racecheck 200 "${SANITIZE[@]}" --tool racecheck python perf/block_sparse_probe.py
  step ragged-op 200 python perf/block_sparse_small.py --seq 8192,8000,32768,32700 --rounds 10
  echo "--- ragged-op"; grep -v DEBUG "$OUT/ragged-op.log" | tail -14
fi
if [ "$PART" = routes ]; then  # block-sparse ops through every route: eager, compile, graphs
  step routes-tests 400 python -m pytest -q --tb=short -p no:logging tests/test_dispatch_gpu.py
  grep -v DEBUG "$OUT/routes-tests.log" | grep -E "passed|failed|Error|error|assert" | tail -30
fi
if [ "$PART" = routes2 ]; then  # after the full-block fix: routes, every block-sparse test, perf
  step routes2-dispatch 200 python -m pytest -q --tb=short -p no:logging \
    tests/test_dispatch_gpu.py -k "block_sparse"
  step routes2-block-sparse 400 python -m pytest -q --tb=short -p no:logging \
    tests/test_block_sparse_gpu.py -k "not packed or full_blocks"
  step routes2-perf 240 python perf/block_sparse.py --quick --out "$OUT"
  echo "--- routes2-perf"; grep -v DEBUG "$OUT/routes2-perf.log" | tail -20
fi
if [ "$PART" = narrow ]; then  # packed 32-key blocks on 64 x 32 tiles; what the baselines launch
  step baseline-kernels 200 python perf/baseline_kernels.py
  LPT="dict(persistent=True, walks='lpt'"
  step narrow-8k 300 python perf/block_sparse_loaders.py --seq 8192 --blocks 32,16 \
    --rounds 12 --configs "[$LPT), $LPT, block_n=32), $LPT, block_n=32, stages=3), \
$LPT, block_n=32, stages=4), $LPT, block_n=32, stages=3, fixed=4)]"
  for f in "$OUT"/baseline-kernels.log "$OUT"/narrow-8k.log; do
    echo "--- $f"; grep -v DEBUG "$f" | tail -60; done
fi
if [ "$PART" = wide ]; then  # packed blocks on 128 x 64 tiles: two consumer warpgroups share K/V
  LPT="dict(persistent=True, walks='lpt'"
  W="dict(short=False, block_n=64"
  step wide-8k 300 python perf/block_sparse_loaders.py --seq 8192 --blocks 32,64 --rounds 12 \
    --configs "[$LPT), $W, persistent=True, walks='lpt'), $W, persistent=True, walks='lpt', \
stages=3), $W)]"
  echo "--- wide"; grep -v DEBUG "$OUT/wide-8k.log" | tail -14
fi
echo; printf '%s\n' "${summary[@]}"
