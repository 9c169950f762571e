#!/usr/bin/python3
"""The admin status page (GET /) in a real browser: headless Chromium driven
by Selenium (Debian packages chromium, chromium-driver, python3-selenium).

Starts two in-tree test DSAs (`dsa-router testdsa`) in one load-share group
(T1, T2; and the same two again as DSAs named `__proto__` and `constructor`,
names that break a page keeping per-DSA state in a plain object) and a
router in front of them with an admin token; then, in the page:
* without the token it shows the DSAs (reads need none), and its buttons
  are disabled and say that control needs the token or `dsa-router ctl`;
  with it, all four DSAs show `up` and the buttons are enabled;
* a stopped DSA shows `down` (probes every 0.3 s), one started again shows
  `up`; a screenshot with the DSA down is saved;
* the `drain` button drains the other DSA through the API;
* a second router without a token (its TCP API is read-only): its page
  shows the DSAs with the buttons disabled and the same note; `dsa-router
  ctl` drains and enables through the control socket, and the page shows
  it;
* replication lag (with DSA_PAGE_REPLICA="P_PORT C_PORT C_PID": a slapd
  provider and a refreshOnly consumer of o=DEMOCORP,c=AU the caller runs):
  a third router in front of both (--csn-interval 100ms,
  --max-replication-lag 2s) while P takes a write every 0.2 s: the lag
  column shows P at 0 and C's lag growing until C shows `lagging`; C
  stopped (SIGSTOP) shows an unknown lag, and continued (SIGCONT) a number
  again; a screenshot with C lagging is saved beside the first one
  (NAME-lag.png);
* the browser logged no Content-Security-Policy violation.

Usage: status_page.py ROUTER_BINARY SCREENSHOT_PNG
Exit 0 when every step is seen within its time, else 1 with the reason.
"""

import os
import signal
import socket
import subprocess
import sys
import tempfile
import re
import threading
import time

from selenium import webdriver
from selenium.webdriver.chromium.options import ChromiumOptions
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

BIN, SHOT = sys.argv[1], sys.argv[2]
TOKEN = "page-test-token"
PROCS = []


def port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def spawn(args, log):
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
    PROCS.append(p)
    return p


def listening(p, secs=20):
    end = time.time() + secs
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", p), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing listens on {p}")


def testdsa(name, p, work):
    proc = spawn([BIN, "testdsa", "--listen", f"127.0.0.1:{p}", "--name", name,
                  "--suffix", "o=DEMOCORP,c=AU"], open(os.path.join(work, f"{name}.log"), "a"))
    listening(p)
    return proc


def until(what, check, secs=15):
    end = time.time() + secs
    last = None
    while time.time() < end:
        try:
            if check():
                return
        except Exception as e:  # the page re-renders under us
            last = e
        time.sleep(0.1)
    raise SystemExit(f"not seen within {secs} s: {what} (last error: {last})")


def state(driver, dsa):
    cells = driver.find_elements(By.CSS_SELECTOR, f'tr[data-dsa="{dsa}"] [data-state]')
    return cells[0].get_attribute("data-state") if cells else None


def press(driver, dsa, action, want, what, secs=15):
    """Clicks `dsa`'s `action` button until its state is `want`: the page
    re-renders its rows every 2 s, and a click landing on a row being
    replaced is lost (seen on a loaded machine)."""
    end = time.time() + secs
    while time.time() < end:
        try:
            driver.find_element(By.CSS_SELECTOR, f'button[data-dsa="{dsa}"][data-action="{action}"]').click()
        except Exception:  # the row was replaced under us: again
            time.sleep(0.1)
            continue
        wait = time.time() + 3
        while time.time() < wait:
            try:
                if state(driver, dsa) == want:
                    return
            except Exception:  # re-rendered while read
                pass
            time.sleep(0.1)
    raise SystemExit(f"not seen within {secs} s: {what}")


