#!/usr/bin/env bash
# Compose test: builds the images (from the local base image, made with
# debootstrap when missing, so no registry is needed), brings up
# docker/docker-compose.yml under a project name of its own and checks,
# with ldapsearch through the router's published 127.0.0.1 port:
#   * reads route to GROUP1 (D1/H1), CUSTOMER reads to C1/C2, a bound user's
#     reads carry the user's identity (proxied authorization), the router is
#     healthy, runs as non-root and publishes on 127.0.0.1 only;
#   * `docker stop` D1 and `docker network disconnect` H1 (cut off: its packets lost):
#     every read still succeeds, from the DSAs left;
#   * `docker start` D1 and reconnect H1: both rejoin and serve again;
#   * `docker pause` H1 (frozen: accepts, never answers): reads go to D1
#     (hedged, H1 ejected), none fails;
#   * knowledge edited on the host + SIGHUP (compose kill -s HUP): reads go
#     to GROUP2; restored + `ctl reload`: back to GROUP1; broken knowledge:
#     `ctl reload` fails and routing is unchanged;
#   * hot upgrades in the container (`docker exec ... ctl upgrade`, then
#     `docker kill -s USR2`) under load from 10 persistent clients
#     (scripts/docker/upgrade_load.py): the container stays up, 0 failed
#     operations, 0 reconnects; then `docker stop` drains: exit code 0;
#   * the router pair (profile "pair": R1 and R2 behind HAProxy, PROXY v2,
#     ldap-check): under load from persistent clients that reconnect
#     (scripts/docker/pair_load.py), R1 then R2 stopped (SIGTERM: drained)
#     and started again: 0 failed operations.
# Exits non-zero when any check fails. On every exit path it removes what
# it made: its containers, network, build leftovers and its copy of the
# knowledge. Only its own containers are touched. Kept for the next run:
# the base image and the built images dsa-router:compose-test,
# dsa-router-slapd:compose-test and dsa-router-haproxy:compose-test (build
# cache; rebuilt when their inputs
# change).
#
#   scripts/docker-test.sh        (root or docker group)
#
# Environment: DSA_ROUTER_BASE_IMAGE (default dsa-router-base:bookworm),
# DSA_DOCKER_TEST_TAG (the built images' tag, default compose-test: two
# runs at once on one engine need two), DSA_FRONT_SUBNET (the pair's
# network, default the first free of 172.31.239.0/24 and a few below),
# DSA_DOCKER_TEST_PAIR=0 leaves out the router pair's checks (on by
# default; about 30 s), DSA_DOCKER_TEST_KEEP=1 keeps the stack up on failure.
set -euo pipefail
cd "$(dirname "$0")/.."

t0=$(date +%s)
passed=0
failed=0
log() { echo "docker-test: [$(($(date +%s) - t0))s] $*" >&2; }
ok() {
    passed=$((passed + 1))
    log "ok: $*"
}
fail() {
    failed=$((failed + 1))
    log "FAIL: $*"
    exit 1
}

# ---- prerequisites
if docker compose version >/dev/null 2>&1; then
    COMPOSE=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
    COMPOSE=(docker-compose)
else
    log "neither 'docker compose' nor 'docker-compose' is installed"
    exit 1
fi
if ! docker info >/dev/null 2>&1; then
    log "the Docker engine does not answer (docker info failed)"
    exit 1
fi
for tool in ldapsearch python3 timeout; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        log "$tool is missing (scripts/install-deps.sh installs ldap-utils)"
        exit 1
    fi
done
# The image ships the production build (no dev-tools: no demo, no test
# DSA); cargo only checks when it is fresh.
log "building target/release/dsa-router: cargo build --release --no-default-features"
cargo build --release --no-default-features
# Wherever cargo put it (CARGO_TARGET_DIR too): into the build context.
scripts/docker-stage-binary.sh

