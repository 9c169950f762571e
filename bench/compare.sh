#!/usr/bin/env bash
# bench/compare.sh: dsa-router against its peers, same load, one run.
#
# Starts two OpenLDAP slapd (mdb, 2,000 users) on free loopback ports and, in
# front of them, HAProxy (mode tcp; two instances: nbthread 1 and the
# default), slapd back-meta, slapd back-asyncmeta and dsa-router (access log
# off, then on); loads each path in turn with `dsa-bench` (crates/bench) and
# prints one table per group of rows: ops/s, latency, the proxy's CPU time
# per operation (/proc/PID/stat, measured run only) and peak RSS, with
# ratios against the cheaper HAProxy (the one with the lower CPU/op).
# Groups (ROW_GROUPS), each measured side by side with HAProxy in every round:
#   plain     persistent reads (MIX) and a connection per operation
#   latency   fixed offered loads of 50% and 80% of HAProxy's maximum
#             (dsa-bench --rate): direct, HAProxy, dsa-router; p50/p99/p99.9
#             added over direct
#   tls       LDAPS persistent reads, LDAPS churn with a full handshake per
#             connection and with session resumption (HAProxy `bind ... ssl
#             crt`, dsa-router --ldaps-listen, both to plain slapd), and LDAPS
#             persistent reads with TLS to the slapd too (HAProxy `server ...
#             ssl verify required ca-file`, dsa-router `link-flags =
#             ssl-encryption` with --dsa-ca)
#   bind      MIX_BIND (eq=90,bind=10: binds as random users) on persistent
#             connections
#   bulk      one BULK_STREAM_ENTRIES-entry search streamed direct, through
#             both HAProxy and through dsa-router (its peak RSS growth)
#   spanning  a subtree search at c=AU (uid=userNNNN) over two partitions
#             (two slapd, o=DEMOCORP,c=AU and o=OTHERCORP,c=AU): dsa-router
#             with two partitions against back-meta with two targets
#   positions (not run by default) the cost of replication positions: two
#             more slapd, a provider (syncprov) and a consumer (syncrepl
#             refreshAndPersist), behind two dsa-router, one reading
#             positions at the default --csn-interval and one with
#             --csn-interval 0 (off): CPU per operation with and without,
#             and, idle for POSITIONS_IDLE seconds, the readings' traffic
#             per DSA (the router's /metrics counters) and the CPU they
#             cost the router and each slapd
#   traces    (not run by default) the cost of traces (OpenTelemetry):
#             three dsa-router over slapd #1 and #2, tracing off, at 1%
#             and at 100% sampling (--otlp-sample), the last two exporting
#             to a minimal local OTLP/HTTP sink: CPU per operation of each
#             against off (target: 1% <= 1.03 x off; 100% stated)
#   policy    (not run by default) the cost of client policies: dsa-router
#             without --policy and with a 20-rule policy file (19 rules
#             the bench's clients do not match, the 20th allowing reads,
#             a default allowing reads) on the same two slapd: CPU per
#             operation with and without (docs/benchmarks/policy.md)
# Then the extras: 10,000 idle client connections to dsa-router (its RSS),
# and a 100,000-entry search streamed through it (its peak RSS growth).
# Writes docs/benchmarks/results.md (machine, versions, command, tables, targets).
#
# Time: each row is WARMUP + DURATION seconds; all groups are 37 rows a
# round, about 5 min with the defaults, so ROUNDS=5 (as the targets want)
# takes about 30 min on 2 cores, plus the 1,000,000-entry load (~2 min).
# ROW_GROUPS=plain ROUNDS=5 takes about 7 min. `--quick` runs every group (or
# ROW_GROUPS) once with 2 s rows in about 3 min.
#
# Usage: bench/compare.sh [--quick] [--setup-only] [--hold] [--help]
#   --quick       CI smoke run: 2 s per path (warm-up 1 s), smaller extras
#                 (1,000 idle connections, 10,000 bulk entries), no table
#                 check, docs/benchmarks/results.md left alone (set OUT= to write one)
#   --setup-only  start everything, check every path answers, stop; no load
#   --hold        start everything, print each path's URL and process ID,
#                 and keep them running until interrupted (to profile one
#                 path with your own load, e.g. `perf stat -p PID`); no load
#                 (needs no `dsa-bench`)
#
# Environment (defaults in brackets):
#   ROW_GROUPS [plain latency tls bind bulk spanning]   the row groups to
#                              measure (space-separated), see above (not
#                              GROUPS: bash keeps that name for itself)
#   CONNECTIONS [8] DEPTH [1] DURATION [5, quick 2] WARMUP [1]
#   MIX [eq=100]               passed to `dsa-bench` (groups plain, latency,
#                              tls, spanning)
#   MIX_BIND [eq=90,bind=10]   the bind group's mix (depth 1)
#   LOAD_PCTS [50 80]          the latency group's offered loads, percent
#                              of HAProxy's (default nbthread) maximum in the
#                              same round (the plain group's row, else a run
#                              of its own)
#   BULK_STREAM_ENTRIES [1000000, quick 10000]   the bulk group's entries
#   POSITIONS_IDLE [30, quick 3]   the positions group's idle measurement, s
#   ROUNDS [1]                 repeat the whole sequence of paths; the table
#                              shows per-path medians (for a noisy machine)
#   USERS [2000]               uid=user0000.. entries in each slapd
#   HAPROXY_NBTHREAD [nproc]   the first HAProxy's `nbthread` (its own
#                              default since 2.5: one per CPU, like
#                              dsa-router's --threads); the second one always
#                              runs `nbthread 1` (rows "HAProxy nbthread 1")
#   META_LAYOUT [uris]         back-meta/asyncmeta: `uris` = one target with
#                              both slapd as URIs (failover; every operation
#                              goes to slapd #1), `targets` = two targets with
#                              the same naming context (searches fan out to
#                              both, so every entry comes back twice)
#   EXTRAS [1]                 0 skips the idle-connection and bulk measurements
#   IDLE_CONNS [10000, quick 1000]
#   BULK_ENTRIES [100000; without the bulk group "100000 1000000";
#                quick 10000]          one streamed search per
#                              size (space-separated), each from a slapd and
#                              a router of its own
#   ROUTER_ARGS []             extra `serve` arguments for both measured
#                              routers (default: one worker thread per CPU,
#                              like HAProxy's default nbthread); shown in
#                              settings
#   PATHS [all]                measure only these paths (space-separated keys:
#                              direct haproxy haproxy-1t meta asyncmeta router
#                              router-1thread router-accesslog haproxy-churn
#                              haproxy-1t-churn router-churn; other groups'
#                              keys are GROUP-PATH, e.g. lat50-router,
#                              tls-haproxy-1t, tlschurn-router, tlsresume-,
#                              tlsdsa-, bind-, bulk-direct, span-meta),
#                              for quick experiments
#   BULK_ROUTER_ARGS []        extra `serve` arguments for the bulk router
#                              (e.g. "--client-queue 100000")
#   NOFILE [65536]             fd limit asked for dsa-router and the idle
#                              client (capped at the hard limit)
#   OUT [docs/benchmarks/results.md; ROW_GROUPS=positions alone:
#                              docs/benchmarks/positions.md; ROW_GROUPS=traces
#                              alone: docs/benchmarks/traces.md; ROW_GROUPS=policy
#                              alone: docs/benchmarks/policy.md; quick: none]
#                              markdown output ('-': none)
#   CHECK [1; quick 0]         1: exit 1 when a path fails or has errors,
#                              3 when a project target FAILs
#   NO_BUILD [0]               1: do not build; else `cargo build --release
#                              --no-default-features -p dsa-router -p dsa-bench`
#                              (the production router, as in the docker image)
#   DSA_ROUTER [target/release/dsa-router]   the binary to test
#   DSA_BENCH [target/release/dsa-bench]     the load generator
#   DSA_ROUTER_BASELINE []     a second dsa-router binary (e.g. the build of
#                              an earlier commit): adds the paths router-base
#                              and router-base-churn, measured beside router
#                              and router-churn in every round, and the
#                              paired ratios new/baseline (CPU/op, p99).
#                              Compare builds this way, not with a router
#                              started by hand beside --hold: that one is
#                              in another session, and with the kernel's
#                              autogroups (sched_autogroup_enabled=1, the
#                              default) each session is scheduled as a
#                              group, so its CPU per operation is not
#                              comparable (seen: one binary at 17 and at
#                              25 µs/op, started in and out of the session)
#   KEEP [0]                   1: keep the temp dir (configs, logs, JSON)
#
# Needs slapd, slapadd, ldapsearch, haproxy, python3 (scripts/install-deps.sh
# installs them). Kills only the processes it started, on every exit path.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
LIB="$ROOT/bench/benchlib.py"
T_START=$(date +%s)

QUICK=0
SETUP_ONLY=0
for arg in "$@"; do
    case "$arg" in
        --quick) QUICK=1 ;;
        --setup-only) SETUP_ONLY=1 ;;
        --hold) SETUP_ONLY=hold ;;
        -h | --help)
            sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            echo "compare.sh: unknown argument '$arg' (try --help)" >&2
            exit 2
            ;;
    esac
done

