//! A write's own position, against real replicated
//! slapd: the router asks the DSA that takes an add, modify or modify DN
//! for the written entry's `entryCSN` with the post-read control (RFC
//! 4527), keeps it as the write's position and takes the control out of
//! the response, unless the client asked for one itself. Without it
//! (`--no-post-read`) the position is the write DSA's first `contextCSN`
//! reading after the write, which OpenLDAP holds back while older writes
//! of the same server ID are still pending: with concurrent writes a
//! consumer can reach that reading without the write.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;
use ldap3::{Ldap, Mod};
use std::collections::HashSet;
use std::time::{Duration, Instant};
use support::replica::{self, metric, read, router, wait_for, Mode};
use support::router::Router;
use support::slapd::{ldap_tool, writer_dn, Slapd, WRITER_PW};

const SUFFIX: &str = "o=DEMOCORP,c=AU";
const POST_READ: &str = "1.3.6.1.1.13.2";
const WRITES: &str = "dsa_router_replication_entry_csn_writes_total";

/// A provider `P`, a consumer `C` replicating in `mode`, and two routers
/// in front of both: one with post-read, one with `--no-post-read` (each
/// with its admin address); returns once the first knows `C`'s position.
struct Rig {
    _dsas: (Slapd, Slapd),
    _dir: tempfile::TempDir,
    on: (Router, String),
    off: (Router, String),
}

fn rig(mode: Mode) -> Rig {
    let p = replica::provider("P", SUFFIX);
    let c = replica::consumer("C", SUFFIX, &p, mode);
    let dir = tempfile::tempdir().unwrap();
    let k = replica::load_share_knowledge(
        dir.path(),
        &[("P", p.port, "multi-write"), ("C", c.port, "read-only")],
    );
    let on = router(dir.path(), &k, &["--csn-interval", "50ms"]);
    let off = router(
        dir.path(),
        &k,
        &["--csn-interval", "50ms", "--no-post-read"],
    );
    // The router knows what the DSAs advertise once their positions are read.
    wait_for("positions", Duration::from_secs(10), || {
        replica::position_of(&on.1, "C", "000").is_some()
            && replica::position_of(&on.1, "P", "000").is_some()
    });
    Rig {
        _dsas: (p, c),
        _dir: dir,
        on,
        off,
    }
}

/// The OIDs of a result's controls.
fn oids(r: &ldap3::LdapResult) -> Vec<String> {
    r.ctrls.iter().map(|c| c.1.ctype.clone()).collect()
}

/// Adds `uid=UID,ou=people` through `l`; its DN and the response's
/// control OIDs.
async fn add(l: &mut Ldap, uid: &str) -> (String, Vec<String>) {
    let dn = format!("uid={uid},ou=people,{SUFFIX}");
    let s = |v: &str| HashSet::from([v.to_string()]);
    let attrs = ["inetOrgPerson", uid, uid, uid];
    let names = ["objectClass", "cn", "sn", "uid"];
    let attrs = names
        .iter()
        .zip(attrs)
        .map(|(n, v)| (n.to_string(), s(v)))
        .collect();
    let r = l.add(&dn, attrs).await.unwrap();
    assert_eq!(r.rc, 0, "add {dn}: {}", r.text);
    let o = oids(&r);
    (dn, o)
}

