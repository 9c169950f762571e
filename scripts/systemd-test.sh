#!/usr/bin/env bash
# systemd test: the Debian package's unit run by a real systemd, in a
# container from the project's base image (scripts/docker-build-base.sh)
# plus the systemd and python3-ldap3 packages, systemd as its PID 1
# (no --privileged: cgroup v1 mounted read-only, or v2 with the host's
# cgroup namespace). In it: `dpkg -i` of the package
# (scripts/package.sh), an OpenLDAP slapd where the packaged knowledge
# says DSA1 is (docker/slapd/dsa-slapd), `systemctl start dsa-router`,
# then 50 persistent LDAP clients searching without pause
# (scripts/docker/upgrade_load.py) across, in turn:
#   * `dsa-router ctl upgrade`, twice: each time the unit stays `active`,
#     its MainPID becomes the new process that `ctl upgrade` names, the
#     old one exits, and the clients see 0 failed operations and 0
#     reconnects (their sessions moved);
#   * `systemctl reload dsa-router`: active, the same MainPID, 0 failed,
#     0 reconnects;
#   * `systemctl restart dsa-router`: active, a new MainPID, 0 failed
#     operations (clients reconnect: a restart drains);
#   * `systemctl stop dsa-router`: inactive, exit status 0 (drained, not
#     killed), timed.
# Prints the figures of each step. Exits non-zero when a check fails;
# removes its container and files on every exit. Kept: the image
# dsa-router-systemdtest:bookworm (cache).
#
#   scripts/systemd-test.sh        (root or docker group)
#
# Environment: DSA_ROUTER_BASE_IMAGE (default dsa-router-base:bookworm).
set -euo pipefail
cd "$(dirname "$0")/.."

t0=$(date +%s)
passed=0
log() { echo "systemd-test: [$(($(date +%s) - t0))s] $*" >&2; }
ok() {
    passed=$((passed + 1))
    log "ok: $*"
}
fail() {
    log "FAIL: $*"
    exit 1
}

docker info >/dev/null 2>&1 || fail "the Docker engine does not answer (docker info failed)"