# Which settings were given explicitly (recorded in the report's command).
ENV_GIVEN=()
for v in ROW_GROUPS CONNECTIONS DEPTH DURATION WARMUP MIX MIX_BIND LOAD_PCTS BULK_STREAM_ENTRIES POSITIONS_IDLE ROUNDS USERS \
    HAPROXY_NBTHREAD META_LAYOUT EXTRAS IDLE_CONNS BULK_ENTRIES BULK_ROUTER_ARGS ROUTER_ARGS PATHS NOFILE CHECK \
    DSA_ROUTER DSA_BENCH DSA_ROUTER_BASELINE; do
    if [ -n "${!v+x}" ]; then ENV_GIVEN+=("$v=$(printf %q "${!v}")"); fi
done

if [ "$QUICK" = 1 ]; then
    DURATION=${DURATION:-2}
    WARMUP=${WARMUP:-1}
    IDLE_CONNS=${IDLE_CONNS:-1000}
    BULK_ENTRIES=${BULK_ENTRIES:-10000}
    BULK_STREAM_ENTRIES=${BULK_STREAM_ENTRIES:-10000}
    POSITIONS_IDLE=${POSITIONS_IDLE:-3}
    CHECK=${CHECK:-0}
    OUT=${OUT:--}
fi
CONNECTIONS=${CONNECTIONS:-8}
DEPTH=${DEPTH:-1}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
MIX=${MIX:-eq=100}
MIX_BIND=${MIX_BIND:-eq=90,bind=10}
LOAD_PCTS=${LOAD_PCTS:-50 80}
BULK_STREAM_ENTRIES=${BULK_STREAM_ENTRIES:-1000000}
ROW_GROUPS=${ROW_GROUPS:-plain latency tls bind bulk spanning}
for g in $ROW_GROUPS; do
    case "$g" in plain | latency | tls | bind | bulk | spanning | positions | traces | policy) ;; *)
        echo "compare.sh: unknown group '$g' in ROW_GROUPS (plain latency tls bind bulk spanning positions traces policy)" >&2
        exit 2
        ;;
    esac
done
has_group() { [[ " $ROW_GROUPS " == *" $1 "* ]]; }
POSITIONS_IDLE=${POSITIONS_IDLE:-30}
ROUNDS=${ROUNDS:-1}
USERS=${USERS:-2000}
HAPROXY_NBTHREAD=${HAPROXY_NBTHREAD:-$(nproc)}
META_LAYOUT=${META_LAYOUT:-uris}
EXTRAS=${EXTRAS:-1}
IDLE_CONNS=${IDLE_CONNS:-10000}
if has_group bulk; then BULK_ENTRIES=${BULK_ENTRIES:-100000}; else BULK_ENTRIES=${BULK_ENTRIES:-100000 1000000}; fi
NOFILE=${NOFILE:-65536}
CHECK=${CHECK:-1}
if [ "$(echo $ROW_GROUPS)" = positions ]; then OUT=${OUT:-$ROOT/docs/benchmarks/positions.md}; fi
if [ "$(echo $ROW_GROUPS)" = traces ]; then OUT=${OUT:-$ROOT/docs/benchmarks/traces.md}; fi
if [ "$(echo $ROW_GROUPS)" = policy ]; then OUT=${OUT:-$ROOT/docs/benchmarks/policy.md}; fi
OUT=${OUT:-$ROOT/docs/benchmarks/results.md}
NO_BUILD=${NO_BUILD:-0}
KEEP=${KEEP:-0}
BIN=${DSA_ROUTER:-$ROOT/target/release/dsa-router}
BENCH=${DSA_BENCH:-$ROOT/target/release/dsa-bench}

SUFFIX="o=DEMOCORP,c=AU"
PEOPLE="ou=people,$SUFFIX"
SLAPD=/usr/sbin/slapd
SLAPADD=/usr/sbin/slapadd
SCHEMA_DIR=/etc/ldap/schema
MODULE_DIR=/usr/lib/ldap
export LDAPNOINIT=1 # no /etc/ldap/ldap.conf or ~/.ldaprc

log() { echo "compare.sh: $*" >&2; }
die() {
    log "error: $*"
    exit 1
}

