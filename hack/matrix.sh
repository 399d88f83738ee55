#!/usr/bin/env bash
# The Kubernetes compatibility matrix (`make matrix`): for each release of MATRIX_VERSIONS,
# builds that release's control plane (internal/localcluster, KUBEVOL_KUBERNETES_VERSION;
# one build at a time, niced) and runs the sidecars' end-to-end packages on it, then the
# node agent's package on the oldest release. Prints one README row per release:
#   | release | date | kubevol commit | build s | result per package |
# Logs and the rows are kept in $MATRIX_OUT (default _output/matrix).
set -uo pipefail
GO=${GO:-go}
export CGO_ENABLED=0
export GOFLAGS="$($GO env GOFLAGS) -trimpath"
versions=(${MATRIX_VERSIONS:-v1.34.4 v1.35.4 v1.36.3 v1.37.2})
packages=(${MATRIX_PACKAGES:-provisioner attacher resizer snapshotter cluster deploy})
node_packages=(${MATRIX_NODE_PACKAGES:-node})
out=${MATRIX_OUT:-_output/matrix}
mkdir -p "$out"
commit=$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || commit="$commit+dirty"

rc=0
rows="$out/rows.md"
: > "$rows"
for i in "${!versions[@]}"; do
  v=${versions[$i]}
  export KUBEVOL_KUBERNETES_VERSION=$v
  log="$out/$v.log"
  s=$(date +%s)
  echo "=== $v: control plane"
  if ! nice -n 10 $GO run ./cmd/kubevol up --build-only > "$log" 2>&1; then
    tail -20 "$log"
    echo "| $v | $(date -u +%F) | $commit | build failed | |" >> "$rows"
    rc=1
    continue
  fi
  built=$(( $(date +%s) - s ))
  pkgs=("${packages[@]}")
  # The node agent's own minimum is the range's oldest release: its package runs there.
  [ "$i" = 0 ] && pkgs+=("${node_packages[@]}")
  echo "=== $v: ${pkgs[*]} (control plane ready after $built s)"
  $GO test -p "${MATRIX_PARALLEL:-2}" -count=1 -timeout "${MATRIX_TIMEOUT:-40m}" \
    $(printf './test/e2e/%s ' "${pkgs[@]}") >> "$log" 2>&1 || rc=1
  cells=""
  for p in "${pkgs[@]}"; do
    line=$(grep -E "^(ok|FAIL|---)?[[:space:]]*github.com/kubevol/kubevol/test/e2e/$p([[:space:]]|$)" "$log" | tail -1)
    case "$line" in
      ok*) cell="pass ($(awk '{print $3}' <<<"$line"))" ;;
      FAIL*) cell="**fail**" ;;
      *) cell="not run" ;;
    esac
    cells+=" $p: $cell;"
  done
  row="| $v | $(date -u +%F) | \`$commit\` | ${built} s |${cells%;} |"
  echo "$row" | tee -a "$rows"
  grep -E "^(--- FAIL|FAIL|ok)" "$log" | sed 's/^/    /'
done
echo
echo "rows (also in $rows):"
cat "$rows"
exit "$rc"
