#!/usr/bin/env bash
# Package test: builds the Debian package (scripts/package.sh) and checks
# it as an operator would use it:
#   * on the host: the files and conffiles it holds, and
#     `systemd-analyze verify` of its unit (when systemd-analyze exists);
#   * in a fresh container from the project's own base image
#     (scripts/docker-build-base.sh, plus man-db and logrotate, and man
#     pages no longer excluded, as on any Debian system): `dpkg -i` installs it; the
#     system user exists; an OpenLDAP slapd (docker/slapd/dsa-slapd) is put
#     where the packaged example knowledge says DSA1 is, 127.0.0.1:1389,
#     holding dc=example,dc=com; the router is started with the unit's own
#     ExecStart line, with /etc/default/dsa-router read as systemd reads
#     it, as the unit's user with CAP_NET_BIND_SERVICE only; it answers
#     `ldapsearch` on port 389 with DSA1's entries; the knowledge files are
#     0640 root:dsa-router; the unit's ExecReload line reloads the
#     knowledge and fails on broken knowledge; `dsa-router ctl` works as it
#     is (the control socket in the unit's RuntimeDirectory=) for root and
#     the service user, and refuses user nobody, over the socket and over
#     TCP (which is read-only without a token); logs carry
#     no colour codes; the access log goes to
#     /var/log/dsa-router/access.log (made as LogsDirectory= makes it),
#     not to stderr; `logrotate -d` parses /etc/logrotate.d/dsa-router and
#     a forced rotation moves the file while the router's next lines go
#     to a fresh one (the file's postrotate, `dsa-router ctl reopen-logs`);
#     README.md and docs/ are under /usr/share/doc/dsa-router;
#     `man dsa-router` shows serve's options; the completions load;
#     `dpkg --purge` removes it.
# systemd does not run inside the container: the unit itself is checked by
# systemd-analyze on the host, and its command lines are run as they are.
# Exits non-zero when any check fails; removes its container and files on
# every exit. Kept: the image dsa-router-pkgtest:bookworm (cache).
#
#   scripts/package-test.sh        (root or docker group)
#
# Environment: DSA_ROUTER_BASE_IMAGE (default dsa-router-base:bookworm).
set -euo pipefail
cd "$(dirname "$0")/.."

t0=$(date +%s)
passed=0
log() { echo "package-test: [$(($(date +%s) - t0))s] $*" >&2; }
ok() {
    passed=$((passed + 1))
    log "ok: $*"
}
fail() {
    log "FAIL: $*"
    exit 1
}

if ! docker info >/dev/null 2>&1; then
    log "the Docker engine does not answer (docker info failed)"
    exit 1
fi
command -v dpkg-deb >/dev/null 2>&1 || fail "dpkg-deb is missing (package dpkg)"

work=$(mktemp -d "${TMPDIR:-/tmp}/dsa-router-package-test.XXXXXX")
container=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM ERR
    set +e
    if [ "$rc" -ne 0 ] && [ -n "$container" ]; then
        log "failed; the router's log in the container:"
        docker exec "$container" sh -c 'tail -n 40 /tmp/router.log' >&2
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

# ---- build
deb=$(scripts/package.sh | tail -n 1)
[[ "$deb" =~ /debian/dsa-router_[0-9][^_]*_[a-z0-9]+\.deb$ ]] || fail "package.sh printed '$deb', want .../debian/dsa-router_VERSION_ARCH.deb"
ok "built $deb ($(du -k "$deb" | cut -f1) KiB)"

# ---- on the host: contents, conffiles, the unit
dpkg-deb -c "$deb" | awk '{ print $NF }' | sed 's|^\./|/|' >"$work/files"
for f in /usr/bin/dsa-router /etc/dsa-router/router.dxg /etc/dsa-router/R1.dxc /etc/dsa-router/DSA1.dxc /etc/dsa-router/router.toml \
    /etc/default/dsa-router /usr/share/man/man1/dsa-router.1.gz \
    /usr/share/bash-completion/completions/dsa-router /usr/share/zsh/vendor-completions/_dsa-router \
    /usr/share/fish/vendor_completions.d/dsa-router.fish /etc/logrotate.d/dsa-router \
    /usr/share/doc/dsa-router/README.md; do
    grep -qx "$f" "$work/files" || fail "$f is not in the package"
