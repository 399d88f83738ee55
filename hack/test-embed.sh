#!/usr/bin/env bash
# Builds examples/embed as a stranger's module would build against this checkout: copied to
# a directory outside the checkout, with one replace line pointing at the checkout and
# nothing else, `go mod tidy`, build and vet there; checks that the module graph has no
# k8s.io/kubernetes; then runs the example's test, which starts a cluster with the kubevol
# binary built here (`kubevol up`) and mounts volumes with the embedded manager. Needs root.
set -euo pipefail
GO=${GO:-go}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/kubevol-embed-module-XXXXXX)
case "$work/" in "$root"/*) echo "test-embed: $work is inside the checkout" >&2; exit 1;; esac

cleanup() {
  # Never remove a directory with something mounted below it: report it and keep the data.
  if grep -q " $work/" /proc/self/mountinfo; then
    echo "test-embed: mounts left under $work; kept" >&2
  else
    rm -rf "$work"
  fi
}
trap cleanup EXIT

cp -R "$root/examples/embed/." "$work/module"
cd "$work/module"
"$GO" mod edit -replace "github.com/kubevol/kubevol=$root"
if [ "$(grep -c '=>' go.mod)" != 1 ] || ! grep -q "=> $root\$" go.mod; then
  echo "test-embed: go.mod must have exactly one replace line, to $root:" >&2; cat go.mod >&2; exit 1
fi
"$GO" mod tidy
"$GO" build ./...
"$GO" vet ./...
if "$GO" list -m all | grep -q '^k8s.io/kubernetes '; then
  echo "test-embed: k8s.io/kubernetes is in the example's module graph:" >&2
  "$GO" mod why -m k8s.io/kubernetes >&2
  exit 1
fi
echo "test-embed: $(wc -l < go.mod)-line go.mod, $("$GO" list -m all | wc -l) modules, none of them k8s.io/kubernetes"

# hack/test.sh's kubevol binary when it runs this script, else one of its own.
bin=${KUBEVOL_TEST_BINARY:-}
if [ -z "$bin" ]; then
  bin="$work/kubevol"
  (cd "$root" && "$GO" build -o "$bin" ./cmd/kubevol)
fi
cluster=$(cd "$root" && "$GO" run ./cmd/kubevol up --build-only)
KUBEVOL_BINARY="$bin" KUBEVOL_CLUSTER_BINARY="$cluster" "$GO" test -count=1 -timeout 15m ./...