case "$META_LAYOUT" in uris | targets) ;; *) die "META_LAYOUT must be uris or targets" ;; esac
[[ "$ROUNDS" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer"

# ---------------------------------------------------------------- processes
# PIDS: every background process this script started and has not reaped.
# Cleanup signals only those, and only while /proc shows them as our
# children (a reaped pid may be reused by someone else).
PIDS=()
PY=python3 # until the real interpreter is known
WORK=""

is_our_child() {
    local pid=$1 ppid
    [ -r "/proc/$pid/status" ] || return 1
    ppid=$(awk '/^PPid:/{print $2}' "/proc/$pid/status" 2>/dev/null) || return 1
    [ "$ppid" = "$$" ]
}

alive() { # running (not a zombie)
    local s
    s=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    s=${s##*) }
    [ "${s%% *}" != Z ]
}

forget_pid() {
    local keep=() p
    for p in "${PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
    PIDS=("${keep[@]+"${keep[@]}"}")
}

stop_pid() { # SIGTERM, wait up to 5 s, SIGKILL; reap
    local pid=$1 i
    if is_our_child "$pid"; then
        kill -TERM "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do
            alive "$pid" || break
            sleep 0.1
        done
        if alive "$pid" && is_our_child "$pid"; then kill -KILL "$pid" 2>/dev/null || true; fi
    fi
    wait "$pid" 2>/dev/null || true
    forget_pid "$pid"
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP
    set +e
    local p
    for p in "${PIDS[@]+"${PIDS[@]}"}"; do
        if is_our_child "$p"; then kill -TERM "$p" 2>/dev/null; fi
    done
    for p in "${PIDS[@]+"${PIDS[@]}"}"; do
        for ((i = 0; i < 50; i++)); do
            alive "$p" || break
            sleep 0.1
        done
        if alive "$p" && is_our_child "$p"; then kill -KILL "$p" 2>/dev/null; fi
        wait "$p" 2>/dev/null
    done
    if [ -n "$WORK" ] && [ -d "$WORK" ]; then
        # Kept for a look when something failed (not when interrupted).
        if [ "$KEEP" = 1 ] || [[ ! " 0 1 3 129 130 143 " =~ " $rc " ]] || { [ "$rc" = 1 ] && [ "${FAILED_EARLY:-1}" = 1 ]; }; then
            log "kept $WORK (configs, logs, bench JSON)"
        else
            rm -rf "$WORK"
        fi
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

LAST_PID=""
# spawn LOGFILE NOFILE_LIMIT CMD...: start CMD in the background (its own
# fd limit when NOFILE_LIMIT is not '-'), stdout+stderr to LOGFILE.
spawn() {
    local logf=$1 lim=$2
    shift 2
    if [ "$lim" = - ]; then
        "$@" </dev/null >>"$logf" 2>&1 &
    else
        (
            ulimit -n "$lim"
            exec "$@"
        ) </dev/null >>"$logf" 2>&1 &
    fi
    LAST_PID=$!
    PIDS+=("$LAST_PID")
}

# run_waited LOGFILE CMD...: run CMD in the background and wait for it, so
# signals reach the trap at once; returns CMD's status.
run_waited() {
    local out=$1 rc=0
    shift
    "$@" </dev/null >"$out" 2>"$out.err" &
    local pid=$!
    PIDS+=("$pid")
    wait "$pid" || rc=$?
    forget_pid "$pid"
    return "$rc"
}

GIVEN_PORTS=" "
PORT=""
pick_port() {
    local p i
    for ((i = 0; i < 100; i++)); do
        p=$("$PY" "$LIB" port)
        case "$GIVEN_PORTS" in *" $p "*) continue ;; esac
        GIVEN_PORTS+="$p "
        PORT=$p
        return 0
    done
    die "no free loopback port"
}

tail_log() { tail -n 30 "$1" 2>/dev/null | sed 's/^/    | /' >&2 || true; }

port_in_use_msg() { grep -qiE 'address already in use|cannot bind|os error 98' "$1" 2>/dev/null; }

count_entries() { # URL BASE FILTER [ATTRS...]: number of entries returned
    local url=$1 base=$2 filter=$3 out
    shift 3
    out=$(timeout 10 ldapsearch -x -LLL -o nettimeout=5 -H "$url" -b "$base" "$filter" "$@" 2>/dev/null) || return 1
    grep -c '^dn:' <<<"$out" || true
}

# wait_for LABEL PID LOGFILE DEADLINE_S CHECK_CMD...: until CHECK_CMD succeeds,
# the process dies (status 2) or the deadline passes (status 1).
wait_for() {
    local label=$1 pid=$2 logf=$3 secs=$4
    shift 4
    local end=$(($(date +%s) + secs))
    while :; do
        if ! alive "$pid"; then return 2; fi
        if "$@" >/dev/null 2>&1; then return 0; fi
        if [ "$(date +%s)" -ge "$end" ]; then
            log "$label did not answer within ${secs}s"
            return 1
        fi
        sleep 0.1
    done
}

# start_service LABEL LAUNCH_FN READY_FN: LAUNCH_FN uses $PORT and sets
# LAST_PID and SVC_LOG; READY_FN is called with the port. Retries with a new
# port when the process dies because its port was taken meanwhile.
SVC_LOG=""
start_service() {
    local label=$1 launch=$2 ready=$3 attempt rc
    for attempt in 1 2 3 4 5; do
        pick_port
        "$launch"
        rc=0
        wait_for "$label" "$LAST_PID" "$SVC_LOG" 30 "$ready" "$PORT" || rc=$?
        if [ "$rc" = 0 ]; then return 0; fi
        if [ "$rc" = 2 ] && port_in_use_msg "$SVC_LOG" && [ "$attempt" -lt 5 ]; then
            log "$label: port $PORT taken meanwhile; retrying"
            forget_pid "$LAST_PID"
            continue
        fi
        log "$label failed to start (log $SVC_LOG):"
        tail_log "$SVC_LOG"
        stop_pid "$LAST_PID"
        exit 1
    done
}

# ---------------------------------------------------------------- 1. prerequisites
missing=()
for t in "$SLAPD" "$SLAPADD"; do [ -x "$t" ] || missing+=("$t"); done
command -v ldapsearch >/dev/null 2>&1 || missing+=(ldapsearch)
HAPROXY=$(command -v haproxy 2>/dev/null || { [ -x /usr/sbin/haproxy ] && echo /usr/sbin/haproxy; } || true)
[ -n "$HAPROXY" ] || missing+=(haproxy)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
# The interpreter itself, not a wrapper (a pyenv shim costs ~0.2 s per call).
PY=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null || true)
[ -n "$PY" ] && [ -x "$PY" ] || PY=python3
command -v timeout >/dev/null 2>&1 || missing+=(timeout)
if [ ${#missing[@]} -gt 0 ]; then
    die "missing: ${missing[*]}; run scripts/install-deps.sh (as root or with sudo) to install slapd, ldap-utils, haproxy"
fi
for m in back_mdb back_ldap back_meta back_asyncmeta; do
    [ -e "$MODULE_DIR/$m.la" ] || [ -e "$MODULE_DIR/$m.so" ] || die "slapd module $m not found in $MODULE_DIR (Debian package slapd)"
done

BUILD=(cargo build --release --no-default-features -p dsa-router -p dsa-bench)
if [ "$NO_BUILD" != 1 ]; then
    # cargo decides what is stale; it only checks when everything is fresh.
    log "building: ${BUILD[*]}"
    # In the background and waited for, so a signal stops it at once.
    (cd "$ROOT" && exec "${BUILD[@]}") </dev/null &
    build_pid=$!
    PIDS+=("$build_pid")
    build_rc=0
    wait "$build_pid" || build_rc=$?
    forget_pid "$build_pid"
    [ "$build_rc" = 0 ] || die "${BUILD[*]} failed"
fi
[ -x "$BIN" ] || die "$BIN not found (${BUILD[*]})"
BUILD_SECS=$(($(date +%s) - T_START))
T_START=$(date +%s) # the run's time, without the build
if [ "$SETUP_ONLY" != 1 ] && ! "$BENCH" --help >/dev/null 2>&1; then
    die "$BENCH not found or not runnable (${BUILD[*]}; or try --setup-only)"
fi

# fd limit for dsa-router and the idle client: NOFILE, capped at the hard limit.
HARD_NOFILE=$(ulimit -Hn)
if [ "$HARD_NOFILE" != unlimited ] && [ "$NOFILE" -gt "$HARD_NOFILE" ]; then
    if (ulimit -Hn "$NOFILE") 2>/dev/null; then
        ulimit -Hn "$NOFILE"
    else
        log "cannot raise the fd limit to $NOFILE (hard limit $HARD_NOFILE): using $HARD_NOFILE"
        NOFILE=$HARD_NOFILE
    fi
fi
if [ "$EXTRAS" = 1 ] && [ "$NOFILE" -lt $((IDLE_CONNS + 200)) ]; then
    die "fd limit $NOFILE too low for IDLE_CONNS=$IDLE_CONNS (raise the hard limit, or lower IDLE_CONNS)"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/dsa-router-compare.XXXXXX")
log "work dir $WORK"
: >"$WORK/results.jsonl"
: >"$WORK/notes.txt"
: >"$WORK/configs.tsv"
note() { echo "$*" >>"$WORK/notes.txt"; }
extra() { "$PY" "$LIB" extra "$WORK" "$1" "$2" "$3"; }
config_file() { printf '%s\t%s\n' "$1" "$2" >>"$WORK/configs.tsv"; }

# ---------------------------------------------------------------- 2. data, slapd
log "generating $USERS users"
"$PY" "$LIB" ldif-people "$USERS" >"$WORK/people.ldif"

# write_slapd_conf DIR KIND [URI...]: KIND mdb (data in DIR/db), mdbsync
# (mdb with syncprov, publishing contextCSN; with CONF_SYNC_FROM=PORT a
# syncrepl consumer, refreshAndPersist, of the slapd on PORT), meta,
# asyncmeta, metaspan (back-meta at c=AU, each URI a target of its own with
# its naming context); the suffix is CONF_SUFFIX (default SUFFIX); with
# CONF_TLS=1 the server certificate (for an ldaps:// listener)
write_slapd_conf() {
    local dir=$1 kind=$2 sfx=${CONF_SUFFIX:-$SUFFIX}
    shift 2
    local c="$dir/slapd.conf" s
    {
        echo "# generated by bench/compare.sh ($kind)"
        for s in core cosine inetorgperson nis; do echo "include $SCHEMA_DIR/$s.schema"; done
        echo "modulepath $MODULE_DIR"
        echo "moduleload back_mdb"
        case "$kind" in
            # back-meta and back-asyncmeta need back-ldap loaded first
            meta | metaspan) printf 'moduleload back_ldap\nmoduleload back_meta\n' ;;
            asyncmeta) printf 'moduleload back_ldap\nmoduleload back_asyncmeta\n' ;;
            mdbsync) echo "moduleload syncprov" ;;
        esac
        echo "pidfile $dir/slapd.pid"
        echo "argsfile $dir/slapd.args"
        echo "rootDSE $dir/rootdse.ldif"
        echo "sizelimit unlimited"
        echo "timelimit unlimited"
        # Who may assume whose identity (proxied authorization): the
        # identity's authzTo, as sites that trust a proxy set it.
        if [ "${CONF_AUTHZ:-0}" = 1 ]; then echo "authz-policy to"; fi
        if [ "${CONF_TLS:-0}" = 1 ]; then
            echo "TLSCACertificateFile $TLS_DIR/ca.pem"
            echo "TLSCertificateFile $TLS_DIR/cert.pem"
            echo "TLSCertificateKeyFile $TLS_DIR/key.pem"
        fi
        echo
        case "$kind" in
            mdb | mdbsync)
                mkdir -p "$dir/db"
                cat <<EOF
database mdb
suffix "$sfx"
rootdn "cn=admin,$sfx"
rootpw secret
directory $dir/db
maxsize 2147483648
index objectClass eq
index uid eq
access to attrs=userPassword
  by self write
  by anonymous auth
  by * none
access to *
  by * read
EOF
                if [ "$kind" = mdbsync ]; then
                    echo "index entryCSN,entryUUID eq"
                    if [ -n "${CONF_SYNC_FROM:-}" ]; then
                        echo "syncrepl rid=001 provider=ldap://127.0.0.1:$CONF_SYNC_FROM bindmethod=simple binddn=\"cn=admin,$sfx\" credentials=secret searchbase=\"$sfx\" type=refreshAndPersist retry=\"1 +\" timeout=3"
                    fi
                    printf 'overlay syncprov\nsyncprov-checkpoint 100 1\n'
                fi
                ;;
            meta | asyncmeta | metaspan)
                echo "database ${kind%span}"
                echo "suffix \"$sfx\""
                if [ "$kind" = metaspan ]; then
                    local u
                    for u in "$@"; do echo "uri \"$u\""; done
                elif [ "$META_LAYOUT" = uris ]; then
                    # One target; the second URI is a failover address.
                    local first=1 u line="uri"
                    for u in "$@"; do
                        if [ "$first" = 1 ]; then line+=" \"$u/$SUFFIX\""; else line+=" \"$u/\""; fi
                        first=0
                    done
                    echo "$line"
                else
                    local u
                    for u in "$@"; do echo "uri \"$u/$SUFFIX\""; done
                fi
                cat <<EOF
access to attrs=userPassword
  by anonymous auth
  by * none
access to *
  by * read
EOF
                ;;
        esac
    } >"$c"
    printf 'dn:\ndescription: %s\n\n' "$(basename "$dir")-$$-$RANDOM" >"$dir/rootdse.ldif"
}

slapd_token() { sed -n 's/^description: //p' "$1/rootdse.ldif"; }

# slapd_ready_check DIR PORT: our slapd (its unique root DSE token) answers
slapd_ready_check() {
    local out
    out=$(timeout 5 ldapsearch -x -LLL -o nettimeout=2 -H "ldap://127.0.0.1:$2/" -b "" -s base description 2>/dev/null) || return 1
    grep -qF "$(slapd_token "$1")" <<<"$out"
}

SLAPD_DIR=""
SLAPD_LDAPS_PORT=""
launch_slapd() {
    SVC_LOG="$SLAPD_DIR/slapd.log"
    spawn "$SVC_LOG" - "$SLAPD" -d none -h "ldap://127.0.0.1:$PORT/${SLAPD_LDAPS_PORT:+ ldaps://127.0.0.1:$SLAPD_LDAPS_PORT/}" \
        -f "$SLAPD_DIR/slapd.conf"
}
ready_slapd() { slapd_ready_check "$SLAPD_DIR" "$1"; }

