#!/usr/bin/env python3
"""Client load across hot upgrades, reloads and restarts
(scripts/systemd-test.sh, scripts/docker-test.sh).

    upgrade_load.py HOST PORT CLIENTS BASE STATS STOP

CLIENTS persistent anonymous ldap3 connections each read BASE (a base
search) in a loop until the file STOP exists. A hot upgrade or a reload
must not disturb them: every operation answered, on the same connection.
A connection that is closed under a client (a restart drains) is opened
again and the operation sent again: a reconnect, not a failure. A failure
is an answer other than success with the one entry, or an error that is
not a closed connection. Every 0.2 s, and at the end, STATS is replaced by
one JSON line of the running totals: ops, failures, reconnects and the
first few failures; the caller compares totals between its steps.
"""
import json
import os
import sys
import threading
import time

import ldap3
from ldap3.core import exceptions as lx

host, port, clients, base, stats, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5], sys.argv[6]
lock = threading.Lock()
totals = {"ops": 0, "failures": 0, "reconnects": 0, "connected": 0, "examples": []}
CLOSED = (lx.LDAPSocketReceiveError, lx.LDAPSocketSendError, lx.LDAPSessionTerminatedByServerError,
          lx.LDAPSocketOpenError, lx.LDAPSocketCloseError, lx.LDAPCommunicationError)


def note(key, what=None):
    with lock:
        totals[key] += 1
        if what is not None and len(totals["examples"]) < 5:
            totals["examples"].append(what)


def connect():
    c = ldap3.Connection(ldap3.Server(host, port=port, connect_timeout=5), receive_timeout=20,
                         raise_exceptions=False)
    if not c.bind():
        raise lx.LDAPCommunicationError("bind: %s" % c.result)
    return c


def client(i):
    conn = None
    first = True
    while not os.path.exists(stop):
        try:
            if conn is None:
                conn = connect()
                if first:
                    note("connected")
                    first = False
            ok = conn.search(base, "(objectClass=*)", search_scope=ldap3.BASE, attributes=["description"])
            if ok and len(conn.entries) == 1:
                note("ops")
                time.sleep(0.01)
            elif conn.closed or not conn.result or conn.result.get("result") is None:
                conn = None
                note("reconnects")
            else:
                note("failures", "client %d: %s" % (i, conn.result))
                time.sleep(0.05)
        except CLOSED:
            if not first:
                note("reconnects")
            conn = None
            time.sleep(0.05)
        except Exception as e:  # anything else is a failure
            conn = None
            note("failures", "client %d: %r" % (i, e))
            time.sleep(0.05)
    if conn is not None:
        conn.unbind()


def dump():
    with lock:
        line = json.dumps(totals)
    with open(stats + ".tmp", "w") as f:
        f.write(line + "\n")
    os.replace(stats + ".tmp", stats)


threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
for t in threads:
    t.start()
while not os.path.exists(stop):
    dump()
    time.sleep(0.2)
for t in threads:
    t.join(30)
dump()
