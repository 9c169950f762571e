//! Horizontal partitions (CA Directory's `<uid "[hash1(N)=S]">` prefix
//! part) against real slapd: one flat namespace spread by the hash of each
//! entry's uid over slot 0 (DSA A) and slot 1 (B1 and B2, a load-share
//! group).
//!
//! Needs slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::collections::BTreeSet;
use std::fs;

use dsa_router::directory::knowledge::hash::{slot, Algo};
use support::knowledge::{Dsa, Knowledge};
use support::ldap::show;
use support::router::Router;
use support::slapd::{ldap_tool, Slapd, SlapdConfig, ToolOutput, ADMIN_PW};

const BASE: &str = "o=HP,c=AU";
const USERS: usize = 2000;

/// A slapd holding only the suffix entry.
fn empty(name: &str) -> Slapd {
    let ldif = format!("dn: {BASE}\nobjectClass: organization\no: HP\n\n");
    Slapd::start(SlapdConfig::new(name, &[BASE], ldif))
}

fn user(i: usize) -> String {
    format!("user{i:04}")
}

fn entry(i: usize) -> String {
    let u = user(i);
    format!("dn: uid={u},{BASE}\nobjectClass: inetOrgPerson\nuid: {u}\ncn: User {i}\nsn: {i}\n\n")
}

fn admin() -> String {
    format!("cn=admin,{BASE}")
}

fn ldapadd(url: &str, ldif: &str) -> ToolOutput {
    ldap_tool(
        "ldapadd",
        &["-x", "-H", url, "-D", &admin(), "-w", ADMIN_PW],
        Some(ldif),
    )
}

/// The uids under BASE on `url` (directly or through the router).
fn uids(url: &str, extra: &[&str]) -> (ToolOutput, Vec<String>) {
    let mut args = vec!["-x", "-LLL", "-H", url, "-b", BASE];
    args.extend_from_slice(extra);
    args.extend(["(objectClass=*)", "uid"]);
    let out = ldap_tool("ldapsearch", &args, None);
    let v = out
        .stdout
        .lines()
        .filter_map(|l| l.strip_prefix("uid: "))
        .map(str::to_string)
        .collect();
    (out, v)
}

