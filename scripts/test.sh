#!/usr/bin/env bash
# The one test command: installs test dependencies, then format check,
# clippy, the production release build, the docker compose test
# (scripts/docker-test.sh), the Debian package test
# (scripts/package-test.sh), the unit under systemd
# (scripts/systemd-test.sh), every cargo test of the workspace and a short
# run of each fuzz target (scripts/fuzz.sh). Exits
# non-zero on the first failure. About 30 minutes on 2 cores; needs root or
# sudo (install-deps.sh's apt and pip installs), a Docker engine with
# Compose, and a nightly toolchain (fuzzing). The cargo tests include
# tests/e2e/dsas/own_directory.rs, which runs README.md's "Put it in front
# of your own directory" as written against two slapd.
set -euo pipefail
cd "$(dirname "$0")/.."

step() {
    echo
    echo "==> $*"
    "$@"
}

step scripts/install-deps.sh
step cargo fmt --all --check
step cargo clippy --workspace --all-targets -- -D warnings
# The production build's code (no dev-tools feature): warnings there too.
# With --all-targets the dependency graph is the one above (dsa-testdsa is
# also a dev-dependency), so only the root package is checked again.
step cargo clippy --all-targets --no-default-features -- -D warnings
# The production binary, the router only: what the docker image ships.
step cargo build --release --no-default-features
# The API docs build without warnings (no links to private items).
step env RUSTDOCFLAGS=-Dwarnings cargo doc --no-deps --workspace
step scripts/docker-test.sh
# The Debian package (scripts/package.sh, from the release binary above),
# installed with dpkg -i in a container from the same base image.
step scripts/package-test.sh
# The package's unit under a real systemd (in a container): hot upgrades,
# reload and restart under load from 50 clients.
step scripts/systemd-test.sh
# Every test, built with the `ci` profile (Cargo.toml: release without LTO
# and debuginfo; a test build links fast): binaries in target/ci/.
step cargo test --profile ci --workspace
# Each fuzz target briefly (nightly; scripts/fuzz.sh N for longer runs).
step scripts/fuzz.sh 15

echo
echo "test.sh: all steps passed"
