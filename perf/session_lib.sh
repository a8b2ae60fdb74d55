# Shared by the device-session scripts (perf/*_session.sh): sourced after they set OUT's
# default; compiles the DSL's bytecode once (the device installs it without: every process
# would pay 1-2 s) and defines ``step label seconds command...``, which runs one time-boxed
# step with its log in $OUT/<label>.log and records ok / FAILED for the summary line.
OUT=${OUT:-/tmp/ck-out}; mkdir -p "$OUT"
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
    summary+=("FAILED  $label (rc $?)"); grep -v DEBUG "$OUT/$label.log" | tail -40
  fi
}
SANITIZE=(compute-sanitizer --report-api-errors no --error-exitcode 9)
