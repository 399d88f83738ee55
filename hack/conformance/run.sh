#!/usr/bin/env bash
# make conformance: the Kubernetes external storage e2e suite (e2e.test and ginkgo from
# k8s.io/kubernetes v1.37.2, built from hack/e2e) against kubevol's driver on `kubevol up
# --runtime containerd`, in three rows:
#   kubevol     kubevol's sidecars, the kubelet's own volume manager;
#   upstream    upstream's external-provisioner and external-snapshotter (snapshot-controller
#               and csi-snapshotter), built from the module proxy (upstream-sidecars.sh) and
#               run as processes on this machine under their upstream RBAC, with kubevol's
#               attacher and resizer (upstream does not serve those modules);
#   kubevol-vm  kubevol's sidecars, and kubevol's volume manager in the kubelet
#               (`kubevol up --volume-manager kubevol`).
# Each row runs three definitions: kubevol-driver.yaml (dir: the type: dir default class),
# kubevol-block-driver.yaml (block: the type: block class), and node: the suite's node-level
# volume specs (configMap, secret, projected, downwardAPI, emptyDir, hostPath, subPath, local
# PVs...), which use no driver definition. Then one side-by-side table.
# ROWS picks rows (default "kubevol upstream kubevol-vm"); FOCUS_DIR, FOCUS_BLOCK and
# FOCUS_NODE narrow each definition's specs (ginkgo regexps; FOCUS sets all three); SKIP
# replaces the skipped ones of dir and block, SKIP_NODE those of node; DEFINITIONS orders (or
# picks) the definitions (default "dir block node"); TIMEOUT bounds each ginkgo run (a
# timed-out run still reports); PROCS runs specs in parallel; KEEP=1 keeps the logs of every
# component.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cache=${KUBEVOL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kubevol}
out=${OUT:-$root/docs/conformance}
all_rows="kubevol upstream kubevol-vm"
all_definitions="dir block node"
rows=${ROWS:-$all_rows}
definitions=${DEFINITIONS:-$all_definitions}
focus_dir=${FOCUS_DIR:-${FOCUS:-External.Storage}}
focus_block=${FOCUS_BLOCK:-${FOCUS:-External.Storage}}
# The node definition: the specs of test/e2e/common/storage and the single-node ones of
# test/e2e/storage that run pods on the kubelet, by their describe names.
focus_node=${FOCUS_NODE:-${FOCUS:-'\[sig-storage\] (ConfigMap|Secrets|Projected (configMap|secret|downwardAPI|combined)|Downward API volume|EmptyDir volumes|EmptyDir wrapper volumes|HostPath|HostPathType [A-Za-z ]+|Subpath|PersistentVolumes-local|Ephemeralstorage|Volume metrics) '}}
# What node leaves out (SKIP_NODE replaces it):
# - Disruptive, Serial and Flaky specs, as dir and block do;
# - [Slow] specs, but HostPathType's (all marked [Slow], a few seconds each): the regexp
#   skips [Slow] under every describe that does not begin with H. Most of the others wait
#   out a 5-minute timeout each (a pod that must stay pending, a local PV that cannot mount);
# - [Feature:...] specs and alpha feature gates (off on this cluster);
# - the Volume metrics specs that deploy upstream's csi-hostpath driver from its images,
#   which this machine cannot pull or build (each would wait out 5 minutes for its pod).
skip_node=${SKIP_NODE:-'Disruptive|Serial|Flaky|\[Feature:|\[Alpha\]|Feature:OffByDefault|\[sig-storage\] [^H].*\[Slow\]|Volume metrics (PVC|Ephemeral) '}
# A mistyped row or definition stops the run before it builds or starts anything.
for row in $rows; do
  case " $all_rows " in *" $row "*) ;; *) echo "unknown row $row: want one of $all_rows" >&2; exit 2 ;; esac
done
for def in $definitions; do
  case " $all_definitions " in *" $def "*) ;; *) echo "unknown definition $def: want one of $all_definitions" >&2; exit 2 ;; esac
done
work=$(mktemp -d /tmp/kubevol-conformance.XXXXXX)
mkdir -p "$cache/e2e" "$out"

echo "building e2e.test and ginkgo (k8s.io/kubernetes v1.37.2, hack/e2e)" >&2
(cd "$root/hack/e2e" && go build -o "$cache/e2e/ginkgo" github.com/onsi/ginkgo/v2/ginkgo && go test -c -o "$cache/e2e/e2e.test" .)
(cd "$root" && go build -o "$work/bin/kubevol" ./cmd/kubevol)
case " $rows " in *" upstream "*) upstream_bin=$("$root/hack/conformance/upstream-sidecars.sh") ;; esac

