#!/usr/bin/env bash
# scripts/docker-up.sh: the docker compose stack (docker/docker-compose.yml)
# on a machine without a container registry, in one command after
# `cargo build --release --no-default-features`:
#   * makes the local base image dsa-router-base:bookworm when missing
#     (scripts/docker-build-base.sh: debootstrap + docker import);
#   * builds the router image from the release binary (target/release, or
#     $CARGO_TARGET_DIR/release: scripts/docker-stage-binary.sh)
#     (BUILD_FROM=the base image, which has no cargo) and the slapd image
#     once (all six DSAs use it), then removes the router build's stage
#     image (the classic builder leaves it behind);
#   * starts the stack and returns once the DSAs are healthy.
# Works with `docker compose` (v2) and `docker-compose` (v1). Arguments are
# passed to `up` (e.g. --force-recreate). With a registry, `docker compose
# -f docker/docker-compose.yml up -d --build` does all of this from source.
set -euo pipefail
cd "$(dirname "$0")/.."
# The release binary, wherever cargo put it (CARGO_TARGET_DIR too), into
# the image's build context.
scripts/docker-stage-binary.sh
if docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE=(docker-compose)
else
    echo "docker-up.sh: neither 'docker compose' nor 'docker-compose' is installed" >&2
    exit 1
fi
base=${BASE_IMAGE:-dsa-router-base:bookworm}
docker image inspect "$base" >/dev/null 2>&1 || scripts/docker-build-base.sh "$base"
export BASE_IMAGE=$base BUILD_FROM=${BUILD_FROM:-$base}
dc() { "${COMPOSE[@]}" -f docker/docker-compose.yml "$@"; }
# The pair's HAProxy image too (profile "pair", not started by default).
COMPOSE_PROFILES=pair dc build router d1 haproxy
docker image prune -f --filter label=io.dsa-router.stage=rootfs >/dev/null
dc up -d --no-build "$@"
echo "docker-up.sh: up; try: ldapsearch -x -H ldap://127.0.0.1:${DSA_ROUTER_PORT:-3389} -b \"cn=served-by,o=DEMOCORP,c=AU\" -s base description"
