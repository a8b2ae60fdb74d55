#!/usr/bin/env bash
# Device calls for issue 17's attention items, each step time-boxed (logs in $OUT, one per
# step); prints a summary last. Usage:
#   source .whl/setup-gpu-env.sh .whl . && bash perf/attention_session.sh tune
#   source .whl/setup-gpu-env.sh .whl . && bash perf/attention_session.sh checks
# tune / tune2: configurations side by side (perf/attention_tuning.py): D = 64 at S = 4k and
# short causal D = 128 against SDPA-cuDNN; the Ampere path at D = 128 against SDPA-flash.
set -u -o pipefail
export PYTHONUNBUFFERED=1 CUTE_KERNELS_CACHE_DIR=${CUTE_KERNELS_CACHE_DIR:-/tmp/ck-attn}
source "$(dirname "$0")/session_lib.sh"
PART=${1:-tune}
TUNE="python perf/attention_tuning.py --rounds 10"
probe() {  # label tool probe-arguments...: a sanitizer on perf/attention_probe.py (Hopper)
  local label=$1 tool=$2; shift 2
  step "$label" 150 "${SANITIZE[@]}" --tool "$tool" python perf/attention_probe.py hopper "$@"
}
short_causal() {  # label-prefix configs: the short causal D = 128 shapes, one step each
  for shape in 32,16,1024 16,16,2048 8,16,1024; do
    step "$1-c${shape//,/-}" 120 $TUNE --causal --shape $shape,128 --configs "$2"
  done
}
split_probes() {  # log-prefix: memcheck and racecheck on clustered splits, and on causal D 64
  probe "$1-memcheck" memcheck 1 9000 16 4 128 0 splits 8
  probe "$1-racecheck" racecheck 1 9000 16 4 128 0 splits 8
  probe "$1-memcheck-causal" memcheck 7 3000 4 4 64 1 splits 3
  probe "$1-racecheck-causal" racecheck 7 3000 4 4 64 1 splits 3
}
sanitizer_summary() {  # log-prefix: each sanitizer log's ok count and summary line
  for f in "$OUT"/"$1"*check*.log; do echo "$f: $(grep -c "^ok" "$f") ok, $(grep -i \
    "ERROR SUMMARY\|RACECHECK SUMMARY" "$f")"; done
}
capacity() {  # label seconds: how many clusters of 2, 4 and 8 CTAs the GPU holds at once
  step "$1" "$2" python -c "import torch; from cute_kernels.runtime.arch import \
cluster_capacity as c; d = torch.device('cuda'); print('clusters held at once:', \
{n: c(d, n) for n in (2, 4, 8)})"
}
# the Ampere kernel's tile / warp configurations (AttentionSm80 keyword arguments)
AMP="[dict(), dict(warps=4), dict(block_n=32, warps=4), dict(block_m=64, warps=4), \
dict(block_m=256, block_n=32, warps=8), dict(block_m=64, block_n=128, warps=4)]"
if [ "$PART" = rows192 ]; then  # short causal D = 128 on 192-row tiles (three consumers)
  P192="dict(block_m=192, block_n=64, stages=3, overlap=True"
  short_causal r192 "[dict(block_n=64, stages=3, overlap=True, pingpong=True, persistent=True), \
dict(overlap=True, pingpong=True, persistent=True), $P192, pingpong=True, persistent=True), \
$P192, persistent=True), dict(block_m=192, block_n=96, stages=2, overlap=True, pingpong=True, \
persistent=True), dict(block_m=192, block_n=128, stages=2, overlap=True)]"
  for f in "$OUT"/r192-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -12; done
fi
if [ "$PART" = skip ]; then  # short causal: a consumer skips its hidden first 64-key block
  step skip-tests 400 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "hopper_configs or persistent or short_causal or matches_reference"
  step skip-racecheck 150 "${SANITIZE[@]}" --tool racecheck \
    python perf/attention_probe.py hopper 1000 1000 2 2 128 1
  step skip-memcheck 150 "${SANITIZE[@]}" --tool memcheck \
    python perf/attention_probe.py hopper 1500 1500 4 2 128 1
  SK="dict(block_n=64, stages=3, overlap=True, pingpong=True, persistent=True"
  short_causal skip "[$SK), $SK, skip_hidden=False)]"
  for f in "$OUT"/skip-c*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -6; done
fi
if [ "$PART" = skip3 ]; then  # the empty turns fixed: the attention tests, racecheck, perf
  step skip3-tests 420 python -m pytest -q --tb=short -p no:logging -x \
    tests/test_attention_gpu.py -k "hopper_configs or persistent or short_causal or matches_reference"
  step skip3-racecheck 150 "${SANITIZE[@]}" --tool racecheck \
    python perf/attention_probe.py hopper 300 77 2 2 128 1
  step skip3-memcheck 150 "${SANITIZE[@]}" --tool memcheck \
    python perf/attention_probe.py hopper 1500 1500 4 2 128 1
  SK="dict(block_n=64, stages=3, overlap=True, pingpong=True, persistent=True"
  step skip3-c32-16-1024 120 $TUNE --causal --shape 32,16,1024,128 \
    --configs "[$SK), $SK, skip_hidden=False)]"
  grep -v DEBUG "$OUT/skip3-c32-16-1024.log" | tail -6
fi
if [ "$PART" = skip4 ]; then  # the rest of the attention tests, dispatch, the op's table
  step skip4-tests 360 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    tests/test_dispatch_gpu.py -k "not (hopper_configs or persistent or short_causal or \
matches_reference)"
  step skip4-attention 200 python perf/attention.py --d 128 --s 1024,2048 --no-flex \
    --out "$OUT"
  grep -v DEBUG "$OUT/skip4-attention.log" | tail -14
fi
if [ "$PART" = d64sc ]; then  # short causal D = 64: the D = 128 turns tiles against 64 x 64
  D64="[dict(block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2, persistent=True), \
dict(block_m=64, block_n=64, stages=3, overlap=True, ctas_per_sm=2, persistent=True), \
dict(block_n=64, stages=3, overlap=True, pingpong=True, persistent=True), \
dict(block_n=64, stages=4, overlap=True, pingpong=True, persistent=True), \
dict(block_n=128, stages=2, overlap=True, pingpong=True, persistent=True), \
dict(block_m=64, block_n=128, stages=2, overlap=True, ctas_per_sm=2, persistent=True)]"
  for shape in 32,32,1024 16,32,2048 8,32,4096; do
    step "d64sc-c${shape//,/-}" 150 $TUNE --causal --shape $shape,64 --configs "$D64"
  done
  for f in "$OUT"/d64sc-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -10; done
fi
if [ "$PART" = d64nc ]; then  # non-causal D = 64 at S >= 4k: persistent tiles side by side
  NC="[dict(block_m=64, block_n=128, overlap=True, ctas_per_sm=2, persistent=True), \
dict(overlap=True, persistent=True, pingpong=True), \
dict(stages=3, overlap=True, persistent=True, pingpong=True), \
dict(block_m=192, persistent=True), dict(block_m=192, overlap=True, persistent=True), \
dict(block_m=192)]"
  for shape in 8,32,4096 4,32,8192; do
    step "d64nc-${shape//,/-}" 200 $TUNE --shape $shape,64 --configs "$NC"
  done
  for f in "$OUT"/d64nc-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -10; done