up=
sidecar_pids=()
stop_row() {
  for p in "${sidecar_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${sidecar_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  sidecar_pids=()
  if [ -n "$up" ]; then kill -INT "$up" 2>/dev/null || true; wait "$up" 2>/dev/null || true; fi
  up=
  # up keeps its volumes for its next start, so what the driver holds for the volumes a spec
  # left (a failed one does not delete its claims) stays: the mounts of staged volumes outside
  # up's runtime directory and the loop devices of block volumes. The run's state is thrown
  # away, so they go, deepest mount first, then the loop devices backed by its images.
  mounts_under "$work" | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m" || true; done
  local l
  for l in $(loops_under "$work"); do
    echo "detaching $l (a block volume still staged when up stopped)" >&2
    losetup -d "$l" || true
  done
}
# mounts_under <dir>, loops_under <dir>: the mount points and the loop devices (by backing
# file) under dir. The mount table escapes a space in a path as \040.
mounts_under() { awk -v d="$1" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo; }
loops_under() { losetup -a | sed -n "s|^\(/dev/loop[0-9]*\):.*($1/.*)\$|\1|p"; }
# leftovers: what of the run is still on this machine once it stopped: a mount or loop device
# under its directory, or a process whose command line names it (the shims and containerd
# name their socket there; no command of this check has it in its own arguments). A
# container's process names nothing of the run; up kills every process in its cgroups before
# it exits, and the smoke test (test/e2e/up) checks that, and the sandboxes, network
# namespaces and veths.
leftovers() {
  mounts_under "$work" | sed 's/^/mount /'
  loops_under "$work" | sed 's/^/loop device /'
  local f args
  for f in /proc/[0-9]*/cmdline; do
    args=$(tr '\0' ' ' 2>/dev/null <"$f") || continue
    case $args in *"$work"*) f=${f#/proc/}; echo "process ${f%/cmdline}: $args" ;; esac
  done
}
finish() {
  local rc=$? left
  trap - EXIT INT TERM
  stop_row
  left=$(leftovers)
  if [ -n "$left" ]; then
    printf 'the run left, in %s:\n%s\n' "$work" "$left" >&2
    exit 1
  fi
  if [ -n "${KEEP:-}" ]; then echo "kept $work" >&2; else rm -rf "$work"; fi
  exit "$rc"
}
# KEEP=1 keeps the run's directory (up's state and component logs, the sidecars' logs). Ctrl-C
# must end the run: bash waits for ginkgo, which handles SIGINT and exits 1, and without a trap
# bash would take that exit (`|| true`) for a finished suite and go on to the next definition
# and row. With one, it ends at once and the EXIT trap stops the row.
trap 'exit 130' INT
trap 'exit 143' TERM
trap finish EXIT

# start_up <row> <up args...>: kubevol up for a row, until its kubeconfig is written.
start_up() {
  local row=$1; shift
  "$work/bin/kubevol" up --dir "$work/$row/up" --runtime containerd --e2e-images --node-name conformance "$@" \
    >"$work/$row/up.out" 2>"$work/$row/up.err" &
  up=$!
  until grep -q kubeconfig "$work/$row/up.out" 2>/dev/null; do
    kill -0 "$up" 2>/dev/null || { cat "$work/$row/up.err" >&2; exit 1; }
    sleep 2
  done
}

