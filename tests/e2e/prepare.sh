#!/usr/bin/env bash
# Get what the end-to-end tests need for one runtime and print where it is, as KEY=VALUE lines:
#   RUNTIME_BIN     directory with the runtime's binaries (containerd, ctr and
#                   containerd-shim-runc-v2; or crio and pinns)
#   RUNTIME_VERSION the version the runtime reports
#   RUNC            the runc binary (for CRI-O: a wrapper of it, see below)
#   BUSYBOX         a static busybox for the test image
#
# usage: prepare.sh [containerd-1.7 | containerd-2 | crio]   (default containerd-1.7)
#
# containerd-1.7 comes from $NRI_TOPOLOGY_CONTAINERD (a directory, any NRI capable containerd),
# else from $PATH when it is 1.7, else from Debian 13's package; containerd-2 from
# $NRI_TOPOLOGY_CONTAINERD2, else from $PATH when it is 2.x, else from Debian unstable's package.
# Packages are downloaded (not installed) into the cache directory with a private apt state, so
# the system's apt sources are left alone. CRI-O is not packaged by Debian: it comes from
# $NRI_TOPOLOGY_CRIO, else from ../shared/runtimes/crio beside the checkout; when neither exists
# this exits 3 (the tests skip, also where e2e is required). CRI-O's helpers (conmon, skopeo, the
# loopback CNI plugin), runc and busybox-static are installed with apt-get when missing and we
# are root.
set -euo pipefail

RUNTIME=${1:-containerd-1.7}
REPO=$(cd "$(dirname "$0")/../.." && pwd)
CACHE=${NRI_TOPOLOGY_E2E_CACHE:-$REPO/.cache/e2e}
mkdir -p "$CACHE"

say() { echo "prepare: $*" >&2; }
die() { say "$*"; exit 1; }
# shellcheck source=debian.sh
. "$(dirname "$0")/debian.sh"

series() {  # containerd binary -> its MAJOR.MINOR
    "$1" --version 2>/dev/null | grep -oE ' v?[0-9]+\.[0-9]+' | head -1 | tr -d ' v'
}

at_least() {  # MAJOR.MINOR WANT_MAJOR WANT_MINOR
    local major=${1%%.*} minor=${1#*.}
    [ -n "$1" ] && { [ "$major" -gt "$2" ] || { [ "$major" -eq "$2" ] && [ "$minor" -ge "$3" ]; }; }
}

apt_install() {  # package... : install with the system's apt when root
    [ "$(id -u)" -eq 0 ] || die "need $* (not root, cannot apt-get install)"
    command -v apt-get >/dev/null || die "need $* (no apt-get here)"
    say "apt-get install $*"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2 \
        || { apt-get update -qq >&2 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2; } \
        || die "apt-get install $* failed"
}

installed() {  # package -> 0 when dpkg has it installed
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'ok installed'
}

debian_containerd() {  # SUITE: download the suite's containerd .deb into the cache, unpack it
    local d=$CACHE/debian-$1
    if [ -x "$d/root/usr/bin/containerd" ]; then echo "$d/root/usr/bin"; return; fi
    say "downloading Debian $1's containerd into $d"
    debian_fetch "$1" "$d" containerd
    echo "$d/root/usr/bin"
}

containerd_from() {  # ENV_DIR SERIES SUITE: the directory holding the containerd of a series
    local given=$1 want=$2 suite=$3 bin path
    if [ -n "$given" ]; then
        bin=$given
        [ -x "$bin/containerd" ] || die "$bin holds no containerd"
        at_least "$(series "$bin/containerd")" "${want%%.*}" "$( [ "$want" = 2 ] && echo 0 || echo 7)" \
            || die "$bin/containerd is $(series "$bin/containerd"), not $want or newer"
    elif path=$(command -v containerd) && [[ "$(series "$path")" == "$want"* ]]; then
        bin=$(dirname "$path")
    else
        bin=$(debian_containerd "$suite")
    fi
    for tool in containerd ctr containerd-shim-runc-v2; do
        [ -x "$bin/$tool" ] || die "$bin has no $tool"
    done
    [[ "$(series "$bin/containerd")" == "$want"* ]] || [ -n "$given" ] \
        || die "$bin/containerd is $(series "$bin/containerd"), not $want"
    echo "$bin"
}

runc=$(command -v runc || true)
if [ -z "$runc" ]; then apt_install runc; runc=$(command -v runc); fi

case $RUNTIME in
    containerd-1.7)
        bin=$(containerd_from "${NRI_TOPOLOGY_CONTAINERD:-}" 1.7 trixie)
        version=$("$bin/containerd" --version | awk '{print $3}')
        ;;
    containerd-2)
        bin=$(containerd_from "${NRI_TOPOLOGY_CONTAINERD2:-}" 2 sid)
        version=$("$bin/containerd" --version | awk '{print $3}')
        ;;
    crio)
        bin=${NRI_TOPOLOGY_CRIO:-$REPO/../shared/runtimes/crio}
        if [ ! -d "$bin" ]; then
            say "no CRI-O here: neither \$NRI_TOPOLOGY_CRIO nor ../shared/runtimes/crio beside the checkout"
            exit 3
        fi
        bin=$(cd "$bin" && pwd)
        for tool in crio pinns; do [ -x "$bin/$tool" ] || die "$bin has no $tool"; done
        missing=()
        for pkg in conmon skopeo containernetworking-plugins; do
            installed "$pkg" || missing+=("$pkg")
        done
        [ ${#missing[@]} -eq 0 ] || apt_install "${missing[@]}"
        version=$("$bin/crio" --version 2>/dev/null | awk '/^crio version/ {print $3}')
        [ -n "$version" ] || die "$bin/crio does not run: $("$bin/crio" --version 2>&1 | tail -3)"
        # Where a negative oom_score_adj cannot be set (no CAP_SYS_RESOURCE), CRI-O, unlike
        # containerd, has no setting to keep it at 0: a runc wrapper clamps it in the bundle.
        if [ -x "$bin/runc-oomclamp" ] && ! (echo -1 > /proc/self/oom_score_adj) 2>/dev/null; then
            runc=$bin/runc-oomclamp
        fi
        ;;
    *) die "unknown runtime $RUNTIME (containerd-1.7, containerd-2 or crio)" ;;
esac

busybox=${NRI_TOPOLOGY_BUSYBOX:-}
if [ -z "$busybox" ]; then
    installed busybox-static || apt_install busybox-static
    busybox=/bin/busybox
fi
[ -x "$busybox" ] || die "no static busybox at $busybox"

echo "RUNTIME_BIN=$bin"
echo "RUNTIME_VERSION=$version"
echo "RUNC=$runc"
echo "BUSYBOX=$busybox"
