//! The admin status page in a real browser: `tests/interop/status_page.py`
//! drives headless Chromium with Selenium (Debian's chromium,
//! chromium-driver and python3-selenium; `scripts/install-deps.sh`)
//! against a router process and two test DSA processes: without the token
//! the buttons say control needs the token or `ctl`; both DSAs up, one
//! stopped shows down (screenshot), started again shows up, and the drain
//! and enable buttons work through the API with the token. DSAs named
//! `__proto__` and `constructor` update like the others; a router without
//! a token serves the page read-only, and `ctl` (its control socket)
//! drains and enables; the lag column, with a
//! slapd provider and a refreshOnly consumer behind a third router (the
//! consumer's lag grows until it is `lagging`, unknown while it is
//! stopped); a partition prefix no DSA holds is warned on the page, with
//! the fix; and the page runs under its Content-Security-Policy without a
//! violation.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support::replica::{self, Mode};
use std::path::Path;
use std::process::Command;

#[test]
fn the_status_page_shows_dsas_going_down_and_drains_them_in_chromium() {
    for (tool, pkg) in [
        ("/usr/bin/chromium", "chromium"),
        ("/usr/bin/chromedriver", "chromium-driver"),
    ] {
        assert!(
            Path::new(tool).exists(),
            "{tool} missing: run scripts/install-deps.sh (Debian package {pkg})"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    // DSA_ROUTER_PAGE_SHOT=docs/status-page.png keeps the screenshots (and
    // docs/status-page-lag.png, the lag column).
    let shot = std::env::var("DSA_ROUTER_PAGE_SHOT")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| dir.path().join("status-page.png"));
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/status_page.py");
    // The lag column's DSAs: C pulls from P every 30 s.
    let suffix = "o=DEMOCORP,c=AU";
    let p = replica::provider("P", suffix);
    let c = replica::consumer("C", suffix, &p, Mode::RefreshOnly(30));
    let out = Command::new("/usr/bin/python3")
        .env(
            "DSA_PAGE_REPLICA",
            format!("{} {} {}", p.port, c.port, c.pid()),
        )
        .arg(&script)
        .arg(env!("CARGO_BIN_EXE_dsa-router"))
        .arg(&shot)
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "status page test failed:\n{text}");
    println!("{text}");
    for seen in [
        "T1 and T2 up",
        "T2 down",
        "T2 up again",
        "T1 draining",
        "T1 enabled again",
        "__proto__ and constructor up",
        "constructor down and up again with T2",
        "page without a token: buttons disabled (control needs the token or ctl); ctl drained and enabled __proto__",
        "page: positions read, no operations shown",
        "page: lag column P 0.000 s, C grew from",
        "page: C stopped (SIGSTOP): lag unknown",
        "page: C continued: lag",
        "page: prefix warning: warning: partition c=AU,o=DEMOCORP: no DSA of it holds this prefix (R holds o=DEMOCORP,c=AU); did you mean o=DEMOCORP,c=AU?",
        "page: no CSP violation",
    ] {
        assert!(text.contains(seen), "{seen:?} not reported:\n{text}");
    }
    drop((c, p));
    let png = std::fs::read(&shot).unwrap();
    assert!(
        png.starts_with(b"\x89PNG") && png.len() > 10_000,
        "screenshot"
    );
}