fi
if [ "$PART" = d64sweep ]; then  # D = 64: 64 x 128 two per SM against 192 x 128 persistent
  P192="dict(block_m=192, overlap=True, persistent=True"
  NC="[dict(block_m=64, block_n=128, overlap=True, ctas_per_sm=2, persistent=True), $P192), \
$P192, stages=3), $P192, async_store=False)]"
  CA="[dict(block_m=64, block_n=128, overlap=True, ctas_per_sm=2, persistent=True), $P192), \
$P192, stages=3)]"
  for shape in 32,32,1024 16,32,2048 8,32,4096 2,32,16384; do
    step "d64s-${shape//,/-}" 200 $TUNE --shape $shape,64 --configs "$NC"
    step "d64s-c${shape//,/-}" 200 $TUNE --causal --shape $shape,64 --configs "$CA"
  done
  for f in "$OUT"/d64s-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -6 | cut -c50-; done
fi
if [ "$PART" = d64rep ]; then  # non-causal D = 64: the two tiles again, twice, 20 rounds
  P192="dict(block_m=192, overlap=True, persistent=True"
  NC="[dict(block_m=64, block_n=128, overlap=True, ctas_per_sm=2, persistent=True), $P192), \
$P192, stages=3)]"
  for i in 1 2; do
    for shape in 16,32,2048 8,32,4096 4,32,8192 2,32,16384; do
      step "d64r$i-${shape//,/-}" 200 python perf/attention_tuning.py --rounds 20 \
        --shape $shape,64 --configs "$NC"
    done
  done
  for f in "$OUT"/d64r*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -4 | cut -c50-; done
fi
if [ "$PART" = tall ]; then  # D = 64 on 192-row tiles by default: tests, sanitizers, table
  step tall-tests 420 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "matches_reference or persistent_ctas or persistent_default"
  probe tall-memcheck memcheck 2100 2300 8 2 64 0
  probe tall-racecheck racecheck 2100 2300 8 2 64 0
  step tall-op 240 python perf/attention.py --d 64 --s 1024,2048,4096,8192 --no-flex \
    --out "$OUT"
  grep -v DEBUG "$OUT/tall-op.log" | tail -12
fi
if [ "$PART" = combine-ab ]; then  # split decode, .before against this tree: tests, A/B, kernels
  step cab-tests 300 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "split or decode or num_splits or gqa or repeat_calls"
  probe cab-memcheck memcheck 1 9000 32 8 128 0
  probe cab-racecheck racecheck 1 9000 32 8 128 0
  for side in after before after before; do
    root=$PWD; [ $side = before ] && root=$PWD/.before
    n=$(ls "$OUT" | grep -c "^cab-$side" || true)
    PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" CUTE_KERNELS_CACHE_DIR=/tmp/ck-ab-$side \
      step "cab-$side-$n" 200 python perf/decode.py --quick --graphs --splits 1 \
      --out "$OUT/$side-$n"
  done
  step cab-kernels 120 python perf/baseline_kernels.py --ours --gemm --attention --decode \
    1,32,8,1,65536 1,32,8,1,4096 1,32,8,8,65536
  for f in "$OUT"/cab-a*.log "$OUT"/cab-b*.log; do echo "--- $f"; grep -A 12 "^ours:" "$f"; done
  grep -v DEBUG "$OUT/cab-kernels.log" | grep -B1 -A3 "^cute_kernels\|^SDPA cudnn"
fi
if [ "$PART" = route-checks ]; then  # attention_route: the default routes' GPU tests
  step route-tests 560 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "not hopper_configs and not colsum"
fi
if [ "$PART" = tall-turns ]; then  # D = 64: 192-row tiles whose three consumers take turns
  T="dict(block_m=192, overlap=True, persistent=True"
  NC="[dict(block_m=64, block_n=128, overlap=True, ctas_per_sm=2, persistent=True), $T), \
$T, pingpong=True)]"
  for shape in 32,32,1024 16,32,2048 8,32,4096 4,32,8192; do
    step "tt-${shape//,/-}" 150 $TUNE --rounds 20 --shape $shape,64 --configs "$NC"
  done
  for shape in 32,32,1024 16,32,2048 8,32,4096; do
    step "tt-c${shape//,/-}" 150 $TUNE --rounds 20 --causal --shape $shape,64 --configs "$NC"
  done
  for f in "$OUT"/tt-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -4 | cut -c40-; done
fi
if [ "$PART" = tall-turns-checks ]; then  # the tall tiles in turns (TALL_TURNS): tests, sanitizers
  # (4 logs: a call returns at most 8 files; the perf comparison is tall-turns)
  step tf-tests 330 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "matches_reference or persistent_ctas or persistent_default"
  probe tf-memcheck memcheck 2100 2300 8 2 64 1
  probe tf-racecheck racecheck 2100 2300 8 2 64 0
  probe tf-racecheck-causal racecheck 2100 2300 8 2 64 1
fi
if [ "$PART" = tune ]; then  # Hopper: D = 64 at S = 4k, short causal D = 128
  step d64-s4k 120 $TUNE --shape 8,32,4096,64 --configs "[dict(block_m=192), \
dict(block_m=192, block_n=96), dict(block_m=192, stages=3), dict(block_m=192, block_n=160), \
dict()]"
  CAUSAL="[dict(overlap=True), dict(overlap=True, longest_first=True), \
dict(overlap=True, block_n=64), dict(overlap=True, block_n=64, longest_first=True), dict()]"
  step causal-1k 100 $TUNE --causal --shape 8,16,1024,128 --configs "$CAUSAL"
  step causal-2k 100 $TUNE --causal --shape 8,16,2048,128 --configs "$CAUSAL"
fi
if [ "$PART" = tune2 ]; then  # the Ampere path (compiled for the GPU), longest_first at large S
  step ampere-d128-s8k 150 $TUNE --path ampere --shape 2,16,8192,128 --configs "$AMP"
  step ampere-d128-s2k 100 $TUNE --path ampere --shape 8,16,2048,128 --configs "$AMP"
  step ampere-d128-s16k-causal 150 $TUNE --path ampere --causal --shape 2,16,16384,128 \
    --configs "$AMP"
  LF="[dict(overlap=True), dict(overlap=True, longest_first=True)]"
  step causal-4k 100 $TUNE --causal --shape 8,16,4096,128 --configs "$LF"
  step causal-16k 100 $TUNE --causal --shape 2,16,16384,128 --configs "$LF"
  step causal-d64-2k 100 $TUNE --causal --shape 16,32,2048,64 --configs "[dict(), \
dict(longest_first=True)]"
fi
if [ "$PART" = ab ]; then  # longest_first at the perf table's short causal shapes
  LF="[dict(overlap=True), dict(overlap=True, longest_first=True)]"
  step causal-1k-b32 100 $TUNE --causal --shape 32,16,1024,128 --configs "$LF"
  step causal-2k-b16 100 $TUNE --causal --shape 16,16,2048,128 --configs "$LF"
  step causal-1k-b8 100 $TUNE --causal --shape 8,16,1024,128 --configs "$LF"
fi
if [ "$PART" = walks ]; then  # 64 x 64 at two CTAs per SM: one CTA per tile vs persistent walks
  SC="dict(block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2)"
  SCP="dict(block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2, persistent=True)"
  step walks-tests 300 python -m pytest -q -x tests/test_attention_gpu.py -k \
    "persistent or short_causal or hopper_configs"
  step walks-c1k-b32 100 $TUNE --causal --shape 32,16,1024,128 --configs "[$SC, $SCP]"
  step walks-c2k-b16 100 $TUNE --causal --shape 16,16,2048,128 --configs "[$SC, $SCP]"
  step walks-c1k-b8 100 $TUNE --causal --shape 8,16,1024,128 --configs "[$SC, $SCP]"
  step walks-c4k-b8 100 $TUNE --causal --shape 8,16,4096,128 --configs \
    "[dict(overlap=True, longest_first=True), $SCP, dict(overlap=True, persistent=True)]"
  step walks-n1k-b32 100 $TUNE --shape 32,16,1024,128 --configs \
    "[dict(overlap=True, persistent=True), dict(overlap=True), $SCP]"
  for f in "$OUT"/walks-[cn]*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -5; done
