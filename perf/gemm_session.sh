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
if [ "$PART" = gaps ]; then  # the misses beside what cuBLAS launches for them
  step gaps-kernels 200 python perf/baseline_kernels.py --ours --attention 8,16,1024,128,causal \
    --gemm 1024,1024,1024 1024,1024,64 1024,1024,256 1024,1024,4096 128,4096,14336 3000,5000,3072
  step gaps-tiles 300 python perf/gemm_skinny.py --graphs --rounds 10 \
    --shapes 128x4096x14336,64x4096x14336,1024x1024x1024 \
    --tiles 128x64x64s2,128x64x64s2c1,128x64x64s4,128x64x64c1
  for f in "$OUT"/gaps-kernels.log "$OUT"/gaps-tiles.log; do
    echo "--- $f"; grep -v "DEBUG\|Warn" "$f" | tail -70; done
fi
if [ "$PART" = stages ]; then  # pipeline depth on the small tiles (cuBLAS: 128x64, 8 stages)
  step stages-tiles 400 python perf/gemm_skinny.py --graphs --rounds 10 \
    --shapes 1024x1024x1024,128x4096x14336,64x4096x14336,1024x1024x4096 \
    --tiles 128x64x64p8,128x64x64p8c1,128x64x128,64x128x64p8,128x64x64s2p8,128x64x64s2p8c1,\
128x128x64s4p6,64x128x64s4p8,64x128x64s2p8
  echo "--- stages"; grep -v "DEBUG\|Warn" "$OUT/stages-tiles.log" | tail -30
fi
if [ "$PART" = ncu ]; then  # 128x64 tiles: where the k-tile time goes, ours against cuBLAS's
  step ncu-1k-4k 200 ncu --nvtx --nvtx-include "profile/" --section SpeedOfLight \
    --section MemoryWorkloadAnalysis --section WarpStateStats --section ComputeWorkloadAnalysis \
    --metrics sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,\
lts__t_sectors_op_read.sum,lts__t_bytes.sum.per_second,sm__inst_executed_pipe_uniform.sum,\
smsp__inst_executed.sum,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,\
smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_wait_per_issue_active.ratio,\
smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio \
    python perf/profile_gemm.py 1024,1024,4096
  grep -v "DEBUG\|Warn\|^==PROF" "$OUT/ncu-1k-4k.log" | grep -E \
    "GemmSm90|nvjet|Duration|Throughput|Busy|hmma|lts__|inst_executed|bank|stalled|Ipc|Eligible|Issued Warp|No Eligible|Active Warps|Hit Rate|Bandwidth" | head -90
fi
if [ "$PART" = stages2 ]; then  # the same with the plain launches honouring max_stages
  step stages2-tiles 450 python perf/gemm_skinny.py --graphs --rounds 10 \
    --shapes 1024x1024x1024,1024x1024x4096,64x14336x4096,512x4096x14336,2048x2048x2048 \
    --tiles 128x64x64p6,128x64x64p8,128x64x64p8c1,64x128x64p8,128x128x64p6,64x256x64p5
  echo "--- stages2"; grep -v "DEBUG\|Warn" "$OUT/stages2-tiles.log" | tail -30
fi
if [ "$PART" = cluster ]; then  # split-K in a cluster (DSMEM reduce): tests, sanitizers, speed
  step cluster-tests 300 python -m pytest -q -x --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "cluster_split or forced_skinny or skinny_shapes"
  step cluster-memcheck 150 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step cluster-racecheck 150 "${SANITIZE[@]}" --tool racecheck python perf/gemm_skinny_probe.py
  step cluster-speed 400 python perf/gemm_skinny.py --graphs --rounds 10 \
    --shapes 1024x1024x1024,128x4096x14336,64x4096x14336,1024x1024x4096,512x4096x14336 \
    --tiles 128x128x64k2,128x128x64k4,128x64x64k2,64x128x64k2,64x128x64k4,128x256x64k2
  echo "--- cluster"; grep -v "DEBUG\|Warn" "$OUT/cluster-speed.log" | tail -30
fi
if [ "$PART" = cluster2 ]; then  # split-K 2 in a cluster: tests, sanitizers, where time goes
  step cluster2-tests 300 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "cluster_split"
  step cluster2-memcheck 150 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step cluster2-racecheck 150 "${SANITIZE[@]}" --tool racecheck python perf/gemm_skinny_probe.py
  for cfg in "dict()" "dict(tile=(128, 128, 64), cluster_m=1, cluster_k=2)"; do
    step "cluster2-ncu-$(echo "$cfg" | tr -dc 'a-z0-9' | head -c 24)" 150 ncu --nvtx \
      --nvtx-include "profile/" --section SpeedOfLight --section SourceCounters \
      --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      python perf/profile_gemm_plan.py 1024,1024,4096 "$cfg"
  done
  for f in "$OUT"/cluster2-ncu-*.log; do echo "--- $f"; grep -v "DEBUG\|Warn\|^==PROF" "$f" \
    | grep -E "GemmSm90|nvjet|Duration|stalled|Throughput  |Busy" | awk '$NF+0 > 0.05 || /Gemm|nvjet|Duration/' | head -60; done
