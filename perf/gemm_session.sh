#!/usr/bin/env bash
# Device calls for the small / skinny GEMM schedules (issue 17): GPU tests, sanitizer probes
# and the sweep against cuBLAS, each step time-boxed (logs in $OUT, one per step). Usage:
#   source .whl/setup-gpu-env.sh .whl . && bash perf/gemm_session.sh first
#   source .whl/setup-gpu-env.sh .whl . && bash perf/gemm_session.sh checks
#   source .whl/setup-gpu-env.sh .whl . && bash perf/gemm_session.sh ops
#   source .whl/setup-gpu-env.sh .whl . && bash perf/gemm_session.sh sweep
# and for the split-K in a cluster: gaps (baseline kernels, ncu), stages, cluster-tiles (forced
# routes), cluster-checks (GPU tests, sanitizers), cluster-shapes (the default routes); and
# cluster-n: 2-D clusters (A multicast along N), forced on the shapes where we trail, and
# cluster-n-checks (their tests and sanitizers); for the misses that remain: wide-split (what
# cuBLAS runs; split-K pairs on wider tiles), w240, rows256 / rows256-n (256-row tiles), c4
# (4x1 clusters) and gaps-odd (ncu against cuBLAS); epi-ncu: the default plan with and
# without its C stores (perf/gemm_epilogue_cost.py); keepab: the A / B loads under an L2
# evict-last policy; stg: C by st.global from the smem ring, cuBLAS's store instructions and
# ncu of both; r256-epi: where a 256 x 160 tile's epilogue time goes; stages6: 6 stages on
# 128x128 against 5, and the GEMM-family GPU tests; stages6-checks: both forced, memcheck;
# llama: the squares and Llama sweep of perf/gemm.py (issue 17: no shape may lose over 2%);
# llama-sk: its misses with whole tiles without the drift limiter and with stream-K;
# llama-sk2: the sweep on the stream-K rule that weighs the drift limiter, forced beside;
# llama-checks: the GEMM GPU tests on that rule, and the sweep once more; llama-h200: the
# sweep and the tiles of its closest shape (for the second card); w176: 128 x 176 tiles
# (whole waves at 1024 x 14336, as cuBLAS's 176 x 128); split-tests / split-perf: the split-K /
# swap-AB workspace route as one host call (SplitKGemm): GPU tests and memcheck, then host time
# and the split shapes against the two-call route (BEFORE_GEMM: the old ops/gemm.py, swapped
# into a copy of this tree: `git show 9c51af8:cute_kernels/ops/gemm.py > .split_before_gemm.py`,
# an untracked file travels with the call); epi-ring: the epilogue's one barrier per subtile and
# grown C ring against the old epilogue (an untracked _sm90_before.py, see the part), memcheck
# and racecheck; pingpong: a tile per consumer warpgroup (GPU tests, memcheck, the A/B);
# pingpong-rule: the shapes the rule gives it, against their old defaults; pingpong-tests:
# the GEMM-family GPU tests; pingpong-sweeps: the Llama and issue sweeps on the rule;
# pingpong-final: ncu of its default against cuBLAS, the demo, the A/B on a warm card;
# pingpong-h200: its tests and the rule's A/B (on whichever card the call gets).
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
if [ "$PART" = stages6 ]; then  # 6 stages on 128x128 (the default since this part): the 5-
  # stage ring forced beside it on the shapes that pick the tile, then the GEMM-family tests
  step s6-perf 200 python perf/gemm_skinny.py --graphs --rounds 15 --out "$OUT/s6" --shapes \
512x4096x14336,128x14336x4096,2048x1024x2048,1024x2048x1024 --tiles 128x128x64p5
  step s6-tests 380 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    tests/test_gated_mlp_gpu.py tests/test_dispatch_gpu.py
  grep -v DEBUG "$OUT/s6-perf.log" | tail -14; tail -3 "$OUT/s6-tests.log"
fi
if [ "$PART" = stages6-checks ]; then  # both depths forced side by side, memcheck, dispatch
  step s6b-perf 200 python perf/gemm_skinny.py --graphs --rounds 15 --out "$OUT/s6b" --shapes \
512x4096x14336,128x14336x4096,2048x1024x2048 --tiles 128x128x64p5,128x128x64p6
  step s6b-memcheck 120 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step s6b-dispatch 260 python -m pytest -q --tb=short -p no:logging tests/test_dispatch_gpu.py
  grep -v DEBUG "$OUT/s6b-perf.log" | tail -12; tail -3 "$OUT/s6b-dispatch.log"
  echo "memcheck: $(grep -c "rel err" "$OUT/s6b-memcheck.log") checks, $(grep "ERROR SUMMARY" \
"$OUT/s6b-memcheck.log")"
fi
if [ "$PART" = ops ]; then  # every other op's GPU tests (all launch through the same bridge)
  step op-gpu-tests 560 python -m pytest -q -x --tb=short -p no:logging -m gpu tests \
    --ignore=tests/test_gemm_gpu.py --ignore=tests/test_gated_mlp_gpu.py \
    --ignore=tests/test_dispatch_gpu.py
fi
if [ "$PART" = sweep ]; then
  step skinny-sweep 500 python perf/gemm_skinny.py --variants --graphs --out "$OUT"