base=${DSA_ROUTER_BASE_IMAGE:-dsa-router-base:bookworm}
# A base made before it included haproxy (the pair's balancer) is made again.
if docker image inspect "$base" >/dev/null 2>&1 &&
    ! docker image inspect -f '{{index .Config.Labels "io.dsa-router.base"}}' "$base" | grep -q haproxy; then
    log "$base has no haproxy: building it again"
    scripts/docker-build-base.sh --force "$base"
fi
scripts/docker-build-base.sh "$base"

# ---- this run's names and files
project="dsarouter-test-$$-$RANDOM"
work=$(mktemp -d "${TMPDIR:-/tmp}/dsa-router-docker-test.XXXXXX")
chmod 755 "$work"
cp -R docker/knowledge "$work/knowledge"
chmod -R a+rX "$work/knowledge"
knowledge=$work/knowledge/router.dxg
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

export COMPOSE_PROJECT_NAME=$project
export BASE_IMAGE=$base
# No registry: the router image takes the binary built above.
export BUILD_FROM=$base
export DSA_ROUTER_PORT=$port
export DSA_ROUTER_KNOWLEDGE=$work/knowledge
# Built images keep fixed tags, reused as build cache by the next run.
tag=${DSA_DOCKER_TEST_TAG:-compose-test}
export DSA_ROUTER_IMAGE=dsa-router:$tag
export DSA_SLAPD_IMAGE=dsa-router-slapd:$tag
export DSA_HAPROXY_IMAGE=dsa-router-haproxy:$tag
# The router pair (profile "pair") runs beside the single router unless
# DSA_DOCKER_TEST_PAIR=0.
pair=${DSA_DOCKER_TEST_PAIR:-1}
[ "$pair" = 1 ] && export COMPOSE_PROFILES=pair
export DSA_PAIR_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
export DSA_PAIR_STATS_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
# The pair's front network: a /24 no Docker network on this host uses.
if [ -z "${DSA_FRONT_SUBNET:-}" ]; then
    used=$(docker network inspect $(docker network ls -q) -f '{{range .IPAM.Config}}{{.Subnet}} {{end}}' 2>/dev/null || true)
    for third in 239 238 237 236 235; do
        [[ " $used " == *" 172.31.$third.0/24 "* ]] || {
            DSA_FRONT_SUBNET=172.31.$third.0/24
            break
        }
    done
fi
export DSA_FRONT_SUBNET
export LDAPNOINIT=1
dc() { "${COMPOSE[@]}" -f docker/docker-compose.yml -p "$project" "$@"; }
old_images=""

