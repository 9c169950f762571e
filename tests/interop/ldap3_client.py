#!/usr/bin/env python3
"""Drive dsa-router with the Python `ldap3` module (PyPI), as another client
implementation would: bind as alice, search, compare, WhoAmI, root DSE.

Usage: ldap3_client.py URL DEMOCORP_SUFFIX CUSTOMER_SUFFIX ALICE_DN ALICE_PW

Prints one line per check; exits 1 on the first mismatch (after printing
all of them), 2 on a usage error. Used by tests/e2e/binds/identity.rs.
"""
import sys

from ldap3 import ANONYMOUS, BASE, LEVEL, SUBTREE, Connection, Server
from ldap3.core.exceptions import LDAPBindError

failures = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + (": " + str(detail) if detail else ""))
    if not ok:
        failures.append(what)


def main():
    if len(sys.argv) != 6:
        print(__doc__, file=sys.stderr)
        return 2
    url, democorp, customer, alice_dn, alice_pw = sys.argv[1:]
    server = Server(url, connect_timeout=10)

    # Bind as alice.
    conn = Connection(server, user=alice_dn, password=alice_pw, receive_timeout=30)
    check("bind alice", conn.bind(), conn.result)

    # WhoAmI: the router answers with alice's DN.
    who = conn.extend.standard.who_am_i()
    check("whoami", who == "dn:" + alice_dn, who)

    # Base search of served-by: a GROUP1 DSA answers.
    ok = conn.search("cn=served-by," + democorp, "(objectClass=*)", BASE,
                     attributes=["description"])
    served = [str(e.description) for e in conn.entries] if ok else []
    check("served-by search", ok and len(served) == 1 and served[0] in ("D1", "H1"),
          (conn.result, served))

    # One-level search of people: 102 entries (alice, bob, 100 users).
    ok = conn.search("ou=people," + democorp, "(objectClass=inetOrgPerson)", LEVEL,
                     attributes=["uid"])
    uids = sorted(str(e.uid) for e in conn.entries) if ok else []
    check("people search", ok and len(uids) == 102 and "alice" in uids and "bob" in uids,
          (conn.result["description"], len(uids)))

    # Filtered subtree search with several attributes.
    ok = conn.search(democorp, "(&(objectClass=inetOrgPerson)(uid=alice))", SUBTREE,
                     attributes=["cn", "sn", "mail"])
    check("alice search", ok and len(conn.entries) == 1
          and conn.entries[0].entry_dn.lower() == alice_dn.lower()
          and str(conn.entries[0].sn) == "Example"
          and str(conn.entries[0].mail) == "alice@example.com",
          conn.entries)

    # Alice must not see ou=restricted.
    ok = conn.search("ou=restricted," + democorp, "(objectClass=*)", SUBTREE)
    check("restricted hidden from alice",
          (not ok and conn.result["result"] == 32) or (ok and len(conn.entries) == 0),
          (conn.result["result"], conn.result["description"], len(conn.entries)))

    # A search of a DN under no partition: noSuchObject.
    ok = conn.search("o=NOWHERE,c=AU", "(objectClass=*)", BASE)
    check("no partition", not ok and conn.result["result"] == 32, conn.result)

    # CUSTOMER is served by C1.
    ok = conn.search("cn=served-by," + customer, "(objectClass=*)", BASE,
                     attributes=["description"])
    served = [str(e.description) for e in conn.entries] if ok else []
    check("customer served-by", ok and served == ["C1"], (conn.result, served))

    # Compare.
    check("compare true", conn.compare(alice_dn, "sn", "Example") is True, conn.result)
    check("compare false", conn.compare(alice_dn, "sn", "Nobody") is False, conn.result)
    check("compare result codes", conn.result["result"] == 5, conn.result)
    r = conn.compare("uid=nobody,ou=people," + democorp, "sn", "Example")
    check("compare missing entry", r is False and conn.result["result"] == 32, conn.result)

    # Root DSE as the library reads it.
    ok = conn.search("", "(objectClass=*)", BASE, attributes=["namingContexts", "supportedExtension"])
    ncs = sorted(v.lower() for e in conn.entries for v in e.namingContexts.values) if ok else []
    check("root DSE naming contexts", ncs == sorted([democorp.lower(), customer.lower()]), ncs)

    # A wrong password is refused, and leaves that connection anonymous.
    bad = Connection(server, user=alice_dn, password="wrong")
    check("bad bind refused", not bad.bind() and bad.result["result"] == 49, bad.result)
    who = bad.extend.standard.who_am_i()
    check("after failed bind: anonymous", who in (None, ""), who)
    bad.unbind()

    # A failed rebind on a bound connection leaves it anonymous (RFC 4513).
    check("rebind alice", conn.rebind(user=alice_dn, password=alice_pw), conn.result)
    try:
        ok = conn.rebind(user=alice_dn, password="wrong")
    except LDAPBindError:
        ok = False
    check("failed rebind refused", not ok and conn.result["result"] == 49, conn.result)
    who = conn.extend.standard.who_am_i()
    check("after failed rebind: anonymous", who in (None, ""), who)
    check("rebind alice again", conn.rebind(user=alice_dn, password=alice_pw), conn.result)
    who = conn.extend.standard.who_am_i()
    check("whoami after rebind", who == "dn:" + alice_dn, who)

    # Rebind the first connection as nobody: anonymous again.
    conn.user = None
    check("rebind anonymous succeeds", conn.rebind(authentication=ANONYMOUS), conn.result)
    who = conn.extend.standard.who_am_i()
    check("rebind anonymous", who in (None, ""), who)
    conn.unbind()

    if failures:
        print("ldap3_client: %d failure(s): %s" % (len(failures), ", ".join(failures)))
        return 1
    print("ldap3_client: ok")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except LDAPBindError as e:
        print("FAIL bind error: %s" % e)
        sys.exit(1)