fi
if [ "$PART" = walks-checks ]; then  # the persistent defaults: GPU tests, sanitizers
  step walks-attention-tests 330 python -m pytest -q --tb=short -p no:logging \
    tests/test_attention_gpu.py tests/test_dispatch_gpu.py
  step walks-gather-tests 200 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_op_gpu.py
  for p in "hopper 1000 1000 4 2 128 1" "hopper 4097 4097 2 2 128 1"; do
    step "walks-memcheck-${p// /-}" 60 "${SANITIZE[@]}" --tool memcheck \
      python perf/attention_probe.py $p
  done
  for p in "hopper 1000 1000 2 2 128 1" "hopper 3000 3000 2 2 128 1"; do
    step "walks-racecheck-${p// /-}" 120 "${SANITIZE[@]}" --tool racecheck \
      python perf/attention_probe.py $p
  done
fi
if [ "$PART" = walks-perf ]; then  # through the op, against cuDNN (perf/RESULTS.md)
  step walks-attention-d128 300 python perf/attention.py --d 128 \
    --s 1024,2048,4096,8192,16384 --no-flex --out "$OUT"
  step walks-attention-b8 100 python perf/attention_tuning.py --causal --rounds 10 \
    --shape 8,16,1024,128 --configs "[dict(block_m=64, block_n=64, stages=2, overlap=True, \
ctas_per_sm=2), dict(block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2, \
persistent=True)]"
  for f in "$OUT"/walks-attention-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -16; done
fi
if [ "$PART" = walks-d64 ]; then  # D = 64 and long non-causal D = 128 with persistent walks
  A="dict(block_m=64, block_n=128, overlap=True, ctas_per_sm=2, persistent=True)"
  C="dict(block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2, persistent=True)"
  E="dict(block_m=64, block_n=128, ctas_per_sm=2, persistent=True)"
  step walks-d64-n4k 150 $TUNE --shape 8,32,4096,64 --configs "[dict(block_m=192), \
dict(block_m=192, persistent=True), $A, $C, $E]"
  step walks-d64-c4k 150 $TUNE --causal --shape 8,32,4096,64 --configs "[dict(), $A, $C, \
dict(overlap=True, persistent=True), $E]"
  step walks-d64-c2k 150 $TUNE --causal --shape 16,32,2048,64 --configs "[dict(), $A, $C, $E]"
  step walks-d128-n4k 100 $TUNE --shape 8,16,4096,128 --configs "[dict(overlap=True), \
dict(overlap=True, persistent=True)]"
  for f in "$OUT"/walks-d*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -8; done
fi
if [ "$PART" = walks-d64b ]; then  # D = 64 persistent 64-row tiles across S
  A="dict(block_m=64, block_n=128, overlap=True, ctas_per_sm=2, persistent=True)"
  C="dict(block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2, persistent=True)"
  step walks-d64-n1k 100 $TUNE --shape 32,32,1024,64 --configs "[dict(block_m=192), $A, $C]"
  step walks-d64-n16k 150 $TUNE --shape 2,32,16384,64 --configs "[dict(block_m=192), $A]"
  step walks-d64-c1k 100 $TUNE --causal --shape 32,32,1024,64 --configs "[dict(), $A, $C]"
  step walks-d64-c16k 150 $TUNE --causal --shape 2,32,16384,64 --configs "[dict(), $A, $C]"
  for f in "$OUT"/walks-d64*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -6; done
fi
if [ "$PART" = walks-final ]; then  # D = 64 and 128 defaults: tests, sanitizers, the op vs cuDNN
  step final-attention-tests 330 python -m pytest -q --tb=short -p no:logging \
    tests/test_attention_gpu.py tests/test_dispatch_gpu.py
  for p in "hopper 1000 1000 4 2 64 1" "hopper 3000 3000 2 2 64 0"; do
    step "final-memcheck-${p// /-}" 60 "${SANITIZE[@]}" --tool memcheck \
      python perf/attention_probe.py $p
  done
  step final-racecheck-d64 120 "${SANITIZE[@]}" --tool racecheck \
    python perf/attention_probe.py hopper 3000 3000 2 2 64 1
  step final-attention 240 python perf/attention.py --d 64,128 \
    --s 1024,2048,4096,8192,16384 --no-flex --out "$OUT"
  grep -v DEBUG "$OUT/final-attention.log" | tail -24
fi
if [ "$PART" = prof ]; then  # short sequences: where the per-tile time goes (ncu), vs cuDNN
  NCU=(ncu --nvtx --nvtx-include "profile/" --section SpeedOfLight --section WarpStateStats \
       --section ComputeWorkloadAnalysis --section LaunchStats --section Occupancy)
  step prof-ours-causal-1k 150 "${NCU[@]}" python perf/attention_profile.py 8,16,1024,128 \
    "dict(causal=True, overlap=True, longest_first=True)"
  step prof-cudnn-causal-1k 150 "${NCU[@]}" python perf/attention_profile.py 8,16,1024,128 \
    "dict(causal=True, sdpa='cudnn')"
  step prof-ours-1k 150 "${NCU[@]}" python perf/attention_profile.py 32,16,1024,128 \
    "dict(overlap=True)"
  step prof-cudnn-1k 150 "${NCU[@]}" python perf/attention_profile.py 32,16,1024,128 \
    "dict(sdpa='cudnn')"
  for f in "$OUT"/prof-*.log; do echo "--- $f"; grep -E "^\s+(Duration|Compute \(SM\)|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Executed Ipc Active|Issue Slots Busy|SM Busy|Registers Per|Shared Memory Config|Dynamic Shared|Threads|Grid Size|Block Size|Achieved Occupancy|Waves Per SM|Warp Cycles Per Issued|Avg. Active Threads)" "$f" | head -24; grep -E "^\s+  *[A-Z].*kernel|void|cudnn|Kernel" "$f" | head -3; done
fi
if [ "$PART" = prof-sc ]; then  # short causal D = 128 through the op: stalls per SASS line
  NCU=(ncu --nvtx --nvtx-include "profile/" --section SpeedOfLight --section WarpStateStats \
       --section SchedulerStats --metrics \
       sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum)
  step profsc-ours 150 "${NCU[@]}" python perf/attention_profile.py 32,16,1024,128 \
    "dict(op=True, causal=True)"
  step profsc-cudnn 150 "${NCU[@]}" python perf/attention_profile.py 32,16,1024,128 \
    "dict(causal=True, sdpa='cudnn')"
  step profsc-source 200 bash -c "ncu --nvtx --nvtx-include profile/ --section SourceCounters \
    --page source --print-source sass --csv python perf/attention_profile.py 32,16,1024,128 \
    'dict(op=True, causal=True)' > $OUT/src-ours.csv"
  for f in "$OUT"/profsc-*.log; do echo "--- $f"; grep -E "Duration|hmma|inst_executed|Issue Slots|Warp Cycles Per Issued|Eligible Warps|No Eligible|Active Warps Per|Grid Size|Registers" "$f" | head -14; done
  ls -la "$OUT"