# new_slapd NAME KIND LDIF|- [URI...]: sets S_PORT, S_PID, S_DIR; with
# CONF_TLS=1 also an LDAPS listener on S_LDAPS_PORT
new_slapd() {
    local name=$1 kind=$2 ldif=$3
    shift 3
    SLAPD_DIR="$WORK/$name"
    mkdir -p "$SLAPD_DIR"
    write_slapd_conf "$SLAPD_DIR" "$kind" "$@"
    SLAPD_LDAPS_PORT=""
    if [ "${CONF_TLS:-0}" = 1 ]; then
        pick_port
        SLAPD_LDAPS_PORT=$PORT
    fi
    if [ "$ldif" != - ]; then
        "$SLAPADD" -q -f "$SLAPD_DIR/slapd.conf" -b "${CONF_SUFFIX:-$SUFFIX}" -l "$ldif" >"$SLAPD_DIR/slapadd.log" 2>&1 || {
            tail_log "$SLAPD_DIR/slapadd.log"
            die "slapadd for $name failed"
        }
    fi
    start_service "slapd $name" launch_slapd ready_slapd
    S_PORT=$PORT
    S_PID=$LAST_PID
    S_DIR=$SLAPD_DIR
    S_LDAPS_PORT=$SLAPD_LDAPS_PORT
    SLAPD_LDAPS_PORT=""
    log "slapd $name ($kind) on 127.0.0.1:$S_PORT${S_LDAPS_PORT:+ and ldaps :$S_LDAPS_PORT}, pid $S_PID"
}

# Certificates (group tls): a CA and a server certificate for 127.0.0.1
# (RSA 2048, as most directories have), for slapd, HAProxy and dsa-router.
TLS_DIR="$WORK/tls"
if has_group tls; then
    command -v openssl >/dev/null 2>&1 || die "the tls group needs openssl (to make certificates)"
    mkdir -p "$TLS_DIR"
    (
        cd "$TLS_DIR"
        openssl req -x509 -newkey rsa:2048 -nodes -keyout ca-key.pem -out ca.pem -days 2 -subj "/CN=compare.sh CA" \
            -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
        openssl req -newkey rsa:2048 -nodes -keyout key.pem -out req.csr -subj "/CN=127.0.0.1"
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n' >ext.cnf
        openssl x509 -req -in req.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -out cert.pem -days 2 -extfile ext.cnf
        cat cert.pem key.pem >haproxy.pem
    ) >"$WORK/openssl.log" 2>&1 || {
        tail_log "$WORK/openssl.log"
        die "openssl could not make the test certificates"
    }
fi
CONF_TLS=0
has_group tls && CONF_TLS=1
# Group bind: the router's identity on slapd #1 and #2, allowed to assume
# the users' (authzTo), for the row whose DSAs trust the router.
CONF_AUTHZ=0
if has_group bind; then
    CONF_AUTHZ=1
    printf 'dn: cn=router,%s\nobjectClass: applicationProcess\nobjectClass: simpleSecurityObject\ncn: router\nuserPassword: routerpw\nauthzTo: dn.subtree:ou=people,%s\n\n' \
        "$SUFFIX" "$SUFFIX" >>"$WORK/people.ldif"
fi
new_slapd slapd1 mdb "$WORK/people.ldif"
P1=$S_PORT PID1=$S_PID P1S=$S_LDAPS_PORT
config_file "slapd #1 and #2 (slapd.conf)" "$S_DIR/slapd.conf"
new_slapd slapd2 mdb "$WORK/people.ldif"
P2=$S_PORT PID2=$S_PID P2S=$S_LDAPS_PORT
CONF_TLS=0 CONF_AUTHZ=0
URI1="ldap://127.0.0.1:$P1"
URI2="ldap://127.0.0.1:$P2"

# one_entry PORT: uid=user0001 searched at the suffix comes back exactly once
one_entry() {
    local n
    n=$(count_entries "ldap://127.0.0.1:$1/" "$SUFFIX" "(uid=user0001)" uid) || return 1
    [ "$n" = 1 ]
}
for p in "$P1" "$P2"; do one_entry "$p" || die "slapd on port $p does not return uid=user0001"; done

# ---------------------------------------------------------------- 3. proxies
# Group bulk: a third slapd holding BULK_STREAM_ENTRIES entries under
# ou=bulk, behind both HAProxy (a frontend of their own) and a router.
if has_group bulk; then
    log "generating and loading $BULK_STREAM_ENTRIES bulk entries into the bulk slapd"
    "$PY" "$LIB" ldif-bulk "$BULK_STREAM_ENTRIES" >"$WORK/bulkgrp.ldif"
    new_slapd slapd-bulk mdb "$WORK/bulkgrp.ldif"
    P_BULK=$S_PORT PID_BULK=$S_PID
    rm -f "$WORK/bulkgrp.ldif"
fi

# (b) HAProxy: two instances, nbthread $HAPROXY_NBTHREAD and nbthread 1.
# Frontends: plain LDAP to both slapd; with the tls group LDAPS terminated
# by HAProxy (`bind ... ssl crt`) to the slapd's plain ports, and LDAPS to
# their LDAPS ports (`server ... ssl verify required ca-file`); with the
# bulk group plain LDAP to the bulk slapd.
HAP_DIR=""
HAP_NBTHREAD=1
HAP_TLS_PORT="" HAP_TLSDSA_PORT="" HAP_BULK_PORT=""
launch_haproxy() {
    SVC_LOG="$HAP_DIR/haproxy.log"
    {
        cat <<EOF
# generated by bench/compare.sh
global
    nbthread $HAP_NBTHREAD
    maxconn 4096

defaults
    mode tcp
    timeout connect 3s
    timeout client 1h
    timeout server 1h

frontend ldap
    bind 127.0.0.1:$PORT
    default_backend slapd

backend slapd
    balance leastconn
    option ldap-check
    server slapd1 127.0.0.1:$P1 check inter 1s fall 3 rise 2
    server slapd2 127.0.0.1:$P2 check inter 1s fall 3 rise 2
EOF
        if [ -n "$HAP_TLS_PORT" ]; then
            cat <<EOF

frontend ldaps
    bind 127.0.0.1:$HAP_TLS_PORT ssl crt $TLS_DIR/haproxy.pem
    default_backend slapd

frontend ldaps-to-ldaps
    bind 127.0.0.1:$HAP_TLSDSA_PORT ssl crt $TLS_DIR/haproxy.pem
    default_backend slapd-ldaps

backend slapd-ldaps
    balance leastconn
    option ldap-check
    server slapd1 127.0.0.1:$P1S ssl verify required ca-file $TLS_DIR/ca.pem check inter 1s fall 3 rise 2
    server slapd2 127.0.0.1:$P2S ssl verify required ca-file $TLS_DIR/ca.pem check inter 1s fall 3 rise 2
EOF
        fi
        if [ -n "$HAP_BULK_PORT" ]; then
            cat <<EOF

frontend bulk
    bind 127.0.0.1:$HAP_BULK_PORT
    default_backend bulk

backend bulk
    option ldap-check
    server bulk 127.0.0.1:$P_BULK check inter 1s fall 3 rise 2
EOF
        fi
    } >"$HAP_DIR/haproxy.cfg"
    "$HAPROXY" -c -q -f "$HAP_DIR/haproxy.cfg" >"$HAP_DIR/check.log" 2>&1 || {
        tail_log "$HAP_DIR/check.log"
        die "haproxy rejects its generated config $HAP_DIR/haproxy.cfg"
    }
    spawn "$SVC_LOG" - "$HAPROXY" -db -f "$HAP_DIR/haproxy.cfg"
}
# new_haproxy NAME NBTHREAD: sets H_PORT H_PID H_TLS H_TLSDSA H_BULK (ports)
new_haproxy() {
    HAP_DIR="$WORK/$1" HAP_NBTHREAD=$2
    mkdir -p "$HAP_DIR"
    HAP_TLS_PORT="" HAP_TLSDSA_PORT="" HAP_BULK_PORT=""
    if has_group tls; then
        pick_port
        HAP_TLS_PORT=$PORT
        pick_port
        HAP_TLSDSA_PORT=$PORT
    fi
    if has_group bulk; then
        pick_port
        HAP_BULK_PORT=$PORT
    fi
    start_service "$1" launch_haproxy one_entry
    H_PORT=$PORT H_PID=$LAST_PID H_TLS=$HAP_TLS_PORT H_TLSDSA=$HAP_TLSDSA_PORT H_BULK=$HAP_BULK_PORT
    log "$1 (nbthread $2) on 127.0.0.1:$H_PORT${H_TLS:+, ldaps :$H_TLS, ldaps to ldaps :$H_TLSDSA}${H_BULK:+, bulk :$H_BULK}, pid $H_PID"
}
new_haproxy haproxy "$HAPROXY_NBTHREAD"
P_HAP=$H_PORT PID_HAP=$H_PID P_HAP_TLS=$H_TLS P_HAP_TLSDSA=$H_TLSDSA P_HAP_BULK=$H_BULK
config_file "HAProxy (haproxy.cfg; the second instance differs only in nbthread 1 and its ports)" "$WORK/haproxy/haproxy.cfg"
new_haproxy haproxy-1t 1
P_HAP1=$H_PORT PID_HAP1=$H_PID P_HAP1_TLS=$H_TLS P_HAP1_TLSDSA=$H_TLSDSA P_HAP1_BULK=$H_BULK

# (c) back-meta, (d) back-asyncmeta
if [ "$META_LAYOUT" = uris ]; then
    meta_ready() { one_entry "$1"; }
else
    # Two targets with one naming context: a subtree search goes to both and
    # each entry comes back twice; accept that (reported in the notes).
    meta_ready() {
        local n
        n=$(count_entries "ldap://127.0.0.1:$1/" "$SUFFIX" "(uid=user0001)" uid) || return 1
        [ "$n" -ge 1 ]
    }