def control_needs_token(driver):
    """Whether the page says control needs the token or ctl, and its
    buttons are disabled."""
    note = driver.find_element(By.ID, "control").text
    buttons = driver.find_elements(By.CSS_SELECTOR, "button[data-action]")
    return ("token" in note and "ctl" in note and buttons
            and all(not b.is_enabled() for b in buttons))


def lag(driver, dsa):
    """The lag cell's text of `dsa`: seconds, 'unknown', or None (none)."""
    cells = driver.find_elements(By.CSS_SELECTOR, f'tr[data-dsa="{dsa}"] td[data-lag]')
    return cells[0].text if cells else None


def seconds(text):
    m = re.fullmatch(r"(\d+\.\d{3}) s", text or "")
    return float(m.group(1)) if m else None


def replication_lag(driver, work, p_port, c_port, c_pid):
    """The lag column with a provider P and a consumer C behind a router."""
    know = os.path.join(work, "replica.dxg")
    with open(know, "w") as f:
        for n, p in [("P", p_port), ("C", c_port)]:
            f.write(f'set dsa "{n}" = {{ prefix = <c AU><o DEMOCORP> address = tcp "127.0.0.1" port {p} '
                    f'dsa-flags = load-share load-share-group = "R" }};\n')
    admin3 = port()
    spawn([BIN, "serve", "--knowledge", know, "--listen", f"127.0.0.1:{port()}",
           "--admin", f"127.0.0.1:{admin3}", "--csn-interval", "100ms", "--max-replication-lag", "2s"],
          open(os.path.join(work, "router3.log"), "w"))
    listening(admin3)
    # P takes a write every 0.2 s; C pulls only every 30 s (refreshOnly).
    stop_writes = threading.Event()

    def writes():
        i = 0
        while not stop_writes.is_set():
            i += 1
            ldif = f"dn: uid=user0001,ou=people,o=DEMOCORP,c=AU\nchangetype: modify\nreplace: description\ndescription: {i}\n"
            subprocess.run(["ldapmodify", "-x", "-H", f"ldap://127.0.0.1:{p_port}", "-D", "cn=admin,o=DEMOCORP,c=AU",
                            "-w", "secret"], input=ldif.encode(), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=10)
            time.sleep(0.2)

    threading.Thread(target=writes, daemon=True).start()
    try:
        driver.get(f"http://127.0.0.1:{admin3}/")
        until("P's lag shown as 0", lambda: seconds(lag(driver, "P")) == 0.0)
        until("C's lag shown", lambda: seconds(lag(driver, "C")) is not None)
        # Nobody sends this router operations: the readings (10 a second
        # per DSA) are not counted as served operations.
        time.sleep(4.5)  # two refreshes of the page, at least
        ops = {n: driver.find_element(By.CSS_SELECTOR, f'tr[data-dsa="{n}"] td[data-label="ops/s"]').text
               for n in ["P", "C"]}
        if ops != {"P": "0.0", "C": "0.0"}:
            raise SystemExit(f"the position readings show as operations: ops/s {ops}")
        print(f"page: positions read, no operations shown: ops/s {ops}")
        # Between C's refreshes its lag grows with P's writes (a CSN-time
        # lag: from P's first write on, the time between the newest CSN C
        # has and P's newest): seen rising by over a second; past the 2 s
        # bound C is out of reads (lagging), its lag the reason.
        seen = {"low": None, "now": None}

        def grew():
            now = seconds(lag(driver, "C"))
            if now is None:
                return False
            if seen["low"] is None or now < seen["low"]:  # first, or C refreshed
                seen["low"] = now
            seen["now"] = now
            return now > seen["low"] + 1.0 and now > 2.2

        until("C's lag grows by a second, past 2 s", grew, secs=45)
        until("C lagging", lambda: state(driver, "C") == "lagging", secs=10)
        reason = driver.find_element(By.CSS_SELECTOR, 'tr[data-dsa="C"] td.reason').text
        if "replication lag" not in reason:
            raise SystemExit(f"C lagging for {reason!r}")
        print(f"page: lag column P {lag(driver, 'P')}, C grew from {seen['low']:.3f} s to {seen['now']:.3f} s: "
              f"C lagging ({reason})")
        driver.save_screenshot(SHOT.replace(".png", "-lag.png"))
        os.kill(int(c_pid), signal.SIGSTOP)
        try:
            until("C's lag unknown while C is stopped", lambda: lag(driver, "C") == "unknown", secs=15)
            print("page: C stopped (SIGSTOP): lag unknown")
        finally:
            os.kill(int(c_pid), signal.SIGCONT)
        until("C's lag a number again after SIGCONT", lambda: seconds(lag(driver, "C")) is not None, secs=15)
        print(f"page: C continued: lag {lag(driver, 'C')}")
    finally:
        stop_writes.set()