fi
if [ "$PART" = gaps ]; then  # what cuBLAS / cuDNN launch for our misses; ncu, ours against them
  step gaps-kernels 200 python perf/baseline_kernels.py --ours --attention 8,16,1024,128,causal \
    --gemm 1024,1024,1024 1024,1024,64 1024,1024,256 1024,1024,4096 128,4096,14336 3000,5000,3072
  for cfg in "dict(tile=(128, 64, 64), cluster_m=2, cluster_k=1)" \
             "dict(tile=(128, 128, 64), cluster_m=1, cluster_k=2)"; do
    step "gaps-ncu-$(echo "$cfg" | tr -dc 'a-z0-9' | head -c 32)" 150 ncu --nvtx \
      --nvtx-include "profile/" --section SpeedOfLight --section MemoryWorkloadAnalysis \
      --metrics "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,\
lts__t_sectors_op_read.sum,smsp__inst_executed.sum,\
regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      python perf/profile_gemm_plan.py 1024,1024,4096 "$cfg"
  done
  for f in "$OUT"/gaps-*.log; do echo "--- $f"; grep -v "DEBUG\|Warn\|^==PROF" "$f" \
    | grep -E "GemmSm90|nvjet|GEMM|SDPA|cute_kernels|grid|Duration|stalled|hmma|lts__|inst_exec" \
    | head -70; done
fi
if [ "$PART" = stages ]; then  # pipeline depth of the small tiles (cuBLAS: 128x64, 8 stages)
  step stages-tiles 450 python perf/gemm_skinny.py --graphs --rounds 10 \
    --shapes 1024x1024x1024,1024x1024x4096,64x14336x4096,512x4096x14336,2048x2048x2048 \
    --tiles 128x64x64p6,128x64x64p8,128x64x64p8c1,64x128x64p8,128x128x64p6,64x256x64p5
  echo "--- stages"; grep -v "DEBUG\|Warn" "$OUT/stages-tiles.log" | tail -30
fi
if [ "$PART" = cluster-tiles ]; then  # split-K in a cluster, forced, against the other routes
  step cluster-tiles-long 450 python perf/gemm_skinny.py --graphs --rounds 10 --shapes \
1024x1024x1024,1024x1024x2048,1024x1024x4096,1024x1024x16384,768x1024x8192,512x2048x8192,\
1024x1536x8192 --tiles 128x128x64k2,128x128x64k4,128x192x64k2,128x256x64k2,128x64x64c2
  step cluster-tiles-skinny 450 python perf/gemm_skinny.py --graphs --rounds 12 --shapes \
128x4096x14336,64x4096x14336,48x4096x14336,333x1024x4096,512x1024x8192 --tiles \
128x64x64k2p8,64x128x64k2p8,128x128x64k2,128x128x64s4c2,128x128x64s4c1,64x128x64s4
  for f in "$OUT"/cluster-tiles-*.log; do echo "--- $f"; grep -v "DEBUG\|Warn" "$f" | tail -24
  done
fi
if [ "$PART" = cluster-checks ]; then  # every GEMM-family GPU test, the sanitizer probe
  step cluster-gemm-tests 500 python -m pytest -q --tb=short -p no:logging \
    tests/test_gemm_gpu.py tests/test_dispatch_gpu.py tests/test_gated_mlp_gpu.py
  step cluster-memcheck 300 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step cluster-racecheck 300 "${SANITIZE[@]}" --tool racecheck python perf/gemm_skinny_probe.py
fi
if [ "$PART" = cluster-shapes ]; then  # the default routes through linear: long K, the sweep
  step cluster-shapes-long 300 python perf/gemm_skinny.py --graphs --rounds 10 \
    --out "$OUT/long" --shapes 1024x1024x2048,1024x1024x4096,1024x1024x8192,1024x1024x16384,\
768x1024x8192,512x2048x8192,768x1024x2048,1024x1536x4096,1024x1536x8192,333x1024x4096,\
512x1024x8192,48x4096x14336
  step cluster-shapes-sweep 400 python perf/gemm_skinny.py --graphs --rounds 8 --out "$OUT/sweep"
  for f in "$OUT"/cluster-shapes-*.log; do echo "--- $f"; grep -v "DEBUG\|Warn" "$f" | tail -40
  done
fi
if [ "$PART" = cluster-n ]; then  # 2-D clusters (A multicast along N): tests, probe, tiles
  step n-tests 200 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "clusters_along_n or cluster_split or every_hopper_tile or forced"
  step n-probe 60 python perf/gemm_skinny_probe.py
  step n-tiles 300 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT/n" --shapes \
1024x1024x1024,2048x2048x2048,3000x5000x3072,1024x1024x4096,1024x14336x4096 --tiles \
64x128x64p8,128x64x64p8c1n2,64x128x64p8c2n2g128,128x64x64p8c2n2g128,128x128x64c2n2g128,\
128x128x64c1n2,128x256x64c1n2
  echo "--- n-tiles"; grep -v "DEBUG\|Warn" "$OUT/n-tiles.log" | tail -60
fi
if [ "$PART" = cluster-n-checks ]; then  # 2-D clusters: their GPU tests, sanitizers
  step n-tests 150 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "clusters_along_n"
  step n-memcheck 150 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step n-racecheck 150 "${SANITIZE[@]}" --tool racecheck python perf/gemm_skinny_probe.py
