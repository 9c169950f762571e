#!/usr/bin/env bash
# The one test command: installs test dependencies, then format check,
# clippy, release build, the docker compose test (scripts/docker-test.sh)
# and every cargo test. Exits non-zero on the first failure.
set -euo pipefail
cd "$(dirname "$0")/.."

step() {
    echo
    echo "==> $*"
    "$@"
}

step scripts/install-deps.sh
step cargo fmt --check
step cargo clippy --all-targets -- -D warnings
step cargo build --release
step scripts/docker-test.sh
step cargo test --release

echo
echo "test.sh: all steps passed"