fi
ready_meta() { slapd_ready_check "$SLAPD_DIR" "$1" && meta_ready "$1"; }
new_meta() { # NAME KIND
    SLAPD_DIR="$WORK/$1"
    mkdir -p "$SLAPD_DIR"
    write_slapd_conf "$SLAPD_DIR" "$2" "$URI1" "$URI2"
    start_service "slapd $1" launch_slapd ready_meta
    S_PORT=$PORT S_PID=$LAST_PID
    log "slapd $1 ($2) on 127.0.0.1:$S_PORT, pid $S_PID"
}
new_meta meta meta
P_META=$S_PORT PID_META=$S_PID
config_file "slapd back-meta (slapd.conf)" "$WORK/meta/slapd.conf"
new_meta asyncmeta asyncmeta
P_AMETA=$S_PORT PID_AMETA=$S_PID
config_file "slapd back-asyncmeta (slapd.conf)" "$WORK/asyncmeta/slapd.conf"
META_ENTRIES=$(count_entries "ldap://127.0.0.1:$P_META/" "$SUFFIX" "(uid=user0001)" uid || echo "?")
AMETA_ENTRIES=$(count_entries "ldap://127.0.0.1:$P_AMETA/" "$SUFFIX" "(uid=user0001)" uid || echo "?")

# (e) dsa-router
# write_knowledge FILE NAME:PORT...: one DSA per slapd, one load-share group
write_knowledge() {
    local f=$1 spec
    shift
    {
        echo "# generated by bench/compare.sh: the slapd instances as one load-share group"
        for spec in "$@"; do
            cat <<EOF
set dsa "${spec%%:*}" =
{
    prefix           = <c AU><o DEMOCORP>
    address          = tcp "127.0.0.1" port ${spec##*:}
    dsa-flags        = load-share
    load-share-group = "BENCH"${KNOW_LINK:+
    $KNOW_LINK}
};
EOF
        done
    } >"$f"
    "$BIN" check "$f" >"$f.check" 2>&1 || {
        tail_log "$f.check"
        die "dsa-router check rejects the generated knowledge $f"
    }
}
KNOW="$WORK/router/bench.dxg"
mkdir -p "$WORK/router"
write_knowledge "$KNOW" "S1:$P1" "S2:$P2"
config_file "dsa-router knowledge (bench.dxg)" "$KNOW"

ROUTER_KNOW=$KNOW
ROUTER_EXTRA=()
ROUTER_NAME=""
launch_router() {
    SVC_LOG="$WORK/router/$ROUTER_NAME.log"
    spawn "$SVC_LOG" "$NOFILE" "$BIN" serve --knowledge "$ROUTER_KNOW" --listen "127.0.0.1:$PORT" \
        --admin "${ROUTER_ADMIN:-none}" --probe-interval 1 "${ROUTER_EXTRA[@]}"
}
router_ready() { one_entry "$1"; }
new_router() { # NAME KNOWLEDGE READY_FN EXTRA_ARGS...
    ROUTER_NAME=$1 ROUTER_KNOW=$2
    local ready=$3
    shift 3
    ROUTER_EXTRA=("$@")
    start_service "dsa-router $ROUTER_NAME" launch_router "$ready"
    S_PORT=$PORT S_PID=$LAST_PID
    log "dsa-router $ROUTER_NAME on 127.0.0.1:$S_PORT, pid $S_PID (log $SVC_LOG)"
}
# shellcheck disable=SC2086 # ROUTER_ARGS: extra words for serve
new_router router "$KNOW" router_ready --no-access-log ${ROUTER_ARGS:-}
P_R=$S_PORT PID_R=$S_PID
# The same on one worker thread (--threads 1, in place of any --threads
# in ROUTER_ARGS): what the default's extra threads cost per operation.
R1_ARGS=$(sed -E 's/(^| )--threads(=| +)[^ ]+//g' <<<"${ROUTER_ARGS:-}")
# shellcheck disable=SC2086
new_router router-1thread "$KNOW" router_ready --no-access-log --threads 1 $R1_ARGS
P_R1=$S_PORT PID_R1=$S_PID
# With the access log on, to a file (--access-log), as in production.
ACCESS_LOG_FILE="$WORK/router/access.log"
# shellcheck disable=SC2086
new_router router-accesslog "$KNOW" router_ready --access-log "$ACCESS_LOG_FILE" ${ROUTER_ARGS:-}
P_RL=$S_PORT PID_RL=$S_PID
# The baseline binary (DSA_ROUTER_BASELINE), same settings as `router`.
if [ -n "${DSA_ROUTER_BASELINE:-}" ]; then
    [ -x "$DSA_ROUTER_BASELINE" ] || die "DSA_ROUTER_BASELINE=$DSA_ROUTER_BASELINE is not an executable"
    BIN_NEW=$BIN BIN=$DSA_ROUTER_BASELINE
    # shellcheck disable=SC2086
    new_router router-base "$KNOW" router_ready --no-access-log ${ROUTER_ARGS:-}
    BIN=$BIN_NEW
    P_RB=$S_PORT PID_RB=$S_PID
fi

# The other groups' servers (bench/groups.sh).
# shellcheck source=bench/groups.sh
source "$ROOT/bench/groups.sh"
for g in tls bind bulk spanning positions traces policy; do
    if has_group "$g"; then "setup_$g"; fi
done

log "every path answers: direct :$P1, haproxy :$P_HAP, back-meta :$P_META ($META_ENTRIES entr(y/ies) for uid=user0001), back-asyncmeta :$P_AMETA ($AMETA_ENTRIES), dsa-router :$P_R and :$P_RL"

if [ "$SETUP_ONLY" = 1 ]; then
    log "--setup-only: everything started and answered; stopping ($(($(date +%s) - T_START)) s)"
    exit 0
fi
if [ "$SETUP_ONLY" = hold ]; then
    log "--hold: direct ldap://127.0.0.1:$P1 (pid $PID1), haproxy ldap://127.0.0.1:$P_HAP (pid $PID_HAP), dsa-router ldap://127.0.0.1:$P_R (pid $PID_R)${P_RB:+, baseline ldap://127.0.0.1:$P_RB (pid $PID_RB)}; interrupt to stop"
    while :; do sleep 3600 & wait $! || break; done
fi

# ---------------------------------------------------------------- 4. load
CLK_TCK=$(getconf CLK_TCK)
NPROC=$(nproc)
# user+nice+system ticks of all CPUs: what processes are charged (irq,
# softirq and steal time are left out; loopback networking shows up as softirq)
sys_busy() { awk '/^cpu /{print $2 + $3 + $4; exit}' /proc/stat; }
children_secs() {                                                                  # from `times` output
    tail -n 1 "$WORK/times" | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60 + a[2] } print t }'
}
cpu_of() { # utime+stime of the whole process (all threads), clock ticks
    local st f
    st=$(<"/proc/$1/stat") || return 1
    read -r -a f <<<"${st##*) }" # f[0] is field 3 (state); utime is field 14, stime 15
    echo $((f[11] + f[12]))
}
mem_of() { awk -v k="$2:" '$1 == k {print $2; found = 1} END {exit !found}' "/proc/$1/status"; } # kB

bench_args=(--connections "$CONNECTIONS" --people "$PEOPLE" --users "$USERS" --password pw --json)
LOAD_DESC="dsa-bench --connections $CONNECTIONS --depth $DEPTH --mix $MIX --users $USERS, warm-up ${WARMUP} s then ${DURATION} s measured"
[ "$ROUNDS" -gt 1 ] && LOAD_DESC+=", $ROUNDS rounds (medians)"
LOADAVG_BEFORE=$(cut -d' ' -f1-3 /proc/loadavg)
WARNINGS=""
if "$PY" -c "import os, sys; sys.exit(0 if os.getloadavg()[0] > 0.5 * os.cpu_count() else 1)"; then
    WARNINGS+="the machine was busy before the run (load average $LOADAVG_BEFORE on $(nproc) CPUs): other processes compete with the paths measured"$'\n'
    log "warning: load average $LOADAVG_BEFORE on $(nproc) CPUs before the run: figures will be noisy"
fi