fi
if [ "$PART" = gaps-mainloop ]; then  # ncu: our small-tile mainloops against cuBLAS's, stalls
  for cfg in "dict(tile=(128, 64, 64), cluster_m=1, cluster_n=2, cluster_k=1, max_stages=8)" \
             "dict(tile=(64, 128, 64), cluster_m=2, cluster_k=1, max_stages=8)"; do
    step "gapsm-$(echo "$cfg" | tr -dc 'a-z0-9' | head -c 40)" 150 ncu --nvtx \
      --nvtx-include "profile/" --section SpeedOfLight --section WarpStateStats \
      --metrics "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,\
lts__t_sectors_op_read.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg,\
regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      python perf/profile_gemm_plan.py 1024,1024,4096 "$cfg"
  done
  for f in "$OUT"/gapsm-*.log; do echo "--- $f"; grep -v "DEBUG\|Warn\|^==PROF" "$f" \
    | grep -E "GemmSm90|nvjet|Duration|stalled|hmma|lts__|inst_exec|cycles_elapsed|Warp Cycles|Issued" \
    | awk '$NF != 0 && $NF != "0.00"' | head -60; done
fi
if [ "$PART" = tile240 ]; then  # 240-wide tiles (16-wide epilogue subtiles) on N = 5000
  for i in 1 2; do
    step "t240-$i" 200 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT/t240-$i" \
      --shapes 3000x5000x3072 --tiles 128x240x64,128x240x64c1,128x192x64c1,128x256x64
    grep -v DEBUG "$OUT/t240-$i.log" | tail -6
  done
fi
if [ "$PART" = rows192 ]; then  # 192-row tiles (three consumer warpgroups), cuBLAS's choice
  step r192 420 python perf/gemm_skinny.py --graphs --rounds 8 --out "$OUT/r192" --shapes \
3000x5000x3072,3000x3000x3000,4000x11008x4096,4096x4096x4096,2048x2048x2048,8192x8192x8192,\
1024x14336x4096,6144x12288x4096,512x14336x4096 --tiles 192x192x64,192x160x64,192x128x64
  grep -v DEBUG "$OUT/r192.log" | tail -28
fi
if [ "$PART" = tile-checks ]; then  # the 192-row / 240-wide tiles: every GEMM test, sanitizers
  step tc-tests 420 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    tests/test_dispatch_gpu.py
  step tc-memcheck 150 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step tc-racecheck 150 "${SANITIZE[@]}" --tool racecheck python perf/gemm_skinny_probe.py
fi
if [ "$PART" = stream-k ]; then  # stream-K: the probe, its GPU tests, memcheck
  step sk-probe 150 python perf/gemm_skinny_probe.py
  step sk-tests 300 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "stream_k or every_hopper_tile or squares"
  step sk-memcheck 140 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
fi
if [ "$PART" = stream-k-perf ]; then  # stream-K against whole tiles on the shapes it takes
  step sk-perf 420 python perf/gemm_skinny.py --graphs --rounds 8 --out "$OUT/sk" --shapes \
3000x5000x3072,4000x11008x4096,4096x4096x4096,3000x3000x3000,1024x14336x4096,\
4096x14336x4096,6144x12288x4096,512x14336x4096,2048x28672x8192 \
    --tiles 128x256x64z0,128x256x64z1,128x192x64z0
  grep -v DEBUG "$OUT/sk-perf.log" | tail -32
  step sk-racecheck 150 "${SANITIZE[@]}" --tool racecheck python perf/gemm_skinny_probe.py
fi
if [ "$PART" = stream-k-picks ]; then  # the shapes the scheduler gives stream-K, whole vs shared
  step sk-picks-tests 200 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "stream_k"
  step sk-picks 360 python perf/gemm_skinny.py --graphs --rounds 15 --out "$OUT/skp" --shapes \
4000x11008x4096,6144x12288x4096,1024x11008x4096,2048x11008x4096,4096x11008x4096,\
8192x14336x4096,3000x5000x3072 --tiles 128x256x64z0,128x256x64z1,128x224x64z0,128x192x64z1
  grep -v DEBUG "$OUT/sk-picks.log" | tail -28
fi
if [ "$PART" = sk-final ]; then  # with stream-K scheduled: every GEMM test, the issue's sweep
  step skf-tests 300 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    tests/test_dispatch_gpu.py
  step skf-sweep 270 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT/skf"
  grep -v DEBUG "$OUT/skf-sweep.log" | tail -32
fi
if [ "$PART" = sk-few ]; then  # stream-K over every tile (fewer than two waves): checks, perf
  step skw-tests 200 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "stream_k"
  step skw-memcheck 120 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step skw-perf 240 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT/skw" --shapes \
336x1024x4096,200x2048x4096,1024x1024x4096,768x1024x2048,1024x1024x1024,512x4096x4096 \
    --tiles 128x64x64z1,128x128x64z1,64x128x64p8z1,128x256x64z1
  grep -v DEBUG "$OUT/skw-perf.log" | grep 'cuBLAS.*|' | sed 's/ s1 / /g'