fi
if [ "$PART" = cluster3 ]; then  # split-K 2 in a cluster against the unsplit 128x64 default
  step cluster3-tests 300 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "cluster_split"
  step cluster3-speed 400 python perf/gemm_skinny.py --graphs --rounds 10 --shapes \
1024x1024x2048,1024x1024x4096,1024x1024x8192,1024x1024x16384,768x1024x8192,512x2048x8192,\
1024x1536x8192 --tiles 128x128x64k2,128x256x64k2
  echo "--- cluster3"; grep -v "DEBUG\|Warn" "$OUT/cluster3-speed.log" | tail -30
fi
if [ "$PART" = cluster-final ]; then  # the cluster split by default: every GEMM test, sweeps
  step final-gemm-tests 500 python -m pytest -q --tb=short -p no:logging \
    tests/test_gemm_gpu.py tests/test_dispatch_gpu.py tests/test_gated_mlp_gpu.py
  step final-memcheck 150 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step final-racecheck 150 "${SANITIZE[@]}" --tool racecheck python perf/gemm_skinny_probe.py
  step final-medium 200 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT/medium" \
    --shapes 1024x1024x2048,1024x1024x4096,1024x1024x8192,1024x1024x16384,768x1024x8192,\
512x2048x8192,768x1024x2048 --tiles 128x64x64c2
  step final-sweep 400 python perf/gemm_skinny.py --graphs --rounds 8 --out "$OUT/sweep"
  for f in "$OUT"/final-medium.log "$OUT"/final-sweep.log; do echo "--- $f"
    grep -v "DEBUG\|Warn" "$f" | tail -40; done
fi
if [ "$PART" = cluster4 ]; then  # cluster split with deeper rings; 128x192 pairs
  step cluster4-speed 400 python perf/gemm_skinny.py --graphs --rounds 10 \
    --shapes 128x4096x14336,64x4096x14336,1024x1536x8192,1024x1536x4096,3000x5000x3072 \
    --tiles 128x64x64k2p8,128x64x64k2p6,64x128x64k2p8,128x192x64k2,128x128x64k2,128x64x64s2p8
  echo "--- cluster4"; grep -v "DEBUG\|Warn" "$OUT/cluster4-speed.log" | tail -24
fi
if [ "$PART" = cluster-final2 ]; then  # the tile choice of the cluster split: tests, speed
  step final2-gemm-tests 500 python -m pytest -q --tb=short -p no:logging \
    tests/test_gemm_gpu.py tests/test_dispatch_gpu.py
  step final2-memcheck 150 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step final2-shapes 300 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT/paired" \
    --shapes 128x4096x14336,64x4096x14336,48x4096x14336,333x1024x4096,512x1024x8192,\
1024x1536x4096,1024x1536x8192,1024x1024x4096,768x1024x8192
  echo "--- final2"; grep -v "DEBUG\|Warn" "$OUT/final2-shapes.log" | tail -16
fi
if [ "$PART" = cluster-ab ]; then  # cluster split against the workspace route it replaced
  step ab-shapes 300 python perf/gemm_skinny.py --graphs --rounds 12 \
    --shapes 333x1024x4096,512x1024x8192,48x4096x14336,128x4096x14336 \
    --tiles 128x128x64s4c2,128x128x64s4c1,128x128x64k2,64x128x64s4
  echo "--- ab"; grep -v "DEBUG\|Warn" "$OUT/ab-shapes.log" | tail -14
fi
if [ "$PART" = final3 ]; then  # 64x128 with 8 stages for 128x64's shapes; the split sync
  step final3-gemm-tests 500 python -m pytest -q --tb=short -p no:logging \
    tests/test_gemm_gpu.py tests/test_dispatch_gpu.py
  step final3-memcheck 150 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step final3-racecheck 150 "${SANITIZE[@]}" --tool racecheck python perf/gemm_skinny_probe.py
  step final3-shapes 300 python perf/gemm_skinny.py --graphs --rounds 12 --out "$OUT/final3" \
    --shapes 1024x1024x1024,1000x776x1000,64x28672x8192,64x14336x4096,128x4096x14336,\
1024x1024x4096,768x1024x2048 --tiles 128x64x64c2,128x128x64k2
  echo "--- final3"; grep -v "DEBUG\|Warn" "$OUT/final3-shapes.log" | tail -20
fi
if [ "$PART" = racecheck ]; then  # the probe under racecheck alone, with time to spare
  step racecheck-probe 400 "${SANITIZE[@]}" --tool racecheck python perf/gemm_skinny_probe.py
fi
echo; echo "=== summary"; printf '%s\n' "${summary[@]}"