# measure KEY LABEL PORT PID SETTINGS [BENCH_ARG...]
# The load: MIX at DEPTH at --base SUFFIX over ldap://, unless M_MIX,
# M_DEPTH, M_BASE or M_SCHEME (ldaps: verified against the test CA) say
# otherwise; backend CPU of slapd #1 and #2 unless M_B1/M_B2 name others.
measure() {
    local key=$1 label=$2 port=$3 pid=$4 settings=$5
    shift 5
    local more=(--mix "${M_MIX:-$MIX}" --depth "${M_DEPTH:-$DEPTH}" --base "${M_BASE:-$SUFFIX}" "$@")
    if [ -n "${PATHS:-}" ] && [[ " $PATHS " != *" $key "* ]]; then return 0; fi
    local url="${M_SCHEME:-ldap}://127.0.0.1:$port" j="$WORK/bench-$key.json"
    [ "${M_SCHEME:-ldap}" = ldaps ] && more+=(--ca-file "$TLS_DIR/ca.pem")
    local PID1=${M_B1:-$PID1} PID2=${M_B2:-$PID2}
    log "measuring $label ($url): warm-up ${WARMUP}s, then ${DURATION}s"
    # The warm-up is a run of its own, so the CPU delta covers exactly the
    # measured run (its own warm-up is 0).
    if [ "$("$PY" -c "print(1 if float('$WARMUP') > 0 else 0)")" = 1 ]; then
        run_waited "$WORK/warmup-$key.json" "$BENCH" --url "$url" --duration "$WARMUP" --warmup 0 "${bench_args[@]}" "${more[@]}" || {
            tail_log "$WORK/warmup-$key.json.err"
            die "bench warm-up against $label failed"
        }
    fi
    local t0 b10 b20 t1 b11 b21 s0 s1 c0 c1 w0 w1 other
    t0=$(cpu_of "$pid") b10=$(cpu_of "$PID1") b20=$(cpu_of "$PID2")
    s0=$(sys_busy) w0=$(date +%s.%N)
    times >"$WORK/times" # CPU of this shell's reaped children: the bench tool's share
    c0=$(children_secs)
    run_waited "$j" "$BENCH" --url "$url" --duration "$DURATION" --warmup 0 "${bench_args[@]}" "${more[@]}" || {
        tail_log "$j.err"
        die "bench against $label failed"
    }
    times >"$WORK/times"
    c1=$(children_secs)
    s1=$(sys_busy) w1=$(date +%s.%N)
    t1=$(cpu_of "$pid") b11=$(cpu_of "$PID1") b21=$(cpu_of "$PID2")
    alive "$pid" || die "$label died during the run"
    # CPU used by everything else on the machine during the run (other
    # processes, e.g. builds), as a share of all CPUs: a noise indicator.
    local ours=$(((t1 - t0) + (b11 - b10) + (b21 - b20)))
    if [ "$pid" = "$PID1" ]; then ours=$(((b11 - b10) + (b21 - b20))); fi
    other=$("$PY" -c "print(f'{max(0.0, (($s1 - $s0) - $ours - ($c1 - $c0) * $CLK_TCK) / (($w1 - $w0) * $CLK_TCK * $NPROC) * 100):.0f}')")
    "$PY" "$LIB" row "$WORK/results.jsonl" "$key" "$label" "$j" $((t1 - t0)) "$CLK_TCK" \
        "$(mem_of "$pid" VmHWM)" "$settings" "$other" $((b11 - b10)) $((b21 - b20))
    "$PY" - "$WORK/results.jsonl" <<'EOF' >&2
import json, sys
r = [json.loads(l) for l in open(sys.argv[1])][-1]
cpu = r["cpu_us_per_op"]
print(f"compare.sh:   {r['path']}: {r['ops_per_sec']:.0f} ops/s, p99 {r['p99']} ms, "
      f"CPU {'n/a' if cpu is None else f'{cpu:.1f}'} µs/op, errors {sum(r['errors'].values())}, "
      f"other processes {r['other_cpu_pct']}% of the machine")
EOF
}

if [ "$META_LAYOUT" = uris ]; then
    META_SET="1 target, URIs slapd #1 + #2 (failover only: all ops to slapd #1), threads 16 (default)"
else
    META_SET="2 targets, same naming context (searches fan out to both), threads 16 (default)"
fi
round_plain() {
    measure direct "direct to slapd #1" "$P1" "$PID1" "slapd mdb, threads 16 (default); CPU is slapd's own"
    measure meta "slapd back-meta" "$P_META" "$PID_META" "$META_SET"
    measure asyncmeta "slapd back-asyncmeta" "$P_AMETA" "$PID_AMETA" "${META_SET/threads 16 (default)/max-target-conns 255, max-pending-ops 128, threads 16 (defaults)}"
    # The rows compared sit next to each other: the targets take the ratio
    # within each round (see benchlib.py paired), and the machine's speed
    # drifts even within a round. The router row has HAProxy on one side
    # and the access log on the other, the two tightest targets (the
    # access log's is 5%); --threads 1 (10%) is one row further.
    # Every second round runs these rows in the reverse order, so that a
    # machine slowing down (or speeding up) during a round does not always
    # favour the same side of a pair.
    # Both HAProxy rows on the same side of the router.
    compared=(router-1thread haproxy-1t haproxy router router-accesslog haproxy-1t-churn haproxy-churn router-churn)
    if ((round % 2 == 0)); then
        compared=(router-accesslog router haproxy haproxy-1t router-1thread router-churn haproxy-churn haproxy-1t-churn)
    fi
    if [ -n "${DSA_ROUTER_BASELINE:-}" ]; then
        # The baseline right beside the router it is compared with, on the
        # side that alternates between rounds.
        with_base=()
        for key in "${compared[@]}"; do
            case $key in
                router | router-churn)
                    b=${key/router/router-base}
                    if ((round % 2 == 0)); then with_base+=("$b" "$key"); else with_base+=("$key" "$b"); fi
                    ;;
                *) with_base+=("$key") ;;
            esac
        done
        compared=("${with_base[@]}")
    fi
    for key in "${compared[@]}"; do
        case $key in
            haproxy) measure haproxy "HAProxy mode tcp" "$P_HAP" "$PID_HAP" "balance leastconn over 2 slapd, nbthread $HAPROXY_NBTHREAD, option ldap-check every 1 s" ;;
            haproxy-1t) measure haproxy-1t "HAProxy nbthread 1" "$P_HAP1" "$PID_HAP1" "as HAProxy above, nbthread 1" ;;
            router) measure router "dsa-router" "$P_R" "$PID_R" "2 DSAs in one load-share group, probe every 1 s, access log off, ${ROUTER_ARGS:-defaults (--threads 0: one worker per CPU)}" ;;
            router-1thread) measure router-1thread "dsa-router --threads 1" "$P_R1" "$PID_R1" "as above, one worker thread (--threads 1)" ;;
            router-accesslog) measure router-accesslog "dsa-router + access log" "$P_RL" "$PID_RL" "as above, access log on (--access-log to a file)" ;;
            # Connection churn (web logins): connect, bind as a random
            # user, search, unbind, close; one operation is the whole
            # sequence.
            haproxy-churn) measure haproxy-churn "HAProxy, connection per op" "$P_HAP" "$PID_HAP" "as HAProxy above; dsa-bench --churn: connect, bind as a random user, search, unbind, close" --churn ;;
            haproxy-1t-churn) measure haproxy-1t-churn "HAProxy nbthread 1, connection per op" "$P_HAP1" "$PID_HAP1" "as HAProxy nbthread 1, dsa-bench --churn" --churn ;;
            router-base) measure router-base "dsa-router, baseline binary" "$P_RB" "$PID_RB" "as dsa-router above, DSA_ROUTER_BASELINE=$DSA_ROUTER_BASELINE" ;;
            router-base-churn) measure router-base-churn "dsa-router baseline, connection per op" "$P_RB" "$PID_RB" "as dsa-router, connection per op, DSA_ROUTER_BASELINE binary" --churn ;;
            router-churn) measure router-churn "dsa-router, connection per op" "$P_R" "$PID_R" "as dsa-router above; dsa-bench --churn (each bind runs on a spare DSA connection an earlier client gave back, --spare-connections)" --churn ;;
        esac
    done
}

for ((round = 1; round <= ROUNDS; round++)); do
    [ "$ROUNDS" -gt 1 ] && log "round $round of $ROUNDS"
    ROUND_START=$(wc -l <"$WORK/results.jsonl")
    export BENCH_ROUND=$round # recorded in each row (benchlib.py pairs rows by it)
    for g in plain latency tls bind bulk spanning positions traces policy; do
        if has_group "$g"; then "round_$g"; fi
    done
done
ACCESS_LINES=$(wc -l <"$ACCESS_LOG_FILE" || echo 0)
has_group positions && positions_idle
has_group traces && traces_sink

LOADAVG_AFTER=$(cut -d' ' -f1-3 /proc/loadavg)

# ---------------------------------------------------------------- 6. extras
mib() { "$PY" -c "print(f'{int(\"$1\") / 1024:.1f}')"; }

# Group bulk: the router's peak RSS growth over all its streams.
if has_group bulk && [ -n "${BULK_HWM0:-}" ]; then
    hwm1=$(mem_of "$PID_RBULK" VmHWM)
    extra "$BULK_STREAM_ENTRIES-entry streams through dsa-router (group bulk): peak RSS growth" "+$("$PY" -c "print(f'{($hwm1 - $BULK_HWM0) / 1024:.1f}')") MiB" \
        "VmHWM $(mib "$BULK_HWM0") MiB before the first stream, $(mib "$hwm1") MiB after the last ($ROUNDS round(s), one stream each)"
fi