# sa_kubeconfig <admin kubeconfig> <namespace> <serviceaccount> <file>: a kubeconfig of a
# ServiceAccount's token, on the admin kubeconfig's cluster.
sa_kubeconfig() {
  local admin=$1 ns=$2 sa=$3 file=$4 token
  kubectl --kubeconfig "$admin" config view --raw --minify --flatten -o jsonpath='{.clusters[0].cluster}' >/dev/null
  token=$(kubectl --kubeconfig "$admin" -n "$ns" create token "$sa" --duration=24h)
  local server ca
  server=$(kubectl --kubeconfig "$admin" config view --raw --minify --flatten -o jsonpath='{.clusters[0].cluster.server}')
  ca=$(kubectl --kubeconfig "$admin" config view --raw --minify --flatten -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
  (umask 077 && cat >"$file" <<KC
apiVersion: v1
kind: Config
clusters: [{name: up, cluster: {server: "$server", certificate-authority-data: "$ca"}}]
users: [{name: $sa, user: {token: "$token"}}]
contexts: [{name: $sa, context: {cluster: up, user: $sa, namespace: $ns}}]
current-context: $sa
KC
  )
}

# start_upstream <row dir>: upstream's provisioner, snapshot-controller and csi-snapshotter
# against the built-in driver's socket, each as its ServiceAccount bound by upstream's RBAC.
start_upstream() {
  local dir=$1 admin=$1/up/kubeconfig sock=unix://$1/up/csi/csi.sock
  for f in rbac-external-provisioner.yaml rbac-snapshot-controller.yaml rbac-csi-snapshotter.yaml; do
    kubectl --kubeconfig "$admin" apply -f "$upstream_bin/$f" >/dev/null
  done
  sa_kubeconfig "$admin" default csi-provisioner "$dir/provisioner.kubeconfig"
  sa_kubeconfig "$admin" kube-system snapshot-controller "$dir/snapshot-controller.kubeconfig"
  sa_kubeconfig "$admin" default csi-snapshotter "$dir/csi-snapshotter.kubeconfig"
  # The arguments of upstream's csi-driver-host-path deployment, but no leader election
  # (one replica) and the kubeconfig of a process outside the cluster.
  "$upstream_bin/csi-provisioner" -v=5 --csi-address="$sock" --kubeconfig="$dir/provisioner.kubeconfig" \
    --feature-gates=Topology=true >"$dir/csi-provisioner.log" 2>&1 &
  sidecar_pids+=($!)
  "$upstream_bin/snapshot-controller" -v=5 --kubeconfig="$dir/snapshot-controller.kubeconfig" \
    --leader-election=false >"$dir/snapshot-controller.log" 2>&1 &
  sidecar_pids+=($!)
  "$upstream_bin/csi-snapshotter" -v=5 --csi-address="$sock" --kubeconfig="$dir/csi-snapshotter.kubeconfig" \
    --leader-election=false >"$dir/csi-snapshotter.log" 2>&1 &
  sidecar_pids+=($!)
  sleep 5
  for p in "${sidecar_pids[@]}"; do
    kill -0 "$p" 2>/dev/null || { tail -n 20 "$dir"/*.log >&2; echo "an upstream sidecar exited" >&2; exit 1; }
  done
}

printf '%s' "gcRegistry: registry.k8s.io
promoterE2eRegistry: registry.k8s.io/e2e-test-images
sigStorageRegistry: registry.k8s.io/sig-storage
" > "$work/repo-list.yaml"

# suite <row> <definition label> <driver.yaml or ""> <focus> <skip>: one ginkgo run, its JUnit
# report and log kept as docs/conformance/<row>-<label>-junit.xml and <row>-<label>.log.
suite() {
  local row=$1 label=$2 def=$3 focus=$4 skip=$5 testdriver=()
  [ -n "$def" ] && testdriver=(--storage.testdriver="$root/hack/conformance/$def")
  KUBE_TEST_REPO_LIST="$work/repo-list.yaml" nice -n 10 "$cache/e2e/ginkgo" --focus="$focus" --skip="$skip" \
    --timeout="${TIMEOUT:-2h}" --procs="${PROCS:-1}" --junit-report="$row-$label.xml" --output-dir="$work/$row" --no-color "$cache/e2e/e2e.test" -- \
    --kubeconfig="$work/$row/up/kubeconfig" "${testdriver[@]}" \
    --provider=local --report-dir="$work/$row" >"$work/$row/$label.log" 2>&1 || true
  cp "$work/$row/$label.log" "$out/$row-$label.log"
  cp "$work/$row/$row-$label.xml" "$out/$row-$label-junit.xml" 2>/dev/null || true
}

for row in $rows; do
  mkdir -p "$work/$row"
  echo "row $row: starting kubevol up --runtime containerd" >&2
  case $row in
    kubevol) start_up "$row" ;;
    upstream) start_up "$row" --sidecars attacher,resizer ;;
    kubevol-vm) start_up "$row" --volume-manager kubevol ;;
  esac
  kubectl --kubeconfig "$work/$row/up/kubeconfig" apply -f "$root/hack/conformance/kubevol-block-class.yaml" \
    -f "$root/hack/conformance/kubevol-vac.yaml" -f "$root/hack/conformance/vac-reader.yaml" >/dev/null
  [ "$row" = upstream ] && start_upstream "$work/$row"
  for def in $definitions; do
    echo "row $row: the $def definition" >&2
    start=$(date +%s)
    case $def in
      dir) suite "$row" dir kubevol-driver.yaml "$focus_dir" "${SKIP:-Disruptive|Serial|Slow}" ;;
      block) suite "$row" block kubevol-block-driver.yaml "$focus_block" "${SKIP:-Disruptive|Serial|Slow}" ;;
      node) suite "$row" node "" "$focus_node" "$skip_node" ;;
    esac
    secs=$(( $(date +%s) - start ))
    echo "row $row: the $def definition took $secs s" >&2
    echo "$secs" >"$out/$row-$def-seconds"
  done
  stop_row
done
# The table has every row with reports in docs/conformance/, so that rows and definitions
# may run apart (ROWS=kubevol, then ROWS=kubevol-vm; DEFINITIONS=dir, then DEFINITIONS=node).
# A row's time is the sum of its definitions' runs; each definition's is given too.
table_rows=()
for row in $all_rows; do
  reports= secs=0
  for def in $all_definitions; do
    [ -f "$out/$row-$def-junit.xml" ] && [ -f "$out/$row-$def-seconds" ] || continue
    reports+=${reports:+,}$def:$out/$row-$def-junit.xml
    secs=$(( secs + $(cat "$out/$row-$def-seconds") ))
    table_rows+=(-seconds "$row:$def=$(cat "$out/$row-$def-seconds")")
  done
  if [ -n "$reports" ]; then table_rows+=(-row "$row=$reports" -seconds "$row=$secs"); fi
done
go run "$root/hack/conformance/table" "${table_rows[@]}" | tee "$out/table.md"