fi
if [ "$PART" = wide-sk ]; then  # the wide tiles' last wave: whole against stream-K, then
  # the issue's sweep (host time after the eager-path change)
  step wsk 240 python perf/gemm_skinny.py --graphs --rounds 8 --out "$OUT/wsk" \
    --shapes 1024x14336x4096,512x28672x8192,1024x28672x8192,2048x14336x4096 \
    --tiles 128x224x64z0,128x224x64z1,128x256x64z0,128x256x64z1
  grep -v DEBUG "$OUT/wsk.log" | grep 'cuBLAS.*|'
  step wsk-sweep 300 python perf/gemm_skinny.py --graphs --rounds 8 --out "$OUT/wsk-sweep"
  grep -v DEBUG "$OUT/wsk-sweep.log" | tail -30
fi
if [ "$PART" = gated-decode ]; then  # the gated op's plan cache: its GPU tests, host time,
  # decode-sized calls against cuBLAS + Liger and torch
  step gd-tests 300 python -m pytest -q --tb=short -p no:logging -x \
    tests/test_gated_mlp_gpu.py tests/test_partition_gpu.py
  step gd-host 150 python perf/host_profile.py --top 2 \
    --ops gated_decode,torch_gated_decode,linear,matmul
  step gd-perf 200 python perf/gated_mlp.py --tokens 1,16,64,128,512 --models 8B,70B --graphs \
    --out "$OUT/gd"
  tail -3 "$OUT/gd-tests.log"; grep "^=== " "$OUT/gd-host.log"
  grep -v DEBUG "$OUT/gd-perf.log" | tail -14
fi
if [ "$PART" = gated-rows64 ]; then  # decode-sized gated calls on 64-row tiles (forced)
  step g64-tests 300 python -m pytest -q --tb=short -p no:logging -x \
    tests/test_gated_mlp_gpu.py -k "every_hopper_tile or repeat"
  step g64-perf 300 python perf/gated_mlp.py --tokens ${G64_TOKENS:-1,16,64,128} --models 8B,70B \
    --graphs \
    --tiles ${G64_TILES:-128x256x64,64x256x64p5,64x128x64p8,64x256x128p3,64x128x128p6} \
    --out "$OUT/g64"
  tail -3 "$OUT/g64-tests.log"; grep -v DEBUG "$OUT/g64-perf.log" | tail -12
fi
if [ "$PART" = gated-final ]; then  # the gated decode schedule: GEMM-family tests, perf
  step gf-tests 420 python -m pytest -q --tb=short -p no:logging -x tests/test_gated_mlp_gpu.py \
    tests/test_gemm_gpu.py tests/test_dispatch_gpu.py
  step gf-perf 150 python perf/gated_mlp.py --tokens 1,16,64,128 --models 8B,70B --graphs \
    --out "$OUT/gf"
  tail -3 "$OUT/gf-tests.log"; grep -v DEBUG "$OUT/gf-perf.log" | tail -12
fi
if [ "$PART" = sanitize ]; then  # memcheck and racecheck on the probe (gated decode included)
  step san-memcheck 240 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step san-racecheck 240 "${SANITIZE[@]}" --tool racecheck python perf/gemm_skinny_probe.py
  for f in "$OUT"/san-*.log; do echo "$f: $(grep -c "rel err" "$f") checks, $(grep -i \
    "ERROR SUMMARY\|RACECHECK SUMMARY" "$f")"; done
fi
if [ "$PART" = gated-arows ]; then  # the decode tile loading only 8 / 16 / 32 rows of A
  step ga-tests 300 python -m pytest -q --tb=short -p no:logging -x tests/test_gated_mlp_gpu.py
  step ga-perf 300 python perf/gated_mlp.py --tokens 1,8,16,32 --models 8B,70B --graphs \
    --tiles 64x128x128p6r0,64x128x128p6 --out "$OUT/ga"
  step ga-memcheck 240 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step ga-racecheck 240 "${SANITIZE[@]}" --tool racecheck python perf/gemm_skinny_probe.py
  tail -3 "$OUT/ga-tests.log"; grep -v DEBUG "$OUT/ga-perf.log" | tail -22
  for f in "$OUT"/ga-*check.log; do echo "$f: $(grep -c "rel err" "$f") checks, $(grep -i \
    "ERROR SUMMARY\|RACECHECK SUMMARY" "$f")"; done
fi
if [ "$PART" = final-tests ]; then  # the session's last code: the ops whose host paths changed
  step ft-gemm 330 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    tests/test_gated_mlp_gpu.py tests/test_dispatch_gpu.py tests/test_partition_gpu.py
  step ft-attention 220 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "split or decode or swap or cluster or gqa or repeat or plan or out"
  tail -2 "$OUT/ft-gemm.log"; tail -2 "$OUT/ft-attention.log"
fi
if [ "$PART" = pdl ]; then  # the GEMM as a programmatic dependent launch, off / on per tile
  step pdl-small 200 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT/pdl-small" \
    --shapes 1024x1024x1024,1024x1024x4096,2048x2048x2048,768x1024x2048 \
    --tiles 64x128x64p8c2d0,64x128x64p8c2d1,128x128x64k2d0,128x128x64k2d1
  step pdl-decode 120 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT/pdl-dec" \
    --shapes 1x14336x4096,13x14336x4096,8x4096x14336 --tiles w128x16x128p6d0,w128x16x128p6d1
  step pdl-big 200 python perf/gemm_skinny.py --graphs --rounds 8 --out "$OUT/pdl-big" \
    --shapes 4096x4096x4096,1024x14336x4096,3000x5000x3072 \
    --tiles 128x256x64c2d0,128x256x64c2d1,128x224x64c2d0,128x224x64c2d1
  for f in pdl-small pdl-decode pdl-big; do grep -v DEBUG "$OUT/$f.log" | grep 'cuBLAS.*|'; done
