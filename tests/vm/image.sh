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
KEY=$(cat "$0" "$HERE/guest-runner.service" | sha256sum | cut -c1-16)
CACHE=${NRI_TOPOLOGY_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/nri-topology/vm}
OUT=$CACHE/$KEY

print() {
    echo "KERNEL=$OUT/vmlinuz"
    echo "INITRD=$OUT/initrd.img"
    echo "DISK=$OUT/disk.raw"
}

if [ -f "$OUT/done" ]; then print; exit 0; fi
[ "$(id -u)" -eq 0 ] || die "building the guest needs root"
missing=()
for tool in mmdebstrap:mmdebstrap mkfs.ext4:e2fsprogs qemu-system-x86_64:qemu-system-x86 \
            qemu-img:qemu-utils; do
    command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
    say "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 \
        || die "apt-get install ${missing[*]} failed"
fi

uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
[ -n "$uri" ] || uri=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
[ -n "$uri" ] || die "cannot find the Debian mirror this machine uses"

mkdir -p "$CACHE"
work=$(mktemp -d "$CACHE/build.XXXXXX")
trap 'rm -rf "$work"' EXIT
say "mmdebstrap trixie into $work (a few minutes)"
# The runner (guest-runner.service): mount the host's share, run its run.sh, power off.
mmdebstrap --variant=important --components=main \
    --include=systemd,systemd-sysv,dbus,udev,linux-image-amd64,containerd,runc,crun,conmon,skopeo,containernetworking-plugins,libsqlite3-0,python3,python3-venv,busybox-static,iproute2,kmod,procps \
    --customize-hook='echo nri-vm > "$1/etc/hostname"' \
    --customize-hook='printf "/dev/vda / ext4 rw,errors=remount-ro 0 1\n" > "$1/etc/fstab"' \
    --customize-hook='mkdir -p "$1/mnt/host" && chroot "$1" passwd -d root' \
    --customize-hook="cp '$HERE/guest-runner.service' \"\$1/etc/systemd/system/\" && chroot \"\$1\" systemctl enable guest-runner.service" \
    --customize-hook='chroot "$1" systemctl disable containerd.service' \
    --customize-hook='chroot "$1" systemctl mask e2scrub_reap.service apt-daily.timer apt-daily-upgrade.timer man-db.timer' \
    trixie "$work/root" "$uri" >&2 || die "mmdebstrap failed"
cp -L "$work/root/vmlinuz" "$work/vmlinuz"
cp -L "$work/root/initrd.img" "$work/initrd.img"
mkfs.ext4 -q -F -L root -d "$work/root" "$work/disk.raw" 4G >&2 || die "mkfs.ext4 failed"
rm -rf "$work/root" "$OUT"
mv "$work" "$OUT"
trap - EXIT
touch "$OUT/done"
print