#[test]
fn users_spread_by_hash_over_slots_and_searches_see_them_once() {
    let a = empty("HASH-A");
    let mut b1 = empty("HASH-B1");
    let mut b2 = empty("HASH-B2");
    let dir = tempfile::tempdir().unwrap();
    let mut k = Knowledge::new();
    for (name, s, part, flags) in [
        ("A", &a, 0, "multi-write"),
        ("B1", &b1, 1, "multi-write, load-share"),
        ("B2", &b2, 1, "multi-write, load-share"),
    ] {
        k = k.dsa(
            Dsa::new(name, s.port)
                .prefix(&slot_prefix(part))
                .flags(flags)
                .load_share_group(&format!("SLOT{part}")),
        );
    }
    let path = k.write(dir.path());
    let check = std::process::Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["check", path.to_str().unwrap()])
        .output()
        .unwrap();
    let summary = String::from_utf8_lossy(&check.stdout);
    assert!(
        summary.contains("partition o=HP,c=AU slot 1 of 2 over uid (hash1)"),
        "{summary}"
    );
    let router = Router::start_with(&path, dir.path(), &["--probe-interval", "0.2"]);

    // 2,000 users added through the router land on the DSA of their slot.
    let ldif: String = (0..USERS).map(entry).collect();
    let out = ldapadd(&router.url, &ldif);
    assert!(
        out.success(),
        "{}",
        show("ldapadd through the router", &out)
    );
    let (_, on_a) = uids(&a.url, &[]);
    let (_, on_b1) = uids(&b1.url, &[]);
    for u in &on_a {
        assert_eq!(slot(Algo::Hash1, u, 2), 0, "{u} is on A");
    }
    for u in &on_b1 {
        assert_eq!(slot(Algo::Hash1, u, 2), 1, "{u} is on B1");
    }
    assert_eq!(on_a.len() + on_b1.len(), USERS);
    let share = on_a.len() as f64 / USERS as f64;
    assert!((0.45..=0.55).contains(&share), "slot 0 holds {share:.3}");
    println!("slot 0: {} users, slot 1: {}", on_a.len(), on_b1.len());
    // Replication within slot 1, by hand: B2 gets B1's entries.
    let slot1: String = (0..USERS)
        .filter(|&i| slot(Algo::Hash1, &user(i), 2) == 1)
        .map(entry)
        .collect();
    let out = ldapadd(&b2.url, &slot1);
    assert!(out.success(), "{}", show("ldapadd B2", &out));

    // A subtree search at the parent: every user once, and the parent
    // entry once; paged the same; a filter on one uid finds it.
    let want: BTreeSet<String> = (0..USERS).map(user).collect();
    for extra in [&[][..], &["-E", "pr=100/noprompt"][..]] {
        let (out, got) = uids(&router.url, extra);
        assert!(out.success(), "{}", show("search at the parent", &out));
        assert_eq!(got.len(), USERS, "{extra:?}: entries");
        assert_eq!(got.iter().cloned().collect::<BTreeSet<_>>(), want);
        assert_eq!(out.stdout.matches(&format!("dn: {BASE}\n")).count(), 1);
    }
    let out = ldap_tool(
        "ldapsearch",
        &[
            "-x",
            "-LLL",
            "-H",
            &router.url,
            "-b",
            BASE,
            "(uid=user0042)",
            "1.1",
        ],
        None,
    );
    assert_eq!(out.stdout.trim(), format!("dn: uid=user0042,{BASE}"));
    // A one-level search at the parent: every user once.
    let (out, got) = uids(&router.url, &["-s", "one"]);
    assert!(out.success(), "{}", show("one-level", &out));
    assert_eq!(got.len(), USERS);

    // A modify DN that would change the slot: affectsMultipleDSAs (71).
    let from = (0..USERS)
        .find(|&i| slot(Algo::Hash1, &user(i), 2) == 0)
        .unwrap();
    let to = (0..100)
        .map(|i| format!("moved{i}"))
        .find(|n| slot(Algo::Hash1, n, 2) == 1)
        .unwrap();
    let out = ldap_tool(
        "ldapmodrdn",
        &[
            "-x",
            "-H",
            &router.url,
            "-D",
            &admin(),
            "-w",
            ADMIN_PW,
            &format!("uid={},{BASE}", user(from)),
            &format!("uid={to}"),
        ],
        None,
    );
    assert_eq!(out.code, Some(71), "{}", show("modrdn across slots", &out));

    // Slot 1 loses one DSA: its entries are still read (from the other).
    let one = (0..USERS)
        .find(|&i| slot(Algo::Hash1, &user(i), 2) == 1)
        .unwrap();
    let zero = from;
    let read = |i: usize| {
        ldap_tool(
            "ldapsearch",
            &[
                "-x",
                "-LLL",
                "-H",
                &router.url,
                "-b",
                &format!("uid={},{BASE}", user(i)),
                "-s",
                "base",
                "1.1",
            ],
            None,
        )
    };
    b1.kill9();
    for _ in 0..4 {
        let out = read(one);
        assert!(
            out.success(),
            "{}",
            show("read of slot 1 with B1 down", &out)
        );
    }
    // Both: slot 1's entries are unavailable, slot 0's are read, and a
    // search at the parent fails by the default policy (unavailable).
    b2.kill9();
    let out = read(one);
    assert_eq!(
        out.code,
        Some(52),
        "{}",
        show("read of slot 1, both down", &out)
    );
    let out = read(zero);
    assert!(out.success(), "{}", show("read of slot 0", &out));
    let (out, _) = uids(&router.url, &[]);
    assert_eq!(out.code, Some(52), "{}", show("search at the parent", &out));
    assert!(
        out.stderr.contains("partition o=HP,c=AU slot 1"),
        "{}",
        show("search", &out)
    );
}

