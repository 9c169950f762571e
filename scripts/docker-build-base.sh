#!/usr/bin/env bash
# Builds the local base image for the docker/ images without a registry:
# a Debian bookworm root file system made by debootstrap from Debian's
# packages (minbase + slapd, ldap-utils, haproxy), imported with `docker import`.
#
#   scripts/docker-build-base.sh            # dsa-router-base:bookworm, unless it exists
#   scripts/docker-build-base.sh --force    # build it again
#   scripts/docker-build-base.sh IMAGE      # another name
#
# Then build with --build-arg BASE_IMAGE=dsa-router-base:bookworm (or
# BASE_IMAGE=dsa-router-base:bookworm for docker/docker-compose.yml).
# Machines with a registry do not need this: the Dockerfiles default to
# debian:bookworm-slim.
#
# Environment: DEBIAN_MIRROR (default http://deb.debian.org/debian),
# DEBIAN_SUITE (default bookworm). Needs root (or sudo) for debootstrap,
# which it installs with apt-get when missing.
set -euo pipefail

log() { echo "docker-build-base: $*" >&2; }

force=0
image=dsa-router-base:bookworm
for a in "$@"; do
    case $a in
    --force) force=1 ;;
    -h | --help)
        sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    -*)
        log "unknown option $a"
        exit 2
        ;;
    *) image=$a ;;
    esac
done
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
suite=${DEBIAN_SUITE:-bookworm}
packages=slapd,ldap-utils,haproxy

if ! command -v docker >/dev/null 2>&1; then
    log "docker is not installed"
    exit 1
fi
if [ "$force" = 0 ] && docker image inspect "$image" >/dev/null 2>&1; then
    log "$image exists ($(docker image inspect -f '{{.Created}}' "$image")); --force builds it again"
    exit 0
fi

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        log "debootstrap needs root: run as root or install sudo"
        exit 1
    fi
    SUDO=(sudo)
fi
if ! command -v debootstrap >/dev/null 2>&1 && [ ! -x /usr/sbin/debootstrap ]; then
    log "installing debootstrap"
    "${SUDO[@]}" apt-get update -q
    "${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap
fi

work=$(mktemp -d "${TMPDIR:-/var/tmp}/dsa-router-base.XXXXXX")
root=$work/root
cleanup() {
    # debootstrap mounts /proc and /sys (and may bind /dev) in the target;
    # a failed run can leave them: unmount before removing anything.
    if [ -d "$root" ]; then
        awk -v r="$root" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/mounts | sort -r |
            while read -r m; do "${SUDO[@]}" umount -l "$m" || true; done
    fi
    "${SUDO[@]}" rm -rf --one-file-system "$work"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

start=$(date +%s)
log "debootstrap --variant=minbase --include=$packages $suite ($mirror); takes a minute or two"
if ! "${SUDO[@]}" debootstrap --variant=minbase --include="$packages" "$suite" "$root" "$mirror" >"$work/debootstrap.log" 2>&1; then
    tail -n 30 "$work/debootstrap.log" >&2
    [ -f "$root/debootstrap/debootstrap.log" ] && tail -n 30 "$root/debootstrap/debootstrap.log" >&2
    log "debootstrap failed"
    exit 1
fi
log "debootstrap done in $(($(date +%s) - start)) s"

# Slim it: package caches and lists, documentation, translations. The
# default cn=config database that slapd's package made is not used (the
# test DSAs run slapd with a generated slapd.conf).
# shellcheck disable=SC2016 # expanded by the inner sh
"${SUDO[@]}" sh -c '
    cd "$1" &&
    rm -rf var/cache/apt/archives/*.deb var/cache/apt/*.bin var/lib/apt/lists/* \
        usr/share/doc/* usr/share/man/* usr/share/info/* usr/share/locale/* \
        var/log/*.log var/log/apt/* var/cache/debconf/*-old \
        etc/ldap/slapd.d var/lib/ldap/* debootstrap &&
    printf "%s\n" "path-exclude /usr/share/doc/*" "path-exclude /usr/share/man/*" \
        "path-exclude /usr/share/locale/*" "path-include /usr/share/locale/locale.alias" \
        >etc/dpkg/dpkg.cfg.d/docker-slim &&
    printf "deb %s %s main\n" "$2" "$3" >etc/apt/sources.list
' sh "$root" "$mirror" "$suite"

log "docker import -> $image"
"${SUDO[@]}" tar --numeric-owner --xattrs -C "$root" -c . |
    docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'CMD ["/bin/bash"]' \
        --change "LABEL io.dsa-router.base=\"debootstrap --variant=minbase --include=$packages $suite\"" \
        --message "scripts/docker-build-base.sh: debootstrap $suite minbase + $packages" \
        - "$image" >/dev/null
log "$image built in $(($(date +%s) - start)) s ($(docker image inspect -f '{{.Size}}' "$image" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
