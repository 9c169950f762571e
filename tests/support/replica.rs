//! Replicated OpenLDAP slapd for the replication tests: a provider with
//! `overlay syncprov` and consumers with `syncrepl` (refreshAndPersist, or
//! refreshOnly with an interval), or two providers replicating each other
//! ([`pair`], multi-provider), configured as real sites do (a consumer
//! pulls the whole tree from its provider at start, so entryUUIDs and
//! entryCSNs are the provider's), on loopback ports; and what the tests do
//! with a router in front of them ([`Setup`]: knowledge, the admin API's
//! `/status` and `/metrics`, LDAP helpers).
#![allow(clippy::panic, clippy::unwrap_used)]

use super::knowledge::{Dsa, Knowledge};
pub use super::ldap::{get, status};
use super::router::Router;
use super::slapd::{
    admin_dn, ldap_tool, pick_port, seed_ldif, writer_dn, Slapd, SlapdConfig, ADMIN_PW, ROUTER_PW,
    WRITER_PW,
};
use ldap3::{Ldap, LdapConnAsync, Scope, SearchEntry};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant};

/// How a consumer replicates.
#[derive(Clone, Copy, Debug)]
pub enum Mode {
    /// `type=refreshAndPersist`: changes stream as they happen.
    Persist,
    /// `type=refreshOnly` every this many seconds.
    RefreshOnly(u32),
}

/// A provider of `suffix` with the seed data and syncprov.
pub fn provider(name: &str, suffix: &str) -> Slapd {
    Slapd::start(SlapdConfig {
        suffixes: vec![suffix.to_string()],
        ldif: seed_ldif(suffix, name),
        name: name.to_string(),
        global: "moduleload syncprov\n".to_string(),
        database: "index entryCSN,entryUUID eq\noverlay syncprov\nsyncprov-checkpoint 100 1\n"
            .to_string(),
        ..SlapdConfig::default()
    })
}

/// The `syncrepl` line of a database replicating `suffix` from the slapd
/// on `port`, bound as its rootdn.
fn syncrepl(rid: u32, port: u16, suffix: &str, mode: Mode) -> String {
    let kind = match mode {
        Mode::Persist => "type=refreshAndPersist".to_string(),
        Mode::RefreshOnly(s) => format!("type=refreshOnly interval=00:00:00:{s:02}"),
    };
    format!(
        "syncrepl rid={rid:03} provider=ldap://127.0.0.1:{port} bindmethod=simple \
         binddn=\"{admin}\" credentials={ADMIN_PW} searchbase=\"{suffix}\" \
         {kind} retry=\"1 +\" timeout=3\n",
        admin = admin_dn(suffix),
    )
}

/// A consumer of `provider`'s `suffix`, empty until it has replicated;
/// waits until it has the provider's position.
pub fn consumer(name: &str, suffix: &str, provider: &Slapd, mode: Mode) -> Slapd {
    let c = Slapd::start(SlapdConfig {
        suffixes: vec![suffix.to_string()],
        ldif: String::new(),
        name: name.to_string(),
        global: String::new(),
        database: format!(
            "index entryCSN,entryUUID eq\n{}",
            syncrepl(1, provider.port, suffix, mode)
        ),
        ..SlapdConfig::default()
    });
    wait_caught_up(&c, provider, suffix, Duration::from_secs(30));
    c
}

