#!/usr/bin/env bash
# Installs the Debian packages kubevol's tests and `kubevol up` need, when they are missing:
# losetup/mount (util-linux, mount), mkfs.ext4 and resize2fs (e2fsprogs), mkfs.xfs and
# xfs_growfs (xfsprogs), gcc and libc6-dev (the race detector's cgo). Needs root; apt-get runs
# only if something is missing.
set -euo pipefail

need=()
command -v losetup >/dev/null || need+=(util-linux)
command -v mount >/dev/null || need+=(mount)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v mkfs.xfs >/dev/null || need+=(xfsprogs)
command -v blkid >/dev/null || need+=(util-linux)
# The image tests run kubevol's images as a pod would: Debian's containerd and runc.
command -v containerd >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
# make test's race step: the race detector needs cgo, so a C compiler and libc's headers.
command -v gcc >/dev/null || need+=(gcc)
[ -e /usr/include/stdlib.h ] || need+=(libc6-dev)

if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Loop devices back the driver's block volumes.
if [ ! -e /dev/loop-control ]; then
  modprobe loop 2>/dev/null || true
fi
[ -e /dev/loop-control ] || { echo "no /dev/loop-control: loop devices are unavailable" >&2; exit 1; }
