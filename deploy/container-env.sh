#!/usr/bin/env bash
# deploy/container-env.sh - podman for deploy/deploy.mk on a Debian bookworm
# machine that is root, has no Docker engine and reaches no registry (only
# the Debian mirror). Prints the environment podman needs, for a recipe to
# eval:
#   eval "$(bash deploy/container-env.sh)"
# after which `FROM debian:bookworm-slim` builds with nothing pulled.
#
# Steps (idempotent; about a second once done):
#  1. installs podman, runc, podman-compose, debootstrap, netavark,
#     aardvark-dns, iptables when missing;
#  2. writes containers.conf: runtime runc (crun fails on hybrid cgroups
#     here) and default ulimits this root may set (it cannot raise them);
#  3. makes localhost/debian:bookworm-slim with debootstrap from the mirror
#     apt already uses (about 70 s, once per machine and mirror), with the
#     slim images' apt settings; podman resolves the short name to it;
#  4. once per image, checks that FROM debian:bookworm-slim builds with
#     --pull=never and runs; if the short name does not resolve, adds an
#     alias in a registries.conf of its own.
# State lives in $POSATTN_CENV_DIR (default /var/tmp/posattn-container-env).
set -euo pipefail

STATE=${POSATTN_CENV_DIR:-/var/tmp/posattn-container-env}
SHORT=debian:bookworm-slim
BASE=localhost/$SHORT
RECIPE=2 # bump when the image recipe changes
T=900

log() { printf '[container-env] %s\n' "$*" >&2; }
die() {
    log "ERROR: $*"
    exit 1
}
mkdir -p "$STATE"
exec 9>"$STATE/lock" # one caller at a time may build the base image
flock -w "$T" 9 || die "timed out waiting for $STATE/lock"

# 1. packages
missing=()
for p in podman runc podman-compose debootstrap netavark aardvark-dns iptables curl; do
    [ "$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null)" = "ii " ] || missing+=("$p")