# The script's own stdout and stderr: a signal can run the traps while a
# command's output is redirected (to a log under $work), so cleanup writes
# here.
exec 3>&1 4>&2
cleanup() {
    local rc=$?
    trap - EXIT INT TERM ERR
    exec 1>&3 2>&4
    set +e
    [ "$rc" -ne 0 ] && [ "$failed" -eq 0 ] && failed=1
    if [ "$rc" -ne 0 ]; then
        log "failed; the stack's last log lines:"
        dc ps
        dc logs --no-color --tail 30 2>&1 | tail -n 150
        if [ -n "${DSA_DOCKER_TEST_KEEP:-}" ]; then
            log "DSA_DOCKER_TEST_KEEP: left up; remove with: ${COMPOSE[*]} -f docker/docker-compose.yml -p $project down -v"
            exit "$rc"
        fi
    fi
    log "tearing down project $project"
    dc down -v --remove-orphans -t 5 >/dev/null 2>&1
    docker network rm "${project}_dsa" "${project}_front" >/dev/null 2>&1
    # Build leftovers: the images this run's builds replaced, and the
    # router's first-stage image (untagged, labelled io.dsa-router.stage).
    for img in $old_images; do
        docker image inspect -f '{{.RepoTags}}' "$img" 2>/dev/null | grep -q '^\[\]$' &&
            docker image rm "$img" >/dev/null 2>&1
    done
    docker image prune -f --filter label=io.dsa-router.stage=rootfs >/dev/null 2>&1
    rm -rf "$work"
    left=$(docker ps -aq --filter "label=com.docker.compose.project=$project")
    if [ -n "$left" ]; then
        log "containers left behind: $left"
        [ "$rc" -eq 0 ] && rc=1
    fi
    log "$passed passed, $failed failed ($(($(date +%s) - t0)) s)"
    exit "$rc"
}
trap cleanup EXIT
set -o errtrace
trap 'log "FAIL: line $LINENO: $BASH_COMMAND (status $?)"' ERR
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- build and start
old_images=$(docker image inspect -f '{{.Id}}' "$DSA_ROUTER_IMAGE" "$DSA_SLAPD_IMAGE" "$DSA_HAPROXY_IMAGE" 2>/dev/null || true)
log "building images (BASE_IMAGE=$base) for project $project"
build_opts=(--force-rm)
[ "${COMPOSE[0]}" = docker-compose ] && build_opts+=(--parallel)
build_services=(router d1)
[ "$pair" = 1 ] && build_services+=(haproxy)
dc build "${build_opts[@]}" "${build_services[@]}" >"$work/build.log" 2>&1 || {
    tail -n 40 "$work/build.log" >&2
    fail "image build failed"
}
ok "images built: $DSA_ROUTER_IMAGE ($(docker image inspect -f '{{.Size}}' "$DSA_ROUTER_IMAGE" | awk '{ printf "%.0f MB", $1 / 1e6 }')), $DSA_SLAPD_IMAGE"
log "starting the stack (router on 127.0.0.1:$port)"
dc up -d --no-build >"$work/up.log" 2>&1 || {
    cat "$work/up.log" >&2
    fail "compose up failed"
}
cid() { dc ps -q "$1"; }
router=$(cid router)
[ -n "$router" ] || fail "no router container"

# ---- helpers
# Prints the DSA that answered a base read of cn=served-by,<suffix>
# (empty, and status 1, when the read failed). Extra args: bind options.
served_by() {
    local suffix=$1
    shift
    local out
    out=$(timeout 30 ldapsearch -x -LLL -o nettimeout=20 -o ldif-wrap=no \
        -H "ldap://127.0.0.1:$port" "$@" -b "cn=served-by,$suffix" -s base description 2>&1) || {
        echo "$out" >&2
        return 1
    }
    sed -n 's/^description: //p' <<<"$out"
}
# Runs N reads of the DEMOCORP partition; each must succeed and be answered
# by one of ALLOWED (space-separated). Sets SEEN to the distinct answers.
reads() {
    local n=$1 allowed=" $2 " what=$3 i who
    SEEN=""
    for ((i = 1; i <= n; i++)); do
        who=$(served_by "o=DEMOCORP,c=AU") || fail "$what: read $i/$n failed"
        [[ -n "$who" && "$allowed" == *" $who "* ]] || fail "$what: read $i/$n answered by '$who', expected one of$allowed"
        [[ " $SEEN " == *" $who "* ]] || SEEN="$SEEN $who"
    done
}
# The router's view (ctl --json status inside its container): prints
# "NAME=state ..." for every DSA; succeeds when each DSA named in WANT
# ("D1=down H1=down") is in that state and every other one is up.
check_states() {
    docker exec "$router" /usr/local/bin/dsa-router ctl --json status |
        python3 -c '
import json, sys
want = dict(x.split("=", 1) for x in sys.argv[1].split())
d = json.load(sys.stdin)
got = {x["name"]: x["state"] for p in d["partitions"] for x in p["dsas"]}
print(" ".join(f"{k}={v}" for k, v in got.items()))
ok = len(got) == 6 and set(want) <= set(got) and all(v == want.get(k, "up") for k, v in got.items())
sys.exit(0 if ok else 1)
' "$1"
}
states() { check_states "" || true; }
# Waits (bounded, SECONDS) until check_states WANT holds.
wait_states() {
    local want=$1 deadline=$(($(date +%s) + $2)) cur
    until cur=$(check_states "$want" 2>&1); do
        if [ "$(date +%s)" -ge "$deadline" ]; then
            log "router sees: ${cur:-nothing}; wanted: ${want:-all up}"
            return 1
        fi
        sleep 0.2
    done
}
health() { docker inspect -f '{{.State.Health.Status}}' "$1"; }

