#!/usr/bin/env bash
# Device calls for the column-sparse MLP delta (issue 16): its GPU tests (and the Ampere GEMM,
# whose mainloop it shares), sanitizer probes, then its speed; each step time-boxed so a part
# fits the device tool's 10-minute limit (logs in $OUT, one per step). Usage (repo root):
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh tests
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh tune
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh sm90
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh default
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh checks
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh final
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh measure
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh partition
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh partition-perf
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh adders
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh scatter-final
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh power   (SM clock, power)
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh one-buffer
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh m-major-src
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh mm2-chunks
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh gated-checks
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh mm1-timing
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh op-timing
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh mm-ncu   (where mm1 / mm2 wait)
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh narrow   (16-bit tile, 5 stages)
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh full-tests   (both GPU files)
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh gated-stage6   (6 vs 5 stages)
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh stage6-checks   (gated defaults)
#   source .whl/setup-gpu-env.sh .whl . && bash perf/mlp_session.sh gated-stage6-op   (the op, 6 / 5)
# Prints a summary last.
set -u -o pipefail
export PYTHONUNBUFFERED=1 CUTE_KERNELS_CACHE_DIR=${CUTE_KERNELS_CACHE_DIR:-/tmp/ck-mlp}
source "$(dirname "$0")/session_lib.sh"
PART=${1:-tests}
if [ "$PART" = tests ]; then
  step probe-hopper 60 python perf/mlp_delta_probe.py hopper
  step mlp-gpu-tests 240 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_mlp_gpu.py
  step memcheck-hopper 60 "${SANITIZE[@]}" --tool memcheck python perf/mlp_delta_probe.py hopper
  step perf-mlp-quick 150 python perf/column_sparse_mlp.py --quick --out "$OUT"
fi
if [ "$PART" = full-tests ]; then  # every MLP-delta and partition GPU test on the defaults
  step mlp-gpu-tests 420 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_mlp_gpu.py
  step partition-tests 150 python -m pytest -q --tb=short -p no:logging tests/test_partition_gpu.py
fi
if [ "$PART" = gated-stage6 ]; then  # the gated mm1 (17 KiB tile) with a sixth stage
  step mm1-gated-stages 200 python perf/mlp_delta_tuning.py --activation swiglu --no-down \
    --up-stages 5,6 --rounds 9
  grep -v DEBUG "$OUT/mm1-gated-stages.log" | tail -12
fi
if [ "$PART" = stage6-checks ]; then  # the default gated mm1's tests and sanitizers (run
  # after giving it six stages by default: GPU tests and probes build the default kernels)
  step wgmma-tests 200 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_mlp_gpu.py -k "(wgmma and 16-bit) or (matches_reference and glu)"
  step memcheck-hopper 60 "${SANITIZE[@]}" --tool memcheck python perf/mlp_delta_probe.py hopper
  step racecheck-hopper 60 "${SANITIZE[@]}" --tool racecheck python perf/mlp_delta_probe.py hopper
fi
if [ "$PART" = gated-stage6-op ]; then  # the whole gated op with mm1 at 6 / 5 stages, alternated
  # (each build in its own process and kernel cache: the stage count is a module constant)
  for s in 6 5 6 5; do
    CUTE_KERNELS_CACHE_DIR=/tmp/ck-s$s step "op-gated-stages$s" 150 python -c "
import runpy, sys
import cute_kernels.kernels.mlp_delta_sm90 as m
m.GATED_NARROW_STAGES = $s
sys.argv = ['perf/column_sparse_mlp.py', '--parts', 'gated', '--rounds', '7', '--out', '$OUT/s$s']
runpy.run_path('perf/column_sparse_mlp.py', run_name='__main__')"
    grep -A2 "  p  count" "$OUT/op-gated-stages$s.log" | tail -1
  done
fi
if [ "$PART" = one-buffer ]; then  # scatter_add's one-CTA-per-tile launches on one buffer
  step scatter-tests 240 python -m pytest -q --tb=short -p no:logging \
    tests/test_partition_gpu.py tests/test_column_sparse_mlp_gpu.py -k "partition or scatter"
  step concurrent 240 python perf/column_sparse_mlp.py --parts concurrent --adders bulk,rmw \
    --partitions green:8,green:6:fine,green:4:fine --rounds 7 --out "$OUT"
  step memcheck-hopper 60 "${SANITIZE[@]}" --tool memcheck python perf/mlp_delta_probe.py hopper
  step racecheck-hopper 60 "${SANITIZE[@]}" --tool racecheck python perf/mlp_delta_probe.py hopper
fi
if [ "$PART" = m-major-src ]; then  # scatter_add from an M-major source (bulk copies)
  step probe-hopper 60 python perf/mlp_delta_probe.py hopper
  step scatter-tests 240 python -m pytest -q --tb=short -p no:logging \
    tests/test_partition_gpu.py tests/test_column_sparse_mlp_gpu.py -k "partition or scatter"
  step concurrent 240 python perf/column_sparse_mlp.py --parts concurrent --adders bulk \
    --partitions green:8,green:6:fine,green:4:fine --rounds 7 --out "$OUT"
  step memcheck-hopper 60 "${SANITIZE[@]}" --tool memcheck python perf/mlp_delta_probe.py hopper
  step racecheck-hopper 60 "${SANITIZE[@]}" --tool racecheck python perf/mlp_delta_probe.py hopper
