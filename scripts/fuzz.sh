#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS]: run each fuzz target (fuzz/fuzz_targets: the
# client request reader, the DSA response reader, the knowledge parser, the
# DN parser, the PROXY header reader, the DSAs' schema reader) for SECONDS
# (default 60) from its seed corpus (fuzz/corpus),
# and print the executions per target. Exits 1 on the first crash; libFuzzer
# leaves the input in fuzz/artifacts/TARGET/: add it to fuzz/regressions/
# TARGET/ (tests/logic runs every file there) and fix the bug.
#
# Needs a nightly toolchain (rustup toolchain install nightly); installs
# cargo-fuzz when missing. New corpus entries go to a temporary directory,
# not into the repository.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${1:-60}
[[ "$SECS" =~ ^[1-9][0-9]*$ ]] || { echo "fuzz.sh: SECONDS must be a positive integer" >&2; exit 2; }
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    echo "fuzz.sh: needs a nightly toolchain: rustup toolchain install nightly" >&2
    exit 1
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi
TARGETS=(request response knowledge dn proxy_header schema)
cd fuzz
cargo +nightly fuzz build -O
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dsa-router-fuzz.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
printf '%-10s %12s %8s %s\n' target executions seconds crashes
for t in "${TARGETS[@]}"; do
    mkdir -p "$WORK/$t"
    log="$WORK/$t.log"
    if ! cargo +nightly fuzz run -O "$t" "$WORK/$t" "corpus/$t" -- \
        -max_total_time="$SECS" -print_final_stats=1 >"$log" 2>&1; then
        tail -n 40 "$log" >&2
        echo "fuzz.sh: $t crashed; the input is in fuzz/artifacts/$t/" >&2
        exit 1
    fi
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    printf '%-10s %12s %8s %s\n' "$t" "${runs:-?}" "$SECS" 0
done
