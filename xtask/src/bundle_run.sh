#!/usr/bin/env bash
# The @NAME@ backend's GPU kit, run from this folder with no Rust toolchain
# and no network:
#   bash run.sh           on the machine's @DRIVER@
#   bash run.sh --soft    on the software driver shipped beside it (no GPU)
# Steps, in order, each bounded by `timeout` and each writing into $OUT (this
# folder's out/ when unset) the moment it ends:
#   1. preflight: the driver library the loader would take (never a */stubs
#      folder), the kernel module, glibc; then, where the probe is carried,
#      the driver's version, the device and its compute capability, the
#      library actually loaded and where the spin kernel loads from
#      (preflight.json). With no driver, one line and exit status 2.
#   2. the probe's sections, one process each (probe-<section>.json; its
#      error in words where the driver refused something; a time-out there).
#   3. the tests, one binary at a time (tests/<binary>.log, its whole
#      output; each failure's first panic line here on stdout), CubeCL's
#      server checks (cubecl_server) on this backend among them.
# summary.json holds every step's outcome and seconds, rewritten as each ends.
# The whole run stays within RUN_BUDGET_S seconds (225 on the machine's
# driver, 900 with --soft): a step that hangs costs its own limit, no more.
# DEVICE_EVENTS_PROBE_HANG=<section> hangs one section on purpose.
set -u
started=$SECONDS
here="$(cd "$(dirname "$0")" && pwd)"
mode=real
[ "${1:-}" = "--soft" ] && mode=soft
out="${OUT:-$here/out}"
mkdir -p "$out/logs" "$out/tests" || { echo "preflight: cannot write $out"; exit 1; }
if [ "$mode" = soft ]; then budget="${RUN_BUDGET_S:-900}"; else budget="${RUN_BUDGET_S:-225}"; fi

# A JSON string of $1.
json_str() {
  local s
  s="$(printf '%s' "$1" | tr -d '\000-\010\013\014\016-\037')"
  s=${s//\\/\\\\}; s=${s//\"/\\\"}; s=${s//$'\t'/\\t}; s=${s//$'\r'/}; s=${s//$'\n'/\\n}
  printf '"%s"' "$s"
}

# Every step's outcome, as JSON objects; summary.json rewritten after each.
steps=""
passed=0; failed=0; skipped=0; probes_ok=0; probes_failed=0
summary() {
  printf '{"kit": "%s", "mode": "%s", "seconds": %d, "passed": %d, "failed": %d, "skipped": %d,\n"probe_sections_ok": %d, "probe_sections_failed": %d,\n"steps": [%s\n]}\n' \
    "@NAME@" "$mode" "$((SECONDS - started))" "$passed" "$failed" "$skipped" \
    "$probes_ok" "$probes_failed" "$steps" > "$out/summary.json.partial" &&
    mv "$out/summary.json.partial" "$out/summary.json"
}
# step NAME STATUS SECONDS DETAIL
step() {
  steps="$steps${steps:+,}"$'\n'"{\"step\": $(json_str "$1"), \"status\": $(json_str "$2"), \"seconds\": $3, \"detail\": $(json_str "$4")}"
  summary
}

# bounded LIMIT COMMAND...: run it under `timeout`, within what is left of
# the budget (5 s kept for the end); 125 without starting it when too little
# is left. $ran: the seconds it took; $limit: the limit it had.
bounded() {
  local want=$1; shift
  local left=$((budget - (SECONDS - started) - 5))
  limit=$want
  [ "$left" -lt "$limit" ] && limit=$left
  ran=0
  if [ "$limit" -lt 3 ]; then return 125; fi
  local t0=$SECONDS
  timeout -k 5 "$limit" "$@"
  local rc=$?
  ran=$((SECONDS - t0))
  return $rc
}

# --- 1. Preflight --------------------------------------------------------
glibc="$(getconf GNU_LIBC_VERSION 2>/dev/null || ldd --version 2>/dev/null | head -n 1)"
glibc="${glibc:-glibc unknown}"
if [ -r /proc/driver/nvidia/version ]; then
  module="$(head -n 1 /proc/driver/nvidia/version)"
else
  module="no NVIDIA kernel module loaded (no /proc/driver/nvidia/version)"
fi
# LD_LIBRARY_PATH without */stubs folders: a toolkit's stub library answers
# every call with an error.
kept=""; dropped=""
IFS=: read -r -a dirs <<< "${LD_LIBRARY_PATH:-}"
for d in ${dirs[@]+"${dirs[@]}"}; do
  case "$d" in
    "") ;;
    */stubs|*/stubs/) dropped="$dropped $d";;
    *) kept="$kept${kept:+:}$d";;
  esac
