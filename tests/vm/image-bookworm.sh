#!/usr/bin/env bash
# Build, or find cached, the second guest of the VM end-to-end test: Debian 12 (bookworm), for its
# systemd 252, which re-applies unit properties on daemon-reload where trixie's 257 does not.
# bookworm's containerd (1.6) has no NRI, so Debian 13's containerd 1.7.24 .deb goes in (it needs
# only runc and libc6 >= 2.34); the rest is bookworm's: systemd, its kernel, runc, Python 3.11.
# The smallest variant (required) and only what run.sh needs, as CI builds it on every run; the
# hosts and resolv.conf files the runtime copies into host-network pods are written here. Prints
# KERNEL, INITRD and DISK lines as image.sh does, cached as it is; needs root, apt-get, mmdebstrap
# and e2fsprogs (installed with apt-get when missing).
set -euo pipefail

say() { echo "vm-image-bookworm: $*" >&2; }
die() { say "$*"; exit 1; }

HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../e2e/debian.sh
. "$HERE/../e2e/debian.sh"
KEY=$(cat "$0" "$HERE/guest-image.sh" "$HERE/guest-runner.service" "$HERE/../e2e/debian.sh" \
    | sha256sum | cut -c1-16)
CACHE=${NRI_TOPOLOGY_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nri-topology/vm}
OUT=$CACHE/bookworm-$KEY
# shellcheck source=guest-image.sh
. "$HERE/guest-image.sh"

if [ -f "$OUT/done" ]; then print_image; exit 0; fi
[ "$(id -u)" -eq 0 ] || die "building the guest needs root"
need_tools mmdebstrap:mmdebstrap mkfs.ext4:e2fsprogs

mkdir -p "$CACHE"
work=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
# A private apt state, fresh for each build: the system's sources and lists stay as they are.
debian_setup trixie "$work/apt"
(cd "$work/apt/deb" && apt-get "${debian_apt[@]}" download containerd >&2) \
    || die "apt-get download containerd (trixie) failed"
ctrd=$(ls "$work"/apt/deb/containerd_*.deb)
uri=$(awk '/^URIs:/ {print $2; exit}' "$work/apt/sp/trixie.sources")
say "mmdebstrap bookworm into $work"
# The hook makes the local .deb visible to dpkg in the chroot, at the same path.
mmdebstrap --variant=required --components=main \
    --hook-dir=/usr/share/mmdebstrap/hooks/file-mirror-automount \
    --include=systemd,systemd-sysv,dbus,udev,linux-image-amd64,runc,python3,python3-venv,"$ctrd" \
    "${GUEST_HOOKS[@]}" \
    --customize-hook='printf "127.0.0.1 localhost nri-vm\n" > "$1/etc/hosts" && touch "$1/etc/resolv.conf"' \
    --customize-hook='rm -rf "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/var/cache/apt/*.bin' \
    bookworm "$work/root" "$uri" >&2 || die "mmdebstrap failed"
finish_image "$work" 2G
print_image
