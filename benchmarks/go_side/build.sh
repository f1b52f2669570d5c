#!/usr/bin/env bash
# Build the Go runtime-side harness and the no-op Go plugin, and print where they are, as
# KEY=VALUE lines:
#   HARNESS  runtime side: containerd/nri's pkg/adaptation driving one plugin (harness/)
#   NOOP     a no-op plugin on containerd/nri's pkg/stub (noop/); with -replies FILE it answers
#            the containers in FILE with the replies recorded there (harness -record)
#   GO       the go command used, NRI  the containerd/nri version built against
#
# The Go toolchain and containerd/nri with its dependencies are Debian 13's packages (Go 1.24,
# golang-github-containerd-nri-dev and the golang-*-dev packages it depends on), downloaded,
# not installed, into the cache directory with a private apt state (tests/e2e/debian13.sh) and
# built in GOPATH mode as Debian builds them, so no Go module proxy is needed. Only the first
# run downloads; the binaries are rebuilt when the Go sources change.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
CACHE=${NRI_TOPOLOGY_GO_CACHE:-$ROOT/.cache/go-side}
mkdir -p "$CACHE"

say() { echo "go-side: $*" >&2; }
die() { say "$*"; exit 1; }
# shellcheck source=../../tests/e2e/debian13.sh
. "$ROOT/tests/e2e/debian13.sh"

NRI_PKG=golang-github-containerd-nri-dev
d=$CACHE/debian
if [ ! -d "$d/root/usr/share/gocode/src/github.com/containerd/nri/pkg/adaptation" ]; then
    say "downloading Debian 13's Go toolchain and containerd/nri into $d"
    mapfile -t libs < <(debian13_closure "$d" "$NRI_PKG" | grep '^golang-')
    debian13_fetch "$d" golang-1.24-go golang-1.24-src "${libs[@]}"
fi
goroot=$(ls -d "$d"/root/usr/lib/go-1.* | tail -1)
[ -x "$goroot/bin/go" ] || die "no go command under $d/root/usr/lib"

export GOROOT=$goroot GOPATH=$d/root/usr/share/gocode GO111MODULE=off GOTOOLCHAIN=local
export GOCACHE=$CACHE/gocache CGO_ENABLED=0 GOFLAGS=
bin=$CACHE/bin
mkdir -p "$bin"
stamp=$(cat "$HERE"/*/*.go "$goroot/VERSION" | sha256sum | cut -d' ' -f1)
if [ "$(cat "$bin/.stamp" 2>/dev/null)" != "$stamp" ]; then
    say "building harness and noop with $("$goroot/bin/go" version)"
    for prog in harness noop; do
        (cd "$HERE/$prog" && "$goroot/bin/go" build -trimpath -o "$bin/$prog.tmp" .) \
            || die "go build $prog failed"
        mv "$bin/$prog.tmp" "$bin/$prog"
    done
    echo "$stamp" > "$bin/.stamp"
fi
echo "HARNESS=$bin/harness"
echo "NOOP=$bin/noop"
echo "GO=$goroot/bin/go"
echo "NRI=$(dpkg-deb -f "$d"/deb/${NRI_PKG}_*.deb Version)"