/// Writes through the router: no response carries the router's
/// post-read control, and each add, modify and modify DN has its
/// `entryCSN` as its position (a delete has none: it keeps to the
/// readings). A client's own post-read control goes to the DSA and its
/// answer to the client. With `--no-post-read`, no write's position comes
/// from its entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_take_their_entry_csn_and_the_client_sees_no_control_it_did_not_ask_for() {
    let rig = rig(Mode::Persist);
    let ((r, admin), (off, off_admin)) = (&rig.on, &rig.off);
    let mut l = replica::writer(&r.url, SUFFIX).await;
    for i in 0..10 {
        let (_, o) = add(&mut l, &format!("pr{i}")).await;
        assert!(!o.iter().any(|x| x == POST_READ), "add {i}: {o:?}");
    }
    let dn = format!("uid=pr0,ou=people,{SUFFIX}");
    let m = l
        .modify(&dn, vec![Mod::Replace("description", HashSet::from(["x"]))])
        .await
        .unwrap();
    assert_eq!((m.rc, oids(&m).len()), (0, 0), "modify: {}", m.text);
    let rn = l.modifydn(&dn, "uid=pr0b", true, None).await.unwrap();
    assert_eq!((rn.rc, oids(&rn).len()), (0, 0), "modify DN: {}", rn.text);
    let del = format!("uid=pr1,ou=people,{SUFFIX}");
    assert_eq!(l.delete(&del).await.unwrap().rc, 0);
    assert_eq!(
        metric(admin, WRITES),
        12.0,
        "10 adds, a modify, a modify DN"
    );
    // A client's own post-read (ldapmodify -e postread) is answered.
    let ldif = format!(
        "dn: uid=pr2,ou=people,{SUFFIX}\nchangetype: modify\nreplace: description\ndescription: y\n"
    );
    let writer = writer_dn(SUFFIX);
    let out = ldap_tool(
        "ldapmodify",
        &[
            "-x",
            "-H",
            &r.url,
            "-D",
            &writer,
            "-w",
            WRITER_PW,
            "-e",
            "postread=entryCSN",
        ],
        Some(&ldif),
    );
    assert!(out.success(), "ldapmodify: {}", out.stderr);
    assert!(
        out.stdout.contains("postread") && out.stdout.contains("entryCSN: "),
        "the client's post-read answer: {}",
        out.stdout
    );
    assert_eq!(metric(admin, WRITES), 13.0, "the client asked for entryCSN");
    // The same writes through the router without post-read.
    let mut l = replica::writer(&off.url, SUFFIX).await;
    for i in 0..5 {
        add(&mut l, &format!("off{i}")).await;
    }
    assert_eq!(metric(off_admin, WRITES), 0.0);
    println!("post-read: 13 of 14 writes positioned by their entryCSN, the delete by a reading; --no-post-read: 0 of 5");
}

/// One client's tries: add, then read back every 20 ms for 1.2 s (over a
/// consumer pull every second); the reads that missed the entry.
async fn tries(url: String, client: usize, n: usize) -> usize {
    let mut l = replica::writer(&url, SUFFIX).await;
    let tag = url.rsplit(':').next().unwrap_or("").to_string();
    let mut stale = 0;
    for i in 0..n {
        let (dn, _) = add(&mut l, &format!("c{tag}x{client}x{i}")).await;
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(1200) {
            stale += usize::from(read(&mut l, &dn, &["entryCSN"]).await.is_none());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    stale
}

/// 20 clients at once through each of two routers, one with post-read
/// and one without, adding entries on `P` and reading each back while a
/// refreshOnly consumer pulls every second: the writes run concurrently
/// on `P`, so its `contextCSN` trails some of them. With post-read no read
/// misses its client's write; without, the figure is printed (how often a
/// trailing reading lets a read go to the consumer too early depends on
/// timing).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_are_read_back_by_their_entry_csn() {
    let rig = rig(Mode::RefreshOnly(1));
    let ((on, admin), (off, _)) = (&rig.on, &rig.off);
    let run = |url: &str| {
        let url = url.to_string();
        (0..20)
            .map(|t| tokio::spawn(tries(url.clone(), t, 8)))
            .collect::<Vec<_>>()
    };
    let (a, b) = (run(&on.url), run(&off.url));
    let (mut stale_on, mut stale_off) = (0, 0);
    for h in a {
        stale_on += h.await.unwrap();
    }
    for h in b {
        stale_off += h.await.unwrap();
    }
    let by_dn = replica::reads_by_dn(on);
    let on_c: usize = by_dn.values().flatten().filter(|d| *d == "C").count();
    let all: usize = by_dn.values().map(Vec::len).sum();
    println!(
        "160 add-then-read-back tries per router, 20 at a time, with the other router's beside them: \
         stale reads with post-read {stale_on}, with --no-post-read {stale_off}; \
         reads on the consumer with post-read: {on_c} of {all}"
    );
    assert_eq!(stale_on, 0, "stale reads with post-read");
    assert_eq!(metric(admin, WRITES), 160.0);
    // Reads still leave P once C has the write.
    assert!(on_c > 0, "no read went to the consumer");
}
