#!/usr/bin/env bash
# Runs `go test` on $PACKAGES (default ./...; make test gives the cluster packages), up to
# four packages at once, and, beside it, each command given as an argument (make test gives
# staticcheck, the embedding test, the unit packages under the race detector and more), and
# after it $AFTER_TESTS if set (make test's benchmarks): the end-to-end packages mostly wait
# on their clusters, so the side jobs use the idle CPU instead of adding their time to the
# run. A side job's output is printed, whole, once it ends, with the CPU time it used. Then
# the figures the tests measured (framework.Figure) and each package's time, slowest first,
# so that a slow package shows the day it lands. Fails if go test or any side job failed.
set -uo pipefail
GO=${GO:-go}
work=$(mktemp -d /tmp/kubevol-test-XXXXXX)
trap 'rm -rf "$work"' EXIT
start=$(date +%s)
# Measurements the tests print (framework.Figure), shown at the end.
export KUBEVOL_TEST_FIGURES="$work/figures.txt"
# One kubevol binary of this tree for every package that runs it (framework.BinaryEnv), linked
# once here with the run's settings instead of once per package.
"$GO" build -o "$work/kubevol" ./cmd/kubevol || exit 1
export KUBEVOL_TEST_BINARY="$work/kubevol"

# cpu_of prints the CPU seconds, user and system, of the children in a file of `times`
# output: what the shell that wrote it had waited for, their own children included. `times`
# runs in that shell itself, since a subshell starts counting from zero.
cpu_of() {
  tail -n 1 "$1" 2>/dev/null | awk '{ n = 0; for (i = 1; i <= 2; i++) { split($i, p, "m"); sub(/s$/, "", p[2]); n += p[1] * 60 + p[2] }; printf "%.0f", n }'
}

pids=()
for i in $(seq 1 $#); do
  cmd=${!i}
  ( s=$(date +%s); bash -c "$cmd"; rc=$?; times > "$work/side-$i.times"; echo "$rc $(( $(date +%s) - s ))" > "$work/side-$i.rc" ) > "$work/side-$i.log" 2>&1 &
  pids+=($!)
done

# shellcheck disable=SC2086 # PACKAGES is a list
"$GO" test -p "${TEST_PACKAGES:-4}" -count=1 -timeout "${TEST_TIMEOUT:-80m}" ${PACKAGES:-./...} 2>&1 | tee "$work/go-test.log"
rc=${PIPESTATUS[0]}
tested=$(( $(date +%s) - start ))
times > "$work/go-test.times" # go test and what it waited for; the side jobs are not waited for yet
if [ -n "${AFTER_TESTS:-}" ]; then
  echo
  echo "=== $AFTER_TESTS"
  bash -c "$AFTER_TESTS" || rc=1
fi

for i in $(seq 1 $#); do
  wait "${pids[$((i - 1))]}"
  read -r side_rc side_secs < "$work/side-$i.rc" || { side_rc=1; side_secs=?; }
  echo
  echo "=== ${!i} (exit $side_rc, $side_secs s, $(cpu_of "$work/side-$i.times") CPU-s)"
  cat "$work/side-$i.log"
  [ "$side_rc" = 0 ] || rc=1
done

if [ -s "$KUBEVOL_TEST_FIGURES" ]; then
  echo
  echo "figures:"
  sort "$KUBEVOL_TEST_FIGURES"
fi
echo
echo "package times (go test took $tested s and $(cpu_of "$work/go-test.times") CPU-s, everything $(( $(date +%s) - start )) s; a side job's packages among them):"
awk '($1 == "ok" || $1 == "FAIL") && $3 ~ /^[0-9.]+s$/ { t = $3; sub(/s$/, "", t); printf "%8.1f s  %-4s %s\n", t, $1, $2 }' "$work"/go-test.log "$work"/side-*.log | sort -rn
exit "$rc"
