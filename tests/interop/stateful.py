#!/usr/bin/env python3
"""Per-connection server state through python's ldap3, for
tests/e2e/protocol/connection_state.rs (the same run against slapd directly and
through the router must agree).

usage: stateful.py CHECK URL [ARGS]
  vlv URL CLIENTS WINDOWS  CLIENTS clients scroll with VLV at once, then a
                           new client runs a sorted search
  cancel URL               cancel a refreshAndPersist sync search
  txn URL                  a transaction (RFC 5805) committed and aborted
  schema URL               read the schema (get_info=ALL)
  sasl URL USER PASSWORD   DIGEST-MD5 bind, then WhoAmI

Prints one JSON object; exits 1 when a check fails.
"""
import json
import sys
import threading
import time

from ldap3 import ALL, ASYNC, DEREF_NEVER, DIGEST_MD5, SASL, Connection, Server

BASE = "o=DEMOCORP,c=AU"
PEOPLE = "ou=people," + BASE
PEOPLE_FILTER = "(objectClass=inetOrgPerson)"
SORT = "1.2.840.113556.1.4.473"
VLV = "2.16.840.1.113730.3.4.9"
VLV_RESPONSE = "2.16.840.1.113730.3.4.10"
SYNC = "1.3.6.1.4.1.4203.1.9.1.1"
CANCEL = "1.3.6.1.1.8"
START_TXN = "1.3.6.1.1.21.1"
END_TXN = "1.3.6.1.1.21.3"
TXN_SPEC = "1.3.6.1.1.21.2"


# ------------------------------------------------------------------ BER


