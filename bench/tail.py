#!/usr/bin/env python3
"""bench/tail.py: tail latency through dsa-router, with figures side by side.

Two scenarios, each measured in one run against its comparison:

1. A DSA freezes: two OpenLDAP slapd (mdb, 2,000 users) in one load-share
   group behind dsa-router; steady read load from 8 clients (dsa-bench,
   eq=100); after 3 s of the measured 10 s, slapd #2 gets SIGSTOP (accepts
   nothing, answers nothing) and SIGCONT 5 s later. Measured with the
   defaults (hedged reads, outlier ejection) and with both off
   (--hedge-budget 0 --max-ejection 0): errors, p99, p99.9, worst read.
   Then 8 s without a fault: hedges as a share of reads (from /metrics).
2. A DSA is slow: a slapd and the in-tree test DSA (`dsa-router testdsa`,
   the same 2,000 users) with every response delayed 20 ms; the same load
   through dsa-router (defaults) and through HAProxy (mode tcp, balance
   leastconn) in front of the same pair: ops/s, p50, p99, p99.9, worst.

Writes docs/benchmarks/tail-latency.md (OUT=- for none). Needs slapd, slapadd, haproxy
(scripts/install-deps.sh). Builds `cargo build --release -p dsa-router -p
dsa-bench` unless NO_BUILD=1.

Usage: python3 bench/tail.py [--quick]   (--quick: 4 s runs, no file)
Environment: CONNECTIONS [8], USERS [2000], OUT [docs/benchmarks/tail-latency.md],
NO_BUILD [0], KEEP [0] (keep the work directory).
"""

import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SUFFIX = "o=DEMOCORP,c=AU"
SLAPD = "/usr/sbin/slapd"
SLAPADD = "/usr/sbin/slapadd"
QUICK = "--quick" in sys.argv[1:]
CONNECTIONS = int(os.environ.get("CONNECTIONS", "8"))
USERS = int(os.environ.get("USERS", "2000"))
DURATION = 4.0 if QUICK else 10.0
OUT = os.environ.get("OUT", "-" if QUICK else os.path.join(ROOT, "docs", "benchmarks", "tail-latency.md"))
BIN = os.path.join(ROOT, "target", "release", "dsa-router")
BENCH = os.path.join(ROOT, "target", "release", "dsa-bench")
PROCS = []


def log(msg):
    print(f"tail.py: {msg}", file=sys.stderr, flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def spawn(args, logf):
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT)
    PROCS.append(p)
    return p


def stop(p):
    if p.poll() is None:
        try:
            p.send_signal(signal.SIGCONT)
            p.terminate()
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    if p in PROCS:
        PROCS.remove(p)


def answers(port, timeout=30):
    """Wait until uid=user0001 comes back once from port."""
    end = time.time() + timeout
    while time.time() < end:
        r = subprocess.run(
            ["ldapsearch", "-x", "-LLL", "-o", "nettimeout=2", "-H", f"ldap://127.0.0.1:{port}",
             "-b", SUFFIX, "(uid=user0001)", "uid"],
            capture_output=True, text=True, timeout=10)
        if r.returncode == 0 and r.stdout.count("dn:") == 1:
            return
        time.sleep(0.2)
    sys.exit(f"tail.py: nothing answers on port {port}")


def slapd(work, name, ldif):
    d = os.path.join(work, name)
    os.makedirs(os.path.join(d, "db"))
    conf = os.path.join(d, "slapd.conf")
    with open(conf, "w") as f:
        for s in ["core", "cosine", "inetorgperson", "nis"]:
            f.write(f"include /etc/ldap/schema/{s}.schema\n")
        f.write(f"""modulepath /usr/lib/ldap
moduleload back_mdb
pidfile {d}/slapd.pid
sizelimit unlimited
timelimit unlimited
database mdb
suffix "{SUFFIX}"
rootdn "cn=admin,{SUFFIX}"
rootpw secret
directory {d}/db
maxsize 1073741824
index objectClass eq
index uid eq
access to * by * read
""")
    subprocess.run([SLAPADD, "-q", "-f", conf, "-b", SUFFIX, "-l", ldif], check=True,
                   capture_output=True)
    port = free_port()
    p = spawn([SLAPD, "-d", "none", "-h", f"ldap://127.0.0.1:{port}/", "-f", conf],
              open(os.path.join(d, "log"), "w"))
    answers(port)
    return p, port


