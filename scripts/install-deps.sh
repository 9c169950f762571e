#!/usr/bin/env bash
# Installs what the tests need, and only what is missing (idempotent):
#   Debian: slapd (+ slapadd), ldap-utils (ldapsearch, ...), haproxy,
#           debootstrap (scripts/docker-build-base.sh: the compose test's
#           base image, made without a registry),
#           sasl2-bin + libsasl2-modules (saslpasswd2; DIGEST-MD5 and
#           SCRAM-SHA-256 for slapd's SASL via sasldb),
#           default-jdk-headless (javac: the JNDI client tests),
#           prometheus (promtool: the metrics lint and the example alert
#           rules' tests; its service is kept from starting)
#   PyPI (for the `python3` on PATH): ldap3, prometheus_client
# Tests run their own slapd processes (tests/support/slapd.rs); the system
# slapd that the Debian package would start is kept from starting (or
# stopped) so it does not sit on port 389.
# Needs root or sudo for the apt part.
set -euo pipefail

log() { echo "install-deps: $*"; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    fi
fi
as_root() {
    if [ "$(id -u)" -ne 0 ] && [ ${#SUDO[@]} -eq 0 ]; then
        log "need root or sudo to run: $*" >&2
        exit 1
    fi
    log "+ $*"
    "${SUDO[@]}" "$@"
}

# ---- Debian packages
apt_pkgs=()
{ [ -x /usr/sbin/slapd ] && [ -x /usr/sbin/slapadd ]; } || apt_pkgs+=(slapd)
for tool in ldapsearch ldapwhoami ldapmodify ldapcompare; do
    if ! command -v "$tool" >/dev/null 2>&1; then
        apt_pkgs+=(ldap-utils)
        break
    fi
done
{ command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ]; } || apt_pkgs+=(haproxy)
{ command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ]; } || apt_pkgs+=(debootstrap)
{ command -v saslpasswd2 >/dev/null 2>&1 || [ -x /usr/sbin/saslpasswd2 ]; } || apt_pkgs+=(sasl2-bin)
ls /usr/lib/*/sasl2/libscram.so* /usr/lib/*/sasl2/libdigestmd5.so* >/dev/null 2>&1 || apt_pkgs+=(libsasl2-modules)
command -v javac >/dev/null 2>&1 || apt_pkgs+=(default-jdk-headless)
command -v promtool >/dev/null 2>&1 || apt_pkgs+=(prometheus)
# The status page's browser test: headless Chromium, its driver, Selenium.
command -v chromium >/dev/null 2>&1 || apt_pkgs+=(chromium)
command -v chromedriver >/dev/null 2>&1 || apt_pkgs+=(chromium-driver)
/usr/bin/python3 -c 'import selenium' >/dev/null 2>&1 || apt_pkgs+=(python3-selenium)

if [ ${#apt_pkgs[@]} -gt 0 ]; then
    log "installing Debian packages: ${apt_pkgs[*]}"
    # Keep package scripts from starting services (system slapd, haproxy):
    # a policy-rc.d that denies everything, unless one is already there.
    policy=/usr/sbin/policy-rc.d
    made_policy=0
    if [ ! -e "$policy" ]; then
        as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod +x $policy"
        made_policy=1
    fi
    cleanup() { if [ "$made_policy" = 1 ]; then as_root rm -f "$policy"; fi; }
    trap cleanup EXIT
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${apt_pkgs[@]}"
    cleanup
    trap - EXIT
else
    log "Debian packages present: slapd, ldap-utils, haproxy, debootstrap, sasl2-bin, libsasl2-modules, a JDK, chromium, chromium-driver, python3-selenium"
fi

# A system slapd (started by the package on a host without policy-rc.d, or
# at boot) is not needed: stop it. Only the one from Debian's pid file;
# never slapd processes of running tests.
for pidfile in /run/slapd/slapd.pid /var/run/slapd/slapd.pid; do
    if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        log "stopping the system slapd (pid $(cat "$pidfile")) so it does not hold port 389"
        if command -v service >/dev/null 2>&1; then
            as_root service slapd stop || as_root kill "$(cat "$pidfile")" || true
        else
            as_root kill "$(cat "$pidfile")" || true
        fi
        break
    fi
done

# ---- Python modules
if ! command -v python3 >/dev/null 2>&1; then
    log "python3 missing: installing python3 python3-ldap3 python3-prometheus-client"
    as_root apt-get update -q
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3 python3-ldap3 python3-prometheus-client
fi
py_missing=()
python3 -c 'import ldap3' 2>/dev/null || py_missing+=(ldap3)
python3 -c 'import prometheus_client' 2>/dev/null || py_missing+=(prometheus_client)
# The OTLP receiver of the trace test (tests/support/otlp_receiver.py).
python3 -c 'import opentelemetry.proto.collector.trace.v1.trace_service_pb2' 2>/dev/null || py_missing+=(opentelemetry-proto)
if [ ${#py_missing[@]} -gt 0 ]; then
    log "installing Python modules for $(command -v python3): ${py_missing[*]}"
    export PIP_DISABLE_PIP_VERSION_CHECK=1
    pip_user=()
    [ "$(id -u)" -eq 0 ] && pip_user=(--root-user-action=ignore)
    if ! python3 -m pip install -q "${pip_user[@]}" "${py_missing[@]}"; then
        # Debian's own python3 refuses pip outside a venv (PEP 668).
        log "pip install failed; retrying with --break-system-packages"
        if ! python3 -m pip install -q "${pip_user[@]}" --break-system-packages "${py_missing[@]}"; then
            log "pip unusable; installing Debian's python3-ldap3 python3-prometheus-client"
            as_root apt-get update -q
            as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-ldap3 python3-prometheus-client
        fi
    fi
    python3 -c 'import ldap3, prometheus_client, opentelemetry.proto'
else
    log "Python modules present: ldap3, prometheus_client, opentelemetry-proto"
fi
log "ok"