/// The knowledge prefix of hash slot `slot` of two under `o=HP,c=AU`.
fn slot_prefix(slot: usize) -> String {
    format!("<c AU><o HP><uid \"[hash1(2)={slot}]\">")
}

/// Knowledge for two slots on `ports` (slot 0, slot 1).
fn two_slots(dir: &std::path::Path, ports: [u16; 2]) -> std::path::PathBuf {
    Knowledge::new()
        .dsas(
            ports.iter().enumerate().map(|(slot, port)| {
                Dsa::new(&format!("S{slot}"), *port).prefix(&slot_prefix(slot))
            }),
        )
        .write_to(&dir.join("hash.dxg"))
}

fn hash_tool(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .arg("hash")
        .args(args)
        .env("DSA_ROUTER_HASH_PASSWORD", ADMIN_PW)
        .output()
        .unwrap()
}

#[test]
fn split_ldif_loads_per_slot_and_check_finds_a_misplaced_entry() {
    let dir = tempfile::tempdir().unwrap();
    let mut ldif = format!("dn: {BASE}\nobjectClass: organization\no: HP\n\n");
    for i in 0..300 {
        ldif.push_str(&entry(i));
    }
    let src = dir.path().join("all.ldif");
    fs::write(&src, &ldif).unwrap();
    // Split with knowledge whose addresses do not matter yet.
    let k = two_slots(dir.path(), [1, 2]);
    let out = hash_tool(&[
        "split",
        k.to_str().unwrap(),
        src.to_str().unwrap(),
        "--out",
        dir.path().to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |slot: u32| {
        fs::read_to_string(dir.path().join(format!("o=HP_c=AU.slot{slot}.ldif"))).unwrap()
    };
    // Each slot's file loads into its DSA.
    let s0 = Slapd::start(SlapdConfig::new("SPLIT0", &[BASE], read(0)));
    let s1 = Slapd::start(SlapdConfig::new("SPLIT1", &[BASE], read(1)));
    let (_, on0) = uids(&s0.url, &[]);
    let (_, on1) = uids(&s1.url, &[]);
    assert_eq!(on0.len() + on1.len(), 300);
    assert!(on0.iter().all(|u| slot(Algo::Hash1, u, 2) == 0));
    assert!(on1.iter().all(|u| slot(Algo::Hash1, u, 2) == 1));
    // The check tool: nothing misplaced.
    let k = two_slots(dir.path(), [s0.port, s1.port]);
    let admin = admin();
    let out = hash_tool(&["check", k.to_str().unwrap(), "--bind-dn", &admin]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("checked 300 entries: 0 misplaced"), "{text}");
    // One entry put on the wrong DSA by hand: reported, exit 1.
    let stray = (0..300)
        .find(|&i| slot(Algo::Hash1, &user(i), 2) == 0)
        .unwrap();
    let mut moved = entry(stray);
    moved = moved.replace(&user(stray), "stray-copy");
    let wrong = (0..100)
        .map(|i| format!("stray{i}"))
        .find(|n| slot(Algo::Hash1, n, 2) == 0)
        .unwrap();
    moved = moved.replace("stray-copy", &wrong);
    let out = ldapadd(&s1.url, &moved);
    assert!(out.success(), "{}", show("ldapadd stray", &out));
    let out = hash_tool(&["check", k.to_str().unwrap(), "--bind-dn", &admin]);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "misplaced: uid={wrong},{BASE} is on DSA S1 (slot 1) but hashes to slot 0"
        )),
        "{text}"
    );
    assert!(text.contains("checked 301 entries: 1 misplaced"), "{text}");
}