done
export LD_LIBRARY_PATH="$kept"
found=""; via=""
if [ "$mode" = soft ]; then
  export LD_LIBRARY_PATH="$here/soft/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export ROCM_PATH="$here/soft" SOFT_DRIVER_LIB="$here/soft/lib/libdevice_events_soft_driver.so"
  unset DEVICE_EVENTS_REAL_DRIVER
  found="$here/soft/lib/@LIBRARY@"; via="this kit's soft/lib (the software driver, no GPU)"
else
  export DEVICE_EVENTS_REAL_DRIVER=1
  unset SOFT_DRIVER_LIB
  # Where the loader looks: LD_LIBRARY_PATH, then ldconfig's cache (ldconfig
  # lives in /sbin), then the folders /etc/ld.so.conf names, then those
  # containers mount a driver into.
  for d in ${dirs[@]+"${dirs[@]}"}; do
    case "$d" in ""|*/stubs|*/stubs/) continue;; esac
    if [ -e "$d/@LIBRARY@" ]; then found="$d/@LIBRARY@"; via="LD_LIBRARY_PATH"; break; fi
  done
  if [ -z "$found" ]; then
    for ldconfig in /sbin/ldconfig /usr/sbin/ldconfig "$(command -v ldconfig 2>/dev/null)"; do
      [ -n "$ldconfig" ] && [ -x "$ldconfig" ] || continue
      found="$("$ldconfig" -p 2>/dev/null | awk '$1 == "@LIBRARY@" && $NF !~ /\/stubs\// {print $NF; exit}')"
      [ -n "$found" ] && via="ldconfig's cache ($ldconfig)" && break
    done
  fi
  if [ -z "$found" ]; then
    conf_dirs="$(cat /etc/ld.so.conf /etc/ld.so.conf.d/*.conf 2>/dev/null | sed -e 's/#.*//' | awk 'NF && $1 != "include" {print $1}')"
    for d in $conf_dirs @FOLDERS@; do
      case "$d" in */stubs|*/stubs/) continue;; esac
      if [ -e "$d/@LIBRARY@" ]; then
        found="$d/@LIBRARY@"; via="$d (not on the loader's path: added to LD_LIBRARY_PATH)"
        export LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        break
      fi
    done
  fi