fi
if [ "$PART" = mask-ab ]; then  # the causal mask as selects: .before (old package) vs this tree
  SC128="[dict(block_n=64, stages=3, overlap=True, pingpong=True, persistent=True)]"
  P128="[dict(overlap=True, persistent=True, pingpong=True)]"
  SC64="[dict(block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2, persistent=True)]"
  P64="[dict(block_m=64, block_n=128, overlap=True, ctas_per_sm=2, persistent=True)]"
  PYTHONPATH="$PWD/.before${PYTHONPATH:+:$PYTHONPATH}" python -c \
    "import cute_kernels, sys; print('before tree:', cute_kernels.__file__)"
  for spec in "32,16,1024,128|$SC128" "16,16,2048,128|$P128" "8,16,4096,128|$P128" \
              "32,32,1024,64|$SC64" "8,32,4096,64|$P64"; do
    shape=${spec%%|*}; cfg=${spec#*|}
    for side in before after; do
      root=$PWD; [ $side = before ] && root=$PWD/.before
      PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" CUTE_KERNELS_CACHE_DIR=/tmp/ck-ab-$side \
        step "ab-$side-${shape//,/-}" 150 $TUNE --causal --shape "$shape" --configs "$cfg"
    done
  done
  for f in "$OUT"/ab-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -3; done
fi
if [ "$PART" = retune ]; then  # short causal thresholds after the mask fix, the op's table
  T128="[dict(block_n=64, stages=3, overlap=True, pingpong=True, persistent=True), \
dict(block_n=64, stages=4, overlap=True, pingpong=True, persistent=True), \
dict(overlap=True, persistent=True, pingpong=True)]"
  T64="[dict(block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2, persistent=True), \
dict(block_m=64, block_n=128, overlap=True, ctas_per_sm=2, persistent=True), \
dict(block_n=64, stages=3, overlap=True, pingpong=True, persistent=True), \
dict(overlap=True, persistent=True, pingpong=True)]"
  for shape in 32,16,1024 24,16,1536 16,16,2048; do
    step "rt-${shape//,/-}-128" 150 $TUNE --causal --shape $shape,128 --configs "$T128"
  done
  for shape in 32,32,1024 16,32,2048; do
    step "rt-${shape//,/-}-64" 150 $TUNE --causal --shape $shape,64 --configs "$T64"
  done
  step rt-op 240 python perf/attention.py --d 128,64 --s 1024,2048,4096 --no-flex --out "$OUT"
  for f in "$OUT"/rt-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -7; done
fi
if [ "$PART" = mask-tests ]; then  # the selects and the route: every attention GPU test
  step mt-attention 560 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py
fi
if [ "$PART" = mask-tests2 ]; then  # dispatch, block-sparse, column-sparse op; sanitizers
  step mt-dispatch 200 python -m pytest -q --tb=short -p no:logging tests/test_dispatch_gpu.py
  step mt-sparse 330 python -m pytest -q --tb=short -p no:logging tests/test_block_sparse_gpu.py \
    tests/test_column_sparse_op_gpu.py
  probe mt-memcheck memcheck 1000 1000 2 2 128 1
  probe mt-racecheck racecheck 1000 1000 2 2 128 1
fi
if [ "$PART" = mask-perf ]; then  # after the selects: the op's table, block-sparse, Ampere
  step mp-op 240 python perf/attention.py --d 128,64 --s 1024,2048,4096,8192 --no-flex \
    --out "$OUT"
  step mp-block-sparse 300 python perf/block_sparse.py --quick --out "$OUT"
  step mp-ampere 150 python perf/attention.py --path ampere --d 128 --s 2048,8192 --no-flex \
    --out "$OUT/ampere"
  for f in "$OUT"/mp-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -24; done
fi
if [ "$PART" = ampere-ab ]; then  # the Ampere kernel's causal mask: .before vs this tree
  for shape in 16,16,2048 4,16,8192; do
    for side in before after; do
      root=$PWD; [ $side = before ] && root=$PWD/.before
      PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" CUTE_KERNELS_CACHE_DIR=/tmp/ck-ab-$side \
        step "aab-$side-${shape//,/-}" 150 $TUNE --path ampere --causal --shape $shape,128 \
        --configs "[dict(warps=4)]"
    done
  done
  for f in "$OUT"/aab-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -3; done
fi
if [ "$PART" = final-check ]; then  # Ampere back on ifs: its tests and speed; the op's table
  step fc-ampere-tests 300 python -m pytest -q --tb=short -p no:logging \
    tests/test_attention_gpu.py tests/test_block_sparse_gpu.py -k ampere
  step fc-ampere 150 python perf/attention.py --path ampere --d 128 --s 2048,8192 --no-flex \
    --out "$OUT/ampere"
  step fc-op 200 python perf/attention.py --d 128,64 --s 1024,2048,4096 --no-flex --out "$OUT"
  for f in "$OUT"/fc-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -18; done
fi
if [ "$PART" = final-check2 ]; then  # the column-sum and column-sparse kernels after the selects
  step fc2-colsum-tests 400 python -m pytest -q --tb=short -p no:logging \
    tests/test_column_sparse_gpu.py
  step fc2-column-sparse 150 python perf/column_sparse.py --quick --out "$OUT"
  for f in "$OUT"/fc2-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -16; done
fi
if [ "$PART" = short-repeat ]; then  # short causal through the op, three runs in one call
  for i in 1 2 3; do
    step "sr-$i" 120 python perf/attention.py --d 128 --s 1024,2048 --no-flex --out "$OUT/r$i"
  done
  for f in "$OUT"/sr-*.log; do echo "--- $f"; grep -v DEBUG "$f" | grep "causal"; done
fi
if [ "$PART" = gather-retune ]; then  # short gathered lists after the selects: which tile
  GT="[dict(), dict(block_m=64, block_n=64, overlap=True, ctas_per_sm=2), \
dict(block_m=128, block_n=64, stages=3, overlap=True, pingpong=True)]"
  step gr-s8k 150 python perf/column_sparse_tuning.py --shape 1,16,8192,128 --group 128 \
    --sparsity 0.93,0.97 --configs "$GT"
  step gr-s16k 150 python perf/column_sparse_tuning.py --shape 1,16,16384,128 --group 128 \
    --sparsity 0.93,0.91 --configs "$GT"
  for f in "$OUT"/gr-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -12; done
fi
if [ "$PART" = decode ]; then  # decode's query tile: 128 vs 64 rows
  step decode-tiles-graphs 200 python perf/decode_tiles.py --graphs
  step decode-tiles-eager 150 python perf/decode_tiles.py --s-kv 4096,65536 --batch 1,16
  for f in "$OUT"/decode-tiles-*.log; do echo "--- $f"; tail -12 "$f"; done
fi
if [ "$PART" = decode2 ]; then  # decode at two CTAs per SM; what cuDNN runs for short causal
  step decode2-tiles 300 python perf/decode_tiles.py --graphs --two-per-sm --block-m 64 \
    --stages 2,3 --splits 1,8,14,16,24,32 --s-q 1 --s-kv 4096,65536 --batch 1,16
  step decode2-baselines 120 python perf/baseline_kernels.py --ours \
    --attention 32,16,1024,128,causal 16,16,2048,128,causal
  for f in "$OUT"/decode2-*.log; do echo "--- $f"; grep -v "DEBUG\|Warn" "$f" | tail -30; done
fi
if [ "$PART" = decode-pdl ]; then  # the combine as a programmatic dependent launch; splits from 2k
  step pdl-tests 300 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "split or decode or num_splits or gqa or repeat_calls"
  step pdl-memcheck 120 "${SANITIZE[@]}" --tool memcheck python perf/attention_probe.py \
    hopper 1 9000 32 8 128 0
  step pdl-racecheck 120 "${SANITIZE[@]}" --tool racecheck python perf/attention_probe.py \
    hopper 1 9000 32 8 128 0
  for g in "--graphs" "--graphs --no-pdl" ""; do
    step "pdl-decode$(echo "$g" | tr -d ' -')" 150 python perf/decode.py --quick $g \
      --s-kv 2048,4096,65536 --out "$OUT/decode$(echo "$g" | tr -d ' -')"
  done
  for f in "$OUT"/pdl-decode*.log; do echo "--- $f"; grep -A 16 "^ours:" "$f"; done
fi
if [ "$PART" = decode-joint ]; then  # split + combine from one host call: tests, host, speed
  step joint-tests 200 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "split or decode or num_splits or gqa or repeat_calls"
  step joint-memcheck 120 "${SANITIZE[@]}" --tool memcheck python perf/attention_probe.py \
    hopper 1 9000 32 8 128 0
  step joint-host 120 python perf/host_profile.py --ops decode,decode_unsplit,sdpa_decode \
    --calls 300 --top 4
  for g in "" "--graphs"; do
    step "joint-decode$(echo "$g" | tr -d ' -')" 150 python perf/decode.py --quick $g \
      --out "$OUT/joint$(echo "$g" | tr -d ' -')"
  done
  grep "us of host time" "$OUT/joint-host.log"
  for f in "$OUT"/joint-decode*.log; do echo "--- $f"; grep -A 16 "^ours:" "$f"; done
fi
if [ "$PART" = checks ]; then  # GPU tests of both paths, sanitizers on the new builds
  step attention-gpu-tests 330 python -m pytest -q --tb=short -p no:logging \
    tests/test_attention_gpu.py tests/test_dispatch_gpu.py
  # the Ampere D = 128 4-warp build (dense, causal, split-KV decode) and longest_first
  for p in "ampere 1000 1000 4 2 128 1" "ampere 333 4097 4 2 128 0" "ampere 1 20000 32 8 128 0" \
           "hopper 1000 1000 4 2 128 1" "hopper 4097 4097 2 2 128 1" \
           "hopper 1 20000 32 8 128 0" "hopper 40 1000 4 2 64 1"; do
    step "memcheck-${p// /-}" 60 "${SANITIZE[@]}" --tool memcheck python perf/attention_probe.py $p
  done
  step racecheck-ampere 90 "${SANITIZE[@]}" --tool racecheck python perf/attention_probe.py \
    ampere 300 1000 2 2 128 1
  step racecheck-hopper 90 "${SANITIZE[@]}" --tool racecheck python perf/attention_probe.py \
    hopper 1000 1000 2 2 128 1
  step racecheck-hopper-short 90 "${SANITIZE[@]}" --tool racecheck \
    python perf/attention_probe.py hopper 8 5000 32 8 128 0
  [ "${DECODE:-0}" = 1 ] && step decode 200 python perf/decode.py --quick --out "$OUT"
fi
if [ "$PART" = async-perf ]; then  # persistent O stores by a producer warp (async_store)
  step async-sass 150 python perf/sass_spills.py --context 3 dense-persistent-causal-d64 \
    dense-persistent-causal-d64-sync dense-persistent-causal dense-persistent-causal-sync
  SCP="block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2, persistent=True"
  BIG="overlap=True, persistent=True"
  D64="block_m=64, block_n=128, overlap=True, ctas_per_sm=2, persistent=True"
  short_causal async "[dict($SCP), dict($SCP, async_store=False), dict($BIG), \
dict($BIG, async_store=False)]"
  step async-c4k-b8 100 $TUNE --causal --shape 8,16,4096,128 --configs \
    "[dict($BIG), dict($BIG, async_store=False)]"
  step async-n1k-b32 100 $TUNE --shape 32,16,1024,128 --configs \
    "[dict($BIG), dict($BIG, async_store=False)]"
  step async-d64-4k 100 $TUNE --shape 8,32,4096,64 --configs \
    "[dict($D64), dict($D64, async_store=False)]"
  LPT="dict(persistent=True, walks='lpt'"
  step async-blocks-8k 200 python perf/block_sparse_loaders.py --seq 8192 --blocks 32,64 \
    --rounds 12 --configs "[$LPT), $LPT, async_store=False)]"
  grep -E "^===|spill|^-- line" "$OUT/async-sass.log"
  for f in "$OUT"/async-[cnd]*.log "$OUT"/async-blocks-8k.log; do
    echo "--- $f"; grep -v DEBUG "$f" | tail -9; done
  echo; echo "=== summary"; printf '%s\n' "${summary[@]}"; exit 0
fi
if [ "$PART" = async-perf2 ]; then  # where 128 x 128 async tiles overtake short causal's
  SCP="block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2, persistent=True"
  BIG="overlap=True, persistent=True"
  step async2-n1k-b32 100 $TUNE --shape 32,16,1024,128 --configs \
    "[dict($BIG), dict($BIG, async_store=False)]"
  for shape in 8,16,2048 32,16,2048 16,16,1536 16,32,1280; do
    step "async2-c${shape//,/-}" 100 $TUNE --causal --shape $shape,128 --configs \
      "[dict($SCP), dict($BIG)]"
  done
  for f in "$OUT"/async2-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -6; done
  echo; echo "=== summary"; printf '%s\n' "${summary[@]}"; exit 0
fi
if [ "$PART" = pingpong ]; then  # consumers taking turns with the overlapped mainloop
  SCP="block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2, persistent=True"
  BIG="overlap=True, persistent=True"
  short_causal pp "[dict($SCP), dict($BIG), dict($BIG, pingpong=True)]"
  step pp-c4k-b8 100 $TUNE --causal --shape 8,16,4096,128 --configs \
    "[dict($BIG), dict($BIG, pingpong=True)]"
  step pp-c16k-b2 100 $TUNE --causal --shape 2,16,16384,128 --configs \
    "[dict($BIG), dict($BIG, pingpong=True)]"
  step pp-n4k-b8 100 $TUNE --shape 8,16,4096,128 --configs \
    "[dict(overlap=True), dict(overlap=True, pingpong=True)]"
  step pp-n1k-b32 100 $TUNE --shape 32,16,1024,128 --configs \
    "[dict($BIG, async_store=False), dict($BIG, async_store=False, pingpong=True), \
dict($BIG, pingpong=True)]"
  for f in "$OUT"/pp-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -6; done
  echo; echo "=== summary"; printf '%s\n' "${summary[@]}"; exit 0
fi
if [ "$PART" = pingpong2 ]; then  # non-causal: persistent with turns against one CTA per tile
  BIG="overlap=True, persistent=True, pingpong=True"
  for shape in 8,16,4096 4,16,8192 2,16,16384; do
    step "pp2-n${shape//,/-}" 100 $TUNE --shape $shape,128 --configs \
      "[dict(overlap=True), dict($BIG), dict($BIG, async_store=False)]"
  done
  step pp2-op-d128 150 python perf/attention.py --d 128 --s 1024,2048,4096 --no-flex --out "$OUT"
  step pp2-tests 330 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    tests/test_dispatch_gpu.py
  for f in "$OUT"/pp2-n*.log "$OUT"/pp2-op-d128.log; do
    echo "--- $f"; grep -v DEBUG "$f" | tail -7; done
  echo; echo "=== summary"; printf '%s\n' "${summary[@]}"; exit 0
fi
if [ "$PART" = pp-final ]; then  # sanitizers on the turns, the op's tables
  step ppf-tests 200 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "persistent or pingpong"
  probe ppf-memcheck memcheck 1000 4100 4 2 128 0
  probe ppf-racecheck racecheck 1000 1000 2 2 128 0
  probe ppf-racecheck-causal racecheck 1700 1700 2 2 128 1
  step ppf-op 120 python perf/attention.py --d 128 --s 4096,8192 --no-flex --out "$OUT"
  step ppf-blocks-8k 100 python perf/block_sparse_small.py --seq 8192 --rounds 10
  for f in "$OUT"/ppf-op.log "$OUT"/ppf-blocks-8k.log; do
    echo "--- $f"; grep -v DEBUG "$f" | tail -6; done
  echo; echo "=== summary"; printf '%s\n' "${summary[@]}"; exit 0
fi
if [ "$PART" = pp-narrow ]; then  # 128 x 64 tiles with turns against short causal's 64 x 64
  SCP="block_m=64, block_n=64, stages=2, overlap=True, ctas_per_sm=2, persistent=True"
  PP="overlap=True, persistent=True, pingpong=True"
  short_causal ppn "[dict($SCP), dict($PP, block_n=64), dict($PP, block_n=64, stages=3), \
dict($PP)]"
  W="dict(short=False, block_n=64, persistent=True, walks='lpt'"
  step ppn-blocks-8k 200 python perf/block_sparse_loaders.py --seq 8192 --blocks 32 \
    --rounds 12 --configs "[dict(persistent=True, walks='lpt'), $W, pingpong=True), \
$W, pingpong=True, stages=3)]"
  for f in "$OUT"/ppn-*.log; do echo "--- $f"; grep -v DEBUG "$f" | tail -7; done
  echo; echo "=== summary"; printf '%s\n' "${summary[@]}"; exit 0
fi
if [ "$PART" = turns-final ]; then  # short causal and packed short lists on 128 x 64 turns
  step turns-tests 330 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    tests/test_block_sparse_gpu.py -k "short or packed or persistent or pingpong or reused"
  probe turns-racecheck racecheck 1000 1000 2 2 128 1
  step turns-blocks-probe 150 "${SANITIZE[@]}" --tool memcheck python perf/block_sparse_probe.py
  step turns-blocks-8k 120 python perf/block_sparse_small.py --seq 8192 --block 32 --rounds 10
  TWO="dict(block_m=64, stages=2, pingpong=False, ctas_per_sm=2, persistent=True, walks='lpt')"
  step turns-loaders-8k 200 python perf/block_sparse_loaders.py --seq 8192 --blocks 16,32,64 \
    --rounds 10 --configs "[dict(persistent=True, walks='lpt'), $TWO]"
  step turns-op 100 python perf/attention.py --d 128 --s 1024,2048 --no-flex --out "$OUT"
  step turns-blocks-racecheck 150 "${SANITIZE[@]}" --tool racecheck \
    python perf/block_sparse_probe.py hopper
  for f in "$OUT"/turns-blocks-8k.log "$OUT"/turns-loaders-8k.log "$OUT"/turns-op.log; do
    echo "--- $f"; grep -v DEBUG "$f" | tail -9; done
  echo; echo "=== summary"; printf '%s\n' "${summary[@]}"; exit 0
fi
if [ "$PART" = turns-tests ]; then  # the gather-family GPU tests on the turns
  step turns-sparse-tests 400 python -m pytest -q --tb=short -p no:logging \
    tests/test_block_sparse_gpu.py tests/test_column_sparse_op_gpu.py
  echo; echo "=== summary"; printf '%s\n' "${summary[@]}"; exit 0
fi
if [ "$PART" = async-checks ]; then  # its GPU tests and sanitizers
  step async-tests 330 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "persistent or short_causal or hopper_configs"
  step async-blocks-tests 200 python -m pytest -q --tb=short -p no:logging \
    tests/test_block_sparse_gpu.py -k "packed or walks or short"
fi
if [ "$PART" = async-final-tests ]; then  # every attention-family GPU test
  step final-attention-tests 330 python -m pytest -q --tb=short -p no:logging \
    tests/test_attention_gpu.py tests/test_dispatch_gpu.py
  step final-sparse-tests 250 python -m pytest -q --tb=short -p no:logging \
    tests/test_block_sparse_gpu.py tests/test_column_sparse_op_gpu.py
fi
if [ "$PART" = async-final-perf ]; then  # the op's tables again
  step final-d128 120 python perf/attention.py --d 128 --s 1024,2048,4096 --no-flex --out "$OUT"
  step final-blocks-8k 120 python perf/block_sparse_small.py --seq 8192 --rounds 10
  for f in "$OUT"/final-d128.log "$OUT"/final-blocks-8k.log; do
    echo "--- $f"; grep -v DEBUG "$f" | tail -9; done
fi
if [ "$PART" = async-san ]; then  # its sanitizers, and the op's short causal table
  probe async-memcheck memcheck 3000 3000 4 2 128 1
  probe async-racecheck racecheck 1000 1000 2 2 128 1
  probe async-racecheck-big racecheck 1700 1700 2 2 128 1
  step hopper-d128-short 150 python perf/attention.py --d 128 --s 1024,2048,4096 --no-flex \
    --out "$OUT"
fi
if [ "$PART" = cluster-perf ]; then  # split-KV combined in clusters against the combine kernel
  capacity cl-capacity 120
  DEC="python perf/decode.py --batch 1,4 --s-q 1,8 --s-kv 4096,65536 --splits 4,8,16 --joint 4,8"
  step cl-smoke 100 python perf/attention_probe.py hopper 1 9000 16 4 128 0 splits 8
  if grep -q "^ok" "$OUT/cl-smoke.log"; then
    step cl-graphs 260 $DEC --graphs --out "$OUT/clg"
    step cl-eager 200 $DEC --out "$OUT/cle"
  fi
  grep "clusters held" "$OUT/cl-capacity.log"
  for f in "$OUT"/cl-graphs.log "$OUT"/cl-eager.log; do
    echo "--- $f"; grep -A 12 "^ours:" "$f"; grep -A 9 "combine kernel (ms" "$f"
  done
fi
if [ "$PART" = cluster-checks ]; then  # its GPU tests and sanitizers; 3 K/V stages at 64 CTAs
  capacity clc-capacity 60
  step clc-tiles 150 python perf/decode_tiles.py --graphs --cluster --block-m 64 --stages 2,3 \
    --splits 8,16 --batch 1 --s-q 1 --s-kv 16384,65536,131072
  step clc-tests 330 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "split or decode or num_splits or gqa or repeat_calls or cluster"
  split_probes clc
  grep "clusters held" "$OUT/clc-capacity.log"; grep -B2 -A8 "^decode tiles" "$OUT/clc-tiles.log"
  grep "^B1" "$OUT/clc-tiles.log"; tail -3 "$OUT/clc-tests.log"
fi
if [ "$PART" = cluster-final ]; then  # the default splits with the cluster route, B1 and B4
  step clf-tests 200 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "cluster or split or num_splits"
  DEC="python perf/decode.py --batch 1,4 --s-q 1,8 --s-kv 4096,8192,16384,32768,65536,131072 \
--splits 8,16 --joint 8"
  step clf-graphs 240 $DEC --graphs --out "$OUT/clfg"
  step clf-eager 200 $DEC --out "$OUT/clfe"
  tail -3 "$OUT/clf-tests.log"
  for f in "$OUT"/clf-graphs.log "$OUT"/clf-eager.log; do
    echo "--- $f"; grep -A 16 "^ours:" "$f"; grep -A 13 "combine kernel (ms" "$f"
  done
fi
if [ "$PART" = cluster-h100 ]; then  # the cluster route on another GPU: capacity, tests, speed
  capacity clh-capacity 60
  step clh-tests 200 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "cluster or split or num_splits or decode or gqa"
  DEC="python perf/decode.py --batch 1,4 --s-q 1,8 --s-kv 4096,8192,16384,65536 --splits 8,16 \
--joint 8"
  step clh-graphs 200 $DEC --graphs --out "$OUT/clhg"
  step clh-eager 160 $DEC --out "$OUT/clhe"
  grep "clusters held" "$OUT/clh-capacity.log"; tail -2 "$OUT/clh-tests.log"
  for f in "$OUT"/clh-graphs.log "$OUT"/clh-eager.log; do
    echo "--- $f"; grep -A 12 "^ours:" "$f"; grep -A 9 "combine kernel (ms" "$f"
  done
fi
if [ "$PART" = cluster-h100b ]; then  # the default past 16k keys on a GPU the clusters saturate
  step clhb-tests 200 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "cluster or num_splits"
  DEC="python perf/decode.py --batch 1 --s-q 1,8 --s-kv 32768,65536,131072 --splits 8,16"
  step clhb-graphs 200 $DEC --graphs --out "$OUT/clhbg"
  step clhb-eager 160 $DEC --out "$OUT/clhbe"
  tail -2 "$OUT/clhb-tests.log"
  for f in "$OUT"/clhb-graphs.log "$OUT"/clhb-eager.log; do
    echo "--- $f"; grep -A 9 "^ours:" "$f"
  done
fi
if [ "$PART" = cluster16 ]; then  # 16 splits in 16-CTA clusters, two CTAs per SM
  T="python perf/decode_tiles.py --graphs --block-m 64 --two-per-sm --splits 8,16 --batch 1 \
--s-q 1 --s-kv 16384,32768,65536,131072"
  step c16-cluster 200 $T --cluster
  step c16-joint 150 $T
  for f in "$OUT"/c16-*.log; do echo "--- $f"; grep "^B1" "$f" | head -4; done
fi
if [ "$PART" = cluster-recheck ]; then  # after each role meets the cluster in its own branch
  step clr-tests 240 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "split or decode or num_splits or gqa or repeat_calls or cluster"
  probe clr-memcheck memcheck 1 9000 16 4 128 0 splits 8
  probe clr-racecheck racecheck 7 3000 4 4 64 1 splits 3
  step clr-graphs 150 python perf/decode.py --graphs --batch 1 --s-q 1 \
    --s-kv 4096,8192,16384,65536 --splits 8,16
  tail -2 "$OUT/clr-tests.log"; grep -A 8 "^ours:" "$OUT/clr-graphs.log"
fi
if [ "$PART" = capacity ]; then  # the cluster capacity query without the DSL: cost, tests
  step cap-time 60 python -c "import time, torch; torch.zeros(1, device='cuda'); \
from cute_kernels.runtime.arch import cluster_capacity as c, hbm_gbps as h; \
d = torch.device('cuda', 0); t = time.perf_counter(); r = {n: c(d, n) for n in (2, 4, 8)}; \
print('capacity', r, f'{(time.perf_counter() - t) * 1e3:.1f} ms', 'hbm GB/s', round(h(d)))"
  step cap-tests 240 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "cluster or split or num_splits"
  cat "$OUT/cap-time.log" | grep capacity; tail -2 "$OUT/cap-tests.log"
fi
if [ "$PART" = key-tiles ]; then  # the decode tile's keys per block: 128 against 64-192
  step kt-graphs 240 python perf/decode_tiles.py --graphs --cluster --block-m 64 \
    --key-tiles 192x2,160x2,64x4 --splits 8,16 --batch 1 --s-q 1 --s-kv 16384,65536
  grep "^B1" "$OUT/kt-graphs.log" | head -2; grep -A 6 "^decode tiles" "$OUT/kt-graphs.log"
fi
if [ "$PART" = sequential ]; then  # the decode tile without the softmax / MMA overlap
  step seq-graphs 200 python perf/decode_tiles.py --graphs --cluster --block-m 64 --sequential \
    --splits 8,16 --batch 1 --s-q 1 --s-kv 16384,65536
  grep "^B1" "$OUT/seq-graphs.log" | head -2
fi
if [ "$PART" = final-h100 ]; then  # the final code's cluster tests and B1 decode on an H100
  step fh-tests 200 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "cluster or num_splits"
  step fh-graphs 150 python perf/decode.py --graphs --batch 1 --s-q 1 \
    --s-kv 4096,16384,65536,131072 --splits 8,16 --out "$OUT/fh"
  tail -2 "$OUT/fh-tests.log"; grep -A 8 "^ours:" "$OUT/fh-graphs.log"
fi
if [ "$PART" = meet-ab ]; then  # cluster meetings at kernel level (.before) / per role branch
  for side in before after before after; do
    tree=.; [ "$side" = before ] && tree=.before
    ( cd "$tree" && PYTHONPATH="$PWD" CUTE_KERNELS_CACHE_DIR="/tmp/ck-$side" timeout 90 \
      python perf/decode.py --graphs --batch 1 --s-q 1 --s-kv 4096,16384 --splits 8 \
      --out "$OUT/$side" ) > "$OUT/meet-$side.log" 2>&1
    echo "$side: $(grep -A 5 '^ours:' "$OUT/meet-$side.log" | grep 'B1' | tr -s ' ' | cut -c1-60)"
  done
fi
if [ "$PART" = swap1 ]; then  # the swap-AB decode kernel: its tests, then against the 64-row tile
  step sw-tests 240 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k swap_ab
  step sw-graphs 320 python perf/decode_tiles.py --graphs --cluster --block-m 64 \
    --swap-ab 128x3,128x2,64x6 --splits 8,16 --batch 1 --s-q 1,8 \
    --s-kv 4096,16384,65536,131072
  tail -3 "$OUT/sw-tests.log"; grep -A 14 "^decode tiles" "$OUT/sw-graphs.log"
fi
if [ "$PART" = swap2 ]; then  # the swap-AB route: decode-family GPU tests, sanitizers
  step sw2-tests 330 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "swap_ab or split or decode or num_splits or gqa or repeat_calls or cluster"
  split_probes sw2
  probe sw2-memcheck-combine memcheck 2 5000 16 2 128 0 splits 16
  tail -3 "$OUT/sw2-tests.log"
  sanitizer_summary sw2-
fi
if [ "$PART" = swap3 ]; then  # the op's decode default against SDPA; B4 / B16 tile A/B
  step sw3-graphs 300 python perf/decode.py --graphs --batch 1,4 --s-q 1 \
    --s-kv 4096,16384,65536,131072 --splits 8,16 --out "$OUT/sw3"
  step sw3-tiles 260 python perf/decode_tiles.py --graphs --cluster --block-m 64 \
    --swap-ab 128x2 --splits 4,8,16 --batch 4,16 --s-q 1 --s-kv 4096,65536
  grep -A 12 "^ours:" "$OUT/sw3-graphs.log"; grep -A 8 "^decode tiles" "$OUT/sw3-tiles.log"
fi
if [ "$PART" = swap4 ]; then  # B16 on the swap-AB tile against the 64-row tile; eager decode
  step sw4-test 120 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "default_splits_take"
  step sw4-tiles 200 python perf/decode_tiles.py --graphs --block-m 64 --swap-ab 128x2 \
    --splits 1,2,4 --batch 16 --s-q 1 --s-kv 4096,16384,65536
  step sw4-eager 240 python perf/decode.py --quick --splits 8,16 --out "$OUT/sw4"
  tail -2 "$OUT/sw4-test.log"; grep -A 7 "^decode tiles" "$OUT/sw4-tiles.log"
  grep -A 12 "^ours:" "$OUT/sw4-eager.log"
fi
if [ "$PART" = swap-h100 ]; then  # the swap-AB route on another GPU: tests, decode in graphs
  capacity swh-capacity 60
  step swh-tests 240 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "swap_ab or cluster or num_splits or default_splits"
  step swh-graphs 330 python perf/decode.py --graphs --batch 1,4,16 --s-q 1 \
    --s-kv 4096,16384,65536,131072 --splits 1,8,16 --out "$OUT/swh"
  grep "clusters held" "$OUT/swh-capacity.log"; tail -2 "$OUT/swh-tests.log"
  grep -A 16 "^ours:" "$OUT/swh-graphs.log"
fi
if [ "$PART" = swap-stages ]; then  # HBM-bound decode (B4, B16): deeper or finer K/V rings
  step sws-tiles 400 python perf/decode_tiles.py --graphs --block-m 64 \
    --swap-ab 128x2,128x3,64x4 --splits 1,4 --batch 4,16 --s-q 1 --s-kv 65536,131072
  grep -A 8 "^decode tiles" "$OUT/sws-tiles.log"
fi
if [ "$PART" = swap5 ]; then  # the swap-AB kernel's softmax / MMA overlap: tests, A/B
  step sw5-tests 240 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "swap_ab"
  step sw5-graphs 330 python perf/decode_tiles.py --graphs --cluster --block-m 64 \
    --swap-ab 128x2,128x2seq --splits 8,16 --batch 1 --s-q 1,8 \
    --s-kv 4096,16384,65536,131072
  tail -2 "$OUT/sw5-tests.log"; grep -A 14 "^decode tiles" "$OUT/sw5-graphs.log"
fi
if [ "$PART" = swap-final-tests ]; then  # the final code: every attention GPU test, sanitizers
  step swf-tests 500 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    tests/test_dispatch_gpu.py
  probe swf-memcheck memcheck 1 9000 16 4 128 0 splits 8
  probe swf-racecheck racecheck 1 9000 16 4 128 0 splits 8
  probe swf-memcheck-causal memcheck 7 3000 4 4 64 1
  probe swf-racecheck-combine racecheck 2 5000 16 2 128 0 splits 16
  tail -3 "$OUT/swf-tests.log"
  sanitizer_summary swf-
fi
if [ "$PART" = swap-final-perf ]; then  # the final code: the op's decode default against SDPA
  step swp-graphs 330 python perf/decode.py --graphs --batch 1,4,16 --s-q 1,8 \
    --s-kv 4096,16384,65536,131072 --splits 8,16 --out "$OUT/swp"
  step swp-eager 200 python perf/decode.py --quick --splits 8,16 --out "$OUT/swp"
  grep -A 30 "^ours:" "$OUT/swp-graphs.log"; grep -A 12 "^ours:" "$OUT/swp-eager.log"
fi
if [ "$PART" = swap-final-h100 ]; then  # the final code on an H100: decode tests, graphs, eager
  step swfh-tests 240 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "swap_ab or split or decode or num_splits or gqa or repeat_calls or cluster"
  step swfh-graphs 250 python perf/decode.py --graphs --batch 1,4,16 --s-q 1 \
    --s-kv 4096,16384,65536,131072 --splits 8,16 --out "$OUT/swfh"
  step swfh-eager 150 python perf/decode.py --quick --splits 8,16 --out "$OUT/swfh"
  tail -2 "$OUT/swfh-tests.log"
  grep -A 17 "^ours:" "$OUT/swfh-graphs.log"; grep -A 12 "^ours:" "$OUT/swfh-eager.log"
fi
if [ "$PART" = swap-eager ]; then  # eager decode twice (its spread between runs), host time
  step swe-eager1 150 python perf/decode.py --quick --splits 8,16 --out "$OUT/swe1"
  step swe-eager2 150 python perf/decode.py --quick --splits 8,16 --out "$OUT/swe2"
  step swe-host 120 python perf/host_profile.py --ops decode,decode_unsplit,sdpa_decode --top 3
  for f in "$OUT"/swe-eager*.log; do echo "--- $f"; grep -A 12 "^ours:" "$f"; done
  grep "^=== " "$OUT/swe-host.log"
fi
if [ "$PART" = host-ab ]; then  # host us per eager call: this tree against .before/ (an
  # older checkout of cute_kernels/ carried beside it), alternating, three runs each
  HOPS=decode,decode_unsplit,sdpa_decode,linear,linear_decode,matmul,gated_decode
  HOPS=$HOPS,torch_gated_decode
  for i in 1 2 3; do
    step hab-new$i 150 python perf/host_profile.py --ops $HOPS --top 2
    step hab-old$i 150 env PYTHONPATH=.before python perf/host_profile.py --ops $HOPS --top 2
  done
  [ "${HAB_EAGER:-1}" = 1 ] && step hab-eager 150 python perf/decode.py --quick --out "$OUT/hab"
  grep -h "^cute_kernels" "$OUT"/hab-new1.log "$OUT"/hab-old1.log
  for tree in new old; do  # us per call of each op, the three runs
    echo "$tree: $(grep -h "^=== " "$OUT"/hab-$tree*.log | awk '{a[$2]=a[$2] " " $3} END \
      {for (k in a) printf "%s%s; ", k, a[k]}')"
  done
  [ -f "$OUT/hab-eager.log" ] && grep -A 12 "^ours:" "$OUT/hab-eager.log"
fi
if [ "$PART" = host-tests ]; then  # after the plan's bound arguments: every attention route
  step ht-tests 560 python -m pytest -q --tb=short -p no:logging -x tests/test_dispatch_gpu.py \
    tests/test_attention_gpu.py
  tail -3 "$OUT/ht-tests.log"
fi
if [ "$PART" = producer-regress ]; then  # the kernels on AttentionSm90's producer mixin
  step prr-tests 480 python -m pytest -q --tb=short -p no:logging -x \
    tests/test_column_sparse_op_gpu.py tests/test_block_sparse_gpu.py \
    tests/test_column_sparse_gpu.py
  tail -3 "$OUT/prr-tests.log"
fi
if [ "$PART" = split-recheck ]; then  # after split_launch / _smem_tiles: split-family tests
  step srk-tests 300 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    -k "swap_ab or split or decode or num_splits or gqa or repeat_calls or cluster"
  tail -2 "$OUT/srk-tests.log"
fi
if [ "$PART" = attention-all ]; then  # every attention-family GPU test
  step aa-tests 560 python -m pytest -q --tb=short -p no:logging tests/test_attention_gpu.py \
    tests/test_dispatch_gpu.py
  tail -3 "$OUT/aa-tests.log"
fi
if [ "$PART" = perf ]; then  # the issue's bars, side by side (perf/RESULTS.md)
  step ampere-d128 200 python perf/attention.py --path ampere --d 128 \
    --s 2048,4096,8192,16384 --no-flex --out "$OUT"
  step hopper-d128-short 120 python perf/attention.py --d 128 --s 1024,2048,4096 --no-flex \
    --out "$OUT"
  step decode 200 python perf/decode.py --quick --out "$OUT"
fi
for f in "$OUT"/*.log; do echo "--- $f"; grep -A12 "^hopper\|^ampere" "$f"; done
echo; echo "=== summary"; printf '%s\n' "${summary[@]}"