def knowledge(work, name, ports):
    path = os.path.join(work, name + ".dxg")
    with open(path, "w") as f:
        for i, port in enumerate(ports, 1):
            f.write(f"""set dsa "S{i}" =
{{
    prefix           = <c AU><o DEMOCORP>
    address          = tcp "127.0.0.1" port {port}
    dsa-flags        = load-share
    load-share-group = "BENCH"
}};
""")
    return path


def router(work, name, know, extra):
    port, admin = free_port(), free_port()
    p = spawn([BIN, "serve", "--knowledge", know, "--listen", f"127.0.0.1:{port}",
               "--admin", f"127.0.0.1:{admin}", "--no-access-log", "--probe-interval", "1",
               *extra], open(os.path.join(work, name + ".log"), "w"))
    answers(port)
    return p, port, admin


def bench(port, duration=DURATION, during=None):
    """dsa-bench against port; `during(t0)` runs in a thread meanwhile."""
    args = [BENCH, "--url", f"ldap://127.0.0.1:{port}", "--connections", str(CONNECTIONS),
            "--duration", str(duration), "--warmup", "1", "--users", str(USERS), "--json"]
    t = None
    if during:
        t = threading.Thread(target=during, args=(time.time(),))
        t.start()
    r = subprocess.run(args, capture_output=True, text=True)
    if t:
        t.join()
    if r.returncode != 0:
        sys.exit(f"tail.py: dsa-bench failed: {r.stderr[-2000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def metric(admin, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=5).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{") or (name.endswith('"') and line.startswith(name)):
            total += float(line.rsplit(" ", 1)[1])
    return total


def row(label, b):
    lat = b["latency_ms"]
    errors = sum(b["errors"].values()) + b["io_errors"]
    return [label, f"{b['ops_per_sec']:.0f}", str(errors), f"{lat['p50']:.2f}", f"{lat['p99']:.2f}",
            f"{lat['p999']:.2f}", f"{lat['max']:.2f}"]


def table(headers, rows):
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def freeze(work, ldif):
    s1, p1 = slapd(work, "slapd1", ldif)
    rows, figures = [], {}
    for label, extra in [("dsa-router, defaults (hedging, ejection)", []),
                         ("dsa-router, --hedge-budget 0 --max-ejection 0", ["--hedge-budget", "0", "--max-ejection", "0"])]:
        s2, p2 = slapd(work, f"slapd2-{len(rows)}", ldif)
        know = knowledge(work, f"freeze{len(rows)}", [p1, p2])
        r, port, admin = router(work, f"freeze{len(rows)}", know, extra)
        stop_at, cont_at = 1 + DURATION * 0.3, 1 + DURATION * 0.8

        def fault(t0, s2=s2):
            time.sleep(max(0, t0 + stop_at - time.time()))
            s2.send_signal(signal.SIGSTOP)
            time.sleep(max(0, t0 + cont_at - time.time()))
            s2.send_signal(signal.SIGCONT)

        b = bench(port, during=fault)
        hedges = metric(admin, "dsa_router_hedges_total")
        ejections = metric(admin, "dsa_router_ejections_total")
        rows.append(row(label, b) + [f"{hedges:.0f}", f"{ejections:.0f}"])
        figures[label] = b
        stop(r)
        stop(s2)
    # Steady state: the share of reads hedged with no fault.
    s2, p2 = slapd(work, "slapd2-steady", ldif)
    r, port, admin = router(work, "steady", knowledge(work, "steady", [p1, p2]), [])
    b = bench(port)
    hedges = metric(admin, "dsa_router_hedges_total")
    reads = metric(admin, 'dsa_router_operations_total{op="search"')
    share = 100.0 * hedges / reads if reads else 0.0
    stop(r)
    stop(s2)
    stop(s1)
    return rows, share, hedges, reads, b