/// Two providers of `suffix` replicating each other (multi-provider,
/// slapd.conf(5) `serverID` and `multiprovider`, OpenLDAP 2.5): `A`
/// (serverID 1) with the seed data and `B` (serverID 2), each with
/// syncprov and a `syncrepl` of the other in `mode`. `B` starts empty and
/// pulls the tree from `A`; then `A` is restarted with its `syncrepl` of
/// `B` (each needs the other's port, which is only known once it runs).
/// Their `contextCSN` has one value per server ID: 000 (the seed data,
/// loaded by slapadd), 001 once `A` took a write, 002 once `B` did.
/// Returns once each has every CSN of the other.
pub fn pair(suffix: &str, mode: Mode) -> (Slapd, Slapd) {
    const SYNCPROV: &str = "overlay syncprov\nsyncprov-checkpoint 100 1\n";
    let mut a = Slapd::start(SlapdConfig {
        suffixes: vec![suffix.to_string()],
        ldif: seed_ldif(suffix, "A"),
        name: "A".to_string(),
        global: "moduleload syncprov\nserverID 1\n".to_string(),
        database: format!("index entryCSN,entryUUID eq\n{SYNCPROV}"),
        ..SlapdConfig::default()
    });
    let b = Slapd::start(SlapdConfig {
        suffixes: vec![suffix.to_string()],
        ldif: String::new(),
        name: "B".to_string(),
        global: "moduleload syncprov\nserverID 2\n".to_string(),
        database: format!(
            "index entryCSN,entryUUID eq\n{}multiprovider on\n{SYNCPROV}",
            syncrepl(1, a.port, suffix, mode)
        ),
        ..SlapdConfig::default()
    });
    wait_caught_up(&b, &a, suffix, Duration::from_secs(30));
    // A's syncrepl of B goes before its syncprov, as B's does.
    let conf = a.dir().join("slapd.conf");
    let text = std::fs::read_to_string(&conf).unwrap();
    let with = text.replacen(
        SYNCPROV,
        &format!(
            "{}multiprovider on\n{SYNCPROV}",
            syncrepl(2, b.port, suffix, mode)
        ),
        1,
    );
    assert_ne!(text, with, "A's slapd.conf has no syncprov section");
    std::fs::write(&conf, with).unwrap();
    a.restart();
    wait_caught_up(&a, &b, suffix, Duration::from_secs(30));
    (a, b)
}

/// `contextCSN` values of `suffix` on `s` (empty when none).
pub fn context_csn(s: &Slapd, suffix: &str) -> Vec<String> {
    let out = ldap_tool(
        "ldapsearch",
        &[
            "-x",
            "-LLL",
            "-o",
            "ldif-wrap=no",
            "-H",
            &s.url,
            "-D",
            &admin_dn(suffix),
            "-w",
            ADMIN_PW,
            "-b",
            suffix,
            "-s",
            "base",
            "(objectClass=*)",
            "contextCSN",
        ],
        None,
    );
    out.stdout
        .lines()
        .filter_map(|l| l.strip_prefix("contextCSN: "))
        .map(str::to_string)
        .collect()
}

/// Waits until `c` has every CSN `p` has.
pub fn wait_caught_up(c: &Slapd, p: &Slapd, suffix: &str, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let want = context_csn(p, suffix);
        let have = context_csn(c, suffix);
        let sid = |c: &str| c.split('#').nth(2).map(str::to_string);
        if !want.is_empty()
            && want
                .iter()
                .all(|w| have.iter().any(|h| h >= w && sid(h) == sid(w)))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "consumer {} did not catch up with {} ({want:?} vs {have:?}):\n{}",
            c.name,
            p.name,
            c.log()
        );
        thread::sleep(Duration::from_millis(50));
    }
}

/// Knowledge of `dsas` (name, port, dsa-flags besides `load-share`) for
/// `<c AU><o DEMOCORP>`, all in load-share group `R`, each naming the
/// router (`cn=router`) and trusting its conveyed originators.
pub fn load_share_knowledge(dir: &Path, dsas: &[(&str, u16, &str)]) -> PathBuf {
    Knowledge::new()
        .dsas(dsas.iter().map(|(name, port, flags)| {
            Dsa::new(name, *port)
                .prefix("<c AU><o DEMOCORP>")
                .router(ROUTER_PW)
                .flags(&format!("load-share, {flags}"))
                .load_share_group("R")
                .trust_conveyed()
        }))
        .write(dir)
}

