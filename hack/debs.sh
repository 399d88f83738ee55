#!/usr/bin/env bash
# hack/debs.sh ARCH DIR: the Debian packages of the mount and filesystem tools that the
# driver and node-agent images carry (mount, util-linux, e2fsprogs, xfsprogs) and the closure
# of the library packages they depend on, for one Debian architecture (amd64, arm64),
# downloaded into DIR/debs and extracted into DIR/root. DIR/packages lists name=version, one a
# line, sorted: the image build records it, and the build is only as reproducible as that list.
#
# Nothing is installed: apt-get download fetches the .deb files, dpkg-deb -x unpacks them.
# A foreign architecture is added to dpkg (dpkg --add-architecture) the first time.
# Runs again only when the tool list or the package versions change.
set -euo pipefail

arch=${1:?usage: hack/debs.sh ARCH DIR}
dir=${2:?usage: hack/debs.sh ARCH DIR}
tools=(mount util-linux e2fsprogs xfsprogs)

if [ "$arch" != "$(dpkg --print-architecture)" ] && ! dpkg --print-foreign-architectures | grep -qx "$arch"; then
  echo "debs: adding the dpkg architecture $arch"
  dpkg --add-architecture "$arch"
  apt-get update -qq
fi
if ! apt-cache show "util-linux:$arch" >/dev/null 2>&1; then
  apt-get update -qq
fi

# The closure: the tools and every package they (pre-)depend on whose name starts with lib.
# Other dependencies (debconf, util-linux-extra, logsave ...) are maintainer-script or
# packaging needs, not libraries a binary loads; the image build takes from the packages only
# the tools and the shared objects their ELF headers name.
#
# One apt-cache call (each takes seconds): the recursive dependency graph of the tools, then a
# walk of it in awk that follows only the edges into lib* packages.
want_names=$(apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks \
  --no-replaces --no-enhances "${tools[@]/%/:$arch}" 2>/dev/null | awk -v roots="${tools[*]}" '
  /^[^ <]/ { pkg = $1; sub(/:.*/, "", pkg); next }
  /^  (Pre)?Depends: [^<]/ { dep = $2; sub(/:.*/, "", dep); edges[pkg] = edges[pkg] " " dep }
  END {
    n = split(roots, queue, " ")
    for (i = 1; i <= n; i++) keep[queue[i]] = 1
    for (i = 1; i <= n; i++) {
      m = split(edges[queue[i]], deps, " ")
      for (j = 1; j <= m; j++) {
        d = deps[j]
        if (d !~ /^lib/ || d ~ /^lib(perl|python)/ || (d in keep)) continue
        keep[d] = 1; queue[++n] = d
      }
    }
    for (p in keep) print p
  }' | sort)
[ -n "$want_names" ] || { echo "debs: apt-cache knows no $arch packages for ${tools[*]}" >&2; exit 1; }

want=$(apt-cache policy $(echo "$want_names" | sed "s/$/:$arch/") | awk '
  /^[^ ]/ { pkg = $1; sub(/:.*$/, "", pkg) }
  /^  Candidate:/ && $2 != "(none)" { print pkg "=" $2 }' | sort)

if [ -f "$dir/packages" ] && [ -d "$dir/root" ] && [ "$(cat "$dir/packages")" = "$want" ]; then
  exit 0
fi

rm -rf "$dir/debs" "$dir/root" "$dir/packages"
mkdir -p "$dir/debs" "$dir/root"
(cd "$dir/debs" && apt-get download -qq -o APT::Sandbox::User=root $(echo "$want" | sed "s/=/:$arch=/") >/dev/null)
for deb in "$dir"/debs/*.deb; do
  dpkg-deb -x "$deb" "$dir/root"
done
echo "$want" >"$dir/packages"
echo "debs: $(echo "$want" | wc -l) packages for $arch in $dir"
