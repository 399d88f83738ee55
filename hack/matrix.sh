#!/usr/bin/env bash
# The Kubernetes compatibility matrix (`make matrix`): for each release of MATRIX_VERSIONS,
# builds that release's control plane (internal/cluster/localcluster, KUBEVOL_KUBERNETES_VERSION;
# one build at a time, niced) and runs the sidecars' end-to-end packages on it, then the
# node agent's package on the oldest release. Prints the README's table, one row per release:
#   | release | date | kubevol commit | build time | one column per package |
# Logs and the rows are kept in $MATRIX_OUT (default _output/matrix). MATRIX_PACKAGES and
# MATRIX_NODE_PACKAGES (directories under test/e2e; empty runs none) narrow the run,
# MATRIX_PARALLEL (2) and MATRIX_TIMEOUT (40m) are go test's -p and -timeout.
set -uo pipefail
GO=${GO:-go}
export CGO_ENABLED=0
export GOFLAGS="$($GO env GOFLAGS) -trimpath"
versions=(${MATRIX_VERSIONS:-v1.34.4 v1.35.4 v1.36.3 v1.37.2})
packages=(${MATRIX_PACKAGES-provisioner attacher resizer snapshotter cluster deploy})
node_packages=(${MATRIX_NODE_PACKAGES-node})
out=${MATRIX_OUT:-_output/matrix}
mkdir -p "$out"
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit+dirty"

# build V: builds release V's control plane, niced, and records its time in $out/V.build
# ("<exit code> <seconds>"). The next release builds while this one's tests run: one build
# at a time, and the tests mostly wait on their clusters.
build() {
  local s; s=$(date +%s)
  KUBEVOL_KUBERNETES_VERSION=$1 nice -n 10 $GO run ./cmd/kubevol up --build-only > "$out/$1.build.log" 2>&1
  echo "$? $(( $(date +%s) - s ))" > "$out/$1.build"
}

rc=0
rows="$out/rows.md"
{
  echo "| Kubernetes | date | kubevol | control plane build |$(printf ' %s |' "${packages[@]}" "${node_packages[@]}")"
  echo "| --- | --- | --- | --- |$(printf ' --- |%.0s' "${packages[@]}" "${node_packages[@]}")"
} > "$rows"
rm -f "$out"/*.build
build "${versions[0]}" &
for i in "${!versions[@]}"; do
  v=${versions[$i]}
  export KUBEVOL_KUBERNETES_VERSION=$v
  log="$out/$v.log"
  echo "=== $v: control plane"
  wait
  read -r build_rc built < "$out/$v.build"
  [ "$((i + 1))" -lt "${#versions[@]}" ] && build "${versions[$((i + 1))]}" &
  if [ "$build_rc" != 0 ]; then
    tail -20 "$out/$v.build.log"
    echo "| $v | $(date -u +%F) | $commit | build failed | |" >> "$rows"
    rc=1
    continue
  fi
  pkgs=("${packages[@]}")
  # The node agent's own minimum is the range's oldest release: its package runs there.
  [ "$i" = 0 ] && pkgs+=("${node_packages[@]}")
  echo "=== $v: ${pkgs[*]} (control plane built in $built s)"
  $GO test -v -p "${MATRIX_PARALLEL:-2}" -count=1 -timeout "${MATRIX_TIMEOUT:-40m}" \
    $(printf './test/e2e/%s ' "${pkgs[@]}") > "$log" 2>&1 || rc=1
  cells=""
  for p in "${packages[@]}" "${node_packages[@]}"; do
    line=$(grep -E "^(ok|FAIL|---)?[[:space:]]*github.com/kubevol/kubevol/test/e2e/$p([[:space:]]|$)" "$log" | tail -1)
    case "$line" in
      ok*) cell="pass ($(awk '{print $3}' <<<"$line"))" ;;
      FAIL*) cell="**fail**" ;;
      *) cell="–" ;;
    esac
    cells+=" $cell |"
  done
  row="| $v | $(date -u +%F) | \`$commit\` | ${built} s |$cells"
  echo "$row" | tee -a "$rows"
  # Failures, and the tests skipped on this release with their reason (framework.Requires).
  grep -E "^(--- FAIL|FAIL|ok)" "$log" | sed 's/^/    /'
  grep -E -A1 "^[[:space:]]*--- SKIP" "$log" | grep -v "^--$" | sed 's/^/    /'
done
wait
echo
echo "rows (also in $rows):"
cat "$rows"
exit "$rc"
