#!/usr/bin/env python3
"""Helpers for bench/compare.sh (standard library only).

Subcommands:
  ldif-people N [SUFFIX [FIRST]]   SUFFIX (o=DEMOCORP,c=AU), ou=people and
                              uid=userFIRST..user(FIRST+N-1) (password pw)
  ldif-bulk N                 suffix, ou=bulk and uid=bulk000000..bulk(N-1)
  port                        a free loopback TCP port (bind :0, print, release)
  cpu PID                     utime+stime of the whole process, clock ticks
  mem PID FIELD               FIELD (VmHWM, VmRSS, ...) of /proc/PID/status, kB
  idle URL_HOSTPORT N STATUS  open N idle TCP connections, write "open N" to
                              STATUS, hold them until SIGTERM/SIGINT
  row RESULTS ...             one result row from a bench JSON (see cmd_row)
  extra WORK WHAT RESULT DETAILS   record one extra measurement
  report WORK OUT             print the tables, write the markdown to OUT ('-': none)
"""

import json
import os
import signal
import socket
import sys
import time

SUFFIX = "o=DEMOCORP,c=AU"


def person(uid, ou, cn, sn, suffix=SUFFIX):
    return (
        f"dn: uid={uid},ou={ou},{suffix}\nobjectClass: inetOrgPerson\nuid: {uid}\n"
        f"cn: {cn}\nsn: {sn}\nmail: {uid}@example.com\nuserPassword: pw\n\n"
    )


def suffix_entries(ou, suffix=SUFFIX):
    o = suffix.split(",")[0].split("=", 1)[1]
    return (
        f"dn: {suffix}\nobjectClass: organization\no: {o}\n\n"
        f"dn: ou={ou},{suffix}\nobjectClass: organizationalUnit\nou: {ou}\n\n"
    )


def cmd_ldif_people(n, suffix=SUFFIX, first="0"):
    n, first = int(n), int(first)
    if not 0 < n or first < 0 or first + n > 10000:
        sys.exit("benchlib: users must be within 0..9999 (uid=userNNNN, 4 digits)")
    out = [suffix_entries("people", suffix)]
    for i in range(first, first + n):
        out.append(person(f"user{i:04d}", "people", f"User {i:04d}", f"User{i:04d}", suffix))
    sys.stdout.write("".join(out))


def cmd_ldif_bulk(n):
    n = int(n)
    w = sys.stdout.write
    w(suffix_entries("bulk"))
    buf = []
    for i in range(n):
        buf.append(person(f"bulk{i:06d}", "bulk", f"Bulk {i:06d}", f"Bulk{i:06d}"))
        if len(buf) >= 10000:
            w("".join(buf))
            buf = []
    w("".join(buf))


def cmd_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
    s.close()


def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        s = f.read()
    fields = s[s.rindex(")") + 2:].split()
    # fields[0] is field 3 (state); utime is field 14, stime field 15
    return int(fields[11]) + int(fields[12])


def cmd_cpu(pid):
    print(cpu_ticks(pid))