fi
if [ "$PART" = mm2-chunks ]; then  # mm2 staging its list in chunks
  step mlp-tuning 200 python perf/mlp_delta_tuning.py --rounds 7
  step mlp-tests 330 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_mlp_gpu.py -k "wgmma or matches_reference"
  step memcheck-hopper 60 "${SANITIZE[@]}" --tool memcheck python perf/mlp_delta_probe.py hopper
  step racecheck-hopper 60 "${SANITIZE[@]}" --tool racecheck python perf/mlp_delta_probe.py hopper
fi
if [ "$PART" = gated-checks ]; then  # the gated forms on the WGMMA mm1
  step probe-hopper 90 python perf/mlp_delta_probe.py hopper
  step gated-tests 300 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_mlp_gpu.py -k "wgmma or swiglu or geglu or reglu"
  step memcheck-hopper 60 "${SANITIZE[@]}" --tool memcheck python perf/mlp_delta_probe.py hopper
  step racecheck-hopper 60 "${SANITIZE[@]}" --tool racecheck python perf/mlp_delta_probe.py hopper
fi
if [ "$PART" = mm1-timing ] || [ "$PART" = op-timing ]; then  # mm1's kernels side by side
  step mm1-gated 240 python perf/mlp_delta_tuning.py --activation swiglu --no-down --rounds 5
  step mm1-gelu 240 python perf/mlp_delta_tuning.py --no-down --rounds 7
fi
if [ "$PART" = op-timing ]; then  # then the whole op, GELU-tanh and gated, against dense
  step perf-mlp 300 python perf/column_sparse_mlp.py --parts mlp,gated --rounds 5 --out "$OUT"
fi
if [ "$PART" = mm-ncu ]; then  # ncu on the Hopper mm1 and mm2 at HunyuanVideo's MLP
  step mm-ncu 400 ncu --kernel-name regex:MlpDelta --launch-skip 2 --launch-count 2 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
    --metrics lts__t_sectors_srcunit_tex_op_read.sum,lts__t_sector_hit_rate.pct,\
