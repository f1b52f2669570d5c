#!/usr/bin/env bash
# Build, or find cached, the guest of the VM end-to-end test: a Debian 13 (trixie) root file system
# from Debian's packages (systemd, its kernel, containerd, runc, crun, Python; conmon, skopeo and
# the CNI plugins for a CRI-O the host may share, which Debian does not package), with a service
# that runs the script the host leaves in the 9p share and powers off. Prints KEY=VALUE lines:
#   KERNEL, INITRD, DISK (raw ext4 image; the test boots a copy-on-write overlay of it)
#
# The result is cached under $NRI_TOPOLOGY_VM_CACHE (default ~/.cache/nri-topology/vm), keyed by
# this script's hash, so a machine that keeps its cache builds it once. Needs root, apt-get,
# mmdebstrap and e2fsprogs (installed with apt-get when missing).
set -euo pipefail

say() { echo "vm-image: $*" >&2; }
die() { say "$*"; exit 1; }

HERE=$(cd "$(dirname "$0")" && pwd)
KEY=$(cat "$0" "$HERE/guest-image.sh" "$HERE/guest-runner.service" | sha256sum | cut -c1-16)
CACHE=${NRI_TOPOLOGY_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nri-topology/vm}
OUT=$CACHE/$KEY
# shellcheck source=guest-image.sh
. "$HERE/guest-image.sh"

if [ -f "$OUT/done" ]; then print_image; exit 0; fi
[ "$(id -u)" -eq 0 ] || die "building the guest needs root"
need_tools mmdebstrap:mmdebstrap mkfs.ext4:e2fsprogs qemu-system-x86_64:qemu-system-x86 \
    qemu-img:qemu-utils

uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$uri" ] || uri=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$uri" ] || die "cannot find the Debian mirror this machine uses"

mkdir -p "$CACHE"
work=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "mmdebstrap trixie into $work (a few minutes)"
mmdebstrap --variant=important --components=main \
    --include=systemd,systemd-sysv,dbus,udev,linux-image-amd64,containerd,runc,crun,conmon,skopeo,containernetworking-plugins,libsqlite3-0,python3,python3-venv,busybox-static,iproute2,kmod,procps \
    "${GUEST_HOOKS[@]}" \
    --customize-hook='chroot "$1" systemctl mask e2scrub_reap.service apt-daily.timer apt-daily-upgrade.timer man-db.timer' \
    trixie "$work/root" "$uri" >&2 || die "mmdebstrap failed"
finish_image "$work" 4G
print_image