def cmd_mem(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                print(line.split()[1])
                return
    sys.exit(f"benchlib: no {field} in /proc/{pid}/status")


def cmd_idle(hostport, n, status):
    host, port = hostport.rsplit(":", 1)
    n = int(n)
    stop = {"flag": False}

    def on_signal(_sig, _frm):
        stop["flag"] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    socks = []
    t0 = time.monotonic()
    try:
        for i in range(n):
            if stop["flag"]:
                return
            s = socket.create_connection((host, int(port)), timeout=30)
            s.setblocking(False)
            socks.append(s)
    except OSError as e:
        with open(status, "w") as f:
            f.write(f"error after {len(socks)} connections: {e}\n")
        sys.exit(1)
    elapsed = time.monotonic() - t0
    with open(status, "w") as f:
        f.write(f"open {len(socks)} {elapsed:.2f}\n")
    # Hold them; report any the server closed.
    while not stop["flag"]:
        time.sleep(0.2)
    closed = 0
    for s in socks:
        try:
            if s.recv(1) == b"":
                closed += 1
        except BlockingIOError:
            pass
        except OSError:
            closed += 1
    with open(status, "a") as f:
        f.write(f"closed-by-server {closed}\n")


def load_bench_json(path):
    with open(path) as f:
        text = f.read()
    a, b = text.find("{"), text.rfind("}")
    if a < 0 or b < a:
        raise SystemExit(f"benchlib: no JSON object in {path}: {text[:300]!r}")
    return json.loads(text[a:b + 1])


def cmd_row(results, key, label, bench_json, ticks, clk_tck, hwm_kb, settings, other_pct, *backend_ticks):
    """Append one row to RESULTS (JSON lines). ticks: CPU clock ticks of the
    measured process over the measured run; other_pct: CPU used meanwhile by
    processes outside the test, % of the machine; backend_ticks: CPU clock
    ticks of slapd #1, #2 over the run."""
    d = load_bench_json(bench_json)
    ok = int(d.get("ok", 0))
    ticks, clk_tck, hwm_kb = int(ticks), int(clk_tck), int(hwm_kb)

    def per_op(t):
        return (t / clk_tck) * 1e6 / ok if ok else None

    lat = d.get("latency_ms", {})
    row = {
        "key": key,
        "path": label,
        "ops_per_sec": float(d.get("ops_per_sec", 0.0)),
        "ok": ok,
        "errors": {str(k): int(v) for k, v in (d.get("errors") or {}).items()},
        "p50": lat.get("p50"),
        "p90": lat.get("p90"),
        "p99": lat.get("p99"),
        "p999": lat.get("p999"),
        "duration_s": d.get("duration_s"),
        "cpu_ticks": ticks,
        "cpu_us_per_op": per_op(ticks),
        "peak_rss_mib": hwm_kb / 1024.0,
        "settings": settings,
        "other_cpu_pct": float(other_pct),
        "backend_cpu_us_per_op": [per_op(int(t)) for t in backend_ticks],
        # TLS handshakes of the measured run, and how many resumed a session
        "tls_handshakes": int((d.get("tls") or {}).get("handshakes", 0)),
        "tls_resumed": int((d.get("tls") or {}).get("resumed", 0)),
        "round": int(os.environ.get("BENCH_ROUND", "0")),
    }
    with open(results, "a") as f:
        f.write(json.dumps(row) + "\n")


def fmt(v, nd=2):
    if v is None:
        return "n/a"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def ratio(a, b):
    if a is None or b is None or not b:
        return None
    return a / b


def render_table(headers, rows, markdown):
    if markdown:
        out = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(out)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()
    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def read_tsv(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [tuple(l.rstrip("\n").split("\t", 1)) for l in f if l.strip()]


def load_meta(work):
    """The report's inputs besides results.jsonl, from files in WORK
    (machine.tsv, notes.txt, configs.tsv, extras.jsonl) and BENCH_* env vars."""
    e = os.environ
    configs = []
    for title, path in read_tsv(os.path.join(work, "configs.tsv")):
        with open(path) as f:
            configs.append((title, f.read()))
    extras = []
    ep = os.path.join(work, "extras.jsonl")
    if os.path.exists(ep):
        with open(ep) as f:
            extras = [json.loads(l) for l in f if l.strip()]
    notes = []
    np_ = os.path.join(work, "notes.txt")
    if os.path.exists(np_):
        with open(np_) as f:
            notes = [l.rstrip("\n") for l in f if l.strip()]
    return {
        "date": e.get("BENCH_DATE", "?"),
        "command": e.get("BENCH_COMMAND", "bench/compare.sh"),
        "load": e.get("BENCH_LOAD", "?"),
        "method": e.get("BENCH_METHOD", ""),
        "runtime_s": e.get("BENCH_RUNTIME", "?"),
        "check": e.get("BENCH_CHECK", "1") == "1",
        "expected_keys": e.get("BENCH_EXPECTED", "").split(),
        "machine": read_tsv(os.path.join(work, "machine.tsv")),
        "notes": notes,
        "configs": configs,
        "extras": extras,
        "warnings": [l for l in e.get("BENCH_WARNINGS", "").split("\n") if l.strip()],
    }


def cmd_otlp_sink(status):
    """A minimal OTLP/HTTP sink: reads each POST, answers 200 with an empty
    body (an empty ExportTraceServiceResponse), counts requests and bytes
    into STATUS (rewritten after each), with `port N` once it listens."""
    from http.server import BaseHTTPRequestHandler, HTTPServer

    counts = {"requests": 0, "bytes": 0}

    def write(port):
        tmp = status + ".tmp"
        with open(tmp, "w") as f:
            f.write(f"port {port}\nrequests {counts['requests']}\nbytes {counts['bytes']}\n")
        os.replace(tmp, status)

    class Sink(BaseHTTPRequestHandler):
        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(n)
            counts["requests"] += 1
            counts["bytes"] += n
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", "0")
            self.end_headers()
            write(self.server.server_address[1])

        def log_message(self, *a):
            pass

    srv = HTTPServer(("127.0.0.1", 0), Sink)
    write(srv.server_address[1])
    srv.serve_forever()


def cmd_extra(work, what, result, details):
    with open(os.path.join(work, "extras.jsonl"), "a") as f:
        f.write(json.dumps({"what": what, "result": result, "details": details}) + "\n")


def median(xs):
    xs = sorted(x for x in xs if x is not None)
    if not xs:
        return None
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


# The table's row order: each proxy after the slapd it fronts, HAProxy
# before the router rows compared with it (compare.sh measures them in
# another order, which changes between rounds).
TABLE_ORDER = ["direct", "meta", "asyncmeta", "haproxy", "haproxy-1t", "router", "router-base", "router-1thread",
               "router-accesslog", "haproxy-churn", "haproxy-1t-churn", "router-churn", "router-base-churn"]

# The other groups' tables: (key prefix, title); rows in the order
# direct/meta, HAProxy, HAProxy nbthread 1, dsa-router. latNN- prefixes
# are found in the rows.
SECTIONS = [
    ("tls-", "LDAPS, persistent connections"),
    ("tlschurn-", "LDAPS, a connection per operation, full handshakes"),
    ("tlsresume-", "LDAPS, a connection per operation, sessions resumed"),
    ("tlsdsa-", "LDAPS to the proxy and from it to LDAPS slapd, persistent connections"),
    ("bind-", "Binds as random users on persistent connections"),
    ("bulk-", "One large search streamed (ops/s: entries per second; CPU per entry)"),
    ("span-", "A subtree search at c=AU spanning two partitions"),
    ("pos-", "Replication positions: dsa-router reading contextCSN (default --csn-interval) against --csn-interval 0"),
    ("otel-", "Traces (OpenTelemetry): dsa-router exporting at 1% and 100% sampling against tracing off"),
    ("pol-", "Client policies: dsa-router with a 20-rule --policy file against none"),
]
# Runs without the positions group point to its own report.
POSITIONS_POINTER = ("The cost of replication positions (CPU per operation with and without, "
                     "the readings' traffic per DSA) is measured by `ROW_GROUPS=positions "
                     "bench/compare.sh`, which writes [positions.md](positions.md).")
TRACES_POINTER = ("The cost of traces (CPU per operation at 1% and 100% sampling against tracing "
                  "off) is measured by `ROW_GROUPS=traces bench/compare.sh`, which writes "
                  "[traces.md](traces.md).")
POLICY_POINTER = ("The cost of client policies (CPU per operation with a 20-rule `--policy` file and "
                  "without) is measured by `ROW_GROUPS=policy bench/compare.sh`, which writes "
                  "[policy.md](policy.md).")
SECTION_ORDER = ["direct", "meta", "haproxy", "haproxy-1t", "router-off", "router", "router-trust", "router-1pct", "router-100pct"]


def section_prefix(key):
    """The section a key belongs to ('' for the main table)."""
    head = key.split("-", 1)[0] + "-"
    if head in {p for p, _ in SECTIONS} or (head.startswith("lat") and head[3:-1].isdigit()):
        return head
    return ""


def cheaper(by, a, b):
    """Of the two HAProxy rows a and b, the one with the lower CPU per
    operation (median over the rounds): the targets are judged against it."""
    x, y = by.get(a), by.get(b)
    if x is None or y is None:
        return x or y
    cx, cy = x["cpu_us_per_op"], y["cpu_us_per_op"]
    if cx is None or cy is None:
        return x if cy is None else y
    return x if cx <= cy else y


def aggregate(rows):
    """One row per path, in TABLE_ORDER (others after, in first-seen order):
    with ROUNDS > 1 each figure is the median over the rounds (peak RSS: the
    maximum), ok and errors the sums."""
    order, groups = [], {}
    for r in rows:
        if r["key"] not in groups:
            order.append(r["key"])
            groups[r["key"]] = []
        groups[r["key"]].append(r)
    order.sort(key=lambda k: TABLE_ORDER.index(k) if k in TABLE_ORDER else len(TABLE_ORDER))
    out = []
    for k in order:
        g = groups[k]
        a = dict(g[0])
        a["runs"] = len(g)
        a["ops_range"] = (min(r["ops_per_sec"] for r in g), max(r["ops_per_sec"] for r in g))
        for f in ("ops_per_sec", "p50", "p90", "p99", "p999", "cpu_us_per_op"):
            a[f] = median(r[f] for r in g)
        a["other_cpu_pct"] = max(r.get("other_cpu_pct", 0.0) for r in g)
        a["peak_rss_mib"] = max(r["peak_rss_mib"] for r in g)
        a["ok"] = sum(r["ok"] for r in g)
        a["tls_handshakes"] = sum(r.get("tls_handshakes", 0) for r in g)
        a["tls_resumed"] = sum(r.get("tls_resumed", 0) for r in g)
        errs = {}
        for r in g:
            for c, n in r["errors"].items():
                errs[c] = errs.get(c, 0) + n
        a["errors"] = errs
        nb = max(len(r.get("backend_cpu_us_per_op") or []) for r in g)
        a["backend_cpu_us_per_op"] = [median((r.get("backend_cpu_us_per_op") or [None] * nb)[i] for r in g)
                                      for i in range(nb)]
        # Each round's figures, for ratios between paths of one round.
        # Each round's figures by round number (rows without one: by order).
        a["rounds"] = {r.get("round") or i: (r["ops_per_sec"], r["cpu_us_per_op"], r["p99"], r["p50"], r["p999"])
                       for i, r in enumerate(g, 1)}
        out.append(a)
    return out


def paired(a, b, i):
    """The median over rounds of a's figure i over b's in the same round
    (0: ops/s, 1: CPU/op, 2: p99, 3: p50, 4: p99.9), and the per-round ratios. Paths of one round run
    back to back, so their ratio is less disturbed by the machine speeding
    up or slowing down between rounds (seen here: every process, slapd
    included, 30-40% slower per operation in some rounds) than the ratio
    of the medians."""
    pairs = [(a["rounds"][n], b["rounds"][n]) for n in sorted(a["rounds"]) if n in b["rounds"]]
    ratios = [x[i] / y[i] for x, y in pairs if x[i] is not None and y[i]]
    return (median(ratios) if ratios else None), ratios


def diffs(a, b, i):
    """The median over rounds of a's figure i minus b's in the same round,
    and the per-round differences (latencies: 2 p99, 3 p50, 4 p99.9)."""
    pairs = [(a["rounds"][n], b["rounds"][n]) for n in sorted(a["rounds"]) if n in b["rounds"]]
    d = [x[i] - y[i] for x, y in pairs if x[i] is not None and y[i] is not None]
    return (median(d) if d else None), d


def section_tables(rows, by):
    """(title, headers, cells) for each group's table besides the main one."""
    prefixes = [p for p, _ in SECTIONS]
    lat = sorted({section_prefix(r["key"]) for r in rows if section_prefix(r["key"]).startswith("lat")},
                 key=lambda p: int(p[3:-1]))
    titles = dict(SECTIONS)
    out = []
    for pfx in lat + prefixes:
        keys = [pfx + k for k in SECTION_ORDER if pfx + k in by]
        if not keys:
            continue
        is_lat = pfx.startswith("lat")
        # The bulk stream's target is against direct; positions' against
        # the router without them; the others' against the cheaper
        # HAProxy (spanning: back-meta).
        ref = by.get(pfx + "direct") if pfx == "bulk-" else by.get(pfx + "router-off") if pfx in ("pos-", "otel-", "pol-") else (
            cheaper(by, pfx + "haproxy", pfx + "haproxy-1t") or by.get(pfx + "meta"))
        direct = by.get(pfx + "direct")
        headers = ["path", "ops/s", "p50 ms", "p99 ms", "p99.9 ms"]
        if is_lat:
            headers += ["added p50 ms", "added p99 ms", "added p99.9 ms"]
        headers += ["CPU µs/op", "peak RSS MiB", "ops/s vs ref", "CPU/op vs ref", "settings"]
        cells = []
        for k in keys:
            r = by[k]
            c = [r["path"] + (" (ref)" if r is ref else ""), f"{r['ops_per_sec']:.0f}", fmt(r["p50"], 3),
                 fmt(r["p99"], 3), fmt(r["p999"], 3)]
            if is_lat:
                for i in (3, 2, 4):
                    d = diffs(r, direct, i)[0] if direct and r is not direct else None
                    c.append("n/a" if d is None else f"{d:+.3f}")
            po = paired(r, ref, 0)[0] if ref and r is not ref else None
            pc = paired(r, ref, 1)[0] if ref and r is not ref and k != pfx + "direct" else None
            c += [fmt(r["cpu_us_per_op"], 1), fmt(r["peak_rss_mib"], 1),
                  "n/a" if po is None else f"{po:.2f}x", "n/a" if pc is None else f"{pc:.2f}x", r["settings"]]
            cells.append(c)
        title = f"Fixed offered load, {pfx[3:-1]}% of HAProxy's maximum" if is_lat else titles[pfx]
        out.append((title, headers, cells))
    return out


def cmd_report(work, out_path):
    """Prints the tables and verdicts; writes markdown to OUT ('-' for none).
    Exit status: 0 fine, 1 the table check failed (a path without successful
    operations, with errors, or missing), 3 a project target FAILed. Checks
    are skipped when meta.check is false (--quick)."""
    rows = []
    results_path = os.path.join(work, "results.jsonl")
    if os.path.exists(results_path):
        with open(results_path) as f:
            rows = [json.loads(l) for l in f if l.strip()]
    meta = load_meta(work)
    rows = aggregate(rows)
    by = {r["key"]: r for r in rows}
    sections = section_tables(rows, by)
    all_rows = rows
    # (lat-haproxy-max: the latency group's own maximum, in the details only)
    rows = [r for r in rows if not section_prefix(r["key"]) and r["key"] != "lat-haproxy-max"]
    # Targets and ratios against the cheaper HAProxy (nbthread 1 or the default).
    hap = cheaper(by, "haproxy", "haproxy-1t")
    hap_churn = cheaper(by, "haproxy-churn", "haproxy-1t-churn")
    meta_row = by.get("meta")

    headers = ["path", "ops/s", "p50 ms", "p99 ms", "p99.9 ms", "CPU µs/op", "peak RSS MiB",
               "ops/s vs HAProxy", "CPU/op vs HAProxy", "settings"]
    cells = []
    for r in rows:
        # Churn rows compare with HAProxy under the same churn.
        base = hap_churn if r["key"].endswith("-churn") else hap
        r_ops = ratio(r["ops_per_sec"], base["ops_per_sec"]) if base else None
        r_cpu = None if r["key"] == "direct" else (
            ratio(r["cpu_us_per_op"], base["cpu_us_per_op"]) if base else None)
        cpu = fmt(r["cpu_us_per_op"], 1)
        if r["key"] == "direct":
            cpu += " (slapd itself)"
        cells.append([
            r["path"], f"{r['ops_per_sec']:.0f}", fmt(r["p50"], 3), fmt(r["p99"], 3), fmt(r["p999"], 3),
            cpu, fmt(r["peak_rss_mib"], 1),
            "n/a" if r_ops is None else f"{r_ops:.2f}x",
            "n/a" if r_cpu is None else f"{r_cpu:.2f}x",
            r["settings"],
        ])

    detail_headers = ["path", "runs", "ops/s min-max", "ok ops", "errors (result code: n)", "p90 ms",
                      "slapd #1 CPU µs/op", "slapd #2 CPU µs/op", "TLS handshakes (resumed)", "other processes' CPU"]
    detail = []
    for r in all_rows:
        errs = ", ".join(f"{k}: {v}" for k, v in sorted(r["errors"].items())) or "0"
        b = r.get("backend_cpu_us_per_op") or []
        lo, hi = r["ops_range"]
        detail.append([r["path"], str(r["runs"]), f"{lo:.0f}-{hi:.0f}", str(r["ok"]), errs, fmt(r["p90"], 3),
                       fmt(b[0] if len(b) > 0 else None, 1), fmt(b[1] if len(b) > 1 else None, 1),
                       f"{r['tls_handshakes']} ({r['tls_resumed']})" if r["tls_handshakes"] else "-",
                       f"{r['other_cpu_pct']:.0f}%"])

    # Table check and targets.
    problems = []
    for key in meta["expected_keys"]:
        r = by.get(key)
        if r is None:
            problems.append(f"no result for {key}")
        elif r["ok"] <= 0:
            problems.append(f"{r['path']}: no successful operations")
        elif sum(r["errors"].values()) > 0:
            problems.append(f"{r['path']}: {sum(r['errors'].values())} failed operations")
    for e in meta.get("extras", []):
        if e["result"].startswith("FAILED"):
            problems.append(f"{e['what']}: {e['result']}")
    router = by.get("router")
    targets = []

    def target(name, measured, limit, ok_fn, unit_fmt):
        if measured is None or limit is None:
            targets.append((name, "n/a", "missing figures"))
            return
        verdict = "PASS" if ok_fn(measured, limit) else "FAIL"
        targets.append((name, verdict, unit_fmt(measured, limit)))

    def stated(a, b, what):
        """a's CPU/op over b's, paired by round: stated, no target."""
        r, per = paired(a, b, 1) if a and b else (None, [])
        if r is not None:
            targets.append((what + " (stated, no target)", "STATED",
                            f"{r:.2f}x, the median of the rounds' ratios (" + ", ".join(f"{x:.2f}" for x in per)
                            + f"); medians {a['cpu_us_per_op']:.1f} vs {b['cpu_us_per_op']:.1f} µs"))

    def vs(a, b, i, limit, more, what):
        """A target on the paired ratio of a's figure i to b's."""
        if a is None or b is None:
            targets.append((what, "n/a", "missing figures"))
            return
        r, per = paired(a, b, i)
        if r is None:
            targets.append((what, "n/a", "missing figures"))
            return
        ok = r >= limit if more else r <= limit
        unit = "ops/s" if i == 0 else "µs"
        fig = (lambda x: f"{x:.0f}") if i == 0 else (lambda x: f"{x:.1f}")
        m, l = (a["ops_per_sec"], b["ops_per_sec"]) if i == 0 else (a["cpu_us_per_op"], b["cpu_us_per_op"])
        targets.append((what, "PASS" if ok else "FAIL",
                        f"{r:.2f}x, the median of the rounds' ratios ("
                        + ", ".join(f"{x:.2f}" for x in per)
                        + f"); medians {fig(m)} vs {fig(l)} {unit} ({m / l:.2f}x)"))

    if router:
        vs(router, hap, 1, 1.0, False, "dsa-router CPU/op <= HAProxy's")
        # (hap: the cheaper of HAProxy nbthread 1 and the default)
        vs(router, hap, 0, 0.95, True, "dsa-router throughput >= 0.95 x HAProxy")
        vs(router, meta_row, 0, 1.8, True, "dsa-router throughput >= 1.8 x back-meta")
        churn = by.get("router-churn")
        vs(churn, hap_churn, 1, 1.0, False, "churn: dsa-router CPU/op <= HAProxy's")
        vs(churn, hap_churn, 0, 1.0, True, "churn: dsa-router throughput >= HAProxy's")
        vs(router, by.get("router-1thread"), 1, 1.10, False,
           "dsa-router (default threads) CPU/op <= 1.10 x --threads 1")
        vs(by.get("router-accesslog"), router, 1, 1.05, False,
           "dsa-router + access log CPU/op <= 1.05 x without")
    # The other groups (issue 40's "Must show"), against the cheaper HAProxy.
    for pfx in sorted({section_prefix(k) for k in by if section_prefix(k).startswith("lat")},
                      key=lambda p: int(p[3:-1])):
        r, h, d = by.get(pfx + "router"), cheaper(by, pfx + "haproxy", pfx + "haproxy-1t"), by.get(pfx + "direct")
        for i, q in ((3, "p50"), (2, "p99")):
            what = f"{pfx[3:-1]}% load: dsa-router's added {q} latency <= HAProxy's"
            m, per = diffs(r, h, i) if r and h and d else (None, [])
            if m is None:
                targets.append((what, "n/a", "missing figures"))
                continue
            targets.append((what, "PASS" if m <= 0 else "FAIL",
                            f"{m * 1000:+.0f} µs, the median of the rounds' differences ("
                            + ", ".join(f"{x * 1000:+.0f}" for x in per) + f"); added over direct: dsa-router "
                            f"{diffs(r, d, i)[0]:+.3f} ms, {h['path']} {diffs(h, d, i)[0]:+.3f} ms"))
    for pfx, what in (("tls-", "LDAPS persistent"), ("tlschurn-", "LDAPS churn, full handshakes"),
                      ("tlsresume-", "LDAPS churn, sessions resumed")):
        r, h = by.get(pfx + "router"), cheaper(by, pfx + "haproxy", pfx + "haproxy-1t")
        if r is None and h is None:
            continue
        vs(r, h, 1, 1.0, False, f"{what}: dsa-router CPU/op <= HAProxy's")
        vs(r, h, 0, 0.95, True, f"{what}: dsa-router throughput >= 0.95 x HAProxy")
    if "bind-router" in by or "bind-haproxy" in by:
        bind_hap = cheaper(by, "bind-haproxy", "bind-haproxy-1t")
        vs(by.get("bind-router"), bind_hap, 1, 1.0, False,
           "binds on persistent connections: dsa-router CPU/op <= HAProxy's")
        # DSAs that trust the router: stated beside it, no target of its own.
        stated(by.get("bind-router-trust"), bind_hap,
               "binds, DSAs trusting the router (proxied authorization): dsa-router CPU/op vs HAProxy's")
    if "bulk-router" in by or "bulk-direct" in by:
        vs(by.get("bulk-router"), by.get("bulk-direct"), 0, 0.95, True,
           "large search streamed through dsa-router >= 0.95 x direct throughput")
    if "span-router" in by or "span-meta" in by:
        vs(by.get("span-router"), by.get("span-meta"), 0, 2.0, True,
           "spanning search: dsa-router throughput >= 2 x back-meta")
    if "otel-router-off" in by:
        off = by.get("otel-router-off")
        vs(by.get("otel-router-1pct"), off, 1, 1.03, False,
           "traces at 1% sampling: dsa-router CPU/op <= 1.03 x tracing off")
        # 100%: stated, no target.
        stated(by.get("otel-router-100pct"), off, "traces at 100% sampling: dsa-router CPU/op vs tracing off")
    # This build against an earlier one (DSA_ROUTER_BASELINE): not targets
    # of the project, figures for a change that must not regress.
    baseline = []
    for new_key, base_key in (("router", "router-base"), ("router-churn", "router-base-churn")):
        a, b = by.get(new_key), by.get(base_key)
        if a is None or b is None:
            continue
        for i, what in ((0, "ops/s"), (1, "CPU/op"), (2, "p99")):
            r, per = paired(a, b, i)
            if r is not None:
                baseline.append(f"{a['path']} / baseline {what}: {r:.2f}x (rounds: "
                                + ", ".join(f"{x:.2f}" for x in per) + ")")
    extras = meta.get("extras", [])
    for e in extras:
        if e["what"].endswith("idle client connections to dsa-router") and not e["result"].startswith("FAILED"):
            try:
                mib = float(e["result"].split()[1])
            except (IndexError, ValueError):
                mib = None
            target(e["what"].split()[0] + " idle connections in <= 100 MiB RSS", mib, 100.0,
                   lambda m, l: m <= l, lambda m, l: f"{m:.1f} MiB")
        if e["what"].endswith("(group bulk): peak RSS growth"):
            try:
                grow = float(e["result"].lstrip("+").split()[0])
            except (IndexError, ValueError):
                grow = None
            target("large search streamed through dsa-router: peak RSS growth < 10 MiB", grow, 10.0,
                   lambda m, l: m < l, lambda m, l: f"+{m:.1f} MiB")
    warnings = list(meta.get("warnings", []))
    noisy = [f"{r['path']} {r['other_cpu_pct']:.0f}%" for r in rows if r["other_cpu_pct"] > 10]
    if noisy:
        warnings.append("other processes used more than 10% of the machine's CPU during some runs ("
                        + ", ".join(noisy) + "): throughput and latency figures are disturbed; "
                        "re-run on a quiet machine (CPU per operation is less affected)")
    # ---- text
    for w in warnings:
        print(f"WARNING: {w}")
    print()
    if cells:
        print(f"Paths measured one after another, same load: {meta['load']}")
        print(render_table(headers, cells, False))
        print()
    print(render_table(detail_headers, detail, False))
    for title, sh, sc in sections:
        print()
        print(f"{title} (ratios against the ref row):")
        print(render_table(sh, sc, False))
    if targets:
        print()
        print("Targets (dsa-router without access log, unless named):"
              + ("" if meta["check"] else "  [--quick: indicative only, not checked]"))
        for name, verdict, why in targets:
            print(f"  {verdict:4}  {name}: {why}")
    if baseline:
        print()
        print("This build against DSA_ROUTER_BASELINE (paired per round, medians):")
        for line in baseline:
            print(f"  {line}")
    if extras:
        print()
        print("Extra measurements:")
        print(render_table(["measurement", "result", "details"],
                           [[e["what"], e["result"], e["details"]] for e in extras], False))
    if problems:
        print()
        print("Table check: " + ("FAILED" if meta["check"] else "problems (not checked with --quick)"))
        for p in problems:
            print(f"  - {p}")

    # ---- markdown
    if out_path != "-":
        md = []
        md.append("# Benchmarks: dsa-router against its peers\n")
        md.append(f"Generated by `bench/compare.sh` on {meta['date']}; do not edit by hand, re-run the script.\n")
        md.append("## Machine and versions\n")
        for k, v in meta["machine"]:
            md.append(f"* {k}: {v}")
        md.append("")
        md.append("Command:\n")
        md.append("```sh\n" + meta["command"] + "\n```\n")
        md.append(f"Load: {meta['load']}. {meta['method']}\n")
        md.append(f"The run took {meta.get('runtime_s', '?')}.\n")
        for w in warnings:
            md.append(f"**Warning:** {w}\n")
        md.append("## Results\n")
        if cells:
            md.append(render_table(headers, cells, True))
            md.append("")
        for title, sh, sc in sections:
            md.append(f"### {title}\n")
            md.append(render_table(sh, sc, True))
            md.append("")
        md.append("Details (slapd #1/#2 CPU per operation shows where the load went; in the "
                  "spanning rows, the two partitions' slapd):\n")
        md.append(render_table(detail_headers, detail, True))
        md.append("")
        if not any(section_prefix(r["key"]) == "pos-" for r in all_rows):
            md.append(POSITIONS_POINTER + "\n")
        if not any(section_prefix(r["key"]) == "otel-" for r in all_rows):
            md.append(TRACES_POINTER + "\n")
        if not any(section_prefix(r["key"]) == "pol-" for r in all_rows):
            md.append(POLICY_POINTER + "\n")
        if targets:
            md.append("### Project targets\n")
            md.append("Each target is judged on the median over the rounds of the ratio between "
                      "the two paths' figures in the same round (paths of a round run back to "
                      "back; the machine's speed drifts between rounds); the ratio of the "
                      "table's medians is shown beside it.\n")
            md.append("Targets: dsa-router CPU/op <= HAProxy's; throughput >= 0.95 x HAProxy "
                      "and >= 1.8 x back-meta (row `dsa-router`, access log off); the access log "
                      "costs at most 5% CPU/op (row `dsa-router + access log`); with a connection per "
                      "operation (rows `..., connection per op`), dsa-router's CPU/op <= HAProxy's "
                      "and its throughput >= HAProxy's; the default threads (one per CPU) cost at most "
                      "10% CPU/op more than `--threads 1` (row `dsa-router --threads 1`); 10,000 idle "
                      "connections in at most 100 MiB. Latency: at fixed offered loads of 50% and 80% "
                      "of HAProxy's maximum, the p50 and p99 latency dsa-router adds over direct at most "
                      "HAProxy's (the median of the per-round differences <= 0); LDAPS persistent, LDAPS "
                      "churn with full handshakes and with resumed sessions: CPU/op <= HAProxy's and "
                      "throughput >= 0.95 x; binds as random users (eq=90,bind=10): CPU/op <= HAProxy's; "
                      "the 1,000,000-entry stream at >= 0.95 x direct throughput with peak RSS growth "
                      "under 10 MiB; the spanning search at >= 2 x back-meta's throughput. HAProxy runs "
                      "twice (nbthread 1 and the default) and every target is judged against the "
                      "cheaper of the two (the lower median CPU/op; marked ref in the tables). Policy: "
                      "CPU/op with a 20-rule policy file at most 1.03 x without (group policy, "
                      "against the router without --policy, not HAProxy)."
                      + (" Traces: with traces exported at 1% sampling, CPU/op at most 1.03 x "
                         "tracing off; at 100% sampling the ratio is stated."
                         if any(section_prefix(r["key"]) == "otel-" for r in all_rows) else "")
                      + ("" if meta["check"] else " This was a `--quick` run: indicative only.") + "\n")
            for name, verdict, why in targets:
                md.append(f"* **{verdict}** {name}: {why}")
            md.append("")
        if baseline:
            md.append("### Against the baseline binary\n")
            for line in baseline:
                md.append(f"* {line}")
            md.append("")
        if problems:
            md.append("Table check: " + ("FAILED" if meta["check"] else "problems (not checked with --quick)") + "\n")
            for p in problems:
                md.append(f"* {p}")
            md.append("")
        if extras:
            md.append("## Extra measurements\n")
            md.append(render_table(["measurement", "result", "details"],
                                   [[e["what"], e["result"], e["details"]] for e in extras], True))
            md.append("")
        md.append("## How each path was set up\n")
        for line in meta["notes"]:
            md.append(f"* {line}")
        md.append("")
        for title, text in meta["configs"]:
            md.append(f"<details><summary>{title}</summary>\n\n```\n{text.rstrip()}\n```\n\n</details>\n")
        os.makedirs(os.path.dirname(os.path.abspath(out_path)), exist_ok=True)
        with open(out_path, "w") as f:
            f.write("\n".join(md).rstrip() + "\n")
        print()
        print(f"wrote {out_path}")

    if meta["check"]:
        if problems:
            return 1
        if any(v == "FAIL" for _, v, _ in targets):
            return 3
    return 0


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    cmd, args = sys.argv[1], sys.argv[2:]
    fns = {
        "ldif-people": cmd_ldif_people,
        "ldif-bulk": cmd_ldif_bulk,
        "port": cmd_port,
        "cpu": cmd_cpu,
        "mem": cmd_mem,
        "idle": cmd_idle,
        "row": cmd_row,
        "report": cmd_report,
        "extra": cmd_extra,
        "otlp-sink": cmd_otlp_sink,
    }
    if cmd not in fns:
        sys.exit(__doc__)
    rc = fns[cmd](*args)
    sys.exit(rc or 0)


if __name__ == "__main__":
    main()
