#!/usr/bin/env bash
# Builds the Debian package target/debian/dsa-router_VERSION_ARCH.deb and
# prints its path (the last line of output):
#   1. the production binary, `cargo build --release --no-default-features`
#      (the router only: no `demo`, no test DSA; fresh builds are reused);
#   2. the man page and the bash, zsh and fish completions, generated from
#      the router's clap definitions by crates/manpage (clap_mangen,
#      clap_complete) into TARGET/release/package/;
#   3. `cargo deb --no-build`: the binary, packaging/dsa-router.service,
#      packaging/knowledge/ as /etc/dsa-router/, packaging/default/dsa-router
#      as /etc/default/dsa-router, the page and the completions (Cargo.toml,
#      [package.metadata.deb]).
# cargo-deb (the tool that turns the Cargo.toml metadata into a .deb, with
# the systemd maintainer-script snippets and conffiles) is installed with
# `cargo install cargo-deb --locked` when missing.
#
#   scripts/package.sh
#
# Honours CARGO_TARGET_DIR (the package goes to $CARGO_TARGET_DIR/debian/).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "package: $*" >&2; }

if ! cargo deb --version >/dev/null 2>&1; then
    log "installing cargo-deb: cargo install cargo-deb --locked (a few minutes, once)"
    cargo install cargo-deb --locked
fi

target=$(cargo metadata --format-version 1 --no-deps |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')
out=$target/release/package

log "production binary: cargo build --release --no-default-features"
cargo build --release --no-default-features
log "man page and completions: crates/manpage -> $out"
cargo build --release -p dsa-router-manpage
rm -rf "$out"
"$target/release/dsa-router-manpage" "$out" >/dev/null
gzip -9n "$out/dsa-router.1"

log "cargo deb --no-build"
deb=$(cargo deb --no-build -p dsa-router --strip --output "$target/debian/" | tail -n 1)
[ -f "$deb" ] || {
    log "cargo deb did not print the package's path (got '$deb')"
    exit 1
}
echo "$deb"