/// A router process over knowledge `k` with an admin API; its admin
/// address.
pub fn router(dir: &Path, k: &Path, extra: &[&str]) -> (Router, String) {
    let admin = format!("127.0.0.1:{}", pick_port());
    let mut args = vec!["--admin", admin.as_str()];
    args.extend_from_slice(extra);
    (Router::start_with(k, dir, &args), admin)
}

/// A series of `/metrics` without labels (-1 when absent).
pub fn metric(admin: &str, name: &str) -> f64 {
    get(admin, "/metrics")
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(-1.0)
}

/// DSA `name`'s report in `/status` (first partition).
pub fn dsa(st: &Value, name: &str) -> Value {
    st["partitions"][0]["dsas"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == name)
        .cloned()
        .unwrap()
}

/// DSA `name`'s position for server ID `sid` (3 hex digits), as `/status`
/// shows it.
pub fn position_of(admin: &str, name: &str, sid: &str) -> Option<String> {
    dsa(&status(admin), name)["replication"]["positions"][sid]
        .as_str()
        .map(str::to_string)
}

/// Polls `f` every 10 ms until it holds; how long that took.
pub fn wait_for(what: &str, within: Duration, mut f: impl FnMut() -> bool) -> Duration {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < within, "{what}: not within {within:?}");
        thread::sleep(Duration::from_millis(10));
    }
    t.elapsed()
}

/// A connection to `url` bound as `cn=writer` of `suffix`.
pub async fn writer(url: &str, suffix: &str) -> Ldap {
    let (conn, mut l) = LdapConnAsync::new(url).await.unwrap();
    ldap3::drive!(conn);
    l.simple_bind(&writer_dn(suffix), WRITER_PW)
        .await
        .unwrap()
        .success()
        .unwrap();
    l
}

/// Adds `uid=UID,ou=people,SUFFIX`; its DN.
pub async fn add(l: &mut Ldap, suffix: &str, uid: &str) -> String {
    let dn = format!("uid={uid},ou=people,{suffix}");
    let s = |v: &str| HashSet::from([v.to_string()]);
    l.add(
        &dn,
        vec![
            ("objectClass".to_string(), s("inetOrgPerson")),
            ("cn".to_string(), s(uid)),
            ("sn".to_string(), s(uid)),
            ("uid".to_string(), s(uid)),
        ],
    )
    .await
    .unwrap()
    .success()
    .unwrap_or_else(|e| panic!("add {dn}: {e}"));
    dn
}

/// The entry, `None` when it is not there (a stale read).
pub async fn read(l: &mut Ldap, dn: &str, attrs: &[&str]) -> Option<SearchEntry> {
    let ldap3::SearchResult(entries, res) = l
        .search(dn, Scope::Base, "(objectClass=*)", attrs.to_vec())
        .await
        .unwrap();
    match res.rc {
        0 => entries.into_iter().next().map(SearchEntry::construct),
        32 => None,
        rc => panic!("read {dn}: result {rc} {}", res.text),
    }
}

/// The entry's `entryCSN` (asked for).
pub fn csn(e: &SearchEntry) -> String {
    e.attrs["entryCSN"][0].clone()
}

/// The DSA of each search access-log line, per DN, in order.
pub fn reads_by_dn(r: &Router) -> HashMap<String, Vec<String>> {
    let mut m: HashMap<String, Vec<String>> = HashMap::new();
    for l in r.log_text().lines() {
        if !(l.contains("access") && l.contains("op=\"search\"")) {
            continue;
        }
        let field = |k: &str| {
            let i = l.find(&format!(" {k}="))? + k.len() + 2;
            let rest = &l[i..];
            Some(if let Some(q) = rest.strip_prefix('"') {
                q[..q.find('"')?].to_string()
            } else {
                rest.split_whitespace().next()?.to_string()
            })
        };
        if let (Some(dn), Some(d)) = (field("dn"), field("dsa")) {
            m.entry(dn).or_default().push(d);
        }
    }
    m
}
