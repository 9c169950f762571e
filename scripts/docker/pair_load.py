#!/usr/bin/env python3
"""Client load for the compose router pair (scripts/docker-test.sh).

CLIENTS persistent ldap3 connections through HAProxy (half anonymous,
half bound as alice) read cn=served-by in a loop until STOP exists. A
client whose connection is closed (a router draining closes idle
connections between operations) reconnects and sends the operation again:
a reconnect, not a failure. A failure is an answer other than success, or
an operation with no answer on a connection that stays open. Prints one
JSON line: ops, failures, reconnects and the first few failures.
"""
import json
import os
import sys
import threading
import time

import ldap3
from ldap3.core import exceptions as lx

host, port, clients, stop = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ALICE = "uid=alice,ou=People,o=DEMOCORP,c=AU"
BASE = "cn=served-by,o=DEMOCORP,c=AU"
lock = threading.Lock()
totals = {"ops": 0, "failures": 0, "reconnects": 0, "examples": []}
CLOSED = (lx.LDAPSocketReceiveError, lx.LDAPSocketSendError, lx.LDAPSessionTerminatedByServerError,
          lx.LDAPSocketOpenError, lx.LDAPSocketCloseError, lx.LDAPStartTLSError, lx.LDAPCommunicationError)


def connect(bound):
    server = ldap3.Server(host, port=port, connect_timeout=5)
    if bound:
        c = ldap3.Connection(server, ALICE, "alicepw", receive_timeout=20, raise_exceptions=False)
    else:
        c = ldap3.Connection(server, receive_timeout=20, raise_exceptions=False)
    if not c.bind():
        raise lx.LDAPCommunicationError("bind: %s" % c.result)
    return c


def note(key, what=None):
    with lock:
        totals[key] += 1
        if what is not None and len(totals["examples"]) < 5:
            totals["examples"].append(what)


def client(i):
    bound = i % 2 == 1
    conn = None
    while not os.path.exists(stop):
        try:
            if conn is None:
                conn = connect(bound)
            ok = conn.search(BASE, "(objectClass=*)", search_scope=ldap3.BASE, attributes=["description"])
            if ok and len(conn.entries) == 1:
                note("ops")
            elif conn.closed or not conn.result or conn.result.get("result") is None:
                # Closed under it: reconnect and send it again.
                conn = None
                note("reconnects")
            else:
                note("failures", "client %d: %s" % (i, conn.result))
                time.sleep(0.05)
        except CLOSED as e:
            conn = None
            note("reconnects")
            time.sleep(0.02)
        except Exception as e:  # anything else is a failure
            conn = None
            note("failures", "client %d: %r" % (i, e))
            time.sleep(0.05)
    if conn is not None:
        conn.unbind()


threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join(120)
print(json.dumps(totals))
