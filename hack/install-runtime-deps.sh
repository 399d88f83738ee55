#!/usr/bin/env bash
# Installs the Debian packages of `kubevol up --runtime containerd` when they are missing:
# containerd (containerd, its runc shim and ctr), runc, iproute2 (ip, to remove the pods'
# bridge) and busybox-static (the sandbox and busybox images are made of it). Only this
# mode needs them; hack/install-deps.sh does not install them. Needs root.
set -euo pipefail

need=()
command -v containerd >/dev/null || need+=(containerd)
command -v containerd-shim-runc-v2 >/dev/null || need+=(containerd)
command -v runc >/dev/null || need+=(runc)
command -v ip >/dev/null || need+=(iproute2)
# The busybox package also installs /bin/busybox, dynamically linked: the images need the static one.
dpkg -s busybox-static >/dev/null 2>&1 || need+=(busybox-static)

if [ ${#need[@]} -gt 0 ]; then
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
