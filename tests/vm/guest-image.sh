# shellcheck shell=bash
# What the two guest images of the VM end-to-end test (image.sh: Debian 13, image-bookworm.sh:
# Debian 12) are built with alike. Sourced by them after `say` and `die`, with HERE and OUT set;
# part of their cache keys.

# The tools a build needs, TOOL:PACKAGE, installed with apt-get when missing.
need_tools() {
    local missing=() tool
    for tool in "$@"; do
        command -v "${tool%%:*}" >/dev/null || missing+=("${tool#*:}")
    done
    [ ${#missing[@]} -gt 0 ] || return 0
    say "apt-get install ${missing[*]}"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2 \
        || die "apt-get install ${missing[*]} failed"
}

# The image's files, as KEY=VALUE lines for test_vm.py.
print_image() {
    echo "KERNEL=$OUT/vmlinuz"
    echo "INITRD=$OUT/initrd.img"
    echo "DISK=$OUT/disk.raw"
}

# mmdebstrap's customize hooks of every guest: its name and root file system, the share's mount
# point, root without a password, and the runner (guest-runner.service: mount the host's share,
# run its run.sh, power off), with containerd left for run.sh to start.
# shellcheck disable=SC2016 # "$1" is mmdebstrap's, expanded in the hook
GUEST_HOOKS=(
    --customize-hook='echo nri-vm > "$1/etc/hostname"'
    --customize-hook='printf "/dev/vda / ext4 rw,errors=remount-ro 0 1\n" > "$1/etc/fstab"'
    --customize-hook='mkdir -p "$1/mnt/host" && chroot "$1" passwd -d root'
    --customize-hook="cp '$HERE/guest-runner.service' \"\$1/etc/systemd/system/\" && chroot \"\$1\" systemctl enable guest-runner.service"
    --customize-hook='chroot "$1" systemctl disable containerd.service'
)

# finish_image WORK SIZE: the kernel, the initrd and an ext4 disk of SIZE made from WORK/root,
# then WORK becomes OUT, marked done.
finish_image() {
    local work=$1 size=$2
    cp -L "$work/root/vmlinuz" "$work/vmlinuz"
    cp -L "$work/root/initrd.img" "$work/initrd.img"
    mkfs.ext4 -q -F -L root -d "$work/root" "$work/disk.raw" "$size" >&2 || die "mkfs.ext4 failed"
    rm -rf "$work/root" "$work/apt" "$OUT"
    mv "$work" "$OUT"
    trap - EXIT
    touch "$OUT/done"
}
