"""Load for tests/e2e/lifecycle/upgrade.rs: N persistent ldap3 connections, bound
(even) and anonymous (odd; every fourth one pipelines its reads with the
ASYNC strategy), doing reads, binds and writes until the stop file
appears. A failed operation is recorded; an exception (a closed
connection) is recorded too and counted as a reconnect. Writes the JSON
result to OUT.

With RETRY (a 7th argument), URL is a comma-separated list of routers
(an ldap3 server pool): a client whose connection was closed (a drain)
reconnects to the next router and retries the operation once; only an
operation that fails again counts as failed.

usage: upgrade_load.py URL STOP READY PROGRESS OUT N [RETRY]
"""
import json
import os
import sys
import threading

from ldap3 import ASYNC, FIRST, MODIFY_REPLACE, SYNC, Connection, Server, ServerPool

URL, STOP, READY, PROGRESS, OUT, N = sys.argv[1:7]
N = int(N)
RETRY = len(sys.argv) > 7


class Closed(Exception):
    """The router closed the connection (a Notice of Disconnection)."""
BASE = "o=DEMOCORP,c=AU"
lock = threading.Lock()
res = {"ops": 0, "failed": [], "reconnects": 0, "before": {}, "after": {}}
started = []


def user(i):
    return "uid=user%04d,ou=people,%s" % (i, BASE)


def connect(i):
    bound = i % 2 == 0
    strategy = ASYNC if i % 4 == 1 else SYNC
    urls = URL.split(",")
    server = ServerPool([Server(u) for u in urls], FIRST, active=True, exhaust=False) if RETRY else Server(URL)
    return Connection(
        server,
        user=user(i) if bound else None,
        password="pw" if bound else None,
        client_strategy=strategy,
        auto_bind=True,
        raise_exceptions=False,
        receive_timeout=30,
    )


def ok(i, what, result):
    if RETRY and result is not None and result.get("result") == 52:
        raise Closed(result.get("message"))
    if result is None or result.get("result") != 0:
        with lock:
            res["failed"].append("%d %s: %r" % (i, what, result))
        return False
    return True


def step(i, c, n):
    if c.strategy_type == ASYNC:
        ids = [c.search(BASE, "(uid=user%04d)" % ((i + k) % 100), attributes=["cn"]) for k in range(3)]
        for m in ids:
            resp, result = c.get_response(m)
            if ok(i, "pipelined search", result) and len(resp) != 1:
                res["failed"].append("%d pipelined search: %d entries" % (i, len(resp)))
        return 3
    if i % 2 == 0 and n % 7 == 3:
        c.rebind(user(i), "pw")
        ok(i, "bind", c.result)
        return 1
    if i % 2 == 0 and n % 5 == 2:
        c.modify(user(i), {"description": [(MODIFY_REPLACE, ["n%d" % n])]})
        ok(i, "modify", c.result)
        return 1
    c.search(BASE, "(uid=user%04d)" % ((i + n) % 100), attributes=["cn"])
    if ok(i, "search", c.result) and len(c.entries) != 1:
        res["failed"].append("%d search: %d entries" % (i, len(c.entries)))
    return 1


def worker(i):
    c = connect(i)
    if i % 2 == 0:
        res["before"][str(i)] = c.extend.standard.who_am_i()
    n = 0
    while not os.path.exists(STOP):
        try:
            done = step(i, c, n)
        except Exception as e:  # a closed connection
            with lock:
                res["reconnects"] += 1
                if not RETRY:
                    res["failed"].append("%d exception: %r" % (i, e))
            c = connect(i)
            if not RETRY:
                continue
            try:
                done = step(i, c, n)
            except Exception as e:
                with lock:
                    res["failed"].append("%d exception after a reconnect: %r" % (i, e))
                c = connect(i)
                continue
        n += 1
        with lock:
            res["ops"] += done
            if n == 1:
                started.append(i)
                if len(started) == N:
                    open(READY, "w").close()
            if res["ops"] % 50 == 0:
                with open(PROGRESS + ".tmp", "w") as f:
                    f.write(str(res["ops"]))
                os.replace(PROGRESS + ".tmp", PROGRESS)
    if i % 2 == 0:
        res["after"][str(i)] = c.extend.standard.who_am_i()
    c.unbind()


threads = [threading.Thread(target=worker, args=(i,)) for i in range(N)]
for t in threads:
    t.start()
for t in threads:
    t.join()
with open(OUT, "w") as f:
    json.dump(res, f)
