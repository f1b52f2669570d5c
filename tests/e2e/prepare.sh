#!/usr/bin/env bash
# Get what the end-to-end tests need and print where it is, as KEY=VALUE lines:
#   CONTAINERD_BIN  directory with containerd, ctr and containerd-shim-runc-v2 (NRI capable, >= 1.7)
#   RUNC            the runc binary
#   BUSYBOX         a static busybox for the test image
#
# containerd comes from $NRI_TOPOLOGY_CONTAINERD (a directory), else from $PATH when it is
# 1.7 or newer, else from Debian 13's package, downloaded (not installed) into the cache
# directory with a private apt state, so the system's apt sources are left alone.
# runc and busybox-static are installed with apt-get when missing and we are root.
set -euo pipefail

CACHE=${NRI_TOPOLOGY_E2E_CACHE:-$(cd "$(dirname "$0")/../.." && pwd)/.cache/e2e}
mkdir -p "$CACHE"

say() { echo "prepare: $*" >&2; }
die() { say "$*"; exit 1; }
# shellcheck source=debian13.sh
. "$(dirname "$0")/debian13.sh"

version_ok() {  # containerd binary -> 0 when it is at least 1.7
    local v
    v=$("$1" --version 2>/dev/null | grep -oE ' v?[0-9]+\.[0-9]+' | head -1 | tr -d ' v') || return 1
    [ -n "$v" ] || return 1
    local major=${v%%.*} minor=${v#*.}
    [ "$major" -gt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -ge 7 ]; }
}

apt_install() {  # package... : install with the system's apt when root
    [ "$(id -u)" -eq 0 ] || die "need $* (not root, cannot apt-get install)"
    command -v apt-get >/dev/null || die "need $* (no apt-get here)"
    say "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2 \
        || { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2; } \
        || die "apt-get install $* failed"
}

debian_containerd() {  # download Debian 13's containerd .deb into $CACHE/debian and unpack it
    local d=$CACHE/debian
    if [ -x "$d/root/usr/bin/containerd" ]; then echo "$d/root/usr/bin"; return; fi
    say "downloading Debian 13's containerd into $d"
    debian13_fetch "$d" containerd
    echo "$d/root/usr/bin"
}

if [ -n "${NRI_TOPOLOGY_CONTAINERD:-}" ]; then
    bin=$NRI_TOPOLOGY_CONTAINERD
    [ -x "$bin/containerd" ] || die "NRI_TOPOLOGY_CONTAINERD=$bin holds no containerd"
    version_ok "$bin/containerd" || die "$bin/containerd is older than 1.7 (no NRI)"
elif command -v containerd >/dev/null && version_ok "$(command -v containerd)"; then
    bin=$(dirname "$(command -v containerd)")
else
    bin=$(debian_containerd)
fi
for tool in containerd ctr containerd-shim-runc-v2; do
    [ -x "$bin/$tool" ] || die "$bin has no $tool"
done

runc=$(command -v runc || true)
if [ -z "$runc" ]; then apt_install runc; runc=$(command -v runc); fi

busybox=${NRI_TOPOLOGY_BUSYBOX:-}
if [ -z "$busybox" ]; then
    if ! dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q 'ok installed'; then
        apt_install busybox-static
    fi
    busybox=/bin/busybox
fi
[ -x "$busybox" ] || die "no static busybox at $busybox"

echo "CONTAINERD_BIN=$bin"
echo "RUNC=$runc"
echo "BUSYBOX=$busybox"