work=$(mktemp -d "${TMPDIR:-/tmp}/dsa-router-systemd-test.XXXXXX")
container=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM ERR
    set +e
    if [ "$rc" -ne 0 ] && [ -n "$container" ]; then
        log "failed; the unit's journal and the load's figures:"
        docker exec "$container" journalctl -u dsa-router --no-pager -n 60 >&2
        docker exec "$container" cat /tmp/load.json >&2
    fi
    [ -n "$container" ] && docker rm -f "$container" >/dev/null 2>&1
    rm -rf "$work"
    log "$passed passed ($(($(date +%s) - t0)) s)"
    exit "$rc"
}
trap cleanup EXIT
set -o errtrace
trap 'log "FAIL: line $LINENO: $BASH_COMMAND (status $?)"' ERR
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- the package and the image
deb=$(scripts/package.sh | tail -n 1)
[ -f "$deb" ] || fail "package.sh printed '$deb', not a file"
base=${DSA_ROUTER_BASE_IMAGE:-dsa-router-base:bookworm}
scripts/docker-build-base.sh "$base"
image=dsa-router-systemdtest:bookworm
# Units a container has no use for (and the base image's own servers:
# the test starts its slapd itself) are masked.
docker build -q -t "$image" --build-arg BASE="$base" - >"$work/build.log" 2>&1 <<'DOCKERFILE' || {
ARG BASE
FROM ${BASE}
LABEL io.dsa-router.systemdtest=1
RUN set -eu; apt-get update -q; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends systemd python3-ldap3; \
    rm -rf /var/lib/apt/lists/*; \
    systemctl mask slapd.service haproxy.service systemd-logind.service getty.target \
        console-getty.service systemd-udevd.service systemd-udev-trigger.service \
        systemd-timesyncd.service systemd-networkd.service
STOPSIGNAL SIGRTMIN+3
CMD ["/lib/systemd/systemd"]
DOCKERFILE
    cat "$work/build.log" >&2
    fail "building $image failed"
}

# ---- systemd as PID 1
cgroup=(-v /sys/fs/cgroup:/sys/fs/cgroup:ro)
# cgroup v2: systemd needs its own writable part of the tree.
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && cgroup=(--cgroupns=host -v /sys/fs/cgroup:/sys/fs/cgroup:rw)
container=dsa-router-systemdtest-$$-$RANDOM
docker run -d --name "$container" --network none -e container=docker "${cgroup[@]}" \
    --tmpfs /run --tmpfs /run/lock \
    -v "$(realpath "$deb"):/tmp/pkg/dsa-router.deb:ro" \
    -v "$PWD/docker/slapd/dsa-slapd:/usr/local/bin/dsa-slapd:ro" \
    -v "$PWD/scripts/docker/upgrade_load.py:/usr/local/bin/upgrade_load.py:ro" \
    "$image" >/dev/null
ctr() { docker exec "$container" "$@"; }
deadline=$(($(date +%s) + 60))
state=""
until [ "$state" = running ] || [ "$state" = degraded ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "systemd did not finish booting: '$state'"
    sleep 0.5
    state=$(ctr systemctl is-system-running 2>/dev/null || true)
done
[ "$state" = running ] || fail "systemd is $state: $(ctr systemctl --failed --no-pager 2>&1)"
ok "systemd $(ctr systemctl --version | head -n 1 | awk '{ print $2 }') runs as PID 1 in $container ($state)"

# ---- the package, a DSA, the service
ctr dpkg -i /tmp/pkg/dsa-router.deb >"$work/dpkg.log" 2>&1 || {
    cat "$work/dpkg.log" >&2
    fail "dpkg -i failed"
}
docker exec -d -e DSA_NAME=DSA1 -e DSA_SUFFIX=dc=example,dc=com -e DSA_PORT=1389 "$container" \
    sh -c 'exec /usr/local/bin/dsa-slapd >/tmp/slapd.log 2>&1'
search() { ctr ldapsearch -x -LLL -o nettimeout=5 -H "ldap://127.0.0.1:$1" -b "cn=served-by,dc=example,dc=com" -s base description; }
deadline=$(($(date +%s) + 30))
until search 1389 >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "slapd on 127.0.0.1:1389 did not start: $(ctr cat /tmp/slapd.log)"
    sleep 0.2
done
ctr systemctl start dsa-router || fail "systemctl start dsa-router failed"
# Type=notify: `systemctl start` returns once the router said READY=1.
out=$(search 389) || fail "the router does not answer on 389 once started: $out"
[ "$(ctr systemctl show -p Type --value dsa-router)" = notify ] || fail "the unit is not Type=notify"
main() { ctr systemctl show -p MainPID --value dsa-router; }
active() { ctr systemctl is-active dsa-router; }
ok "dpkg -i, slapd DSA1, systemctl start: active (Type=notify, MainPID $(main)), the router answers on 389"

# ---- the load
ctr sh -c 'exec python3 /usr/local/bin/upgrade_load.py 127.0.0.1 389 50 cn=served-by,dc=example,dc=com /tmp/load.json /tmp/load.stop >/tmp/load.log 2>&1' &
load=$!
figure() { ctr python3 -c 'import json, sys; d = json.load(open("/tmp/load.json")); print(d[sys.argv[1]])' "$1" 2>/dev/null || echo 0; }
deadline=$(($(date +%s) + 30))
until [ "$(figure connected)" = 50 ] && [ "$(figure ops)" -gt 500 ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "the 50 clients did not get going: $(ctr cat /tmp/load.json /tmp/load.log)"
    sleep 0.5
done
ok "50 clients connected, each searching without pause ($(figure ops) operations so far)"

# A step's figures: operations, failures and reconnects since the last.
last_ops=0 last_failures=0 last_reconnects=0
step_figures() {
    sleep 1
    local ops failures reconnects
    ops=$(figure ops) failures=$(figure failures) reconnects=$(figure reconnects)
    d_ops=$((ops - last_ops)) d_failures=$((failures - last_failures)) d_reconnects=$((reconnects - last_reconnects))
    last_ops=$ops last_failures=$failures last_reconnects=$reconnects
}
step_figures
wait_gone() {
    local deadline=$(($(date +%s) + 40))
    while ctr test -d "/proc/$1"; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "process $1 still runs"
        sleep 0.2
    done
}

# ---- hot upgrades
for n in 1 2; do
    old=$(main)
    s=$(date +%s%N)
    out=$(ctr dsa-router ctl upgrade) || fail "ctl upgrade $n: $out"
    new=$(sed -n 's/^upgraded: process \([0-9]*\) .*/\1/p' <<<"$out")
    [ -n "$new" ] && [ "$new" != "$old" ] || fail "ctl upgrade $n: $out"
    deadline=$(($(date +%s) + 10))
    until [ "$(main)" = "$new" ]; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "upgrade $n: MainPID is $(main), want the new process $new"
        sleep 0.1
    done
    wait_gone "$old"
    ms=$((($(date +%s%N) - s) / 1000000))
    [ "$(active)" = active ] || fail "upgrade $n: the unit is $(active)"
    [ "$(ctr cat "/proc/$new/comm")" = dsa-router ] || fail "upgrade $n: MainPID $new is no router"
    ctr dsa-router ctl status >/dev/null || fail "upgrade $n: ctl status does not answer"
    step_figures
    [ "$d_failures" = 0 ] && [ "$d_reconnects" = 0 ] && [ "$d_ops" -gt 0 ] ||
        fail "upgrade $n: $d_ops operations, $d_failures failed, $d_reconnects reconnects: $(ctr cat /tmp/load.json)"
    ok "ctl upgrade $n: active, MainPID $old -> $new, the old process gone after $ms ms; 50 clients: $d_ops operations, 0 failed, 0 reconnects"
done

# ---- reload
pid=$(main)
ctr systemctl reload dsa-router || fail "systemctl reload failed"
[ "$(active)" = active ] && [ "$(main)" = "$pid" ] || fail "reload: $(active), MainPID $(main) (was $pid)"
step_figures
[ "$d_failures" = 0 ] && [ "$d_reconnects" = 0 ] && [ "$d_ops" -gt 0 ] ||
    fail "reload: $d_ops operations, $d_failures failed, $d_reconnects reconnects: $(ctr cat /tmp/load.json)"
ok "systemctl reload: active, MainPID $pid; 50 clients: $d_ops operations, 0 failed, 0 reconnects"

# ---- restart
s=$(date +%s%N)
ctr systemctl restart dsa-router || fail "systemctl restart failed"
ms=$((($(date +%s%N) - s) / 1000000))
new=$(main)
[ "$(active)" = active ] && [ "$new" != "$pid" ] && [ "$new" != 0 ] || fail "restart: $(active), MainPID $new (was $pid)"
step_figures
restart_ops=$d_ops restart_failures=$d_failures restart_reconnects=$d_reconnects
step_figures
[ "$restart_failures" = 0 ] && [ "$d_failures" = 0 ] && [ "$d_ops" -gt 0 ] ||
    fail "restart: $restart_failures failed, then $d_ops operations, $d_failures failed: $(ctr cat /tmp/load.json)"
ok "systemctl restart ($ms ms): active, MainPID $pid -> $new; 50 clients: $restart_ops operations, 0 failed, $restart_reconnects reconnects, then $d_ops more in 1 s"

# ---- the totals, then stop
ctr touch /tmp/load.stop
wait "$load" || true
totals=$(ctr cat /tmp/load.json)
[ "$(figure failures)" = 0 ] || fail "failed operations: $totals"
ok "50 clients in all: $(figure ops) operations, $(figure failures) failed, $(figure reconnects) reconnects (all at the restart)"
s=$(date +%s%N)
ctr systemctl stop dsa-router
ms=$((($(date +%s%N) - s) / 1000000))
result=$(ctr systemctl show -p Result --value dsa-router)
status=$(ctr systemctl show -p ExecMainStatus --value dsa-router)
[ "$(active)" = inactive ] && [ "$result" = success ] && [ "$status" = 0 ] ||
    fail "stop: $(active), result $result, exit status $status"
ok "systemctl stop: drained in $ms ms, exit status 0 (TimeoutStopSec $(ctr systemctl show -p TimeoutStopUSec --value dsa-router))"