fi
if [ "$PART" = pdl-final ]; then  # the cluster split as a dependent launch by default
  step pf-tests 200 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "cluster_split or dependent or graph or forced_skinny"
  step pf-memcheck 100 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step pf-racecheck 100 "${SANITIZE[@]}" --tool racecheck python perf/gemm_skinny_probe.py
  step pf-perf 120 python perf/gemm_skinny.py --graphs --rounds 8 --out "$OUT/pf" \
    --shapes 1024x1024x4096,768x1024x2048,768x1024x8192,512x2048x8192 --tiles 128x128x64k2d0
  tail -2 "$OUT/pf-tests.log"
  for f in "$OUT"/pf-*check.log; do echo "$f: $(grep -c "rel err" "$f") checks, $(grep -i \
    "ERROR SUMMARY\|RACECHECK SUMMARY" "$f")"; done
  grep -v DEBUG "$OUT/pf-perf.log" | grep -A7 'MxNxK'; grep -v DEBUG "$OUT/pf-perf.log" \
    | grep 'cuBLAS.*|'
fi
if [ "$PART" = rows256 ]; then  # 256-row tiles (two consumers, two WGMMA rows each): tests, speed
  step r256-tests 240 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "256_row or every_hopper_tile"
  step r256-perf 300 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT/r256" \
    --shapes 3000x5000x3072,2048x2048x2048,3000x3000x3072,4096x4096x4096,4000x11008x4096 \
    --tiles 256x160x64c2,256x160x64c1,256x128x64c2,256x144x64c1
  grep -v DEBUG "$OUT/r256-perf.log" | grep -A7 'MxNxK'; grep -v DEBUG "$OUT/r256-perf.log" \
    | grep 'cuBLAS.*|'
fi
if [ "$PART" = gaps-odd ]; then  # ncu: the default plan against cuBLAS where we trail most
  for shape in ${GAPS_SHAPES:-3000,5000,3072 2048,2048,2048}; do
    step "gapso-${shape//,/x}" 200 ncu --nvtx --nvtx-include "profile/" \
      --section SpeedOfLight --section WarpStateStats --section LaunchStats \
      --metrics "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,\
lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,dram__bytes_read.sum,\
smsp__inst_executed.sum,sm__cycles_elapsed.avg,\
regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      python perf/profile_gemm_plan.py "$shape" "${GAPS_PLAN:-dict()}"
  done
  for f in "$OUT"/gapso-*.log; do echo "--- $f"; grep -v "DEBUG\|Warn\|^==PROF" "$f" \
    | grep -E "GemmSm90|nvjet|Duration|stalled|hmma|lts__|dram__|inst_exec|cycles_elapsed|Warp Cycles|Issued|Registers|Grid Size|Waves" \
    | awk '$NF != 0 && $NF != "0.00"' | cut -c1-110 | head -40; done
fi
if [ "$PART" = epi-ncu ]; then  # ncu: the default plan against itself without its C stores
  step epi-ncu 200 ncu -k regex:GemmSm90 -c 2 --section SpeedOfLight --section WarpStateStats \
      --metrics "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,\
lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,dram__bytes_read.sum,\
dram__bytes_write.sum,smsp__inst_executed.sum,sm__cycles_elapsed.avg,\
regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
      python perf/gemm_epilogue_cost.py --shapes "${EPI_SHAPE:-3000x5000x3072}" \
      --variants "base,nostore*" --rounds 1
  grep -v "DEBUG\|Warn\|^==PROF" "$OUT/epi-ncu.log" \
    | grep -E "GemmSm90|Duration|SM Frequency|stalled|hmma|lts__|dram__|inst_exec|cycles_elapsed|Warp Cycles" \
    | awk '$NF != 0 && $NF != "0.00"' | cut -c1-110 | head -60
fi
if [ "$PART" = keepab ]; then  # the A / B loads under L2 evict-last, where C evicts them
  step keepab 300 python perf/gemm_epilogue_cost.py --variants "base,keepab,nostore*" \
    --shapes 3000x5000x3072,512x4096x14336,1024x14336x4096,2048x2048x2048,4096x4096x4096 \
    --out "$OUT"
  grep -v DEBUG "$OUT/keepab.log" | tail -18