done
# The user documentation, every page of docs/ beside the README (whose
# links name docs/PAGE.md).
ndocs=0
for f in docs/*.md; do
    grep -qx "/usr/share/doc/dsa-router/$f" "$work/files" || fail "/usr/share/doc/dsa-router/$f is not in the package"
    ndocs=$((ndocs + 1))
done
[ "$ndocs" -gt 10 ] && grep -qx /usr/share/doc/dsa-router/docs/reference.md "$work/files" ||
    fail "docs/reference.md is not in the package ($ndocs pages)"
unit=$(grep -E '^/(usr/)?lib/systemd/system/dsa-router\.service$' "$work/files") || fail "no dsa-router.service in the package"
dpkg-deb -e "$deb" "$work/control"
for f in /etc/dsa-router/router.dxg /etc/dsa-router/router.toml /etc/default/dsa-router /etc/logrotate.d/dsa-router; do
    grep -qx "$f" "$work/control/conffiles" || fail "$f is not a conffile"
done
ok "the package holds the binary, $unit, /etc/dsa-router/, /etc/default/dsa-router, /etc/logrotate.d/dsa-router (conffiles), the man page, the completions, README.md and the $ndocs pages of docs/ under /usr/share/doc/dsa-router"
dpkg-deb -x "$deb" "$work/root"
if command -v systemd-analyze >/dev/null 2>&1; then
    # The package's files as the root, with the host's units beside them
    # (the unit's dependencies, sysinit.target and the like).
    mkdir -p "$work/root/usr/lib/systemd/system"
    cp -an /usr/lib/systemd/system/. "$work/root/usr/lib/systemd/system/"
    systemd-analyze verify --man=no --root="$work/root" "$work/root$unit" >"$work/verify" 2>&1 ||
        fail "systemd-analyze verify: $(cat "$work/verify")"
    [ ! -s "$work/verify" ] || fail "systemd-analyze verify warns: $(cat "$work/verify")"
    # The sandboxing, as systemd scores it (0 best, 10 worst): 1.7 today;
    # above 2 something was loosened.
    exposure=$(systemd-analyze security --offline=yes --root="$work/root" "$work/root$unit" 2>/dev/null |
        sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
    [ -n "$exposure" ] && awk -v e="$exposure" 'BEGIN { exit !(e <= 2.0) }' ||
        fail "systemd-analyze security: exposure '$exposure', want 2.0 or less"
    ok "systemd-analyze verify: the unit is clean; security exposure $exposure"
else
    log "systemd-analyze is not installed: the unit is not verified"
fi

# ---- the test image: the base image, man-db, man pages kept
base=${DSA_ROUTER_BASE_IMAGE:-dsa-router-base:bookworm}
scripts/docker-build-base.sh "$base"
image=dsa-router-pkgtest:bookworm
docker build -q -t "$image" --build-arg BASE="$base" - >"$work/build.log" 2>&1 <<'DOCKERFILE' || {
ARG BASE
FROM ${BASE}
LABEL io.dsa-router.pkgtest=1
RUN set -eu; rm -f /etc/dpkg/dpkg.cfg.d/docker-slim; \
    apt-get update -q; \
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends man-db logrotate; \
    rm -rf /var/lib/apt/lists/*
DOCKERFILE
    cat "$work/build.log" >&2
    fail "building $image failed"
}
container=dsa-router-pkgtest-$$-$RANDOM
docker run -d --name "$container" --network none \
    -v "$(realpath "$deb"):/tmp/dsa-router.deb:ro" \
    -v "$PWD/docker/slapd/dsa-slapd:/usr/local/bin/dsa-slapd:ro" \
    "$image" sleep infinity >/dev/null
ctr() { docker exec "$container" "$@"; }
ok "fresh container $container from $image (base $base)"

# ---- install
ctr dpkg -i /tmp/dsa-router.deb >"$work/dpkg.log" 2>&1 || {
    cat "$work/dpkg.log" >&2
    fail "dpkg -i failed"
}
[ "$(ctr dpkg-query -W -f '${Status}' dsa-router)" = "install ok installed" ] || fail "dsa-router is not installed"
ctr getent passwd dsa-router >/dev/null || fail "no system user dsa-router"
ctr dsa-router --version >/dev/null
if ctr dsa-router demo --help >/dev/null 2>&1; then fail "the packaged binary has demo (dev-tools)"; fi
ok "dpkg -i: installed ($(ctr dsa-router --version)), system user dsa-router, production binary (no demo)"

# ---- a DSA where the example knowledge says DSA1 is
docker exec -d -e DSA_NAME=DSA1 -e DSA_SUFFIX=dc=example,dc=com -e DSA_PORT=1389 "$container" \
    sh -c 'exec /usr/local/bin/dsa-slapd >/tmp/slapd.log 2>&1'
deadline=$(($(date +%s) + 30))
until ctr ldapsearch -x -LLL -o nettimeout=2 -H ldap://127.0.0.1:1389 -b "" -s base namingContexts >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "slapd on 127.0.0.1:1389 did not start: $(ctr cat /tmp/slapd.log)"
    sleep 0.2
done
ok "slapd DSA1 holds dc=example,dc=com on 127.0.0.1:1389"

# ---- the router, as the unit starts it
ctr sh -c "dsa-router check /etc/dsa-router/router.dxg --name R1" >/dev/null || fail "the packaged knowledge does not load"
ctr sh -c "dsa-router check --config /etc/dsa-router/router.toml" >/dev/null || fail "the packaged settings file does not load"
unit_line() { ctr sed -n "s/^$1=//p" "$unit"; }
# systemd: ${VAR} is one word, $VAR splits on white space; the shell, the
# same when ${VAR} is quoted.
to_shell() { sed -E 's/\$\{([A-Za-z_][A-Za-z0-9_]*)\}/"${\1}"/g'; }
start=$(unit_line ExecStart | to_shell)
reload=$(unit_line ExecReload | to_shell)
user=$(unit_line User)
rundir=/run/$(unit_line RuntimeDirectory)
runmode=$(unit_line RuntimeDirectoryMode)
[ "$rundir" = /run/dsa-router ] && [ -n "$runmode" ] || fail "unexpected unit: RuntimeDirectory '$rundir' (mode '$runmode')"
caps=$(unit_line AmbientCapabilities | tr 'A-Z' 'a-z' | sed -E 's/(^| )cap_/\1+/g; s/ /,/g')
envfile=$(unit_line EnvironmentFile)
[ -n "$start" ] && [ -n "$reload" ] && [ "$user" = dsa-router ] && [ "$caps" = +net_bind_service ] ||
    fail "unexpected unit: ExecStart '$start', ExecReload '$reload', User '$user', capabilities '$caps'"
# As systemd: the environment file read as root, RuntimeDirectory= made
# (the service user's) and named in $RUNTIME_DIRECTORY, then the command as
# the unit's user with the unit's ambient capability (and no new
# privileges).
ctr install -d -o "$user" -g "$user" -m "$runmode" "$rundir"
# LogsDirectory=: /var/log/NAME, the service user's (mode 0755).
logdir=/var/log/$(unit_line LogsDirectory)
[ "$logdir" = /var/log/dsa-router ] || fail "unexpected unit: LogsDirectory '$logdir'"
ctr install -d -o "$user" -g "$user" -m 0755 "$logdir"
as_unit() {
    printf 'set -a; . %s; RUNTIME_DIRECTORY=%s; set +a; exec setpriv --reuid %s --regid %s --init-groups --no-new-privs --inh-caps %s --ambient-caps %s -- %s' \
        "$envfile" "$rundir" "$user" "$user" "$caps" "$caps" "$1"
}
docker exec -d "$container" bash -c "$(as_unit "$start") >/tmp/router.log 2>&1"
search() {
    ctr ldapsearch -x -LLL -o nettimeout=5 -o ldif-wrap=no -H ldap://127.0.0.1:389 "$@"
}
deadline=$(($(date +%s) + 30))
until out=$(search -b "cn=served-by,dc=example,dc=com" -s base description 2>&1); do
    [ "$(date +%s)" -lt "$deadline" ] || fail "the router does not answer on port 389: $out"
    sleep 0.2
done
[ "$(sed -n 's/^description: //p' <<<"$out")" = DSA1 ] || fail "cn=served-by answered '$out', want DSA1"
# The router's processes' owners (no procps in the base image: /proc).
owners='for p in /proc/[0-9]*; do [ "$(cat "$p/comm" 2>/dev/null)" = dsa-router ] && stat -c %U "$p"; done; true'
uid=$(ctr sh -c "$owners" | sort -u | tr -d ' \n')
[ "$uid" = dsa-router ] || fail "the router runs as '$uid'"
out=$(search -b "dc=example,dc=com" "(uid=alice)" mail) || fail "search (uid=alice) failed: $out"
grep -qx 'mail: alice@example.com' <<<"$out" || fail "search (uid=alice): $out"
ok "the router (ExecStart, user dsa-router) answers on 389 with the packaged knowledge: cn=served-by from DSA1, alice's mail"

# ---- knowledge holds DSA passwords: not for every local user
for f in /etc/dsa-router/router.dxg /etc/dsa-router/R1.dxc /etc/dsa-router/DSA1.dxc; do
    mode=$(ctr stat -c '%a %U:%G' "$f")
    [ "$mode" = "640 root:dsa-router" ] || fail "$f is $mode, want 640 root:dsa-router"
done
if ctr setpriv --reuid nobody --regid nogroup --clear-groups cat /etc/dsa-router/DSA1.dxc >/dev/null 2>&1; then
    fail "user nobody reads /etc/dsa-router/DSA1.dxc"
fi
ok "the knowledge files are 0640 root:dsa-router: the service reads them, nobody does not"

# ---- ctl as it is: the control socket, for root and the service user
sock=$(ctr stat -c '%a %U %F' "$rundir/control.sock") || fail "no control socket $rundir/control.sock"
[ "$sock" = "600 $user socket" ] || fail "$rundir/control.sock is '$sock', want '600 $user socket'"
ctr dsa-router ctl drain DSA1 >"$work/ctl.out" 2>&1 || fail "ctl drain DSA1 as root: $(cat "$work/ctl.out")"
grep -q "DSA1: draining" "$work/ctl.out" || fail "ctl drain DSA1 as root: $(cat "$work/ctl.out")"
ctr setpriv --reuid "$user" --regid "$user" --init-groups dsa-router ctl enable DSA1 >"$work/ctl.out" 2>&1 ||
    fail "ctl enable DSA1 as $user: $(cat "$work/ctl.out")"
ctr dsa-router ctl status | grep -E '^ +DSA1 ' | grep -qw up || fail "DSA1 not up after ctl enable: $(ctr dsa-router ctl status)"
ok "dsa-router ctl (no options) drains as root and enables as $user through $rundir/control.sock"
as_nobody() { ctr setpriv --reuid nobody --regid nogroup --clear-groups "$@"; }
for cmd in "reload" "drain DSA1" "shutdown" "upgrade"; do
    # shellcheck disable=SC2086
    if as_nobody dsa-router ctl $cmd >"$work/ctl.out" 2>&1; then fail "user nobody: ctl $cmd succeeded"; fi
    grep -q "control socket" "$work/ctl.out" || fail "user nobody: ctl $cmd: $(cat "$work/ctl.out")"
    # shellcheck disable=SC2086
    if as_nobody dsa-router ctl --token guess $cmd >"$work/ctl.out" 2>&1; then fail "user nobody: ctl --token guess $cmd (TCP) succeeded"; fi
    grep -q "HTTP 403" "$work/ctl.out" || fail "user nobody over TCP: ctl $cmd: $(cat "$work/ctl.out")"
done
search -b "cn=served-by,dc=example,dc=com" -s base description >/dev/null || fail "no answer after nobody's attempts"
ctr dsa-router ctl status | grep -E '^ +DSA1 ' | grep -qw up || fail "DSA1 changed by nobody: $(ctr dsa-router ctl status)"
ok "user nobody: ctl reload, drain, shutdown and upgrade refused over the control socket and over TCP; the router serves on"

# ---- systemctl reload: ExecReload
ctr bash -c "$(as_unit "$reload")" >"$work/reload.out" 2>&1 || fail "ExecReload failed: $(cat "$work/reload.out")"
ctr cp /etc/dsa-router/DSA1.dxc /tmp/DSA1.dxc.orig
ctr sh -c 'echo "set dsa broken" >>/etc/dsa-router/DSA1.dxc'
if ctr bash -c "$(as_unit "$reload")" >"$work/reload.out" 2>&1; then
    fail "ExecReload accepted broken knowledge: $(cat "$work/reload.out")"
fi
ctr cp /tmp/DSA1.dxc.orig /etc/dsa-router/DSA1.dxc
search -b "cn=served-by,dc=example,dc=com" -s base description >/dev/null || fail "no answer after the failed reload"
ok "ExecReload (dsa-router ctl reload) reloads; on broken knowledge it fails and the router keeps answering"

# ---- logs: plain lines for the journal
ctr grep -q "dsa-router listening" /tmp/router.log || fail "no 'dsa-router listening' in the log"
if ctr grep -q $'\e' /tmp/router.log; then fail "ANSI escapes in the log (not a terminal)"; fi
ok "logs: plain text on stderr, no colour codes ($(ctr sh -c 'wc -l </tmp/router.log') lines)"

# ---- the access log: a file of its own, rotated by logrotate
access=$logdir/access.log
# Lines are written every 100 ms: wait for them.
lines_in() {
    local deadline=$(($(date +%s) + 10)) n
    while :; do
        n=$(ctr sh -c "grep -c ' op=\"search\"' $1 2>/dev/null || true")
        [ "${n:-0}" -ge "$2" ] && return 0
        [ "$(date +%s)" -lt "$deadline" ] || return 1
        sleep 0.2
    done
}
lines_in "$access" 2 || fail "no search lines in $access: $(ctr sh -c "cat $access" 2>&1 | tail -n 5)"
ctr grep -q ' dn=cn=served-by,dc=example,dc=com ' "$access" || fail "the search of cn=served-by is not in $access"
if ctr grep -q ' access: ' /tmp/router.log; then fail "access lines on stderr (the journal): $(ctr grep ' access: ' /tmp/router.log | head -n 2)"; fi
ok "the access log goes to $access ($(ctr sh -c "wc -l <$access") lines, $(ctr stat -c '%a %U' "$access")), not to stderr"
ctr logrotate -d /etc/logrotate.d/dsa-router >"$work/logrotate.out" 2>&1 ||
    fail "logrotate -d: $(cat "$work/logrotate.out")"
if grep -qi '^error' "$work/logrotate.out"; then fail "logrotate -d: $(grep -i '^error' "$work/logrotate.out")"; fi
before=$(ctr sh -c "grep -c ' op=' $access")
ctr logrotate -f -s /tmp/logrotate.state /etc/logrotate.d/dsa-router >"$work/logrotate.out" 2>&1 ||
    fail "logrotate -f: $(cat "$work/logrotate.out")"
ctr test -f "$access.1" || fail "logrotate -f did not move $access: $(ctr ls -l "$logdir")"
[ "$(ctr sh -c "grep -c ' op=' $access.1")" = "$before" ] || fail "$access.1 holds other lines than $access did"
search -b "cn=served-by,dc=example,dc=com" -s base description >/dev/null || fail "no answer after the rotation"
lines_in "$access" 1 || fail "no line in the new $access after logrotate: $(ctr ls -l "$logdir"; ctr tail -n 3 /tmp/router.log)"
[ "$(ctr sh -c "grep -c ' op=' $access.1")" = "$before" ] || fail "lines went to $access.1 after the reopen"
mode=$(ctr stat -c '%a %U:%G' "$access")
[ "$mode" = "640 $user:adm" ] || fail "the new $access is $mode, want 640 $user:adm"
ok "logrotate: -d parses /etc/logrotate.d/dsa-router; -f moves $access to $access.1 ($before lines) and, after ctl reopen-logs, new lines go to a fresh $access ($mode)"

# ---- the documentation
for f in README.md docs/README.md docs/reference.md docs/logs.md docs/debian.md; do
    ctr test -s "/usr/share/doc/dsa-router/$f" || fail "/usr/share/doc/dsa-router/$f is not installed"
    docker exec -i "$container" cmp -s "/usr/share/doc/dsa-router/$f" - <"$f" || fail "/usr/share/doc/dsa-router/$f differs from $f"
done
ok "the documentation is installed: /usr/share/doc/dsa-router/README.md and docs/ ($(ctr sh -c 'ls /usr/share/doc/dsa-router/docs | wc -l') pages)"

# ---- man page and completions
ctr sh -c 'MANPAGER=cat MANWIDTH=100 man dsa-router' >"$work/man.txt" 2>&1 || fail "man dsa-router: $(head -n 5 "$work/man.txt")"
for want in "DSA-ROUTER SERVE" "--knowledge <KNOWLEDGE>" "--max-clients" "--listen <LISTEN>" "/etc/default/dsa-router" "SIGHUP"; do
    grep -qF -- "$want" "$work/man.txt" || fail "man dsa-router does not show '$want'"
done
ctr bash -c '. /usr/share/bash-completion/completions/dsa-router && complete -p dsa-router' >/dev/null ||
    fail "the bash completion does not load"
ok "man dsa-router shows serve's options ($(wc -l <"$work/man.txt") lines); the bash completion loads"

# ---- removal
ctr sh -c 'for p in /proc/[0-9]*; do [ "$(cat "$p/comm" 2>/dev/null)" = dsa-router ] && kill "${p#/proc/}"; done; true'
ctr dpkg --purge dsa-router >"$work/purge.log" 2>&1 || fail "dpkg --purge: $(cat "$work/purge.log")"
if ctr test -e /etc/dsa-router/router.dxg || ctr test -e /usr/bin/dsa-router || ctr test -e /etc/logrotate.d/dsa-router ||
    ctr test -e /usr/share/doc/dsa-router/README.md || ctr test -e "$logdir"; then
    fail "files left after purge"
fi
ok "dpkg --purge removes the package and its conffiles"