# ---- the stack is up
deadline=$(($(date +%s) + 60))
until [ "$(health "$router")" = healthy ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "router not healthy after 60 s (health: $(health "$router"))"
    sleep 0.2
done
ok "router container healthy (HEALTHCHECK: dsa-router ctl ready)"
wait_states "" 30 || fail "not every DSA is up"
ok "router sees all 6 DSAs up: $(states)"

user=$(docker inspect -f '{{.Config.User}}' "$router")
[ "$user" = "10001:10001" ] || fail "router runs as '$user'"
uid=$(docker top "$router" -o pid,uid | awk 'NR > 1 { print $2 }' | sort -u | tr '\n' ' ')
[ "$uid" = "10001 " ] || fail "router processes run as uid '$uid', want 10001"
published=$(docker port "$router" 3389/tcp)
[ "$published" = "127.0.0.1:$port" ] || fail "router published as '$published', want 127.0.0.1:$port only"
ok "router runs as user $user, publishes 3389 on $published only"

reads 4 "D1 H1" "GROUP1 reads"
[ "$(wc -w <<<"$SEEN")" = 2 ] || fail "4 reads of GROUP1 were answered by$SEEN only, want D1 and H1 (load-share)"
ok "DEMOCORP reads go to GROUP1, shared:$SEEN"
who=$(served_by "o=CUSTOMER,c=AU") || fail "CUSTOMER read failed"
[[ "$who" == C1 || "$who" == C2 ]] || fail "CUSTOMER read answered by '$who'"
ok "CUSTOMER reads go to $who"
# A search at c=AU, which no DSA holds, spans both partitions: the router
# fans it out and merges; each partition's served-by entry comes back once.
out=$(timeout 30 ldapsearch -x -LLL -o nettimeout=20 -o ldif-wrap=no -H "ldap://127.0.0.1:$port" \
    -b c=AU -s sub '(cn=served-by)' description) || fail "spanning search at c=AU failed: $out"
spans=$(sed -n 's/^description: //p' <<<"$out" | sort | tr '\n' ' ')
[[ "$spans" =~ ^(C1|C2)\ (D1|H1)\ $ ]] || fail "spanning search at c=AU: served-by from '$spans', want one of C1/C2 and one of D1/H1"
ok "search at c=AU spans both partitions: $spans"

alice="uid=alice,ou=People,o=DEMOCORP,c=AU"
out=$(timeout 30 ldapsearch -x -LLL -o nettimeout=20 -H "ldap://127.0.0.1:$port" -D "$alice" -w alicepw \
    -b "$alice" -s base userPassword) || fail "alice's bound read failed"
# Only alice herself may read her userPassword: seeing it proves the DSA
# acted as alice (the router's cn=router identity with proxied authz).
grep -q '^userPassword:: YWxpY2Vwdw==$' <<<"$out" || fail "bound as alice, her userPassword is not visible: $out"
rc=0
timeout 30 ldapsearch -x -LLL -o nettimeout=20 -H "ldap://127.0.0.1:$port" -D "$alice" -w alicepw \
    -b "cn=secret,ou=Restricted,o=DEMOCORP,c=AU" -s base >/dev/null 2>&1 || rc=$?
[ "$rc" = 32 ] || fail "alice read cn=secret,ou=Restricted (exit $rc, want 32 noSuchObject)"
rc=0
timeout 30 ldapsearch -x -LLL -o nettimeout=20 -H "ldap://127.0.0.1:$port" -D "$alice" -w wrong \
    -b "$alice" -s base >/dev/null 2>&1 || rc=$?
[ "$rc" = 49 ] || fail "bind with a wrong password: exit $rc, want 49"
ok "bound reads carry the client's identity (proxied authorization as alice); wrong password gets 49"

# ---- failures: D1 stopped, H1 cut off from the network
d1=$(cid d1)
h1=$(cid h1)
network=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}} {{end}}' "$h1" | awk '{ print $1 }')
docker stop -t 5 "$d1" >/dev/null
s=$(date +%s%N)
reads 6 "H1" "D1 stopped"
ok "D1 stopped: 6 reads succeed, all from H1 ($((($(date +%s%N) - s) / 1000000)) ms)"