def tlv(tag, body):
    n = len(body)
    if n < 0x80:
        head = bytes([n])
    else:
        b = n.to_bytes((n.bit_length() + 7) // 8, "big")
        head = bytes([0x80 | len(b)]) + b
    return bytes([tag]) + head + body


def integer(v, tag=0x02):
    return tlv(tag, v.to_bytes(max(1, (v.bit_length() + 8) // 8), "big", signed=True))


def octets(s, tag=0x04):
    return tlv(tag, s.encode() if isinstance(s, str) else s)


def seq(*parts, tag=0x30):
    return tlv(tag, b"".join(parts))


def elements(data):
    """The TLVs of `data`: [(tag, body)]."""
    out, i = [], 0
    while i < len(data):
        tag, n = data[i], data[i + 1]
        i += 2
        if n & 0x80:
            k = n & 0x7F
            n = int.from_bytes(data[i:i + k], "big")
            i += k
        out.append((tag, data[i:i + n]))
        i += n
    return out


def sort_control(attr="cn", rule="2.5.13.3"):
    """Server-side sort by `attr` with an ordering rule (cn has none)."""
    return (SORT, True, seq(seq(octets(attr) + octets(rule, tag=0x80))))


def vlv_control(before, after, offset, count, context=None):
    body = integer(before) + integer(after) + seq(integer(offset), integer(count), tag=0xA0)
    if context is not None:
        body += octets(context)
    return (VLV, True, seq(body))


def vlv_response(conn):
    """(target position, content count, result, context) of the last result."""
    c = (conn.result or {}).get("controls") or {}
    if VLV_RESPONSE not in c:
        return None
    (_, body), = elements(c[VLV_RESPONSE]["value"])
    items = elements(body)
    ints = [int.from_bytes(v, "big", signed=True) for _, v in items[:3]]
    context = items[3][1] if len(items) > 3 else None
    return ints[0], ints[1], ints[2], context


def fail(summary, why):
    summary["failure"] = why
    print(json.dumps(summary, default=str))
    sys.exit(1)


# ------------------------------------------------------------------ checks


def search_retrying_busy(conn, controls, tries=5):
    """A search; slapd's sssvlv answers busy (51) to a continuation that
    comes in before it has finished the previous window (a race in slapd
    itself, seen directly too), so a 51 is retried a few times."""
    for _ in range(tries):
        conn.search(PEOPLE, PEOPLE_FILTER, attributes=["cn"], controls=controls)
        if conn.result["result"] != 51:
            return conn.result
        time.sleep(0.1)
    return conn.result


def check_vlv(url, clients, windows):
    summary = {"clients": clients, "windows": windows, "errors": []}
    barrier = threading.Barrier(clients)

    def scroll(i):
        conn = Connection(Server(url), auto_bind=True)
        barrier.wait()
        context, count = None, 0
        for w in range(windows):
            offset = 1 + (w * 3 + i) % 25
            res = search_retrying_busy(
                conn, [sort_control(), vlv_control(0, 2, offset, count, context)]
            )
            vlv = vlv_response(conn)
            if res["result"] != 0 or vlv is None or len(conn.entries) != 3:
                summary["errors"].append(
                    f"client {i} window {w}: {res['result']} {res['message']!r}, "
                    f"{len(conn.entries)} entries, vlv {vlv}"
                )
                break
            names = [str(e.cn) for e in conn.entries]
            if names != sorted(names, key=str.lower):
                summary["errors"].append(f"client {i} window {w}: not sorted: {names}")
            _, count, _, context = vlv
        conn.unbind()

    threads = [threading.Thread(target=scroll, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # After they left: a sorted search from a new client.
    conn = Connection(Server(url), auto_bind=True)
    conn.search(PEOPLE, PEOPLE_FILTER, attributes=["cn"], controls=[sort_control()])
    names = [str(e.cn) for e in conn.entries]
    summary["after"] = {"result": conn.result["result"], "message": conn.result["message"], "entries": len(names)}
    if conn.result["result"] != 0 or names != sorted(names, key=str.lower) or not names:
        summary["errors"].append(f"sorted search after: {summary['after']}")
    conn.unbind()
    if summary["errors"]:
        fail(summary, "VLV scrolling or sorting failed")
    print(json.dumps(summary))


def check_cancel(url):
    conn = Connection(Server(url), client_strategy=ASYNC, auto_bind=True)
    sync_rp = (SYNC, True, seq(tlv(0x0A, b"\x03")))
    summary = {}
    m1 = conn.search(BASE, "(uid=alice)", attributes=["cn"], controls=[sync_rp], dereference_aliases=DEREF_NEVER)
    time.sleep(1.0)  # the refresh is over; the search persists
    m2 = conn.extended(CANCEL, seq(integer(m1)))
    _, r2 = conn.get_response(m2, timeout=10)
    r1_entries, r1 = conn.get_response(m1, timeout=10)
    summary["cancel"] = r2["result"]
    summary["cancelled"] = r1["result"]
    summary["entries"] = len([x for x in r1_entries if x.get("type") == "searchResEntry"])
    m3 = conn.extended(CANCEL, seq(integer(9999)))
    _, r3 = conn.get_response(m3, timeout=10)
    summary["unknown"] = r3["result"]
    conn.unbind()
    if (summary["cancel"], summary["cancelled"], summary["unknown"]) != (0, 118, 119):
        fail(summary, "cancel: want 0 for the cancel, 118 for the search, 119 for an unknown ID")
    print(json.dumps(summary))


def check_txn(url, admin_pw="secret"):
    admin = "cn=admin," + BASE
    conn = Connection(Server(url), admin, admin_pw, auto_bind=True)
    other = Connection(Server(url), admin, admin_pw, auto_bind=True)
    bob = "uid=bob," + PEOPLE
    summary = {}

    def description():
        other.search(bob, "(objectClass=*)", search_scope="BASE", attributes=["description"])
        return [str(v) for v in other.entries[0].description.values] if other.entries else None

    for commit in (True, False):
        label = "commit" if commit else "abort"
        value = f"txn {label} {time.time()}"
        before = description()
        conn.extended(START_TXN)
        txn_id = conn.result.get("responseValue") or b""
        conn.modify(bob, {"description": [("MODIFY_REPLACE", [value])]}, controls=[(TXN_SPEC, True, txn_id)])
        in_txn = conn.result["result"]
        hidden = description() == before
        end = seq(tlv(0x01, b"\xff" if commit else b"\x00") + octets(txn_id))
        conn.extended(END_TXN, end)
        ended = conn.result["result"]
        after = description()
        summary[label] = {"in_txn": in_txn, "hidden_before_end": hidden, "end": ended, "applied": after == [value]}
        if in_txn != 0 or not hidden or ended != 0 or (after == [value]) != commit:
            fail(summary, f"transaction {label}")
    conn.unbind()
    other.unbind()
    print(json.dumps(summary))


def check_schema(url):
    server = Server(url, get_info=ALL)
    conn = Connection(server, auto_bind=True)
    schema = server.schema
    summary = {
        "object_classes": len(schema.object_classes) if schema else 0,
        "attribute_types": len(schema.attribute_types) if schema else 0,
        "sasl": sorted(server.info.supported_sasl_mechanisms or []),
    }
    conn.unbind()
    if summary["object_classes"] == 0:
        fail(summary, "no schema")
    print(json.dumps(summary))


def check_sasl(url, user, password):
    conn = Connection(
        Server(url),
        authentication=SASL,
        sasl_mechanism=DIGEST_MD5,
        sasl_credentials=(None, user, password, None),
    )
    summary = {"bound": conn.bind()}
    summary["result"] = conn.result["result"]
    summary["whoami"] = conn.extend.standard.who_am_i() if summary["bound"] else None
    if summary["bound"]:
        conn.search(PEOPLE, f"(uid={user})", attributes=["uid"])
        summary["entries"] = len(conn.entries)
    conn.unbind()
    print(json.dumps(summary))
    if not summary["bound"]:
        sys.exit(1)


def main():
    check, url, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    {
        "vlv": lambda: check_vlv(url, int(rest[0]), int(rest[1])),
        "cancel": lambda: check_cancel(url),
        "txn": lambda: check_txn(url),
        "schema": lambda: check_schema(url),
        "sasl": lambda: check_sasl(url, rest[0], rest[1]),
    }[check]()


if __name__ == "__main__":
    main()