def slow(work, ldif):
    # The slow one: the in-tree test DSA with its delay switch; the other:
    # a real slapd with the same entries.
    port = free_port()
    spawn([BIN, "testdsa", "--listen", f"127.0.0.1:{port}", "--name", "SLOW", "--ldif", ldif,
           "--delay-ms", "20"], open(os.path.join(work, "testdsa.log"), "w"))
    answers(port)
    s, sport = slapd(work, "slapd-fast", ldif)
    ports = [port, sport]
    rows = []
    r, port, _ = router(work, "slow", knowledge(work, "slow", ports), [])
    rows.append(row("dsa-router, defaults", bench(port)))
    stop(r)
    hp = free_port()
    cfg = os.path.join(work, "haproxy.cfg")
    with open(cfg, "w") as f:
        f.write(f"""global
    nbthread 1
defaults
    mode tcp
    timeout connect 3s
    timeout client 1h
    timeout server 1h
frontend ldap
    bind 127.0.0.1:{hp}
    default_backend dsas
backend dsas
    balance leastconn
    server t1 127.0.0.1:{ports[0]} check inter 1s
    server t2 127.0.0.1:{ports[1]} check inter 1s
""")
    h = spawn([shutil.which("haproxy") or "/usr/sbin/haproxy", "-db", "-f", cfg],
              open(os.path.join(work, "haproxy.log"), "w"))
    answers(hp)
    rows.append(row("HAProxy mode tcp, balance leastconn", bench(hp)))
    stop(h)
    stop(s)
    return rows


def main():
    for tool in [SLAPD, SLAPADD]:
        if not os.access(tool, os.X_OK):
            sys.exit(f"tail.py: {tool} missing; run scripts/install-deps.sh")
    if not (shutil.which("haproxy") or os.access("/usr/sbin/haproxy", os.X_OK)) or not shutil.which("ldapsearch"):
        sys.exit("tail.py: haproxy or ldapsearch missing; run scripts/install-deps.sh")
    if os.environ.get("NO_BUILD") != "1":
        log("building: cargo build --release -p dsa-router -p dsa-bench")
        subprocess.run(["cargo", "build", "--release", "-p", "dsa-router", "-p", "dsa-bench"],
                       cwd=ROOT, check=True)
    work = tempfile.mkdtemp(prefix="dsa-router-tail.")
    log(f"work dir {work}")
    try:
        ldif = os.path.join(work, "people.ldif")
        with open(ldif, "w") as f:
            subprocess.run([sys.executable, os.path.join(ROOT, "bench", "benchlib.py"), "ldif-people",
                            str(USERS)], stdout=f, check=True)
        log("scenario 1: a DSA freezes (SIGSTOP)")
        frows, share, hedges, reads, steady = freeze(work, ldif)
        log("scenario 2: a DSA is slow (+20 ms per operation)")
        srows = slow(work, ldif)
    finally:
        for p in list(PROCS):
            stop(p)
        if os.environ.get("KEEP") == "1":
            log(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    head = ["path", "ops/s", "errors", "p50 ms", "p99 ms", "p99.9 ms", "worst ms"]
    t1 = table(head + ["hedges", "ejections"], frows)
    t2 = table(head, srows)
    stop_s, cont_s = DURATION * 0.3, DURATION * 0.8
    lat = steady["latency_ms"]
    text = f"""# Tail latency: hedged reads and outlier ejection

Generated by `python3 bench/tail.py` on {time.strftime('%Y-%m-%d')} ({platform.node()}, {os.cpu_count()} CPUs,
{platform.machine()}); {CONNECTIONS} clients of `dsa-bench` (mix eq=100: a search for one of
{USERS} users by uid), {DURATION:.0f} s measured after 1 s of warm-up. This machine is shared and
noisy: read the rows of one table against each other, not against other runs.

## A DSA freezes

Two slapd (mdb) in one load-share group; slapd #2 is stopped (SIGSTOP) {stop_s:.0f} s into
the measured run and continued (SIGCONT) {cont_s:.0f} s in. Health probes every 1 s,
timeout 1 s, fall 3 in both rows.

{t1}

Without a fault, with the defaults: {hedges:.0f} hedges for {reads:.0f} reads
({share:.2f}% of reads; the budget allows 5%), p99 {lat['p99']:.2f} ms, worst {lat['max']:.2f} ms.

## A DSA is slow

A real slapd and the in-tree test DSA with the same entries, in one group;
every response of the test DSA is delayed 20 ms (its delay switch). The same
load through each path. HAProxy balances connections: a client connection
it put on the slow DSA stays there.

{t2}
"""
    print(text)
    if OUT != "-":
        with open(OUT, "w") as f:
            f.write(text)
        log(f"wrote {OUT}")


if __name__ == "__main__":
    main()
