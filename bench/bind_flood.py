#!/usr/bin/env python3
"""bench/bind_flood.py: the router's memory under a flood of failed binds for
distinct DNs (issue 41), measured.

Starts the in-tree test DSA (`dsa-router testdsa`: a wrong password, or a DN
it does not hold, gets invalidCredentials, 49) and, for each run, a fresh
`dsa-router serve` in front of it; then sends one wrong-password simple bind
for each of N distinct DNs, pipelined over several connections, and samples
the router process's RSS (VmRSS) before, at its peak during (every 50 ms),
and 3 s after the clients closed (another client reading once a second
meanwhile, as in bench/floods.py), with the failed-bind table's size from
/metrics (`dsa_router_failed_bind_keys{of="dn"}`). The runs: the defence off
(`--failed-bind-limit 0`) with 100,000 DNs, for the memory that is not the
table's; then on (default limit 5) with 10,000, 30,000, 100,000 and 300,000
DNs.

Usage: bench/bind_flood.py [path/to/dsa-router [serve options]]
       (default target/release/dsa-router)
"""
import os, socket, subprocess, sys, tempfile, threading, time, urllib.request

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/dsa-router"
SUFFIX = "o=DEMOCORP,c=AU"
CONNECTIONS = 8
WINDOW = 64  # binds in flight on each connection


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def ber_len(n):
    if n < 0x80:
        return bytes([n])
    b = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return bytes([0x80 | len(b)]) + b


def tlv(tag, body):
    return bytes([tag]) + ber_len(len(body)) + body


def message(msgid, op):
    return tlv(0x30, tlv(0x02, msgid.to_bytes(4, "big")) + op)


def bind(msgid, dn, pw):
    return message(msgid, tlv(0x60, b"\x02\x01\x03" + tlv(0x04, dn.encode()) + tlv(0x80, pw.encode())))


def root_dse(msgid):
    body = (b"\x04\x00" b"\x0a\x01\x00" b"\x0a\x01\x00" b"\x02\x01\x00" b"\x02\x01\x00"
            b"\x01\x01\x00" b"\x87\x0bobjectClass" b"\x30\x00")
    return message(msgid, tlv(0x63, body))


class Reader:
    """LDAPMessages off a socket; result codes of bind responses."""

    def __init__(self, sock):
        self.s, self.buf = sock, b""

    def _need(self, n):
        while len(self.buf) < n:
            chunk = self.s.recv(1 << 16)
            if not chunk:
                raise EOFError("connection closed")
            self.buf += chunk

    def _len_at(self, i):
        self._need(i + 1)
        first = self.buf[i]
        if first < 0x80:
            return first, i + 1
        n = first & 0x7F
        self._need(i + 1 + n)
        return int.from_bytes(self.buf[i + 1:i + 1 + n], "big"), i + 1 + n

    def next(self):
        """(op tag, result code or None) of the next message."""
        length, start = self._len_at(1)
        self._need(start + length)
        msg, self.buf = self.buf[start:start + length], self.buf[start + length:]
        i = 2 + msg[1]  # past the message ID (short form)
        tag = msg[i]
        j = i + 1
        j += 1 + (msg[j] & 0x7F) if msg[j] & 0x80 else 1
        rc = msg[j + 2] if tag in (0x61, 0x65) and msg[j] == 0x0A else None
        return tag, rc


def wait_ready(port, timeout=30):
    end = time.time() + timeout
    while time.time() < end:
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=2)
            s.sendall(bind(1, f"uid=ready,ou=People,{SUFFIX}", "x"))
            tag, rc = Reader(s).next()
            s.close()
            if rc == 49:
                return
        except (OSError, EOFError):
            pass
        time.sleep(0.2)
    sys.exit(f"bind_flood.py: no invalidCredentials from port {port}")


