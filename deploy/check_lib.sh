# Shared by deploy/check.sh and deploy/prometheus_check.sh (sourced, from the repository root,
# after $tmp names a scratch folder): counters and the PASS/FAIL runner.
failed=0
passed=0
# run WHAT COMMAND...: PASS or FAIL (then the command's output). SHOW=1 prints the output on PASS.
run() {
  local what="$1"; shift
  if "$@" >"$tmp/log" 2>&1; then
    echo "PASS  $what"; passed=$((passed + 1))
    if [ "${SHOW:-0}" = 1 ]; then sed 's/^/      /' "$tmp/log"; fi
  else
    echo "FAIL  $what"; sed 's/^/      /' "$tmp/log"; failed=$((failed + 1))
  fi
}