docker network disconnect "$network" "$h1"
s=$(date +%s%N)
reads 6 "H2 D2" "H1 disconnected"
ok "H1 disconnected too (cut off: packets lost): 6 reads succeed from GROUP2:$SEEN ($((($(date +%s%N) - s) / 1000000)) ms)"
wait_states "D1=down H1=down" 15 || fail "router does not see D1 and H1 down"
ok "router sees D1 and H1 down: $(states)"

# ---- they come back
s=$(date +%s%N)
docker start "$d1" >/dev/null
# The service name is a network alias: a plain reconnect would drop it.
docker network connect --alias h1 "$network" "$h1"
wait_states "" 30 || fail "D1 and H1 did not rejoin"
ok "D1 started and H1 reconnected: both up after $((($(date +%s%N) - s) / 1000000)) ms"
reads 6 "D1 H1" "after rejoin"
[ "$(wc -w <<<"$SEEN")" = 2 ] || fail "after rejoin 6 reads were answered by$SEEN only, want D1 and H1"
ok "reads back on GROUP1:$SEEN"

# ---- a frozen DSA (docker pause: it accepts connections, answers nothing):
# reads waiting on it are hedged to D1 and it is ejected; none fails.
docker pause "$h1" >/dev/null
s=$(date +%s%N)
reads 20 "D1" "H1 paused"
ms=$((($(date +%s%N) - s) / 1000000))
docker unpause "$h1" >/dev/null
ok "H1 paused (frozen: accepts, never answers): 20 reads succeed, all from D1, 0 failed ($ms ms)"

# ---- knowledge edited on the host, reloaded
cp "$knowledge" "$work/router.dxg.orig"
sed -i 's/^set precedence = H1, H2;$/set precedence = H2;/' "$knowledge"
grep -q '^set precedence = H2;$' "$knowledge" || fail "could not edit $knowledge"
dc kill -s HUP router >/dev/null 2>&1 || fail "compose kill -s HUP router failed"
deadline=$(($(date +%s) + 15))
until who=$(served_by "o=DEMOCORP,c=AU") && [[ "$who" == H2 || "$who" == D2 ]]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "after 'set precedence = H2;' and SIGHUP reads still go to '$who'"
    sleep 0.2
done
reads 4 "H2 D2" "precedence H2"
ok "'set precedence = H2;' + SIGHUP: reads go to GROUP2:$SEEN"

cp "$work/router.dxg.orig" "$knowledge"
docker exec "$router" /usr/local/bin/dsa-router ctl reload >/dev/null || fail "ctl reload failed"
reads 4 "D1 H1" "knowledge restored"
ok "knowledge restored + ctl reload: reads go to GROUP1:$SEEN"

printf 'set precedence = H2\n' >>"$knowledge" # no ';': invalid
if docker exec "$router" /usr/local/bin/dsa-router ctl reload >"$work/reload.out" 2>&1; then
    fail "ctl reload accepted broken knowledge: $(cat "$work/reload.out")"