fi
facts="$(json_str "$glibc"), \"kernel_module\": $(json_str "$module"), \"library\": $(json_str "$found"), \"found_by\": $(json_str "$via"), \"stubs_dropped\": $(json_str "${dropped# }")"
if [ -z "$found" ]; then
  echo "preflight: no @DRIVER@: @LIBRARY@ is in none of LD_LIBRARY_PATH, ldconfig's cache, /etc/ld.so.conf.d or the folders containers mount it in${dropped:+ (left out, as stubs:$dropped)}; $module; $glibc. Nothing run."
  printf '{"glibc": %s, "error": "no driver library"}\n' "$facts" > "$out/preflight.json"
  step preflight "no driver" "$((SECONDS - started))" "@LIBRARY@ not found"
  exit 2
fi
echo "preflight: driver library $found, found in $via; $module; $glibc${dropped:+; dropped from LD_LIBRARY_PATH:$dropped}"

# The binaries travel compressed; unpacked beside this script, once. An
# artifact download loses the executable bits.
for sub in bin probe; do
  for packed in "$here/$sub"/*.gz; do
    [ -e "$packed" ] || continue
    gunzip -f "$packed" || { echo "preflight: could not unpack $packed"; exit 1; }
  done
  chmod +x "$here/$sub"/* 2>/dev/null
done
# The spin kernel's cubin, tried before its PTX.
cubin="$(ls "$here"/spin/*.cubin 2>/dev/null | head -n 1)"
[ -n "$cubin" ] && export DEVICE_EVENTS_SPIN_CUBIN="$cubin"

probe="$here/probe/bench-probe"
if [ -x "$probe" ]; then
  bounded 30 "$probe" preflight --json "$out/preflight-device.json" > "$out/logs/preflight.log" 2>&1
  rc=$?
  sed -n '1p' "$out/logs/preflight.log" | sed 's/^/preflight: /'
  if [ $rc -ne 0 ]; then
    [ $rc -ge 124 ] && echo "preflight: the driver did not answer within $limit s"
    printf '{"glibc": %s, "error": "no usable device", "exit": %d}\n' "$facts" "$rc" > "$out/preflight.json"
    step preflight failed "$ran" "$(sed -n '1p' "$out/logs/preflight.log")"
    exit 2
  fi
  printf '{"glibc": %s,\n"device": %s}\n' "$facts" "$(cat "$out/preflight-device.json")" > "$out/preflight.json"
  rm -f "$out/preflight-device.json"
else
  printf '{"glibc": %s}\n' "$facts" > "$out/preflight.json"
fi
step preflight ok "$((SECONDS - started))" "$found"

# --- 2. The probe's sections ---------------------------------------------
# Each in a process of its own, so that one refusal, panic or hang loses
# only its section; the gate's alone with one hardware queue (the driver
# reads CUDA_DEVICE_MAX_CONNECTIONS once). NO_PROBES=1 skips them.
# section LIMIT NAME [ENV=VALUE...] -- ARGS...
section() {
  local want=$1 key=$2; shift 2
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  local json="$out/probe-$key.json" log="$out/logs/probe-$key.log"
  rm -f "$json"
  echo "probe $key: running (at most ${want} s)"
  bounded "$want" env ${envs[@]+"${envs[@]}"} "$probe" "$@" --json "$json" > "$log" 2>&1
  local rc=$?
  grep -v '^$' "$log" | grep -v '^(written to' | sed 's/^/  /'
  if [ $rc -eq 0 ]; then
    probes_ok=$((probes_ok + 1))
    echo "probe $key: ok in ${ran} s -> $json"
    step "probe $key" ok "$ran" "$json"
    return
  fi
  probes_failed=$((probes_failed + 1))
  local why
  case $rc in
    125) why="not run: the run's ${budget} s were spent";;
    124|137) why="timed out after ${limit} s";;
    *) why="exit status $rc";;
  esac
  # A section that wrote its own error keeps it; otherwise the reason.
  if [ $rc -ge 124 ] || ! [ -s "$json" ]; then
    printf '{%s: {"error": %s, "seconds": %d, "log": %s}}\n' "$(json_str "$key")" \
      "$(json_str "$why")" "$ran" "$(json_str "logs/probe-$key.log")" > "$json"
  fi
  echo "probe $key: FAILED ($why) -> $json"
  step "probe $key" failed "$ran" "$why"
}
if [ -x "$probe" ] && [ -z "${NO_PROBES:-}" ]; then
  section 30 fence_cost -- gpu-day --section fence-cost
  section 45 spin_windows -- gpu-day --section spin-windows
  section 45 submit_wall -- gpu-day --section submit-wall
  section 45 every_kernel -- gpu-day --section every-kernel
  section 20 head_of_line -- gpu-day --section head-of-line
  section 45 gate CUDA_DEVICE_MAX_CONNECTIONS=1 -- gpu-gate
  section 45 global_captures -- gpu-day --section global-captures
  section 15 unbound_calls -- gpu-day --section unbound-calls
fi

# --- 3. The tests ----------------------------------------------------------
# A line per test: PASS, SKIP (nothing to check on this driver, as the test
# said) or FAIL with its first panic line; the whole output in tests/.
# Reads a binary's log: one line per test, "STATUS<TAB>test<TAB>detail".
read_log() {
  awk '
    /^test .* \.\.\. ok$/ { t = substr($0, 6, length($0) - 12); if (!(t in st)) order[n++] = t; st[t] = "ok"; next }
    /^test .* \.\.\. FAILED$/ { t = substr($0, 6, length($0) - 16); if (!(t in st)) order[n++] = t; st[t] = "FAILED"; next }
    /^test .* \.\.\. ignored/ { next }
    /^test .* \.\.\. *$/ { t = $0; sub(/^test /, "", t); sub(/ \.\.\. *$/, "", t); if (!(t in st)) { order[n++] = t; st[t] = "running" } ; next }
    /^---- .* stdout ----$/ { cur = substr($0, 6, length($0) - 17); grab = 0; next }
    cur != "" && /^SKIP: / && !(cur in skip) { skip[cur] = substr($0, 7); next }
    cur != "" && grab == 1 { if (!(cur in msg)) msg[cur] = $0; grab = 0; next }
    cur != "" && /panicked at/ && !(cur in at) { w = $0; sub(/^.*panicked at /, "", w); sub(/:$/, "", w); at[cur] = w; grab = 1; next }
    END {
      for (i = 0; i < n; i++) {
        t = order[i]; s = st[t]
        if (s == "ok" && (t in skip)) print "SKIP\t" t "\t" skip[t]
        else if (s == "ok") print "PASS\t" t "\t"
        else if (s == "FAILED") print "FAIL\t" t "\t" msg[t] " (at " at[t] ")"
        else print "HUNG\t" t "\t"
      }
    }' "$1"
}
failures=""; skips=""
for bin in "$here"/bin/*; do
  [ -x "$bin" ] || continue
  name="$(basename "$bin")"
  # These drive the software driver's control API.
  case "$name" in
    soft|fault_sweep)
      if [ "$mode" = real ]; then
        echo "SKIP $name (the software driver's own suite)"; skipped=$((skipped + 1))
        step "tests $name" skipped 0 "software driver only"; continue
      fi;;
  esac
  case "$name" in soft|fork) want=240;; *) want=90;; esac
  [ "$mode" = real ] && case "$name" in fork) want=90;; *) want=60;; esac
  log="$out/tests/$name.log"
  # CubeCL's server checks: this backend's alone.
  only=()
  [ "$name" = cubecl_server ] && only=("@NAME@::")
  bounded "$want" "$bin" ${only[@]+"${only[@]}"} --test-threads=1 --show-output > "$log" 2>&1
  rc=$?
  before=$((passed + failed + skipped)); failed_before=$failed
  while IFS=$'\t' read -r status test detail; do
    case "$status" in
      PASS) echo "PASS $name::$test"; passed=$((passed + 1));;
      SKIP) echo "SKIP $name::$test: $detail"; skipped=$((skipped + 1))
            skips="$skips${skips:+,}{\"test\": $(json_str "$name::$test"), \"why\": $(json_str "$detail")}";;
      FAIL) echo "FAIL $name::$test: $detail"; failed=$((failed + 1))
            failures="$failures${failures:+,}{\"test\": $(json_str "$name::$test"), \"first_line\": $(json_str "$detail")}";;
      HUNG) echo "FAIL $name::$test: did not finish (the binary's time-out)"; failed=$((failed + 1))
            failures="$failures${failures:+,}{\"test\": $(json_str "$name::$test"), \"first_line\": \"did not finish\"}";;
    esac
  done < <(read_log "$log")
  grep -E "^[a-z]+ (fault sweep:|stress)" "$log" | head -n 5
  counted=$((passed + failed + skipped - before))
  case $rc in
    0) why="";;
    125) why="not run: the run's ${budget} s were spent";;
    124|137) why="timed out after ${limit} s";;
    *) why="exit status $rc";;
  esac
  if [ -n "$why" ] && [ "$failed" -eq "$failed_before" ]; then
    # A binary with its own harness, one that never got to say which test
    # failed, or one that failed after its tests passed: one failure.
    echo "FAIL $name: $why (its output: $log)"; failed=$((failed + 1))
    failures="$failures${failures:+,}{\"test\": $(json_str "$name"), \"first_line\": $(json_str "$why")}"
  elif [ -n "$why" ]; then
    echo "($name: $why; its output: $log)"
  elif [ "$counted" -eq 0 ] && grep -q '^running 0 tests' "$log"; then
    echo "($name: no tests in it)"
  elif [ "$counted" -eq 0 ]; then
    echo "PASS $name"; passed=$((passed + 1))
  fi
  step "tests $name" "${why:-ok}" "$ran" "tests/$name.log"
done
printf '{"passed": %d, "failed": %d, "skipped": %d,\n"failures": [%s],\n"skips": [%s]}\n' \
  "$passed" "$failed" "$skipped" "$failures" "$skips" > "$out/tests.json"
[ $((passed + failed)) -gt 0 ] || failed=1
summary
echo "$passed passed, $failed failed, $skipped skipped; probe sections: $probes_ok ok, $probes_failed failed; all done in $((SECONDS - started)) s; results in $out"
[ "$failed" -eq 0 ] && [ "$probes_failed" -eq 0 ]
