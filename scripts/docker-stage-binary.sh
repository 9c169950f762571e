#!/usr/bin/env bash
# Puts the host's release build of dsa-router where the router image's
# build (docker/router/Dockerfile, without cargo in BUILD_FROM) takes it:
# docker/.bin/dsa-router in the build context, without its debug info. The binary is found where
# cargo put it: $CARGO_TARGET_DIR/release when that is set (or
# build.target-dir in a cargo config), else target/release; `cargo
# metadata` says which. Used by scripts/docker-up.sh and
# scripts/docker-test.sh; run it by hand before a `docker compose build`
# with BUILD_FROM set to an image without cargo.
#
#   cargo build --release --no-default-features && scripts/docker-stage-binary.sh
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
bin=$target/release/dsa-router
if [ ! -x "$bin" ]; then
    echo "docker-stage-binary.sh: $bin is missing: cargo build --release --no-default-features" >&2
    exit 1
fi
mkdir -p docker/.bin
# A copy, not a link: the build context cannot follow a link out of it,
# and the target directory may be on another file system.
cp -p "$bin" docker/.bin/dsa-router.tmp
# The release profile keeps line tables for profiling (Cargo.toml); the
# image does not need them (the Debian package strips them too).
if command -v strip >/dev/null 2>&1; then
    strip --strip-debug docker/.bin/dsa-router.tmp
fi
mv -f docker/.bin/dsa-router.tmp docker/.bin/dsa-router
echo "docker-stage-binary.sh: $bin -> docker/.bin/dsa-router" >&2
