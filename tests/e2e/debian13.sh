# Sourced, not run: fetch Debian 13 (trixie) packages without installing them.
#
#   debian13_fetch DIR PACKAGE...   download the packages' .debs into DIR/deb and unpack them all
#                                   into DIR/root
#   debian13_closure DIR PACKAGE... print the packages and their whole Depends closure
#
# The apt state (sources, lists, cache) is private to DIR, taken from the Debian mirror this
# machine already uses, so the system's apt sources and package database are left alone.
# The caller defines die().

debian13_apt=()

debian13_setup() {  # DIR: write the private apt state and read trixie's lists once
    local d uri
    mkdir -p "$1" && d=$(cd "$1" && pwd)
    debian13_apt=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$d/sp"
                  -o "Dir::State::lists=$d/lists" -o "Dir::Cache=$d/cache"
                  -o Dir::State::status=/dev/null -o APT::Architecture="$(dpkg --print-architecture)")
    [ -f "$d/lists/.updated" ] && return
    command -v apt-get >/dev/null || die "no apt-get to fetch Debian 13 packages"
    mkdir -p "$d/sp" "$d/lists/partial" "$d/cache/archives/partial" "$d/deb"
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    if [ -z "$uri" ]; then
        uri=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    fi
    [ -n "$uri" ] || die "cannot find the Debian mirror this machine uses"
    printf 'Types: deb\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: %s\n' \
        "$uri" /usr/share/keyrings/debian-archive-keyring.gpg > "$d/sp/trixie.sources"
    apt-get "${debian13_apt[@]}" update -qq >&2 || die "apt-get update (trixie lists) failed"
    touch "$d/lists/.updated"
}

debian13_closure() {  # DIR PACKAGE...
    debian13_setup "$1"; shift
    apt-cache "${debian13_apt[@]}" depends --recurse --no-recommends --no-suggests \
        --no-conflicts --no-breaks --no-replaces --no-enhances "$@" \
        | grep -v '^ ' | grep -v '^<' | sort -u
}

debian13_fetch() {  # DIR PACKAGE...
    local d deb
    debian13_setup "$1"
    d=$(cd "$1" && pwd); shift
    (cd "$d/deb" && apt-get "${debian13_apt[@]}" download "$@" >&2) || die "apt-get download $* failed"
    rm -rf "$d/root.tmp"
    for deb in "$d"/deb/*.deb; do dpkg-deb -x "$deb" "$d/root.tmp"; done
    rm -rf "$d/root" && mv "$d/root.tmp" "$d/root"
}