fi
reads 4 "D1 H1" "broken knowledge"
cp "$work/router.dxg.orig" "$knowledge"
ok "broken knowledge: ctl reload fails ($(head -n 1 "$work/reload.out")), routing unchanged"

# ---- hot upgrades in the container: the router is its first process, which
# stays (the supervisor) and runs the serving router as its child; clients
# keep their connections across `ctl upgrade` and SIGUSR2; `docker stop`
# then drains and exits 0.
first=$(docker inspect -f '{{.State.Pid}}' "$router")
# The serving routers: the container's processes but its first.
serving() { docker top "$router" -eo pid,args | awk -v f="$first" '$1 != f && $2 ~ /dsa-router$/ && $3 == "serve" { print $1 }' | sort | tr '\n' ' ' | sed 's/ $//'; }
[ -n "$(serving)" ] || fail "no router child of the container's first process: $(docker top "$router" -eo pid,ppid,args)"
ustats=$work/upgrade.json
ustop=$work/upgrade.stop
python3 scripts/docker/upgrade_load.py 127.0.0.1 "$port" 10 "cn=served-by,o=DEMOCORP,c=AU" "$ustats" "$ustop" 2>"$work/upgrade.err" &
uload=$!
ufig() { python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$ustats" "$1" 2>/dev/null || echo 0; }
deadline=$(($(date +%s) + 30))
until [ "$(ufig connected)" = 10 ] && [ "$(ufig ops)" -gt 100 ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "the upgrade load did not get going: $(cat "$ustats" "$work/upgrade.err" 2>&1)"
    sleep 0.2
done
for how in "ctl upgrade" "docker kill -s USR2"; do
    old=$(serving)
    ops0=$(ufig ops) failures0=$(ufig failures) reconnects0=$(ufig reconnects)
    s=$(date +%s%N)
    case $how in
    "ctl upgrade") docker exec "$router" /usr/local/bin/dsa-router ctl upgrade >"$work/upgrade.out" 2>&1 || fail "ctl upgrade: $(cat "$work/upgrade.out")" ;;
    *) docker kill -s USR2 "$router" >/dev/null ;;
    esac
    deadline=$(($(date +%s) + 40))
    until now=$(serving) && [ -n "$now" ] && [ "$now" != "$old" ] && [[ "$now" != *" "* ]]; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "$how: serving processes '$now' (was $old)"
        sleep 0.2
    done
    ms=$((($(date +%s%N) - s) / 1000000))
    sleep 1
    [ "$(docker inspect -f '{{.State.Running}} {{.State.Pid}} {{.RestartCount}}' "$router")" = "true $first 0" ] ||
        fail "$how: the container did not stay up: $(docker inspect -f '{{.State.Status}} {{.State.Pid}} {{.RestartCount}}' "$router")"
    d_ops=$(($(ufig ops) - ops0)) d_failures=$(($(ufig failures) - failures0)) d_reconnects=$(($(ufig reconnects) - reconnects0))
    [ "$d_failures" = 0 ] && [ "$d_reconnects" = 0 ] && [ "$d_ops" -gt 0 ] ||
        fail "$how: $d_ops operations, $d_failures failed, $d_reconnects reconnects: $(cat "$ustats")"
    ok "$how: the container stays up (first process $first), router $old -> $now in $ms ms; 10 clients: $d_ops operations, 0 failed, 0 reconnects"
done
touch "$ustop"
wait "$uload" || fail "the upgrade load failed: $(cat "$work/upgrade.err")"
s=$(date +%s%N)
docker stop -t 40 "$router" >/dev/null
ms=$((($(date +%s%N) - s) / 1000000))
code=$(docker inspect -f '{{.State.ExitCode}}' "$router")
[ "$code" = 0 ] && [ "$ms" -lt 40000 ] || fail "docker stop: exit code $code after $ms ms, want 0 (drained) within 40 s"
ok "docker stop: the router drained and exited 0 in $ms ms (the compose file gives it 40 s)"

