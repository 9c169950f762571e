#!/usr/bin/env bash
# scripts/soak.sh MINUTES [SEED]: the chaos soak (tests/serial/soak.rs, an
# ignored test that runs only when asked). Mixed load (anonymous and bound
# reads, WhoAmI, connection churn, adds kept in a ledger, paged and spanning
# searches, StartTLS) through the router to five real slapd for MINUTES,
# while DSAs are killed, frozen, stopped, disabled and drained and knowledge
# is reloaded at random moments drawn from SEED (default: the clock; the
# test prints it, so a run's chaos schedule can be repeated). Then it checks
# that every acknowledged write exists exactly once and no unacknowledged
# one was re-sent (each slapd read directly), that no client saw another's
# identity or data, and that the router's RSS and open fds are back near
# their baseline, and prints one summary table. Exits with the test's
# status. docs/reliability.md has the last 30-minute run.
#
# Needs slapd and ldap-utils (scripts/install-deps.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."
MINUTES=${1:-}
SEED=${2:-}
[[ "$MINUTES" =~ ^[1-9][0-9]*$ ]] || { echo "usage: scripts/soak.sh MINUTES [SEED]: MINUTES must be a positive integer" >&2; exit 2; }
if [ -n "$SEED" ] && ! [[ "$SEED" =~ ^[0-9]+$ ]]; then
    echo "soak.sh: SEED must be a non-negative integer" >&2
    exit 2
fi
if [ ! -x /usr/sbin/slapd ]; then
    echo "soak.sh: needs slapd: run scripts/install-deps.sh" >&2
    exit 1
fi
export SOAK_MINUTES="$MINUTES"
if [ -n "$SEED" ]; then
    export SOAK_SEED="$SEED"
fi
exec cargo test --profile ci --test serial soak -- --ignored --nocapture --test-threads 1