fi
if [ "$PART" = stg ]; then  # C out by st.global from the smem ring instead of TMA stores;
  # which store instructions cuBLAS's kernel executes; ncu of the two store routes
  step stg 300 python perf/gemm_epilogue_cost.py --variants "base,stg,nostore*" \
    --shapes 3000x5000x3072,512x4096x14336,1024x14336x4096,2048x2048x2048,4096x4096x4096 \
    --out "$OUT"
  grep -v DEBUG "$OUT/stg.log" | tail -18
  step cublas-sass 200 ncu -k regex:nvjet -c 1 --section SourceCounters --page source \
      --print-source sass python perf/profile_gemm_plan.py 3000,5000,3072 "dict()"
  grep -oE "\b(STG|UTMASTG|UTMALDG|UTMAREDG|UBLKCP|UBLKRED|STSM|STS|LDS|LDSM|BAR|SYNCS)[.A-Z0-9]*" \
    "$OUT/cublas-sass.log" | sort | uniq -c | sort -rn | head -20
  step stg-ncu 200 ncu -k regex:GemmSm90 -c 2 --metrics "sm__pipe_tensor_op_hmma_cycles_active.\
avg.pct_of_peak_sustained_elapsed,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,\
dram__bytes_read.sum,dram__bytes_write.sum,sm__cycles_elapsed.avg,gpu__time_duration.sum" \
      python perf/gemm_epilogue_cost.py --shapes 3000x5000x3072 --variants "base,stg" --rounds 1
  grep -v "DEBUG\|Warn\|^==PROF" "$OUT/stg-ncu.log" | grep -E "GemmSm90|hmma|lts__|dram__|\
cycles_elapsed|duration" | cut -c1-110 | head -30
fi
if [ "$PART" = r256-epi ]; then  # where a 256-row tile's epilogue time goes
  step r256-epi 300 python perf/gemm_epilogue_cost.py \
    --variants "base,nostore*,e2,n16,noepi*" --shapes 3000x5000x3072,3000x3000x3072 \
    --plan "dict(tile=(256, 160, 64), cluster_m=1, cluster_n=2, cluster_k=1)" --out "$OUT"
  grep -v DEBUG "$OUT/r256-epi.log" | grep "^ *[0-9]*x" | sort -u
fi
if [ "$PART" = keepa ]; then  # A kept in L2, B streamed; DRAM reads of each
  step keepa 240 python perf/gemm_epilogue_cost.py --variants "base,keepa,keepa-firstb,keepab" \
    --shapes 3000x5000x3072,3000x3000x3072,1024x14336x4096,4096x4096x4096 --out "$OUT"
  grep -v DEBUG "$OUT/keepa.log" | grep "^ *[0-9]*x" | sort -u
  step keepa-ncu 200 ncu -k regex:GemmSm90 --metrics "dram__bytes_read.sum,\
lts__t_sector_op_read_hit_rate.pct,gpu__time_duration.sum" \
      python perf/gemm_epilogue_cost.py --shapes 3000x5000x3072 \
      --variants "base,keepa,keepa-firstb,nostore*" --rounds 1
  grep -v "DEBUG\|Warn\|^==PROF" "$OUT/keepa-ncu.log" | grep -E "dram__|hit_rate|duration" \
    | head -12
fi
if [ "$PART" = power ]; then  # SM clock and board power under each contender, back to back
  nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,clocks.applications.graphics \
    --format=csv
  step power 300 python perf/gemm_epilogue_cost.py --variants "base,nostore*,noepi*" \
    --shapes 3000x5000x3072,4096x4096x4096 --power 3 --out "$OUT"
  grep -v DEBUG "$OUT/power.log" | grep -v "^ *$" | tail -22
fi
if [ "$PART" = power256 ]; then  # 256-row tiles (less L2 traffic per flop) under the power cap
  step power256 300 python perf/gemm_epilogue_cost.py --variants "base,nostore*" \
    --shapes 3000x5000x3072 --power 3 --out "$OUT/r256" \
    --plan "dict(tile=(256, 160, 64), cluster_m=1, cluster_n=2, cluster_k=1)"
  grep -v DEBUG "$OUT/power256.log" | grep -v "^ *$" | tail -10
  step power256-sq 300 python perf/gemm_epilogue_cost.py --variants base \
    --shapes 4096x4096x4096,2048x2048x2048 --power 3 --out "$OUT/r256sq" \
    --plan "dict(tile=(256, 128, 64), cluster_m=1, cluster_n=2, cluster_k=1)"
  grep -v DEBUG "$OUT/power256-sq.log" | grep -v "^ *$" | tail -12
  step power-sq 300 python perf/gemm_epilogue_cost.py --variants base \
    --shapes 2048x2048x2048 --power 3 --out "$OUT/sq"
  grep -v DEBUG "$OUT/power-sq.log" | grep -v "^ *$" | tail -8
fi
if [ "$PART" = c4 ]; then  # four CTAs along M sharing B (a quarter each); where instructions go
  step c4-perf 300 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT/c4" \
    --shapes 3000x5000x3072,2048x2048x2048,4096x4096x4096 \
    --tiles 128x192x64c4,128x192x64c4g128,128x256x64c4g128
  grep -v DEBUG "$OUT/c4-perf.log" | grep -A5 'MxNxK'; grep -v DEBUG "$OUT/c4-perf.log" \
    | grep 'cuBLAS.*|'
  step c4-ncu 150 ncu --nvtx --nvtx-include "profile/" --section InstructionStats \
    --section SourceCounters python perf/profile_gemm_plan.py 3000,5000,3072 "dict()"
  grep -v "DEBUG\|^==PROF" "$OUT/c4-ncu.log" | grep -E "GemmSm90|nvjet|Executed Instructions|\
Branch Instructions|Warp Divergence|Uncoalesced|^ *[A-Z]+[A-Z0-9.]* +[0-9]" | cut -c1-120 | head -60
fi
if [ "$PART" = rows256-n ]; then  # 256-row tiles whose pairs share A (cuBLAS's 1x2 coopA)
  step r256n-tests 200 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "256_row"
  step r256n-perf 300 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT/r256n" \
    --shapes 3000x5000x3072,2048x2048x2048,4096x4096x4096,3000x3000x3072 \
    --tiles 256x160x64c1n2,256x128x64c1n2,256x144x64c1n2
  grep -v DEBUG "$OUT/r256n-perf.log" | grep -A6 'MxNxK'; grep -v DEBUG "$OUT/r256n-perf.log" \
    | grep 'cuBLAS.*|'