dram__bytes_read.sum,l1tex__m_xbar2l1tex_read_bytes.sum,sm__cycles_elapsed.avg.per_second,\
lts__t_sectors_srcunit_tex.avg.pct_of_peak_sustained_elapsed \
    python perf/mlp_delta_probe.py hopper --hunyuan
  grep -v "DEBUG\|Warn\|^==PROF" "$OUT/mm-ncu.log" | grep -E "MlpDelta|Duration|Throughput|\
Busy|Hit|Stall|lts__|dram__|l1tex__|sm__cycles|Warp Cycles|Issued|Bandwidth|Pipe" | head -90
fi
if [ "$PART" = narrow ]; then  # the 16-bit staging tile and five stages, timed and checked
  step mm1-tuning 120 python perf/mlp_delta_tuning.py --no-down --rounds 5
  step mm2-tuning 90 python perf/mlp_delta_tuning.py --no-up --rounds 5
  step wgmma-tests 120 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_mlp_gpu.py -k "wgmma"
  step memcheck-hopper 60 "${SANITIZE[@]}" --tool memcheck python perf/mlp_delta_probe.py hopper
  step racecheck-hopper 90 "${SANITIZE[@]}" --tool racecheck python perf/mlp_delta_probe.py hopper
  step perf-mlp 100 python perf/column_sparse_mlp.py --parts mlp --rounds 3 --out "$OUT"
  grep -v DEBUG "$OUT/mm1-tuning.log" | grep "up sm90\|mm1-sized"
  grep -v DEBUG "$OUT/mm2-tuning.log" | grep "down sm90\|mm2-sized"
  grep -v DEBUG "$OUT/perf-mlp.log" | grep -A10 "^dense MLP"
  grep -h "ERROR SUMMARY\|RACECHECK SUMMARY\|hazard" "$OUT"/*check-hopper.log | tail -4
fi
if [ "$PART" = tune ]; then
  step mlp-gpu-tests 240 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_mlp_gpu.py
  step mlp-tuning 200 python perf/mlp_delta_tuning.py
  step gemm-ampere-tests 150 python -m pytest -q --tb=short -p no:logging \
    tests/test_gemm_gpu.py -k ampere
fi
if [ "$PART" = sm90 ]; then
  step probe-hopper 60 python perf/mlp_delta_probe.py hopper
  step hunyuan-hopper 90 python perf/mlp_delta_probe.py hopper --hunyuan
  step mlp-gpu-tests 240 python -m pytest -q -x --tb=short -p no:logging \
    tests/test_column_sparse_mlp_gpu.py
  step mlp-tuning 150 python perf/mlp_delta_tuning.py
  step memcheck-hopper 90 "${SANITIZE[@]}" --tool memcheck python perf/mlp_delta_probe.py hopper
  step racecheck-hopper 90 "${SANITIZE[@]}" --tool racecheck python perf/mlp_delta_probe.py hopper
fi
if [ "$PART" = default ]; then
  step mlp-gpu-tests 240 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_mlp_gpu.py
  step perf-mlp 240 python perf/column_sparse_mlp.py --parts mlp,scatter --rounds 5 --out "$OUT"
fi
if [ "$PART" = checks ]; then
  step gemm-ampere-tests 150 python -m pytest -q --tb=short -p no:logging \
    tests/test_gemm_gpu.py tests/test_gated_mlp_gpu.py -k ampere
  step memcheck-ampere 60 "${SANITIZE[@]}" --tool memcheck python perf/mlp_delta_probe.py ampere
  step racecheck-hopper 60 "${SANITIZE[@]}" --tool racecheck python perf/mlp_delta_probe.py hopper
fi
if [ "$PART" = final ]; then
  step mlp-gpu-tests 200 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_mlp_gpu.py tests/test_offload_gpu.py
  step memcheck-ampere 60 "${SANITIZE[@]}" --tool memcheck python perf/mlp_delta_probe.py ampere
  step racecheck-hopper 60 "${SANITIZE[@]}" --tool racecheck python perf/mlp_delta_probe.py hopper
  step perf-mlp 200 python perf/column_sparse_mlp.py --rounds 5 --out "$OUT"
  step perf-offload 90 python perf/offload.py --out "$OUT"
fi
if [ "$PART" = measure ]; then
  step perf-mlp 420 python perf/column_sparse_mlp.py --rounds 5 --out "$OUT"
  step perf-offload 120 python perf/offload.py --out "$OUT"
fi
if [ "$PART" = partition ]; then  # SmPartition, the double-buffered writeback, the gated speed
  step partition-gpu-tests 300 python -m pytest -q --tb=short -p no:logging \
    tests/test_partition_gpu.py tests/test_column_sparse_mlp_gpu.py -k "partition or scatter"
  step memcheck-hopper 90 "${SANITIZE[@]}" --tool memcheck python perf/mlp_delta_probe.py hopper
  step racecheck-hopper 90 "${SANITIZE[@]}" --tool racecheck python perf/mlp_delta_probe.py hopper
fi
if [ "$PART" = partition-perf ]; then
  step perf-partition 480 python perf/column_sparse_mlp.py --parts scatter,concurrent,gated \
    --rounds 5 --out "$OUT"
fi
if [ "$PART" = adders ]; then  # the writeback's three adders: tests, partitioned speed, ncu
  step probe-hopper 60 python perf/mlp_delta_probe.py hopper
  step scatter-tests 200 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_mlp_gpu.py -k scatter
  step ncu-writeback 150 ncu --kernel-name regex:ScatterAdd --section SpeedOfLight \
    --section Occupancy --section WarpStateStats --section LaunchStats \
    --metrics "lts__t_requests_op_red.sum,lts__t_sectors_op_red.sum,l1tex__t_requests_pipe_lsu_mem_global_op_red.sum,smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio,smsp__average_warps_issue_stalled_lg_throttle_per_issue_active.ratio,smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio,smsp__average_warps_issue_stalled_membar_per_issue_active.ratio" \
    python perf/mlp_delta_probe.py hopper --writeback
  grep -E "ScatterAdd|Duration|Grid Size|Registers|Achieved Occupancy|Theoretical Occ|Memory Through|DRAM Through|lts__|l1tex__|stalled|Block Limit" \
    "$OUT/ncu-writeback.log" | head -120
  step perf-concurrent 330 python perf/column_sparse_mlp.py --parts concurrent --rounds 5 \
    --out "$OUT"
fi
if [ "$PART" = scatter-final ]; then  # the default adder: tests, sanitizers, speed
  step scatter-tests 300 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_mlp_gpu.py tests/test_partition_gpu.py -k "scatter or partition"
  step memcheck-hopper 90 "${SANITIZE[@]}" --tool memcheck python perf/mlp_delta_probe.py hopper
  step racecheck-hopper 90 "${SANITIZE[@]}" --tool racecheck python perf/mlp_delta_probe.py hopper
  step perf-scatter 300 python perf/column_sparse_mlp.py --parts scatter,concurrent --rounds 7 \
    --adders bulk,rmw --partitions green:8,green:16 --out "$OUT"
  grep -v DEBUG "$OUT/perf-scatter.log" | grep -v "^bars\|^wrote" | tail -32
fi
if [ "$PART" = power ]; then  # are the partition and the offload floors the power cap?
  nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv
  step power-concurrent 330 python perf/column_sparse_mlp.py --parts concurrent --rounds 5 \
    --adders bulk --partitions green:8 --power 3 --out "$OUT"
  grep -v DEBUG "$OUT/power-concurrent.log" | grep -v "^bars\|^wrote" | tail -22
  step power-offload 200 python perf/offload.py --power 3 --out "$OUT"
  grep -v DEBUG "$OUT/power-offload.log" | grep -v "^wrote" | tail -18
fi
echo; printf '%s\n' "${summary[@]}"
