#!/usr/bin/env python3
"""Interleave long-lived connections with different identities through
dsa-router (Python `ldap3`): anonymous, alice and the router identity
(cn=router) each search ou=restricted and read served-by, in turns, many
times. Each must get exactly its own access every time: only cn=router sees
the restricted entries. Also a write as alice between reads must not change
what the others see.

Usage: identity_interleave.py URL SUFFIX ALICE_DN ALICE_PW ROUTER_DN ROUTER_PW

Exits 1 on any mismatch, 2 on a usage error.
"""
import sys

from ldap3 import BASE, SUBTREE, Connection, Server

failures = []


def check(what, ok, detail=""):
    if not ok:
        print("FAIL " + what + (": " + str(detail) if detail else ""))
        failures.append(what)


def main():
    if len(sys.argv) != 7:
        print(__doc__, file=sys.stderr)
        return 2
    url, suffix, alice_dn, alice_pw, router_dn, router_pw = sys.argv[1:]
    server = Server(url, connect_timeout=10)
    clients = {
        "anonymous": Connection(server, receive_timeout=30),
        "alice": Connection(server, user=alice_dn, password=alice_pw, receive_timeout=30),
        "router": Connection(server, user=router_dn, password=router_pw, receive_timeout=30),
    }
    for name, c in clients.items():
        check("bind " + name, c.bind(), c.result)
    expect_whoami = {"anonymous": "", "alice": "dn:" + alice_dn, "router": "dn:" + router_dn}
    restricted = "ou=restricted," + suffix
    served = {}
    for rnd in range(15):
        for name, c in clients.items():
            ok = c.search(restricted, "(objectClass=*)", SUBTREE, attributes=["description"])
            n = len(c.entries) if ok else 0
            if name == "router":
                check("round %d: router sees restricted" % rnd,
                      ok and n == 2 and any("top secret" in (r.get("attributes", {}).get("description") or [])
                                             for r in c.response),
                      (c.result["result"], n))
            else:
                check("round %d: %s does not see restricted" % (rnd, name),
                      (not ok and c.result["result"] == 32) or (ok and n == 0),
                      (c.result["result"], n))
            ok = c.search("cn=served-by," + suffix, "(objectClass=*)", BASE,
                          attributes=["description"])
            if ok and len(c.entries) == 1:
                served.setdefault(name, set()).add(str(c.entries[0].description))
            else:
                check("round %d: %s served-by" % (rnd, name), False, c.result)
            who = c.extend.standard.who_am_i() or ""
            check("round %d: %s whoami" % (rnd, name), who == expect_whoami[name], who)
        # alice writes her own description: allowed; anonymous may not.
        a = clients["alice"]
        ok = a.modify(alice_dn, {"description": [("MODIFY_REPLACE", ["round %d" % rnd])]})
        check("round %d: alice modifies herself" % rnd, ok, a.result)
        n = clients["anonymous"]
        ok = n.modify(alice_dn, {"description": [("MODIFY_REPLACE", ["anon"])]})
        # slapd: strongerAuthRequired (8) for anonymous updates.
        check("round %d: anonymous may not modify alice" % rnd,
              not ok and n.result["result"] in (8, 50), n.result)
        # One more read (7 per round), so that with two DSAs rotating each
        # client's served-by read does not always land on the same one.
        check("round %d: alice compares" % rnd,
              a.compare(alice_dn, "sn", "Example") is True, a.result)
    for name, dsas in served.items():
        check("%s read from GROUP1 only" % name, dsas <= {"D1", "H1"}, dsas)
    union = set().union(*served.values()) if served else set()
    check("reads spread over both GROUP1 DSAs", union == {"D1", "H1"}, union)
    for c in clients.values():
        c.unbind()
    if failures:
        print("identity_interleave: %d failure(s)" % len(failures))
        return 1
    print("identity_interleave: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