done
if ((${#missing[@]})); then
    log "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get -q install -y "${missing[@]}" >"$STATE/apt.log" 2>&1 ||
        { apt-get -q update >>"$STATE/apt.log" 2>&1 && apt-get -q install -y "${missing[@]}" >>"$STATE/apt.log" 2>&1; } ||
        die "apt-get install failed: $(tail -3 "$STATE/apt.log")"
fi

# 2. containers.conf
nofile=$(ulimit -Hn)
[ "$nofile" = unlimited ] && nofile=1048576
nproc=$(ulimit -Hu)
[ "$nproc" = unlimited ] && nproc=4194304
pidmax=$(cat /proc/sys/kernel/pid_max)
((nproc > pidmax)) && nproc=$pidmax
printf '[containers]\ndefault_ulimits = ["nofile=%s:%s", "nproc=%s:%s"]\n\n[engine]\nruntime = "runc"\n' \
    "$nofile" "$nofile" "$nproc" "$nproc" >"$STATE/containers.conf"
export CONTAINERS_CONF=$STATE/containers.conf
if [ -f "$STATE/registries.conf" ]; then
    export CONTAINERS_REGISTRIES_CONF=$STATE/registries.conf
fi

# 3. the base image, from the bookworm entries apt itself uses
entries=$(apt-get indextargets --format '$(REPO_URI) $(RELEASE) $(COMPONENT)' 'Created-By: Packages' |
    awk '$1 ~ /^https?:/ && $2 ~ /^bookworm(-updates|-security)?$/' | sort -u)
mirror=$(awk '$2 == "bookworm" { sub(/\/$/, "", $1); print $1; exit }' <<<"$entries")
[ -n "$mirror" ] || die "apt has no bookworm mirror (run apt-get update)"
sources=$(awk '{ sub(/\/$/, "", $1); k = $1 " " $2; c[k] = c[k] " " $3 }
    END { for (k in c) { split(k, a, " ")
          printf "Types: deb\nURIs: %s\nSuites: %s\nComponents:%s\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n", a[1], a[2], c[k] } }' \
    <<<"$entries")
key=$(printf '%s\n%s\n' "$RECIPE" "$sources" | sha256sum | cut -c1-16)
label() { podman image inspect --format '{{index .Config.Labels "posattn.cenv"}}' "$1" 2>/dev/null || true; }

if [ "$(label "$BASE")" != "$key" ]; then
    PATH=$PATH:/usr/sbin:/sbin
    root=$STATE/rootfs
    clean() {
        findmnt -rn -o TARGET | awk -v r="$root/" 'index($0, r) == 1' | sort -r | xargs -r -n1 umount -l 2>/dev/null || true
        rm -rf --one-file-system "$root"
    }
    clean
    log "debootstrap --variant=minbase bookworm from $mirror (about 70 s)"
    timeout "$T" debootstrap --variant=minbase bookworm "$root" "$mirror" >"$STATE/debootstrap.log" 2>&1 ||
        { clean; die "debootstrap failed: $(tail -3 "$STATE/debootstrap.log")"; }
    rm -f "$root/etc/apt/sources.list"
    printf '%s' "$sources" >"$root/etc/apt/sources.list.d/debian.sources"
    # the slim images' apt and dpkg settings
    printf '%s\n' 'DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };' \
        'Dir::Cache::pkgcache "";' 'Dir::Cache::srcpkgcache "";' >"$root/etc/apt/apt.conf.d/docker-clean"
    echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/docker-no-languages"
    printf '%s\n' 'path-exclude /usr/share/doc/*' 'path-include /usr/share/doc/*/copyright' \
        'path-exclude /usr/share/man/*' 'path-exclude /usr/share/locale/*' >"$root/etc/dpkg/dpkg.cfg.d/docker"
    printf '%s\n' 'path-exclude /usr/share/groff/*' 'path-exclude /usr/share/info/*' \
        'path-include /usr/share/locale/locale.alias' >>"$root/etc/dpkg/dpkg.cfg.d/docker"
    echo 'force-unsafe-io' >"$root/etc/dpkg/dpkg.cfg.d/docker-apt-speedup"
    (
        cd "$root" # what those settings keep out, taken out of the minbase too
        find usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete
        find usr/share/doc -mindepth 1 -type d -empty -delete
        find usr/share/locale -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
        rm -rf usr/share/man/* usr/share/groff/* usr/share/info/* usr/share/lintian/* \
            var/lib/apt/lists/* var/cache/apt/archives/*.deb var/cache/apt/*.bin var/log/* \
            var/cache/debconf/*-old var/lib/dpkg/*-old tmp/* debootstrap
        : >etc/resolv.conf
        echo localhost >etc/hostname
    )
    log "podman import $BASE"
    tar --numeric-owner -C "$root" -c . | podman import --change 'CMD ["bash"]' \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change "LABEL posattn.cenv=$key" - "$BASE" >"$STATE/import.log" 2>&1 ||
        { clean; die "podman import failed: $(tail -3 "$STATE/import.log")"; }
    clean
    rm -f "$STATE/verified"
fi

# 4. FROM the short name builds with nothing pulled, and runs
check() {
    local d=$STATE/verify
    rm -rf "$d" && mkdir -p "$d"
    printf 'FROM %s\nRUN true\n' "$SHORT" >"$d/Dockerfile"
    timeout 180 podman build --layers=false --pull=never -t localhost/posattn-cenv-check "$d" </dev/null >"$STATE/verify.log" 2>&1 &&
        [ "$(label localhost/posattn-cenv-check)" = "$key" ] &&
        { podman rmi -f localhost/posattn-cenv-check >/dev/null 2>&1 || true; } &&
        timeout 120 podman run --rm --pull=never "$SHORT" true </dev/null >>"$STATE/verify.log" 2>&1
}
stamp=$(podman image inspect --format '{{.Id}}' "$BASE")$(podman --version)
if [ "$(cat "$STATE/verified" 2>/dev/null)" != "$stamp" ]; then
    if ! check; then
        log "short name $SHORT did not resolve to $BASE: adding an alias"
        printf 'short-name-mode = "permissive"\n[aliases]\n"debian" = "localhost/debian"\n' >"$STATE/registries.conf"
        export CONTAINERS_REGISTRIES_CONF=$STATE/registries.conf
        check || die "podman cannot build FROM $SHORT: $(tail -3 "$STATE/verify.log")"
    fi
    echo "$stamp" >"$STATE/verified"
fi

printf 'export CONTAINERS_CONF=%q\n' "$CONTAINERS_CONF"
if [ -n "${CONTAINERS_REGISTRIES_CONF:-}" ]; then
    printf 'export CONTAINERS_REGISTRIES_CONF=%q\n' "$CONTAINERS_REGISTRIES_CONF"
fi
