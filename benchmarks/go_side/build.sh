#!/usr/bin/env bash
# Build the Go runtime-side harness and the no-op Go plugin, and print where they are, as
# KEY=VALUE lines:
#   HARNESS  runtime side: containerd/nri's pkg/adaptation driving one plugin (harness/)
#   NOOP     a no-op plugin on containerd/nri's pkg/stub (noop/); with -replies FILE it answers
#            the containers in FILE with the replies recorded there (harness -record)
#   GO       the go command used, NRI  the containerd/nri version built against
#
# The Go toolchain is Debian 13's (Go 1.24), downloaded, not installed, into the cache directory
# with a private apt state (tests/e2e/debian.sh); the programs are built in GOPATH mode as
# Debian builds Go, so no Go module proxy is needed. containerd/nri with its dependencies comes
#   * by default from Debian 13's packages (golang-github-containerd-nri-dev, 0.6.x, and the
#     golang-*-dev packages it depends on), downloaded the same way;
#   * with NRI_TOPOLOGY_NRI_SRC=DIR from the vendor tree of the Go module in DIR, which must
#     hold containerd/nri's pkg/adaptation and pkg/stub: a containerd 2.x source tree (whose
#     vendor/ holds the containerd/nri release that containerd embeds, with every dependency).
#     Its version is read from DIR/vendor/modules.txt; 0.12 and later build with the tag nri012.
# Only the first run downloads; the binaries are rebuilt when the Go sources change.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${NRI_TOPOLOGY_GO_CACHE:-$ROOT/.cache/go-side}
mkdir -p "$CACHE"

say() { echo "go-side: $*" >&2; }
die() { say "$*"; exit 1; }
# shellcheck source=../../tests/e2e/debian.sh
. "$ROOT/tests/e2e/debian.sh"

NRI_PKG=golang-github-containerd-nri-dev
d=$CACHE/debian
src=${NRI_TOPOLOGY_NRI_SRC:-}
if [ -n "$src" ]; then
    src=$(cd "$src" && pwd) || die "NRI_TOPOLOGY_NRI_SRC: no directory $NRI_TOPOLOGY_NRI_SRC"
    for pkg in adaptation stub; do
        [ -d "$src/vendor/github.com/containerd/nri/pkg/$pkg" ] \
            || die "$src/vendor holds no containerd/nri pkg/$pkg"
    done
    nri=$(awk '$1 == "#" && $2 == "github.com/containerd/nri" {print $3}' \
        "$src/vendor/modules.txt")
    [ -n "$nri" ] || die "$src/vendor/modules.txt names no containerd/nri version"
    if ! ls -d "$d"/root/usr/lib/go-1.* > /dev/null 2>&1; then
        say "downloading Debian 13's Go toolchain into $d"
        debian_fetch trixie "$d" golang-1.24-go golang-1.24-src
    fi
    gopath=$CACHE/gopath-$(printf %s "$src" | sha256sum | cut -c1-12)
    mkdir -p "$gopath"
    ln -sfn "$src/vendor" "$gopath/src"
    tags=
    case $nri in v0.[0-9].* | v0.1[01].*) ;; *) tags=nri012 ;; esac
    bin=$CACHE/bin-$nri
else
    if [ ! -d "$d/root/usr/share/gocode/src/github.com/containerd/nri/pkg/adaptation" ]; then
        say "downloading Debian 13's Go toolchain and containerd/nri into $d"
        mapfile -t libs < <(debian_closure trixie "$d" "$NRI_PKG" | grep '^golang-')
        debian_fetch trixie "$d" golang-1.24-go golang-1.24-src "${libs[@]}"
    fi
    nri=$(dpkg-deb -f "$d"/deb/${NRI_PKG}_*.deb Version)
    gopath=$d/root/usr/share/gocode
    tags=
    bin=$CACHE/bin
fi
goroot=$(ls -d "$d"/root/usr/lib/go-1.* | tail -1)
[ -x "$goroot/bin/go" ] || die "no go command under $d/root/usr/lib"

export GOROOT=$goroot GOPATH=$gopath GO111MODULE=off GOTOOLCHAIN=local
export GOCACHE=$CACHE/gocache CGO_ENABLED=0 GOFLAGS=
mkdir -p "$bin"
stamp=$( (cat "$0" "$HERE"/*/*.go "$goroot/VERSION"; echo "$src $nri $tags") | sha256sum | cut -d' ' -f1)
if [ "$(cat "$bin/.stamp" 2>/dev/null)" != "$stamp" ]; then
    say "building harness and noop against containerd/nri $nri with $("$goroot/bin/go" version)"
    for prog in harness noop; do
        (cd "$HERE/$prog" && "$goroot/bin/go" build -trimpath -tags "$tags" \
            -ldflags "-X main.nriVersion=${tags:+$nri}" -o "$bin/$prog.tmp" .) \
            || die "go build $prog failed"
        mv "$bin/$prog.tmp" "$bin/$prog"
    done
    echo "$stamp" > "$bin/.stamp"
fi
echo "HARNESS=$bin/harness"
echo "NOOP=$bin/noop"
echo "GO=$goroot/bin/go"
echo "NRI=$nri"