if [ "$EXTRAS" = 1 ]; then
    # Idle connections: a fresh router, so its RSS is not inflated by the runs above.
    new_router router-idle "$KNOW" router_ready --no-access-log --max-clients $((IDLE_CONNS + 1000)) --idle-timeout 0
    P_I=$S_PORT PID_I=$S_PID
    sleep 1
    rss0=$(mem_of "$PID_I" VmRSS)
    log "opening $IDLE_CONNS idle connections to dsa-router"
    status="$WORK/idle.status"
    spawn "$WORK/idle.log" "$NOFILE" "$PY" "$LIB" idle "127.0.0.1:$P_I" "$IDLE_CONNS" "$status"
    PID_IDLE=$LAST_PID
    end=$(($(date +%s) + 120))
    while [ ! -s "$status" ] && alive "$PID_IDLE" && [ "$(date +%s)" -lt "$end" ]; do sleep 0.2; done
    [ -s "$status" ] || die "idle client gave up: $(cat "$WORK/idle.log")"
    grep -q '^open ' "$status" || die "idle client: $(cat "$status")"
    open_secs=$(awk '/^open /{print $3}' "$status")
    # Wait until the router holds them (accepted, not just queued by the kernel).
    end=$(($(date +%s) + 60))
    while :; do
        fds=$(find "/proc/$PID_I/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
        [ "$fds" -ge "$IDLE_CONNS" ] && break
        [ "$(date +%s)" -ge "$end" ] && break
        sleep 0.2
    done
    sleep 2
    rss1=$(mem_of "$PID_I" VmRSS)
    hwm1=$(mem_of "$PID_I" VmHWM)
    t0=$(date +%s.%N)
    served=$(count_entries "ldap://127.0.0.1:$P_I/" "$SUFFIX" "(uid=user0001)" uid || echo 0)
    t1=$(date +%s.%N)
    stop_pid "$PID_IDLE"
    closed=$(awk '/^closed-by-server/{print $2}' "$status")
    per_conn=$("$PY" -c "print(f'{($rss1 - $rss0) * 1024 / $IDLE_CONNS:.0f}')")
    idle_result="VmRSS $(mib "$rss1") MiB"
    if [ "$fds" -lt "$IDLE_CONNS" ] || [ "${closed:-1}" != 0 ] || [ "$served" != 1 ]; then
        idle_result="FAILED: $idle_result"
    fi
    extra "$IDLE_CONNS idle client connections to dsa-router" "$idle_result" \
        "baseline $(mib "$rss0") MiB before, +${per_conn} bytes/connection; router fds $fds; opened in ${open_secs} s; a search meanwhile returned $served entry in $("$PY" -c "print(f'{($t1 - $t0) * 1000:.0f}')") ms; closed by the router before the end: ${closed:-?}; fd limit $NOFILE, --max-clients $((IDLE_CONNS + 1000)), --idle-timeout 0"
    log "idle: RSS $(mib "$rss0") -> $(mib "$rss1") MiB with $IDLE_CONNS connections (peak $(mib "$hwm1"))"
    stop_pid "$PID_I"

    # Bulk: for each size, a third slapd with that many entries under
    # ou=bulk and a fresh router; one search streams them all.
    for BULK_N_ENTRIES in $BULK_ENTRIES; do
        log "generating and loading $BULK_N_ENTRIES bulk entries into slapd #3"
        "$PY" "$LIB" ldif-bulk "$BULK_N_ENTRIES" >"$WORK/bulk.ldif"
        new_slapd "slapd3-bulk$BULK_N_ENTRIES" mdb "$WORK/bulk.ldif"
        P3=$S_PORT PID3=$S_PID
        rm -f "$WORK/bulk.ldif"
        write_knowledge "$WORK/router/bulk.dxg" "B1:$P3"
        bulk_ready() {
            local n
            n=$(count_entries "ldap://127.0.0.1:$1/" "ou=bulk,$SUFFIX" "(uid=bulk000001)" uid) || return 1
            [ "$n" = 1 ]
        }
        # shellcheck disable=SC2086 # BULK_ROUTER_ARGS: extra words for serve
        new_router "router-bulk$BULK_N_ENTRIES" "$WORK/router/bulk.dxg" bulk_ready --no-access-log ${BULK_ROUTER_ARGS:-}
        P_B=$S_PORT PID_B=$S_PID
        sleep 1
        hwm0=$(mem_of "$PID_B" VmHWM)
        # stream_bulk URL: sets BULK_N (entries received), BULK_S (seconds) and
        # BULK_ERR (ldapsearch's complaint; empty when it succeeded)
        stream_bulk() {
            local t0 t1 out="$WORK/bulk-out.ldif"
            BULK_ERR=""
            t0=$(date +%s.%N)
            run_waited "$out" ldapsearch -x -LLL -o nettimeout=30 -H "$1" -b "ou=bulk,$SUFFIX" -z 0 '(objectClass=*)' dn ||
                BULK_ERR=$(tr -s '\n' ' ' <"$out.err")
            t1=$(date +%s.%N)
            BULK_N=$(grep -c '^dn:' "$out" || true)
            BULK_S=$("$PY" -c "print(f'{$t1 - $t0:.2f}')")
            rm -f "$out" "$out.err"
        }
        expect=$((BULK_N_ENTRIES + 1))
        stream_bulk "ldap://127.0.0.1:$P3/"
        n_direct=$BULK_N s_direct=$BULK_S
        [ -z "$BULK_ERR" ] && [ "$n_direct" = "$expect" ] || die "bulk search direct to slapd #3: $n_direct of $expect entries: $BULK_ERR"
        stream_bulk "ldap://127.0.0.1:$P_B/"
        n_router=$BULK_N s_router=$BULK_S
        hwm1=$(mem_of "$PID_B" VmHWM)
        growth=$("$PY" -c "print(f'{($hwm1 - $hwm0) / 1024:.1f}')")
        how="ldapsearch -z 0 '(objectClass=*)' dn (entries without attributes) into a file; slapd #3 holds only ou=bulk; router args: ${BULK_ROUTER_ARGS:-defaults}"
        if [ -n "$BULK_ERR" ] || [ "$n_router" != "$expect" ]; then
            why=$(grep -E 'WARN|ERROR' "$WORK/router/router-bulk$BULK_N_ENTRIES.log" | tail -n 1 | sed 's/\x1b\[[0-9;]*m//g; s/^[^ ]* *//' || true)
            extra "$BULK_N_ENTRIES-entry subtree search through dsa-router" "FAILED after $n_router of $expect entries" \
                "ldapsearch: ${BULK_ERR:-no error}; router: ${why:-nothing logged}; VmHWM $(mib "$hwm0") -> $(mib "$hwm1") MiB (+$growth); direct to slapd #3: $n_direct entries in $s_direct s; $how"
            log "bulk: FAILED through dsa-router after $n_router of $expect entries: $BULK_ERR ${why:+(router: $why)}"
        else
            extra "$BULK_N_ENTRIES-entry subtree search through dsa-router" "peak RSS +$growth MiB" \
                "VmHWM $(mib "$hwm0") -> $(mib "$hwm1") MiB; $n_router entries in $s_router s through the router, $n_direct in $s_direct s direct; $how"
        fi
        log "bulk: $n_router entries in $s_router s (direct $s_direct s), VmHWM $(mib "$hwm0") -> $(mib "$hwm1") MiB"
        stop_pid "$PID_B"
        stop_pid "$PID3"
    done
fi

# ---------------------------------------------------------------- 5. report
MEM_KB=$(awk '/^MemTotal:/{print $2}' /proc/meminfo)
{
    printf 'CPUs (nproc)\t%s\n' "$(nproc)"
    printf 'CPU model\t%s\n' "$(awk -F': ' '/^model name/{print $2; exit}' /proc/cpuinfo)"
    printf 'memory\t%s GiB\n' "$("$PY" -c "print(f'{$MEM_KB / 1048576:.1f}')")"
    printf 'kernel\t%s\n' "$(uname -sr)"
    printf 'slapd\t%s\n' "$("$SLAPD" -VV 2>&1 | head -n 1 | sed 's/^@(#) \$OpenLDAP: //; s/ \$$//' | tr -s ' \t' ' ')"
    printf 'haproxy\t%s\n' "$("$HAPROXY" -v 2>&1 | head -n 1)"
    rev=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
    if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then rev+=" (with uncommitted changes)"; fi
    printf 'dsa-router\t%s, commit %s\n' "$("$BIN" --version 2>/dev/null || echo '?')" "$rev"
    printf 'fd limit for dsa-router\t%s\n' "$NOFILE"
    printf 'load average before / after the paths\t%s / %s\n' "$LOADAVG_BEFORE" "$LOADAVG_AFTER"
} >"$WORK/machine.tsv"

note "Data: two slapd (mdb, \`slapadd -q\`, index uid eq), each with $SUFFIX, $PEOPLE and $USERS inetOrgPerson entries uid=user0000.. (password pw); anonymous read, sizelimit unlimited; \`slapd -d none -h ldap://127.0.0.1:PORT/ -f slapd.conf\`, every process on a free loopback port."
note "Load (group plain): \`$LOAD_DESC\`; every path gets the same load, one after another, in this order: direct, back-meta, back-asyncmeta, dsa-router --threads 1, HAProxy nbthread 1, HAProxy, dsa-router, dsa-router + access log (each target's pair of rows side by side, --threads 1 one row further), then the three connection-per-op rows (HAProxy's first); the other groups after it, each with its rows side by side, every second round with the HAProxy and dsa-router rows in the reverse order (so that a machine speeding up or slowing down within a round does not always favour the same side of a pair); each target compares paths of one round, run back to back, and takes the median over the rounds. The load generator runs on the same machine, competing for the same CPUs."
note "CPU µs/op: utime+stime of the proxy process (/proc/PID/stat, CLK_TCK $CLK_TCK) over the measured run only (the warm-up is a separate bench run before it), divided by successful operations. For 'direct' it is slapd #1's own CPU. Kernel time spent in softirq for loopback TCP is charged to no process and is not included, for any path. Peak RSS: VmHWM of that process at the end of its run. 'other processes' CPU': user+system time of everything else on the machine during the measured run (other than the proxy, both slapd and the load generator), as a share of all CPUs; above ~10% the throughput and latency figures are disturbed."
note "HAProxy: \`haproxy -db -f haproxy.cfg\`, mode tcp, balance leastconn over both slapd, nbthread $HAPROXY_NBTHREAD, option ldap-check every 1 s (like the router's probes), and a second instance the same but for nbthread 1 (rows 'HAProxy nbthread 1'); every target is judged against the one with the lower CPU per operation (ref in the tables). It balances connections, not operations."
if [ "$META_LAYOUT" = uris ]; then
    note "back-meta and back-asyncmeta (separate slapd processes): one target \`uri \"$URI1/$SUFFIX\" \"$URI2/\"\`. slapd-meta(5): further URIs of a target are failover addresses, so every operation goes to slapd #1 (see the slapd #1/#2 CPU columns). Two targets with the same naming context were not used: a subtree search then goes to both and returns every entry twice (META_LAYOUT=targets measures that)."
else
    note "back-meta and back-asyncmeta (separate slapd processes): two targets with the same naming context \`uri \"$URI1/$SUFFIX\"\` and \`uri \"$URI2/$SUFFIX\"\` (META_LAYOUT=targets). A subtree search fans out to both targets: uid=user0001 came back $META_ENTRIES time(s) through back-meta and $AMETA_ENTRIES through back-asyncmeta, so each operation does twice the backend work."
fi
note "dsa-router: \`dsa-router serve --knowledge bench.dxg --listen 127.0.0.1:PORT --admin none --no-access-log --probe-interval 1${ROUTER_ARGS:+ $ROUTER_ARGS}\` (fd limit $NOFILE); knowledge: two DSAs with prefix <c AU><o DEMOCORP>, dsa-flags load-share, one load-share-group. The second row is the same without --no-access-log, stderr to a file ($ACCESS_LINES lines written during its runs)."
if [ "$EXTRAS" = 1 ]; then
    note "Idle connections: a fresh dsa-router (--max-clients $((IDLE_CONNS + 1000)), --idle-timeout 0), $IDLE_CONNS TCP connections opened by a Python client and left idle; VmRSS measured after the router holds them all. Bulk: for each size ($BULK_ENTRIES entries), a third slapd with ou=bulk and that many entries and a fresh dsa-router with one DSA for it, VmHWM before and after one \`ldapsearch -z 0 -b ou=bulk,$SUFFIX '(objectClass=*)' dn\` read as fast as ldapsearch can."
fi

# The rows each group must have produced (within PATHS, when given).
EXPECTED=""
for g in plain latency tls bind bulk spanning positions traces policy; do
    has_group "$g" || continue
    case $g in
        plain) keys="direct haproxy haproxy-1t meta asyncmeta router router-1thread router-accesslog haproxy-churn haproxy-1t-churn router-churn" ;;
        latency) keys=$(for p in $LOAD_PCTS; do echo "lat$p-direct lat$p-haproxy lat$p-haproxy-1t lat$p-router"; done) ;;
        tls) keys=$(for r in tls tlschurn tlsresume tlsdsa; do echo "$r-haproxy $r-haproxy-1t $r-router"; done) ;;
        bind) keys="bind-haproxy bind-haproxy-1t bind-router bind-router-trust" ;;
        bulk) keys="bulk-direct bulk-haproxy bulk-haproxy-1t bulk-router" ;;
        spanning) keys="span-meta span-router" ;;
        positions) keys="pos-router-off pos-router" ;;
        traces) keys="otel-router-off otel-router-1pct otel-router-100pct" ;;
        policy) keys="pol-router-off pol-router" ;;
    esac
    for k in $keys; do
        if [ -z "${PATHS:-}" ] || [[ " $PATHS " == *" $k "* ]]; then EXPECTED+="$k "; fi
    done
