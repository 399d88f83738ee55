#!/usr/bin/env bash
# Runs every Go test package (make test's `go test ./...`), then prints each package's time,
# slowest first, so that a slow package shows the day it lands. The exit code is go test's.
set -uo pipefail
GO=${GO:-go}
log=$(mktemp /tmp/kubevol-test-XXXXXX.log)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
"$GO" test -count=1 -timeout "${TEST_TIMEOUT:-80m}" ./... 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
echo
echo "package times (go test ./... took $(( $(date +%s) - start )) s):"
awk '($1 == "ok" || $1 == "FAIL") && $3 ~ /^[0-9.]+s$/ { t = $3; sub(/s$/, "", t); printf "%8.1f s  %-4s %s\n", t, $1, $2 }' "$log" | sort -rn
exit "$rc"
