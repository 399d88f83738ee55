#!/usr/bin/env bash
# make conformance: the Kubernetes external storage e2e suite (e2e.test and ginkgo from
# k8s.io/kubernetes v1.37.2, built from hack/e2e) against kubevol's driver and sidecars on
# `kubevol up --runtime containerd`, then a table of every spec and its result.
# FOCUS narrows the specs (a ginkgo regexp; the default is every External.Storage spec), SKIP
# replaces the skipped ones, TIMEOUT bounds the run (a timed-out run still reports), PROCS runs
# specs in parallel.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${KUBEVOL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevol}
out=${OUT:-$root/docs/conformance}
work=$(mktemp -d /tmp/kubevol-conformance.XXXXXX)
focus=${FOCUS:-External.Storage}
mkdir -p "$cache/e2e" "$out"

echo "building e2e.test and ginkgo (k8s.io/kubernetes v1.37.2, hack/e2e)" >&2
(cd "$root/hack/e2e" && go build -o "$cache/e2e/ginkgo" github.com/onsi/ginkgo/v2/ginkgo && go test -c -o "$cache/e2e/e2e.test" .)
(cd "$root" && go build -o "$work/kubevol" ./cmd/kubevol)

"$work/kubevol" up --dir "$work/up" --runtime containerd --e2e-images --node-name conformance >"$work/up.out" 2>"$work/up.err" &
up=$!
trap 'kill -INT $up 2>/dev/null; wait $up 2>/dev/null; rm -rf "$work"' EXIT
until grep -q kubeconfig "$work/up.out" 2>/dev/null; do
  kill -0 $up 2>/dev/null || { cat "$work/up.err" >&2; exit 1; }
  sleep 2
done
printf '%s' "gcRegistry: registry.k8s.io
promoterE2eRegistry: registry.k8s.io/e2e-test-images
sigStorageRegistry: registry.k8s.io/sig-storage
" > "$work/repo-list.yaml"

start=$(date +%s)
KUBE_TEST_REPO_LIST="$work/repo-list.yaml" "$cache/e2e/ginkgo" --focus="$focus" --skip="${SKIP:-Disruptive|Serial|Slow}" \
  --timeout="${TIMEOUT:-2h}" --procs="${PROCS:-1}" --junit-report=junit.xml --output-dir="$work" --no-color "$cache/e2e/e2e.test" -- \
  --kubeconfig="$work/up/kubeconfig" --storage.testdriver="$root/hack/conformance/kubevol-driver.yaml" \
  --provider=local --report-dir="$work" >"$work/ginkgo.log" 2>&1 || true
secs=$(( $(date +%s) - start ))
cp "$work/ginkgo.log" "$out/kubevol.log"
cp "$work/junit.xml" "$out/kubevol-junit.xml" 2>/dev/null || true
go run "$root/hack/conformance/table" -row kubevol="$out/kubevol-junit.xml" -seconds kubevol=$secs | tee "$out/table.md"