done
has_group latency && note "Group latency: each round, fixed offered loads of $LOAD_PCTS percent of HAProxy's (nbthread $HAPROXY_NBTHREAD) throughput in that round's plain row (or a full-speed run of its own without the plain group), \`dsa-bench --rate\`, the same $CONNECTIONS connections each sending on its own schedule; direct to slapd #1, through both HAProxy and through dsa-router. Latency runs from each request's send; the added latency is the path's percentile minus direct's in the same round."
has_group tls && note "Group tls: a CA and one RSA 2048 server certificate for 127.0.0.1 (openssl). HAProxy terminates LDAPS with \`bind ... ssl crt\` (OpenSSL, its session cache and tickets on by default) to the plain slapd; dsa-router with --tls-cert/--tls-key --ldaps-listen (rustls, its default session cache and tickets). dsa-bench verifies the certificate (--ca-file); 'connection per op' makes a full handshake per connection, 'resumed' shares one client session cache across its connections (--tls-resume, as a client library's process does; the JSON counts the resumed handshakes). The rows 'LDAPS to LDAPS slapd': slapd #1 and #2 also listen on ldaps:// with the same certificate; HAProxy \`server ... ssl verify required ca-file\`, dsa-router \`link-flags = dsp-ldap, ssl-encryption\` with --dsa-ca."
has_group bind && note "Group bind: \`dsa-bench --mix $MIX_BIND --depth 1\` on $CONNECTIONS persistent connections: each bind is a simple bind as a random user (password pw), then searches follow as that user. Row 'dsa-router': the slapd do not trust the router, so a bound client's operations run on a DSA connection of its own, bound by its bind. Row 'DSAs trusting it': knowledge gives the slapd \`ldap-dsa-name\` cn=router and \`trust-flags = trust-conveyed-originator\`, and slapd #1 and #2 (\`authz-policy to\`) let cn=router assume the users' identities (\`authzTo: dn.subtree:$PEOPLE\`): binds are verified on connections of their own, searches run on the router's shared connections with the proxied-authorization control; stated beside the target."
has_group bulk && note "Group bulk: a slapd holding $BULK_STREAM_ENTRIES entries under ou=bulk,$SUFFIX; each round one \`ldapsearch -z 0 '(objectClass=*)' dn\` into a file, direct, through both HAProxy (a frontend of their own to that slapd) and through a dsa-router with that slapd as its only DSA; 'ops/s' is entries per second, CPU per entry."
has_group positions && note "Group positions: two more slapd with the users, a provider (syncprov, syncprov-checkpoint 100 1) and a consumer (syncrepl refreshAndPersist from it, bound as its rootdn), both publishing contextCSN; two dsa-router with both in one load-share group, one reading positions at the default --csn-interval (100 ms: a base read of contextCSN per DSA on a connection of its own, bound as the router's identity, here anonymous) and one with --csn-interval 0; \`dsa-bench --mix $MIX\` (reads only: the cost measured is the poller's and the read gate's, not read-your-writes' per write). 'CPU/op vs ref' is the router with positions over the one without, per round. The extra row: both idle for $POSITIONS_IDLE s, the readings per DSA (requests and bytes, the router's counters) and the CPU meanwhile."
has_group traces && note "Group traces: three dsa-router with the same knowledge as dsa-router above (slapd #1 and #2 in one load-share group, access log off): tracing off (no --otlp-endpoint), \`--otlp-endpoint URL --otlp-sample 0.01\` and \`--otlp-sample 1\`, exporting every --otlp-interval (1 s, the default) to a minimal local OTLP/HTTP sink (benchlib.py otlp-sink, a Python HTTP server on the same machine that reads each request and answers 200: the router's batching, encoding and sending are real, a collector's work is not measured); \`dsa-bench --mix $MIX\`, each sampled search a span with one child span (its DSA attempt). The rows run back to back, every second round in the reverse order; 'CPU/op vs ref' is each traced router's CPU per operation over the untraced one's, the median of the per-round ratios. Target: 1% <= 1.03 x off; 100% is stated."
has_group policy && note "Group policy: the same two slapd behind two more dsa-router, one without --policy and one with \`--policy policy20.toml\` (below): 19 rules naming clients the bench's do not match (other networks, bound identities, TLS, SASL EXTERNAL), so choosing the rule walks all of them, then rule \"loopback\" (127.0.0.0/8: reads of $SUFFIX, scopes base/one/sub), and a default allowing reads; \`dsa-bench --mix $MIX\` on persistent connections, anonymous. The rule is chosen once per connection and identity (cached in the session), then each operation is checked against that one rule (type, target subtree, scope). 'CPU/op vs ref' is the router with the policy over the one without, per round."
has_group spanning && note "Group spanning: two more slapd, one holding $SUFFIX (users 0..$((USERS / 2 - 1))) and one o=OTHERCORP,c=AU (the rest), each with ou=people; \`dsa-bench --base c=AU --mix eq=100\`: a subtree search at c=AU for (uid=userNNNN), found in one partition. back-meta: suffix c=AU, one target per partition (uri ldap://.../o=DEMOCORP,c=AU and .../o=OTHERCORP,c=AU); dsa-router: knowledge with the two partitions. HAProxy cannot split a search between servers."

RUNTIME="$(($(date +%s) - T_START)) s (plus ${BUILD_SECS} s for checks and the build)"
cmd="bench/compare.sh"
[ "$QUICK" = 1 ] && cmd+=" --quick"
if [ ${#ENV_GIVEN[@]} -gt 0 ]; then cmd="${ENV_GIVEN[*]} $cmd"; fi
rc=0
FAILED_EARLY=0 # from here on, status 1 means the table check failed
BENCH_DATE="$(date -u '+%Y-%m-%d %H:%M UTC')" BENCH_COMMAND="$cmd" BENCH_LOAD="$LOAD_DESC" \
    BENCH_METHOD="" BENCH_WARNINGS="$WARNINGS" BENCH_RUNTIME="$RUNTIME" BENCH_CHECK=$([ "$CHECK" = 1 ] && echo 1 || echo 0) \
    BENCH_EXPECTED="$EXPECTED" \
    "$PY" "$LIB" report "$WORK" "$OUT" || rc=$?
log "done in $(($(date +%s) - T_START)) s (plus ${BUILD_SECS} s for checks and the build)"
exit "$rc"
