#!/usr/bin/env python3
"""bench/floods.py: the router's memory under the floods of issue 20, measured.

Starts `dsa-router serve` (default threads; its one DSA never answers: the
floods need none) and, one after another:

1. one anonymous client pipelining 400,000 root DSE searches (answered by
   the router itself) and never reading;
2. forty clients each sending all but 16 bytes of an add announced as
   4 MiB (in 64 KiB writes), then
   stopping.

For each: the router process's RSS before, its peak during (sampled every
100 ms), and 1, 3 and 10 s after the clients closed (another client reading
once a second meanwhile), and the latency of a root DSE read by another client
during the flood. Prints one table.

Usage: bench/floods.py [path/to/dsa-router [serve options]]
       (default target/release/dsa-router)
"""
import os, socket, subprocess, sys, tempfile, threading, time

BIN = sys.argv[1] if len(sys.argv) > 1 else "target/release/dsa-router"
PORT = 3479


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


def root_dse(msgid):
    # SearchRequest base "" scope base, (objectClass=*), no attributes.
    body = (b"\x04\x00" b"\x0a\x01\x00" b"\x0a\x01\x00" b"\x02\x01\x00" b"\x02\x01\x00"
            b"\x01\x01\x00" b"\x87\x0bobjectClass" b"\x30\x00")
    op = b"\x63" + ber_len(len(body)) + body
    mid = b"\x02\x04" + msgid.to_bytes(4, "big")
    inner = mid + op
    return b"\x30" + ber_len(len(inner)) + inner


def prompt_read():
    t = time.monotonic()
    s = socket.create_connection(("127.0.0.1", PORT), timeout=10)
    s.sendall(root_dse(1))
    s.recv(65536)
    s.close()
    return (time.monotonic() - t) * 1000


def sample(pid, stop, peak):
    while not stop.is_set():
        peak[0] = max(peak[0], rss_kib(pid))
        time.sleep(0.1)


def flood(pid, name, start, close):
    time.sleep(1)
    before = rss_kib(pid)
    stop, peak = threading.Event(), [before]
    th = threading.Thread(target=sample, args=(pid, stop, peak))
    th.start()
    socks = start()
    time.sleep(4)
    lat = prompt_read()
    close(socks)
    # A live router always has some traffic: another client reads once a
    # second meanwhile (each worker also gives freed memory back once a
    # second by itself, src/base/memory.rs). RSS 1, 3 and 10 s after.
    after = {}
    for s in range(1, 11):
        time.sleep(1)
        prompt_read()
        after[s] = rss_kib(pid)
    stop.set()
    th.join()
    return [name, before, peak[0], after[1], after[3], after[10], lat]


def pipeline():
    s = socket.create_connection(("127.0.0.1", PORT))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    batch = b"".join(root_dse(i) for i in range(1, 1001))

    def write():
        try:
            for _ in range(400):
                s.sendall(batch)
        except OSError:
            pass
    threading.Thread(target=write, daemon=True).start()
    return [s]


def partial_pdus():
    socks = []
    announced = 4 * 1024 * 1024 - 16
    head = b"\x30" + ber_len(announced) + b"\x02\x01\x01" + b"\x68" + ber_len(announced - 8)
    chunk = b"\x00" * (64 << 10)
    for _ in range(40):
        try:
            s = socket.create_connection(("127.0.0.1", PORT))
            s.sendall(head)
            for _ in range(63):
                s.sendall(chunk)
            socks.append(s)
        except OSError:
            pass
    return socks


def close(socks):
    for s in socks:
        try:
            s.close()
        except OSError:
            pass


def main():
    with tempfile.TemporaryDirectory() as d:
        log = open(os.path.join(d, "demo.log"), "w")
        k = os.path.join(d, "router.dxg")
        with open(k, "w") as f:
            f.write('set dsa "D1" =\n{\n prefix = <c AU><o DEMOCORP>\n'
                    ' address = tcp "127.0.0.1" port 9\n};\n')
        p = subprocess.Popen([BIN, "serve", "--knowledge", k, "--listen", f"127.0.0.1:{PORT}",
                              "--admin", "none", "--no-access-log", "--probe-interval", "0"]
                             + sys.argv[2:], stdout=log, stderr=subprocess.STDOUT)
        try:
            for _ in range(100):
                try:
                    socket.create_connection(("127.0.0.1", PORT), timeout=1).close()
                    break
                except OSError:
                    time.sleep(0.1)
            rows = [flood(p.pid, "1 client pipelining 400,000 root DSE reads, never reading",
                          pipeline, close),
                    flood(p.pid, "40 clients each sending all but 16 bytes of a 4 MiB add in 64 KiB writes, then stopping",
                          partial_pdus, close)]
        finally:
            p.terminate()
            p.wait()
    print("| flood | RSS before | peak during | 1 s after close | 3 s after | 10 s after "
          "| 3 s after vs before | another client's read during |")
    print("|---|---|---|---|---|---|---|---|")
    for name, b, pk, a1, a3, a10, lat in rows:
        print(f"| {name} | {b / 1024:.1f} MiB | {pk / 1024:.1f} MiB | {a1 / 1024:.1f} MiB | "
              f"{a3 / 1024:.1f} MiB | {a10 / 1024:.1f} MiB | {(a3 - b) / b * 100:+.0f}% | {lat:.1f} ms |")


if __name__ == "__main__":
    main()