fi
if [ "$PART" = llama ]; then  # today's Llama sweep on the current schedule
  step llama-sweep 400 python perf/gemm.py --out "$OUT"
  grep -v DEBUG "$OUT/llama-sweep.log" | grep -B2 -A30 'MxNxK'
fi
if [ "$PART" = llama-sk ]; then  # the sweep's misses: drift limiter off, stream-K
  step llama-sweep 250 python perf/gemm.py --out "$OUT"
  grep -v DEBUG "$OUT/llama-sweep.log" | grep -A24 'MxNxK'
  step llama-sk 200 python perf/gemm_skinny.py --rounds 12 --out "$OUT" \
    --shapes 4096x28672x8192,16384x14336x4096,1024x14336x4096,4096x14336x4096 \
    --tiles 128x256x64z0,128x256x64z1,128x224x64z0,128x224x64z1
  grep -v DEBUG "$OUT/llama-sk.log" | grep 'cuBLAS.*|'
fi
if [ "$PART" = llama-sk2 ]; then  # stream-K against the drift limiter, lower minimum gain
  step sk-tests 150 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "stream or drift or default"
  step llama-sweep 200 python perf/gemm.py --out "$OUT"
  grep -v DEBUG "$OUT/llama-sweep.log" | grep -A24 'MxNxK'
  step llama-sk2 240 python perf/gemm_skinny.py --rounds 10 --out "$OUT" \
    --shapes 4096x28672x8192,16384x8192x28672,2048x53248x16384,2048x28672x8192,2048x22016x8192,\
2048x5120x13824,1024x53248x16384,16384x14336x4096 \
    --tiles 128x256x64l1,128x256x64z0,128x256x64z1,128x224x64z0,128x192x64z0,128x192x64z1
  grep -v DEBUG "$OUT/llama-sk2.log" | grep -A10 'MxNxK'
  grep -v DEBUG "$OUT/llama-sk2.log" | grep 'cuBLAS.*|'
fi
if [ "$PART" = llama-checks ]; then
  step gemm-gpu-tests 400 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py
  step llama-sweep 150 python perf/gemm.py --out "$OUT"
  grep -v DEBUG "$OUT/llama-sweep.log" | grep -A24 'MxNxK'
fi
if [ "$PART" = llama-h200 ]; then
  step llama-sweep 150 python perf/gemm.py --out "$OUT"
  grep -v DEBUG "$OUT/llama-sweep.log" | grep -A24 'MxNxK'
  step llama-1024 150 python perf/gemm_skinny.py --rounds 12 --out "$OUT" \
    --shapes 1024x14336x4096,4096x14336x4096,4096x28672x8192 \
    --tiles 128x224x64z0,128x224x64z1,128x192x64z1,128x256x64z0,128x256x64z1,128x256x64l1
  grep -v DEBUG "$OUT/llama-1024.log" | grep -A5 'MxNxK'
  grep -v DEBUG "$OUT/llama-1024.log" | grep 'cuBLAS.*|'
fi
if [ "$PART" = w176 ]; then
  step w176 200 python perf/gemm_skinny.py --graphs --rounds 15 --out "$OUT" \
    --shapes 1024x14336x4096,2048x14336x4096,1024x14336x4096 \
    --tiles 128x176x64z0,128x224x64z0,128x176x64z1
  grep -v DEBUG "$OUT/w176.log" | grep -A5 'MxNxK'
  grep -v DEBUG "$OUT/w176.log" | grep 'cuBLAS.*|'
fi
if [ "$PART" = pingpong ]; then  # a tile per consumer warpgroup: tests, memcheck, A/B
  step pp-tests 300 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "pingpong or c_ring or 256_row or dependent"
  for tool in memcheck racecheck; do
    step pp-$tool 150 "${SANITIZE[@]}" --tool $tool python perf/gemm_skinny_probe.py
    echo "$tool: $(grep -c "rel err" "$OUT/pp-$tool.log") checks, $(grep "ERROR SUMMARY\|RACECHECK" \
"$OUT/pp-$tool.log")"
  done
  # the shapes whose waves a 176-wide tile fills, twice: pingpong against the cooperative
  # kernel on the same tile and the default's
  for pass in 1 2; do
    step pp-perf-$pass 280 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT/$pass" \
      --shapes 1024x14336x4096,2048x14336x4096,4096x14336x4096,4096x4096x4096 \
      --tiles 128x176x64c2q1,128x176x64c2q0,128x224x64c2,128x256x64c2,128x128x64c2q1
    grep -v DEBUG "$OUT/pp-perf-$pass.log" | grep -B1 -A6 'MxNxK'
    grep -v DEBUG "$OUT/pp-perf-$pass.log" | grep 'cuBLAS.*|'
  done