def flood_one(port, dns, codes, lock):
    s = socket.create_connection(("127.0.0.1", port))
    r = Reader(s)
    got = {}
    for at in range(0, len(dns), WINDOW):
        chunk = dns[at:at + WINDOW]
        s.sendall(b"".join(bind(at + k + 1, dn, "wrong-password") for k, dn in enumerate(chunk)))
        for _ in chunk:
            _, rc = r.next()
            got[rc] = got.get(rc, 0) + 1
    s.close()
    with lock:
        for rc, n in got.items():
            codes[rc] = codes.get(rc, 0) + n


def metric(admin, name):
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        if line.startswith(name):
            return int(float(line.split()[-1]))
    return -1


def prompt_read(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    s.sendall(root_dse(1))
    Reader(s).next()
    s.close()


def run(work, dsa_port, n, limit):
    port, admin = free_port(), free_port()
    k = os.path.join(work, "router.dxg")
    with open(k, "w") as f:
        f.write(f'set dsa "D1" =\n{{\n prefix = <c AU><o DEMOCORP>\n'
                f' address = tcp "127.0.0.1" port {dsa_port}\n}};\n')
    log = open(os.path.join(work, f"router-{n}-{limit}.log"), "w")
    p = subprocess.Popen([BIN, "serve", "--knowledge", k, "--listen", f"127.0.0.1:{port}",
                          "--admin", f"127.0.0.1:{admin}", "--no-access-log",
                          "--failed-bind-limit", str(limit)] + sys.argv[2:],
                         stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_ready(port)
        time.sleep(1)
        before = rss_kib(p.pid)
        stop, peak = threading.Event(), [before]

        def sample():
            while not stop.is_set():
                peak[0] = max(peak[0], rss_kib(p.pid))
                time.sleep(0.05)
        th = threading.Thread(target=sample)
        th.start()
        dns = [f"uid=guesser{i:06d},ou=People,{SUFFIX}" for i in range(n)]
        codes, lock = {}, threading.Lock()
        t0 = time.monotonic()
        ths = [threading.Thread(target=flood_one, args=(port, dns[c::CONNECTIONS], codes, lock))
               for c in range(CONNECTIONS)]
        for t in ths:
            t.start()
        for t in ths:
            t.join()
        took = time.monotonic() - t0
        keys = metric(admin, 'dsa_router_failed_bind_keys{of="dn"}')
        for _ in range(3):
            time.sleep(1)
            prompt_read(port)
        after = rss_kib(p.pid)
        stop.set()
        th.join()
        return [n, limit, took, codes, keys, before, peak[0], after]
    finally:
        p.terminate()
        p.wait()


def main():
    with tempfile.TemporaryDirectory() as work:
        dsa_port = free_port()
        dsa = subprocess.Popen([BIN, "testdsa", "--listen", f"127.0.0.1:{dsa_port}", "--name", "D1",
                                "--suffix", SUFFIX],
                               stdout=open(os.path.join(work, "testdsa.log"), "w"),
                               stderr=subprocess.STDOUT)
        try:
            wait_ready(dsa_port)
            rows = [run(work, dsa_port, n, limit)
                    for n, limit in [(100_000, 0), (10_000, 5), (30_000, 5), (100_000, 5), (300_000, 5)]]
        finally:
            dsa.terminate()
            dsa.wait()
    print(f"load average: {open('/proc/loadavg').read().split()[:3]}, binary {BIN}, "
          f"{CONNECTIONS} connections, {WINDOW} binds in flight on each")
    print("| distinct DNs | --failed-bind-limit | binds/s | answers | DNs in the table "
          "| RSS before | peak during | 3 s after | peak - before |")
    print("|---|---|---|---|---|---|---|---|---|")
    for n, limit, took, codes, keys, b, pk, a in rows:
        answers = ", ".join(f"{rc}: {c:,}" for rc, c in sorted(codes.items(), key=str))
        print(f"| {n:,} | {limit} | {n / took:,.0f} | {answers} | {keys:,} | {b / 1024:.1f} MiB | "
              f"{pk / 1024:.1f} MiB | {a / 1024:.1f} MiB | {(pk - b) / 1024:+.1f} MiB |")


if __name__ == "__main__":
    main()