[ "$pair" = 1 ] || exit 0
# ---- the router pair behind HAProxy: each router restarted in turn under
# load from clients that reconnect; none of their operations may fail.
# HAProxy's view of its servers (stats CSV): "r1=UP r2=UP".
pair_states() {
    python3 - "$DSA_PAIR_STATS_PORT" <<'PY'
import csv, io, sys, urllib.request
rows = csv.reader(io.StringIO(urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/;csv", timeout=5).read().decode()))
print(" ".join(f"{r[1]}={r[17].split()[0]}" for r in rows if r and r[0] == "routers" and r[1] in ("r1", "r2")))
PY
}
wait_pair_up() {
    local deadline=$(($(date +%s) + $1)) cur=""
    until cur=$(pair_states 2>/dev/null) && [ "$cur" = "r1=UP r2=UP" ]; do
        [ "$(date +%s)" -lt "$deadline" ] || {
            log "HAProxy sees: ${cur:-nothing}"
            return 1
        }
        sleep 0.2
    done
}
wait_pair_up 60 || fail "HAProxy does not see both routers up (ldap-check through PROXY v2)"
ok "HAProxy sees R1 and R2 up: $(pair_states)"
who=$(timeout 30 ldapsearch -x -LLL -o nettimeout=20 -H "ldap://127.0.0.1:$DSA_PAIR_PORT" \
    -b "cn=served-by,o=DEMOCORP,c=AU" -s base description | sed -n 's/^description: //p') ||
    fail "a read through HAProxy failed"
[[ "$who" == D1 || "$who" == H1 ]] || fail "a read through HAProxy answered by '$who'"
# The routers see the client's address from the PROXY header (the
# published port's connections come from the host side of the network's
# gateway), not HAProxy's.
haproxy_ip=$(docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' "$(cid haproxy)" | awk '{ print $1 }')
clients=""
deadline=$(($(date +%s) + 15))
until [ -n "$clients" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "no access-log line for the read through HAProxy"
    sleep 0.2
    clients=$(dc logs --no-color r1 r2 2>&1 | grep -i 'served-by' | grep -o 'client=[^ ]*' |
        sed 's/^client=//; s/:[0-9]*$//' | sort -u | tr '\n' ' ')
done
[[ " $clients " != *" $haproxy_ip "* ]] || fail "a router logged HAProxy's address $haproxy_ip as the client's: $clients"
ok "a read through HAProxy (127.0.0.1:$DSA_PAIR_PORT) answered by $who; the router logged client $clients, not HAProxy's $haproxy_ip"

stop_file=$work/pair.stop
python3 scripts/docker/pair_load.py 127.0.0.1 "$DSA_PAIR_PORT" 8 "$stop_file" >"$work/pair.json" 2>"$work/pair.err" &
load=$!
sleep 2
for r in r1 r2; do
    s=$(date +%s%N)
    dc stop -t 35 "$r" >/dev/null 2>&1 || fail "compose stop $r failed"
    dc start "$r" >/dev/null 2>&1 || fail "compose start $r failed"
    wait_pair_up 60 || fail "$r did not come back in HAProxy"
    ok "$r stopped (drained) and started under load: both up again after $((($(date +%s%N) - s) / 1000000)) ms"
done
sleep 2
touch "$stop_file"
wait "$load" || fail "the load clients failed: $(cat "$work/pair.err")"
summary=$(cat "$work/pair.json")
read -r ops failures reconnects < <(python3 -c 'import json, sys; d = json.loads(sys.argv[1]); print(d["ops"], d["failures"], d["reconnects"])' "$summary")
[ "$failures" = 0 ] || fail "the pair under restarts: $summary"
[ "$ops" -gt 100 ] || fail "the pair under restarts: only $ops operations: $summary"
ok "R1 and R2 restarted in turn under load from 8 clients (anonymous and bound): $ops operations, 0 failed, $reconnects reconnects"