fi
if [ "$PART" = pingpong-rule ]; then  # the shapes the rule moves to pingpong 128x176, against
  # the old defaults forced (128x224; 128x256, with stream-K, with the drift limiter)
  step rule-perf 300 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT" --shapes \
512x28672x8192,1024x14336x4096,2048x14336x4096,4096x14336x4096,8192x8192x8192 \
    --tiles 128x224x64c2,128x256x64c2,128x256x64c2z1,128x256x64c2l1
  grep -v DEBUG "$OUT/rule-perf.log" | grep -B1 -A8 'MxNxK'
  grep -v DEBUG "$OUT/rule-perf.log" | grep 'cuBLAS.*|'
fi
if [ "$PART" = pingpong-sweeps ]; then  # the Llama sweep and the issue's on the rule
  step llama-sweep 280 python perf/gemm.py --out "$OUT"
  grep -v DEBUG "$OUT/llama-sweep.log" | grep -A40 'M x N x K\|MxNxK' | head -40
  step sweep 240 python perf/gemm_skinny.py --graphs --rounds 10 --out "$OUT/skinny"
  grep -v DEBUG "$OUT/sweep.log" | grep -A30 'MxNxK' | cut -c1-120
fi
if [ "$PART" = pingpong-final ]; then  # ncu of the pingpong default against cuBLAS, the demo,
  # then the rule's shapes on the card the demo warmed
  GAPS_SHAPES=1024,14336,4096 bash "$0" gaps-odd 2>&1 | tail -45
  step demo 300 cute-kernels demo
  grep -v DEBUG "$OUT/demo.log" | tail -25
  step warm-ab 200 python perf/gemm_skinny.py --rounds 10 --out "$OUT/warm" --shapes \
1024x14336x4096,2048x14336x4096,512x28672x8192,1024x14336x4096 \
    --tiles 128x176x64c2q0,128x224x64c2,128x256x64c2
  grep -v DEBUG "$OUT/warm-ab.log" | grep -A6 'MxNxK'; grep -v DEBUG "$OUT/warm-ab.log" \
    | grep 'cuBLAS.*|'
fi
if [ "$PART" = pingpong-h200 ]; then  # the second card: the pingpong tests and the rule's A/B
  step pp-tests 300 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    -k "pingpong or c_ring"
  bash "$0" pingpong-rule 2>&1 | tail -20
fi
if [ "$PART" = pingpong-tests ]; then
  step rule-tests 560 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    tests/test_dispatch_gpu.py tests/test_gated_mlp_gpu.py
fi
if [ "$PART" = split-tests ]; then
  step split-tests 440 python -m pytest -q --tb=short -p no:logging tests/test_gemm_gpu.py \
    tests/test_dispatch_gpu.py
  step split-memcheck 120 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  echo "memcheck: $(grep -c "rel err" "$OUT/split-memcheck.log") checks, $(grep "ERROR SUMMARY" \
"$OUT/split-memcheck.log")"
fi
if [ "$PART" = split-perf ]; then
  before=/tmp/ck-before; rm -rf $before; mkdir -p $before; cp -r cute_kernels $before/
  cp "${BEFORE_GEMM:?the old ops/gemm.py}" $before/cute_kernels/ops/gemm.py
  shapes=1x2304x9216,13x1536x8960,1x1024x14336,1x2048x14336,1x3584x18944,1x4096x14336,\
8x4096x14336,13x4096x14336,13x14336x4096
  for side in after before after before; do
    pp=$PWD; [ $side = before ] && pp=$before
    step host-$side 100 env PYTHONPATH=$pp python perf/host_profile.py --passes 5 \
      --ops linear_split,matmul_split,linear_decode
    grep "cute_kernels from\|host time per call" "$OUT/host-$side.log"
    step sweep-$side 150 env PYTHONPATH=$pp python perf/gemm_skinny.py --graphs --rounds 10 \
      --out "$OUT/$side" --shapes $shapes
    grep -v DEBUG "$OUT/sweep-$side.log" | grep -A11 'MxNxK'
  done
fi
if [ "$PART" = epi-ring ]; then  # one barrier per subtile and a deeper C ring, against the
  # old epilogue (an untracked cute_kernels/kernels/gemm/_sm90_before.py, e.g. `git show
  # f165534:cute_kernels/kernels/gemm/sm90.py`) and the ring held at 2; then the sanitizers
  shapes=1024x14336x4096,3000x5000x3072,4096x4096x4096,2048x2048x2048,4096x14336x4096,\
512x4096x14336,1024x1024x1024
  for pass in 1 2; do
    step epi-ring-$pass 280 python perf/gemm_epilogue_cost.py --variants "base,e2,before" \
      --shapes $shapes --out "$OUT/$pass"
    grep -v DEBUG "$OUT/epi-ring-$pass.log" | grep "^ *[0-9]*x" | sort
  done
  step epi-memcheck 120 "${SANITIZE[@]}" --tool memcheck python perf/gemm_skinny_probe.py
  step epi-racecheck 150 "${SANITIZE[@]}" --tool racecheck python perf/gemm_skinny_probe.py
  for t in memcheck racecheck; do
    echo "$t: $(grep -c "rel err" "$OUT/epi-$t.log") checks, $(grep "ERROR SUMMARY" \
"$OUT/epi-$t.log")"
  done
fi
echo; echo "=== summary"; printf '%s\n' "${summary[@]}"
