//! Paged results (RFC 2696) through the router: every entry once, paged
//! searches interleaved on one connection, and the Rust `ldap3` client's
//! paged searches against real slapd, interleaved anonymous and bound, in
//! one group and directly on slapd as the control.
//!
//! The slapd tests need slapd and ldap-utils (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::dsas::five_dsas::{
    alice, bob, rt, served_by, setup, setup_without, tail, Dsas, Setup, DEMOCORP,
};
use crate::dsas::inproc_checks::people;
use crate::support;
use crate::support::inproc::*;
use ldap3::controls::{ControlType, PagedResults};
use ldap3::{Scope, SearchEntry};
use std::collections::BTreeSet;
use support::slapd::{user_dn, ALICE_PW, BOB_PW, SEED_USERS};

async fn page_through(
    l: &mut ldap3::Ldap,
    base: &str,
    cookie: &mut Vec<u8>,
) -> (Vec<String>, u32, String) {
    let r = within(
        "paged search",
        l.with_controls(PagedResults {
            size: 5,
            cookie: cookie.clone(),
        })
        .search(base, Scope::Subtree, "(objectClass=*)", vec!["1.1"]),
    )
    .await
    .unwrap();
    let dns =
        r.0.into_iter()
            .map(|e| SearchEntry::construct(e).dn)
            .collect::<Vec<_>>();
    assert!(dns.len() <= 5, "page of {} entries", dns.len());
    *cookie =
        r.1.ctrls
            .iter()
            .find(|c| matches!(c.0, Some(ControlType::PagedResults)))
            .map(|c| c.1.parse::<PagedResults>().cookie)
            .unwrap_or_default();
    (dns, r.1.rc, r.1.text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paged_results_return_every_entry_once() {
    let h = Builder::default().start().await;
    let mut l = ldap(&h.url()).await;
    let base = format!("ou=People,{DEMOCORP}");
    let mut cookie = Vec::new();
    let mut all = Vec::new();
    let mut pages = 0;
    let mut dsas = BTreeSet::new();
    loop {
        let (dns, rc, text) = page_through(&mut l, &base, &mut cookie).await;
        assert_eq!(rc, 0, "page {pages}: {text}");
        dsas.insert(dsa_of(&text).unwrap_or_default());
        pages += 1;
        all.extend(dns);
        if cookie.is_empty() {
            break;
        }
        assert!(pages < 50, "paging does not end");
    }
    println!("{} entries in {pages} pages from {dsas:?}", all.len());
    let uniq: BTreeSet<String> = all.iter().cloned().collect();
    assert_eq!(uniq.len(), all.len(), "an entry came twice: {all:?}");
    assert_eq!(uniq, people(DEMOCORP));
    assert_eq!(pages, 5, "23 entries in pages of 5");
    assert_eq!(
        dsas.len(),
        1,
        "all pages from the DSA that issued the cookie"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interleaved_paged_searches_on_one_connection() {
    let h = Builder::default().start().await;
    let mut l = ldap(&h.url()).await;
    let bases = [format!("ou=People,{DEMOCORP}"), DEMOCORP.to_string()];
    let mut cookies = [Vec::new(), Vec::new()];
    let mut got: [Vec<String>; 2] = [Vec::new(), Vec::new()];
    let mut done = [false, false];
    let mut log = Vec::new();
    let mut errors = Vec::new();
    let mut page = 0;
    while !(done[0] && done[1]) && errors.is_empty() {
        page += 1;
        assert!(page < 50, "paging does not end");
        for s in 0..2 {
            if done[s] {
                continue;
            }
            let sent = String::from_utf8_lossy(&cookies[s]).into_owned();
            let (dns, rc, text) = page_through(&mut l, &bases[s], &mut cookies[s]).await;
            let name = ["A", "B"][s];
            log.push(format!(
                "search {name} page {page}: cookie sent {sent:?} -> rc {rc} ({text}), {} entries, next cookie {:?}",
                dns.len(),
                String::from_utf8_lossy(&cookies[s])
            ));
            if rc != 0 {
                errors.push(format!("search {name} page {page}: rc {rc} {text}"));
            }
            got[s].extend(dns);
            done[s] = cookies[s].is_empty();
        }
    }
    for line in &log {
        println!("{line}");
    }
    let want_a = people(DEMOCORP);
    let mut want_b = want_a.clone();
    for dn in [
        DEMOCORP.to_string(),
        format!("cn=served-by,{DEMOCORP}"),
        format!("cn=router,{DEMOCORP}"),
    ] {
        want_b.insert(dn);
    }
    for (s, want) in [want_a, want_b].iter().enumerate() {
        let name = ["A", "B"][s];
        let set: BTreeSet<String> = got[s].iter().cloned().collect();
        let foreign: Vec<&String> = set.difference(want).collect();
        if !foreign.is_empty() {
            errors.push(format!(
                "search {name} returned entries outside its base: {foreign:?}"
            ));
        }
        if set.len() != got[s].len() {
            errors.push(format!("search {name} returned duplicates"));
        }
        if errors.is_empty() && &set != want {
            errors.push(format!(
                "search {name} missed {:?}",
                want.difference(&set).collect::<Vec<_>>()
            ));
        }
    }
    assert!(errors.is_empty(), "{errors:#?}");
}

/// One paged search with the PagedResults adapter; the DNs returned.
async fn paged_users(ldap: &mut ldap3::Ldap, page: i32) -> Vec<String> {
    use ldap3::adapters::{Adapter, EntriesOnly, PagedResults};
    use ldap3::{Scope, SearchEntry};
    let adapters: Vec<Box<dyn Adapter<_, _>>> = vec![
        Box::new(EntriesOnly::new()),
        Box::new(PagedResults::new(page)),
    ];
    let mut stream = ldap
        .streaming_search_with(
            adapters,
            &format!("ou=people,{DEMOCORP}"),
            Scope::OneLevel,
            "(uid=user*)",
            vec!["uid"],
        )
        .await
        .unwrap();
    let mut dns = Vec::new();
    while let Some(e) = stream.next().await.unwrap() {
        dns.push(SearchEntry::construct(e).dn);
    }
    let res = stream.finish().await;
    assert_eq!(res.rc, 0, "paged search ended with {res:?}");
    dns
}

/// Manual paging with the control, one page at a time; returns the DNs
/// per page.
async fn paged_manual(ldap: &mut ldap3::Ldap, page: i32) -> Vec<Vec<String>> {
    use ldap3::controls::{ControlType, PagedResults};
    use ldap3::{Scope, SearchEntry};
    let mut cookie = Vec::new();
    let mut pages = Vec::new();
    loop {
        let ldap3::SearchResult(entries, res) = ldap
            .with_controls(PagedResults {
                size: page,
                cookie: cookie.clone(),
            })
            .search(
                &format!("ou=people,{DEMOCORP}"),
                Scope::OneLevel,
                "(uid=user*)",
                vec!["uid"],
            )
            .await
            .unwrap();
        assert_eq!(res.rc, 0, "page {}: {res:?}", pages.len());
        pages.push(
            entries
                .into_iter()
                .map(|e| SearchEntry::construct(e).dn)
                .collect(),
        );
        let ctrl = res
            .ctrls
            .iter()
            .find(|c| matches!(c.0, Some(ControlType::PagedResults)))
            .unwrap_or_else(|| panic!("page {}: no paged-results control in {res:?}", pages.len()));
        let pr: PagedResults = ctrl.1.parse();
        if pr.cookie.is_empty() {
            break;
        }
        assert!(pages.len() <= 2 * SEED_USERS, "paging does not end");
        cookie = pr.cookie;
    }
    pages
}

fn assert_each_user_once(dns: &[String], what: &str) {
    let uniq: BTreeSet<String> = dns.iter().map(|d| d.to_ascii_lowercase()).collect();
    assert_eq!(
        dns.len(),
        SEED_USERS,
        "{what}: {} entries, want {SEED_USERS}",
        dns.len()
    );
    assert_eq!(uniq.len(), SEED_USERS, "{what}: duplicates among {dns:?}");
    for i in 0..SEED_USERS {
        let want = user_dn(DEMOCORP, &format!("user{i:04}")).to_ascii_lowercase();
        assert!(uniq.contains(&want), "{what}: missing {want}");
    }
}

#[test]
fn rust_ldap3_bind_paged_search_compare() {
    let s = setup("");
    let url = s.router.url.clone();
    let pages_per_search = rt().block_on(async move {
        use ldap3::LdapConnAsync;
        let (conn, mut ldap) = LdapConnAsync::new(&url).await.unwrap();
        ldap3::drive!(conn);
        ldap.simple_bind(&alice(), ALICE_PW)
            .await
            .unwrap()
            .success()
            .unwrap();
        // Wrong password: 49.
        let (conn2, mut l2) = LdapConnAsync::new(&url).await.unwrap();
        ldap3::drive!(conn2);
        let r = l2.simple_bind(&alice(), "wrong").await.unwrap();
        assert_eq!(r.rc, 49, "{r:?}");

        // Paged, by the adapter: several rounds so both GROUP1 DSAs issue
        // first pages.
        for round in 0..4 {
            let dns = paged_users(&mut ldap, 10).await;
            assert_each_user_once(&dns, &format!("adapter round {round}"));
        }
        // Paged, by hand: 10 pages of 10 (and maybe an empty last one).
        let mut pages_per_search = 0;
        for round in 0..2 {
            let pages = paged_manual(&mut ldap, 10).await;
            pages_per_search = pages.len();
            let full: Vec<usize> = pages.iter().map(|p| p.len()).collect();
            assert!(
                full.iter().take(10).all(|&n| n == 10) && full.iter().skip(10).all(|&n| n == 0),
                "manual round {round}: page sizes {full:?}"
            );
            let all: Vec<String> = pages.into_iter().flatten().collect();
            assert_each_user_once(&all, &format!("manual round {round}"));
        }

        // Compare.
        let t = ldap
            .compare(&alice(), "sn", "Example")
            .await
            .unwrap()
            .equal()
            .unwrap();
        assert!(t, "compare sn=Example");
        let f = ldap
            .compare(&alice(), "sn", "Nobody")
            .await
            .unwrap()
            .equal()
            .unwrap();
        assert!(!f, "compare sn=Nobody");
        // WhoAmI.
        let ldap3::result::ExopResult(exop, res) =
            ldap.extended(ldap3::exop::WhoAmI).await.unwrap();
        assert_eq!(res.rc, 0);
        let w: ldap3::exop::WhoAmIResp = exop.parse();
        assert_eq!(w.authzid, format!("dn:{}", alice()));
        ldap.unbind().await.unwrap();
        pages_per_search
    });
    // Every page of one paged search went to one DSA: the access log shows
    // the 6 paged searches of ou=people (4 by the adapter, 2 by hand, one
    // after the other on one connection) as 6 runs of `pages_per_search`
    // operations, each run on one GROUP1 DSA.
    let dsas = s
        .router
        .access_dsas("search", &format!("ou=people,{DEMOCORP}"));
    assert_eq!(
        dsas.len(),
        6 * pages_per_search,
        "access log: {dsas:?} ({pages_per_search} pages per search)\n{}",
        s.router.log_text()
    );
    for (i, run) in dsas.chunks(pages_per_search).enumerate() {
        assert!(
            run.iter().all(|d| d == &run[0]) && (run[0] == "D1" || run[0] == "H1"),
            "paged search {i} was not answered by one GROUP1 DSA: {run:?} (all: {dsas:?})"
        );
    }
}

/// Clients that page through `ou=people` at the same time through the
/// router at `url`, pages interleaved (one page for each client in turn).
/// `binds`: each client's identity (`None`: anonymous). Returns the errors
/// and each client's DNs.
fn interleaved_paged(
    url: &str,
    binds: Vec<Option<(String, &'static str)>>,
) -> (Vec<String>, Vec<Vec<String>>) {
    let url = url.to_string();
    rt().block_on(async move {
        use ldap3::controls::{ControlType, PagedResults};
        use ldap3::{LdapConnAsync, Scope, SearchEntry};
        let mut clients = Vec::new();
        for bind in binds {
            let (conn, mut ldap) = LdapConnAsync::new(&url).await.unwrap();
            ldap3::drive!(conn);
            if let Some((dn, pw)) = bind {
                ldap.simple_bind(&dn, pw).await.unwrap().success().unwrap();
            }
            clients.push((ldap, Vec::<u8>::new(), Vec::<String>::new(), false));
        }
        let base = format!("ou=people,{DEMOCORP}");
        let mut errors = Vec::new();
        for step in 0..40 {
            for (i, (ldap, cookie, dns, done)) in clients.iter_mut().enumerate() {
                if *done {
                    continue;
                }
                let ldap3::SearchResult(entries, res) = ldap
                    .with_controls(PagedResults {
                        size: 10,
                        cookie: cookie.clone(),
                    })
                    .search(&base, Scope::OneLevel, "(uid=user*)", vec!["uid"])
                    .await
                    .unwrap();
                if res.rc != 0 {
                    errors.push(format!(
                        "client {i} page {step}: result {} {:?}",
                        res.rc, res.text
                    ));
                    *done = true;
                    continue;
                }
                dns.extend(entries.into_iter().map(|e| SearchEntry::construct(e).dn));
                let pr: Option<PagedResults> = res
                    .ctrls
                    .iter()
                    .find(|c| matches!(c.0, Some(ControlType::PagedResults)))
                    .map(|c| c.1.parse());
                match pr {
                    Some(pr) if !pr.cookie.is_empty() => *cookie = pr.cookie,
                    _ => *done = true,
                }
            }
            if clients.iter().all(|c| c.3) {
                break;
            }
        }
        (errors, clients.into_iter().map(|c| c.2).collect())
    })
}

/// Checks an [`interleaved_paged`] outcome: no errors, every user exactly
/// once for every client.
fn assert_interleaved_ok(s: &Setup, what: &str, result: (Vec<String>, Vec<Vec<String>>)) {
    let (errors, per_client) = result;
    let mut problems = errors;
    for (i, dns) in per_client.iter().enumerate() {
        let uniq: BTreeSet<String> = dns.iter().map(|d| d.to_ascii_lowercase()).collect();
        if dns.len() != SEED_USERS || uniq.len() != SEED_USERS {
            problems.push(format!(
                "client {i}: {} entries, {} distinct (want {SEED_USERS} each)",
                dns.len(),
                uniq.len()
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{what}: {problems:?}\nrouter log tail:\n{}",
        tail(&s.router.log_text())
    );
}

/// Only D1 in GROUP1, first in the ordered list: every DEMOCORP read
/// lands on D1.
fn setup_d1_reads() -> Setup {
    let s = setup_without("", &["H1"]);
    assert_eq!(served_by(&s.router.url, None, DEMOCORP), "D1");
    s
}

/// An anonymous and a bound client page through D1 at the same time.
#[test]
fn paged_searches_interleaved_anonymous_and_bound() {
    let s = setup_d1_reads();
    let r = interleaved_paged(&s.router.url, vec![None, Some((alice(), ALICE_PW))]);
    assert_interleaved_ok(&s, "anonymous + alice", r);
}

/// Two anonymous clients page through D1 at the same time. Each is its own
/// LDAP connection to the router, so each must get its own paged search,
/// as two connections to one slapd would
/// (`paged_searches_interleaved_directly_on_slapd` is the control).
#[test]
fn paged_searches_interleaved_two_anonymous_clients() {
    let s = setup_d1_reads();
    let r = interleaved_paged(&s.router.url, vec![None, None]);
    assert_interleaved_ok(&s, "two anonymous clients", r);
}

/// Two bound clients (alice, bob) page through D1 at the same time.
#[test]
fn paged_searches_interleaved_two_bound_clients() {
    let s = setup_d1_reads();
    let r = interleaved_paged(
        &s.router.url,
        vec![Some((alice(), ALICE_PW)), Some((bob(), BOB_PW))],
    );
    assert_interleaved_ok(&s, "alice + bob", r);
}

/// Four clients (two anonymous, alice, bob) page at the same time with both
/// GROUP1 DSAs in use.
#[test]
fn paged_searches_interleaved_group1() {
    let s = setup("");
    let r = interleaved_paged(
        &s.router.url,
        vec![None, None, Some((alice(), ALICE_PW)), Some((bob(), BOB_PW))],
    );
    assert_interleaved_ok(&s, "four clients over D1 and H1", r);
}

/// The same paged search, one client at a time, directly on a slapd, as
/// the control experiment: slapd itself pages correctly for clients on
/// separate connections.
#[test]
fn paged_searches_interleaved_directly_on_slapd() {
    let dsas = Dsas::start();
    let url = dsas.get("D1").url.clone();
    let (errors, per_client) = interleaved_paged(&url, vec![None, None]);
    assert!(errors.is_empty(), "{errors:?}");
    for dns in &per_client {
        assert_each_user_once(dns, "direct");
    }
}