def main():
    work = tempfile.mkdtemp(prefix="dsa-router-page.")
    ports = {"T1": port(), "T2": port()}
    dsas = {n: testdsa(n, p, work) for n, p in ports.items()}
    know = os.path.join(work, "router.dxg")
    with open(know, "w") as f:
        for n, p in ports.items():
            f.write(f'set dsa "{n}" = {{ prefix = <c AU><o DEMOCORP> address = tcp "127.0.0.1" port {p} '
                    f'dsa-flags = load-share load-share-group = "G" }};\n')
        for n, p in [("__proto__", ports["T1"]), ("constructor", ports["T2"])]:
            f.write(f'set dsa "{n}" = {{ prefix = <c AU><o DEMOCORP> address = tcp "127.0.0.1" port {p} '
                    f'dsa-flags = load-share load-share-group = "H" }};\n')
    listen, admin = port(), port()
    spawn([BIN, "serve", "--knowledge", know, "--listen", f"127.0.0.1:{listen}",
           "--admin", f"127.0.0.1:{admin}", "--admin-token", TOKEN, "--probe-interval", "0.3",
           "--probe-timeout", "0.3", "--fall", "2", "--rise", "1", "--failback-hold", "0"],
          open(os.path.join(work, "router.log"), "w"))
    listening(admin)
    # A little load, so that the page's ops/s and latency have something
    # to show: a search a tenth of a second, through the router.
    stop_load = threading.Event()

    def load():
        while not stop_load.is_set():
            subprocess.run(["ldapsearch", "-x", "-LLL", "-H", f"ldap://127.0.0.1:{listen}",
                            "-b", "o=DEMOCORP,c=AU", "-s", "base", "dn"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10)
            time.sleep(0.1)

    threading.Thread(target=load, daemon=True).start()

    opts = ChromiumOptions()
    opts.binary_location = "/usr/bin/chromium"
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    for a in ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              "--window-size=1280,800"]:
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)
    try:
        driver.get(f"http://127.0.0.1:{admin}/")
        until("the page asks for the token to show the status",
              lambda: "token" in driver.find_element(By.ID, "msg").text
              and not driver.find_elements(By.CSS_SELECTOR, "tr[data-dsa]"))
        box = driver.find_element(By.ID, "token")
        box.send_keys(TOKEN)
        driver.execute_script("arguments[0].dispatchEvent(new Event('change'))", box)
        until("all DSAs up", lambda: all(state(driver, n) == "up" for n in ["T1", "T2", "__proto__", "constructor"]))
        until("the buttons enabled with the token", lambda: not control_needs_token(driver))
        print("page: T1 and T2 up")
        print("page: __proto__ and constructor up")
        conns = driver.find_element(By.CSS_SELECTOR, 'tr[data-dsa="T1"] td[data-label="own / spare conns"]').text
        if not re.fullmatch(r"\d+ / \d+", conns):
            raise SystemExit(f"T1's own / spare connections cell reads {conns!r}")
        print(f"page: T1 own / spare connections {conns}")

        dsas["T2"].send_signal(signal.SIGKILL)
        dsas["T2"].wait()
        until("T2 down after it stopped", lambda: state(driver, "T2") == "down" and state(driver, "constructor") == "down")
        time.sleep(2)  # a few more points on the charts
        reason = driver.find_element(By.CSS_SELECTOR, 'tr[data-dsa="T2"] td.reason').text
        print(f"page: T2 down ({reason})")
        driver.save_screenshot(SHOT)
        print(f"screenshot: {SHOT}")

        dsas["T2"] = testdsa("T2", ports["T2"], work)
        until("T2 up again after it started", lambda: state(driver, "T2") == "up" and state(driver, "constructor") == "up")
        print("page: T2 up again")
        print("page: constructor down and up again with T2")

        press(driver, "T1", "drain", "draining", "T1 draining after the drain button")
        print("page: T1 draining (drain button)")
        press(driver, "T1", "enable", "up", "T1 up after the enable button")
        print("page: T1 enabled again")

        # A router without a token: its page reads, its buttons say that
        # control needs the token or ctl; ctl (the control socket) drains.
        admin2 = port()
        sock2 = os.path.join(work, "control2.sock")
        spawn([BIN, "serve", "--knowledge", know, "--listen", f"127.0.0.1:{port()}",
               "--admin", f"127.0.0.1:{admin2}", "--control-socket", sock2, "--probe-interval", "0.3",
               "--probe-timeout", "0.3", "--failback-hold", "0"], open(os.path.join(work, "router2.log"), "w"))
        listening(admin2)
        driver.get(f"http://127.0.0.1:{admin2}/")
        until("T1 up on the page of the router without a token", lambda: state(driver, "T1") == "up")
        until("the page without a token says control needs the token or ctl", lambda: control_needs_token(driver))
        for action, want in [("drain", "draining"), ("enable", "up")]:
            subprocess.run([BIN, "ctl", "--control-socket", sock2, action, "__proto__"], check=True,
                           stdout=subprocess.DEVNULL, timeout=30)
            until(f"__proto__ {want} on the page after ctl {action}", lambda: state(driver, "__proto__") == want)
        print("page without a token: buttons disabled (control needs the token or ctl); ctl drained and enabled __proto__")

        # A prefix written leaf first: the page warns, with the fix.
        know3 = os.path.join(work, "reversed.dxg")
        with open(know3, "w") as f:
            f.write(f'set dsa "R" = {{ prefix = <o DEMOCORP><c AU> address = tcp "127.0.0.1" port {ports["T1"]} }};\n')
        admin3 = port()
        spawn([BIN, "serve", "--knowledge", know3, "--listen", f"127.0.0.1:{port()}",
               "--admin", f"127.0.0.1:{admin3}", "--control-socket", "none", "--probe-interval", "0.3"],
              open(os.path.join(work, "router3.log"), "w"))
        listening(admin3)
        driver.get(f"http://127.0.0.1:{admin3}/")
        warned = 'div[data-prefix-warning="c=AU,o=DEMOCORP"]'
        until("the reversed prefix warned on the page",
              lambda: "did you mean o=DEMOCORP,c=AU?" in driver.find_element(By.CSS_SELECTOR, warned).text)
        print("page: prefix warning: " + driver.find_element(By.CSS_SELECTOR, warned).text)

        replica = os.environ.get("DSA_PAGE_REPLICA")
        if replica:
            replication_lag(driver, work, *replica.split())

        logs = driver.get_log("browser")
        csp = [e["message"] for e in logs if "Content Security Policy" in e["message"] or "Refused to" in e["message"]]
        if csp:
            raise SystemExit(f"the page broke its Content-Security-Policy: {csp}")
        print(f"page: no CSP violation in {len(logs)} console message(s)")
    finally:
        stop_load.set()
        driver.quit()
        for p in PROCS:
            if p.poll() is None:
                p.kill()
                p.wait()


if __name__ == "__main__":
    main()
