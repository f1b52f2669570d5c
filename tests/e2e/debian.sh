# Sourced, not run: fetch Debian packages of one suite without installing them.
#
#   debian_fetch SUITE DIR PACKAGE...   download the packages' .debs of SUITE (trixie, sid, ...)
#                                       into DIR/deb and unpack them all into DIR/root
#   debian_closure SUITE DIR PACKAGE... print the packages and their whole Depends closure
#
# The apt state (sources, lists, cache) is private to DIR, taken from the Debian mirror this
# machine already uses, so the system's apt sources and package database are left alone.
# The caller defines die().

debian_apt=()

debian_setup() {  # SUITE DIR: write the private apt state and read the suite's lists once
    local suite=$1 d uri
    mkdir -p "$2" && d=$(cd "$2" && pwd)
    debian_apt=(-o Dir::Etc::sourcelist=/dev/null -o "Dir::Etc::sourceparts=$d/sp"
                -o "Dir::State::lists=$d/lists" -o "Dir::Cache=$d/cache"
                -o Dir::State::status=/dev/null -o APT::Architecture="$(dpkg --print-architecture)")
    [ -f "$d/lists/.updated" ] && return
    command -v apt-get >/dev/null || die "no apt-get to fetch Debian $suite packages"
    mkdir -p "$d/sp" "$d/lists/partial" "$d/cache/archives/partial" "$d/deb"
    uri=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    if [ -z "$uri" ]; then
        uri=$(awk '$1 == "deb" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)
    fi
    [ -n "$uri" ] || die "cannot find the Debian mirror this machine uses"
    printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: main\nSigned-By: %s\n' \
        "$uri" "$suite" /usr/share/keyrings/debian-archive-keyring.gpg > "$d/sp/$suite.sources"
    apt-get "${debian_apt[@]}" update -qq >&2 || die "apt-get update ($suite lists) failed"
    touch "$d/lists/.updated"
}

debian_closure() {  # SUITE DIR PACKAGE...
    debian_setup "$1" "$2"; shift 2
    apt-cache "${debian_apt[@]}" depends --recurse --no-recommends --no-suggests \
        --no-conflicts --no-breaks --no-replaces --no-enhances "$@" \
        | grep -v '^ ' | grep -v '^<' | sort -u
}

debian_fetch() {  # SUITE DIR PACKAGE...
    local d deb
    debian_setup "$1" "$2"
    d=$(cd "$2" && pwd); shift 2
    (cd "$d/deb" && apt-get "${debian_apt[@]}" download "$@" >&2) || die "apt-get download $* failed"
    rm -rf "$d/root.tmp"
    for deb in "$d"/deb/*.deb; do dpkg-deb -x "$deb" "$d/root.tmp"; done
    rm -rf "$d/root" && mv "$d/root.tmp" "$d/root"
}
