#!/usr/bin/env bash
# Builds upstream's external-provisioner and external-snapshotter (snapshot-controller and
# csi-snapshotter) from the Go module proxy into $1 (default: the kubevol cache), once per
# version, and prints the directory. Nothing of them enters this repository: the module
# source is downloaded, copied to a scratch directory and built there with its own go.sum.
# external-snapshotter's go.mod points its client module at ./client, a module of its own
# that its zip leaves out, so the copy takes the client of the same release from the proxy.
set -euo pipefail
PROVISIONER=${PROVISIONER:-v6.4.0}
SNAPSHOTTER=${SNAPSHOTTER:-v8.7.0}
cache=${KUBEVOL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevol}
out=${1:-$cache/upstream-sidecars-provisioner-$PROVISIONER-snapshotter-$SNAPSHOTTER}
if [ -x "$out/csi-provisioner" ] && [ -x "$out/snapshot-controller" ] && [ -x "$out/csi-snapshotter" ]; then
  echo "$out"; exit 0
fi
scratch=$(mktemp -d /tmp/kubevol-upstream-sidecars.XXXXXX)
trap 'chmod -R u+w "$scratch"; rm -rf "$scratch"' EXIT
# build <module>@<version> <dir> <cmd>...: copies the module's source and builds its mains.
build() {
  local mod=$1 name=$2; shift 2
  local dir
  dir=$(cd "$scratch" && GOFLAGS=-mod=mod go mod download -json "$mod" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  cp -r "$dir" "$scratch/$name"
  chmod -R u+w "$scratch/$name"
  (cd "$scratch/$name" && "$@")
}
mkdir -p "$out.tmp"
echo "building external-provisioner $PROVISIONER and external-snapshotter $SNAPSHOTTER from the module proxy into $out" >&2
build "github.com/kubernetes-csi/external-provisioner/v6@$PROVISIONER" provisioner \
  env GOFLAGS=-mod=mod CGO_ENABLED=0 go build -ldflags "-X main.version=$PROVISIONER" -o "$out.tmp/" ./cmd/csi-provisioner
build "github.com/kubernetes-csi/external-snapshotter/v8@$SNAPSHOTTER" snapshotter sh -c "
  go mod edit -dropreplace github.com/kubernetes-csi/external-snapshotter/client/v8 \
    -require github.com/kubernetes-csi/external-snapshotter/client/v8@$SNAPSHOTTER &&
  GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1;
  GOFLAGS=-mod=mod CGO_ENABLED=0 go build -ldflags '-X main.version=$SNAPSHOTTER' -o '$out.tmp/' ./cmd/snapshot-controller ./cmd/csi-snapshotter"
# The RBAC each runs under, as upstream ships it.
cp "$scratch/provisioner/deploy/kubernetes/rbac.yaml" "$out.tmp/rbac-external-provisioner.yaml"
cp "$scratch/snapshotter/deploy/kubernetes/snapshot-controller/rbac-snapshot-controller.yaml" "$out.tmp/"
cp "$scratch/snapshotter/deploy/kubernetes/csi-snapshotter/rbac-csi-snapshotter.yaml" "$out.tmp/"
rm -rf "$out" && mv "$out.tmp" "$out"
echo "$out"
