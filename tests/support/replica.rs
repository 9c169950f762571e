//! Replicated OpenLDAP slapd for the replication tests: a provider with
//! `overlay syncprov` and consumers with `syncrepl` (refreshAndPersist, or
//! refreshOnly with an interval), configured as real sites do (the
//! consumer pulls the whole tree from the provider at start, so entryUUIDs
//! and entryCSNs are the provider's), on loopback ports.
#![allow(clippy::panic)]

use super::slapd::{admin_dn, ldap_tool, seed_ldif, Slapd, SlapdConfig, ADMIN_PW};
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

/// A consumer of `provider`'s `suffix`, empty until it has replicated;
/// waits until it has the provider's position.
pub fn consumer(name: &str, suffix: &str, provider: &Slapd, mode: Mode) -> Slapd {
    let kind = match mode {
        Mode::Persist => "type=refreshAndPersist".to_string(),
        Mode::RefreshOnly(s) => format!("type=refreshOnly interval=00:00:00:{s:02}"),
    };
    let c = Slapd::start(SlapdConfig {
        suffixes: vec![suffix.to_string()],
        ldif: String::new(),
        name: name.to_string(),
        global: String::new(),
        database: format!(
            "index entryCSN,entryUUID eq\n\
             syncrepl rid=001 provider=ldap://127.0.0.1:{port} bindmethod=simple \
             binddn=\"{admin}\" credentials={ADMIN_PW} searchbase=\"{suffix}\" \
             {kind} retry=\"1 +\" timeout=3\n",
            port = provider.port,
            admin = admin_dn(suffix),
        ),
        ..SlapdConfig::default()
    });
    wait_caught_up(&c, provider, suffix, Duration::from_secs(30));
    c
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
