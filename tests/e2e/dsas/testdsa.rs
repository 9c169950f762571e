//! Integration tests of the test DSA, driven by the `ldap3` client crate.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use crate::support::inproc::HEAVY;
use crate::support::ldap::authzid;
use dsa_testdsa::{Directory, TestDsa};
use ldap3::controls::{PagedResults, ProxyAuth};
use ldap3::exop::{Exop, WhoAmI};
use ldap3::{
    Ldap, LdapConnAsync, LdapConnSettings, LdapResult, Mod, Scope, SearchEntry, SearchOptions,
};

const ALICE: &str = "cn=Alice Smith,ou=People,o=Acme";
const BOB: &str = "cn=Bob Jones,ou=People,o=Acme";
const CAROL: &str = "cn=Carol,ou=People,o=Acme";

const LDIF: &str = "\
version: 1

# The Acme naming context.
dn: o=Acme
objectClass: organization

dn: ou=People,o=Acme
objectClass: organizationalUnit

dn: cn=Alice Smith,ou=People,o=Acme
objectClass: person
sn: Smith
uidNumber: 1001
mail: alice@acme.example
userPassword: alicepw
testAclProxy: TRUE

dn: cn=Bob Jones,ou=People,o=Acme
objectClass: person
sn: Jones
uidNumber: 1002
description:: Zm9sZGVkIGFuZCBiYXNlNjQ=
userPassword: bobpw

dn: cn=Carol,ou=People,o=Acme
objectClass: person
sn: Smith
uidNumber: 1003
testAclReaders: CN=bob jones, ou=people, o=acme

dn: ou=Groups,o=Acme
objectClass: organizationalUnit

dn: cn=Admins,ou=Groups,o=Acme
objectClass: groupOfNames
member: cn=Alice Smith,ou=People,o=Acme

dn: dc=example,dc=com
objectClass: domain
";

async fn start(name: &str) -> TestDsa {
    let dir = Directory::from_ldif(LDIF).expect("fixture LDIF");
    TestDsa::start(dir, "127.0.0.1:0", name)
        .await
        .expect("start")
}

async fn connect(dsa: &TestDsa) -> Ldap {
    let settings = LdapConnSettings::new().set_conn_timeout(Duration::from_secs(5));
    let (conn, ldap) = LdapConnAsync::with_settings(settings, &dsa.url())
        .await
        .expect("connect");
    ldap3::drive!(conn);
    ldap
}

async fn bound(dsa: &TestDsa, dn: &str, pw: &str) -> Ldap {
    let mut ldap = connect(dsa).await;
    ldap.simple_bind(dn, pw)
        .await
        .expect("bind")
        .success()
        .expect("bind ok");
    ldap
}

/// Searches and returns the sorted DNs with the final result.
async fn dns(ldap: &mut Ldap, base: &str, scope: Scope, filter: &str) -> (Vec<String>, LdapResult) {
    let res = ldap
        .search(base, scope, filter, vec!["1.1"])
        .await
        .expect("search");
    let mut dns: Vec<String> = res
        .0
        .into_iter()
        .map(|e| SearchEntry::construct(e).dn)
        .collect();
    dns.sort();
    (dns, res.1)
}

#[tokio::test]
async fn search_scopes_and_filters() {
    let dsa = start("east").await;
    let mut ldap = connect(&dsa).await;
    let (people, groups) = ("ou=People,o=Acme", "ou=Groups,o=Acme");
    for (base, scope, filter, want) in [
        ("o=Acme", Scope::Base, "(objectClass=*)", vec!["o=Acme"]),
        (
            "O=ACME",
            Scope::OneLevel,
            "(objectClass=*)",
            vec![groups, people],
        ),
        (
            "o=acme",
            Scope::Subtree,
            "(objectClass=person)",
            vec![ALICE, BOB],
        ),
        (people, Scope::OneLevel, "(sn=smith)", vec![ALICE]),
        (people, Scope::Subtree, "(cn=*li*)", vec![ALICE]),
        (people, Scope::Subtree, "(cn=b*es)", vec![BOB]),
        (people, Scope::Subtree, "(uidNumber>=1002)", vec![BOB]),
        (people, Scope::Subtree, "(uidNumber<=1001)", vec![ALICE]),
        (people, Scope::Subtree, "(mail=*)", vec![ALICE]),
        (people, Scope::Subtree, "(sn~=JONES)", vec![BOB]),
        (
            people,
            Scope::Subtree,
            "(|(sn=jones)(mail=alice@acme.example))",
            vec![ALICE, BOB],
        ),
        (
            people,
            Scope::Subtree,
            "(&(objectClass=person)(!(sn=smith)))",
            vec![BOB],
        ),
        (
            "o=Acme",
            Scope::Subtree,
            "(member=CN=alice smith,ou=people,o=acme)",
            vec!["cn=Admins,ou=Groups,o=Acme"],
        ),
        (
            "",
            Scope::OneLevel,
            "(objectClass=*)",
            vec!["dc=example,dc=com", "o=Acme"],
        ),
        (people, Scope::Subtree, "(sn=nobody)", vec![]),
    ] {
        let (got, res) = dns(&mut ldap, base, scope, filter).await;
        assert_eq!(got, want, "{base} {scope:?} {filter}");
        assert_eq!((res.rc, res.text.as_str()), (0, "testdsa east"), "{filter}");
    }

    // A missing base: noSuchObject with the deepest existing entry as matchedDN.
    let (_, res) = dns(
        &mut ldap,
        "cn=nobody,ou=People,o=Acme",
        Scope::Base,
        "(objectClass=*)",
    )
    .await;
    assert_eq!((res.rc, res.matched.as_str()), (32, people));

    // Size limit: two entries, then sizeLimitExceeded.
    let opts = SearchOptions::new().sizelimit(2);
    let res = ldap.with_search_options(opts).search(
        "o=Acme",
        Scope::Subtree,
        "(objectClass=*)",
        vec!["1.1"],
    );
    let res = res.await.expect("search");
    assert_eq!((res.0.len(), res.1.rc), (2, 4));
}

#[tokio::test]
async fn attribute_selection_and_root_dse() {
    let dsa = start("west").await;
    let mut ldap = connect(&dsa).await;
    let attrs = |sel: Vec<&'static str>, types_only: bool| {
        let mut ldap = ldap.clone();
        async move {
            let opts = SearchOptions::new().typesonly(types_only);
            let res =
                ldap.with_search_options(opts)
                    .search(BOB, Scope::Base, "(objectClass=*)", sel);
            let (mut entries, _) = res.await.expect("search").success().expect("ok");
            let entry = SearchEntry::construct(entries.remove(0));
            let mut got: Vec<(String, usize)> =
                entry.attrs.into_iter().map(|(a, v)| (a, v.len())).collect();
            got.extend(entry.bin_attrs.into_iter().map(|(a, v)| (a, v.len())));
            got.sort();
            got
        }
    };
    let names = |got: Vec<(String, usize)>| got.into_iter().map(|(a, _)| a).collect::<Vec<_>>();
    let all = [
        "cn",
        "description",
        "objectClass",
        "sn",
        "uidNumber",
        "userPassword",
    ];
    assert_eq!(names(attrs(vec![], false).await), all);
    assert_eq!(names(attrs(vec!["*"], false).await), all);
    assert_eq!(names(attrs(vec!["+"], false).await), ["entryDN"]);
    assert!(attrs(vec!["1.1"], false).await.is_empty());
    assert_eq!(
        attrs(vec!["SN", "nope"], false).await,
        [("sn".to_string(), 1)]
    );
    assert_eq!(attrs(vec!["sn"], true).await, [("sn".to_string(), 0)]);
    let res = ldap
        .search(BOB, Scope::Base, "(objectClass=*)", vec!["description"])
        .await
        .expect("search");
    let bob = SearchEntry::construct(res.0.into_iter().next().expect("bob"));
    assert_eq!(bob.attrs["description"], ["folded and base64"]);

    let res = ldap
        .search("", Scope::Base, "(objectClass=*)", vec!["*"])
        .await
        .expect("root DSE");
    let dse = SearchEntry::construct(res.0.into_iter().next().expect("root DSE entry")).attrs;
    let set = |a: &str| {
        dse.get(a)
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .collect::<BTreeSet<_>>()
    };
    assert_eq!(
        set("namingContexts"),
        BTreeSet::from(["dc=example,dc=com".into(), "o=Acme".into()])
    );
    assert_eq!(set("testDsaName"), BTreeSet::from(["west".into()]));
    assert_eq!(
        set("vendorName"),
        BTreeSet::from(["dsa-router testdsa".into()])
    );
    assert_eq!(set("supportedLDAPVersion"), BTreeSet::from(["3".into()]));
    assert!(set("supportedControl").contains("2.16.840.1.113730.3.4.18"));
    assert!(set("supportedControl").contains("1.2.840.113556.1.4.319"));
}

#[tokio::test]
async fn compare_bind_whoami_and_unknown_exop() {
    let dsa = start("north").await;
    let mut ldap = connect(&dsa).await;
    for (dn, attr, val, rc) in [
        (ALICE, "sn", "SMITH", 6),
        (ALICE, "sn", "jones", 5),
        (ALICE, "telephoneNumber", "1", 16),
        ("cn=nobody,o=Acme", "sn", "x", 32),
        (CAROL, "sn", "smith", 32), // invisible to anonymous
    ] {
        let res = ldap.compare(dn, attr, val).await.expect("compare").0;
        assert_eq!(res.rc, rc, "{dn} {attr}={val}");
        if rc == 5 || rc == 6 {
            assert_eq!(res.text, "testdsa north");
        }
    }
    assert_eq!(authzid(&mut ldap).await, "");
    for (dn, pw, rc, identity) in [
        (ALICE, "alicepw", 0, "dn:cn=Alice Smith,ou=People,o=Acme"),
        (
            "CN=alice smith, OU=people,o=acme",
            "alicepw",
            0,
            "dn:cn=Alice Smith,ou=People,o=Acme",
        ),
        (ALICE, "wrong", 49, ""),
        ("cn=nobody,o=Acme", "x", 49, ""),
        ("o=Acme", "x", 49, ""), // no userPassword
        ("", "", 0, ""),
    ] {
        let res = ldap.simple_bind(dn, pw).await.expect("bind");
        assert_eq!(res.rc, rc, "bind {dn}");
        assert_eq!(authzid(&mut ldap).await, identity, "after bind {dn}");
    }
    let res = ldap
        .extended(Exop {
            name: Some("1.2.3.4".into()),
            val: None,
        })
        .await
        .expect("exop")
        .1;
    assert_eq!(res.rc, 2);
    assert!(res.text.contains("1.2.3.4"), "{}", res.text);
}

#[tokio::test]
async fn writes() {
    let dsa = start("south").await;
    let mut ldap = connect(&dsa).await;
    let set = |v: &[&'static str]| v.iter().copied().collect::<HashSet<&str>>();
    let dave = "cn=Dave,ou=People,o=Acme";
    let attrs = || vec![("objectClass", set(&["person"])), ("sn", set(&["Doe"]))];
    for (dn, rc) in [
        (dave, 0),
        (dave, 68),
        ("cn=x,ou=Nope,o=Acme", 32),
        ("o=NewTop", 0),
    ] {
        assert_eq!(ldap.add(dn, attrs()).await.expect("add").rc, rc, "add {dn}");
    }
    assert!(dsa.dir.contains("o=newtop"));
    let entry = dsa.dir.entry(dave).expect("dave");
    assert!(
        entry.contains(&("cn".to_string(), vec!["Dave".to_string()])),
        "{entry:?}"
    );

    let mods = [
        (vec![Mod::Add("mail", set(&["d@x", "dave@x"]))], 0),
        (vec![Mod::Add("mail", set(&["D@X"]))], 20),
        (vec![Mod::Delete("mail", set(&["d@x"]))], 0),
        (vec![Mod::Delete("mail", set(&["gone@x"]))], 16),
        (
            vec![
                Mod::Replace("sn", set(&["Dough"])),
                Mod::Delete("nothing", set(&[])),
            ],
            16,
        ),
        (
            vec![
                Mod::Replace("sn", set(&["Dough"])),
                Mod::Add("uidNumber", set(&["7"])),
            ],
            0,
        ),
        (vec![Mod::Increment("uidNumber", "3")], 0),
    ];
    for (i, (m, rc)) in mods.into_iter().enumerate() {
        assert_eq!(
            ldap.modify(dave, m).await.expect("modify").rc,
            rc,
            "modify #{i}"
        );
    }
    let (found, _) = dns(
        &mut ldap,
        "o=Acme",
        Scope::Subtree,
        "(&(sn=dough)(mail=dave@x)(uidNumber=10))",
    )
    .await;
    assert_eq!(found, [dave]);
    assert_eq!(
        ldap.modify("cn=nobody,o=Acme", vec![Mod::Add("a", set(&["b"]))])
            .await
            .expect("m")
            .rc,
        32
    );

    // Rename and move ou=People (with its children) below dc=example,dc=com.
    let res = ldap
        .modifydn(
            "ou=People,o=Acme",
            "ou=Staff",
            true,
            Some("dc=example,dc=com"),
        )
        .await;
    assert_eq!(res.expect("moddn").rc, 0);
    let (found, _) = dns(&mut ldap, "dc=example,dc=com", Scope::Subtree, "(sn=dough)").await;
    assert_eq!(found, ["cn=Dave,ou=Staff,dc=example,dc=com"]);
    let (found, _) = dns(
        &mut ldap,
        "ou=Staff,dc=example,dc=com",
        Scope::Base,
        "(ou=staff)",
    )
    .await;
    assert_eq!(found.len(), 1, "new RDN value present");
    let (found, _) = dns(
        &mut ldap,
        "ou=Staff,dc=example,dc=com",
        Scope::Base,
        "(ou=people)",
    )
    .await;
    assert!(found.is_empty(), "old RDN value deleted");
    let res = ldap
        .modifydn(
            "cn=Dave,ou=Staff,dc=example,dc=com",
            "cn=Bob Jones",
            false,
            None,
        )
        .await;
    assert_eq!(res.expect("moddn").rc, 68);

    for (dn, rc) in [
        ("ou=Staff,dc=example,dc=com", 66),
        ("cn=Dave,ou=Staff,dc=example,dc=com", 0),
        ("cn=Dave,o=Acme", 32),
    ] {
        let res = ldap.delete(dn).await.expect("delete");
        assert_eq!(res.rc, rc, "delete {dn}");
        if rc == 0 {
            assert_eq!(res.text, "testdsa south");
        }
    }
}

#[tokio::test]
async fn acl_and_proxied_authorization() {
    let dsa = start("acl").await;
    let people = "ou=People,o=Acme";
    let all = vec![ALICE, BOB, CAROL];
    let visible = vec![ALICE, BOB];

    let mut anon = connect(&dsa).await;
    let mut bob = bound(&dsa, BOB, "bobpw").await;
    let mut alice = bound(&dsa, ALICE, "alicepw").await;
    assert_eq!(
        dns(&mut anon, people, Scope::OneLevel, "(sn=*)").await.0,
        visible
    );
    assert_eq!(
        dns(&mut alice, people, Scope::OneLevel, "(sn=*)").await.0,
        visible
    );
    assert_eq!(
        dns(&mut bob, people, Scope::OneLevel, "(sn=*)").await.0,
        all
    );
    assert_eq!(dns(&mut anon, CAROL, Scope::Base, "(sn=*)").await.1.rc, 32);
    assert_eq!(
        bob.compare(CAROL, "sn", "smith")
            .await
            .expect("compare")
            .0
            .rc,
        6
    );

    // Alice may proxy: as Bob she sees Carol, and WhoAmI says Bob.
    let proxy = |authzid: &str| ProxyAuth {
        authzid: authzid.to_string(),
    };
    let res = alice.with_controls(proxy(&format!("dn:{BOB}"))).search(
        CAROL,
        Scope::Base,
        "(sn=*)",
        vec!["1.1"],
    );
    assert_eq!(res.await.expect("search").0.len(), 1);
    let res = alice
        .with_controls(proxy("dn:cn=bob jones,ou=people,o=acme"))
        .extended(WhoAmI)
        .await;
    assert_eq!(
        res.expect("whoami").0.val.unwrap_or_default(),
        format!("dn:{BOB}").into_bytes()
    );
    let res = alice
        .with_controls(proxy(""))
        .extended(WhoAmI)
        .await
        .expect("whoami");
    assert_eq!((res.1.rc, res.0.val.unwrap_or_default()), (0, vec![]));
    for (who, authzid) in [
        (alice.clone(), "dn:cn=nobody,o=Acme"),
        (alice.clone(), "u:bob"),
        (bob.clone(), "dn:cn=Carol,ou=People,o=Acme"),
        (anon.clone(), ""),
    ] {
        let mut who = who;
        let res =
            who.with_controls(proxy(authzid))
                .search(CAROL, Scope::Base, "(sn=*)", vec!["1.1"]);
        let res = res.await.expect("search");
        assert_eq!((res.0.len(), res.1.rc), (0, 123), "{authzid}");
    }
    // Without the control Alice is herself again.
    assert_eq!(authzid(&mut alice).await, format!("dn:{ALICE}"));
}

#[tokio::test]
async fn paged_results_through_all_pages() {
    let mut text = String::from("dn: o=Paged\n\n");
    for i in 0..25 {
        text.push_str(&format!(
            "dn: cn=user{i:02},o=Paged\nobjectClass: person\n\n"
        ));
    }
    let dsa = TestDsa::start(
        Directory::from_ldif(&text).expect("ldif"),
        "127.0.0.1:0",
        "pages",
    )
    .await
    .expect("start");
    let mut ldap = connect(&dsa).await;
    let (mut cookie, mut seen, mut pages) = (Vec::new(), BTreeSet::new(), Vec::new());
    loop {
        let ctrl = PagedResults {
            size: 10,
            cookie: cookie.clone(),
        };
        let res = ldap.with_controls(ctrl).search(
            "o=Paged",
            Scope::OneLevel,
            "(objectClass=person)",
            vec!["cn"],
        );
        let (entries, res) = res.await.expect("search").success().expect("page ok");
        pages.push(entries.len());
        seen.extend(entries.into_iter().map(|e| SearchEntry::construct(e).dn));
        let ctrl = res
            .ctrls
            .iter()
            .find(|c| c.1.ctype == "1.2.840.113556.1.4.319")
            .expect("paged control in done");
        let paged: PagedResults = ctrl.1.parse();
        assert_eq!(paged.size, 25);
        cookie = paged.cookie;
        if cookie.is_empty() {
            break;
        }
        assert!(pages.len() < 10, "runaway paging");
    }
    assert_eq!((pages, seen.len()), (vec![10, 10, 5], 25));
    let res = ldap
        .with_controls(PagedResults {
            size: 10,
            cookie: b"999".to_vec(),
        })
        .search("o=Paged", Scope::OneLevel, "(cn=*)", vec!["cn"]);
    assert_eq!(res.await.expect("search").1.rc, 53, "unknown cookie");
}

#[tokio::test]
async fn faults_delay_blackhole_refuse() {
    let dsa = start("faulty").await;
    let mut ldap = connect(&dsa).await;

    dsa.faults.set_delay(Duration::from_millis(300));
    let t = Instant::now();
    assert_eq!(authzid(&mut ldap).await, "");
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "delayed {:?}",
        t.elapsed()
    );
    assert!(
        ldap.with_timeout(Duration::from_millis(100))
            .extended(WhoAmI)
            .await
            .is_err(),
        "client timeout"
    );
    dsa.faults.set_delay(Duration::ZERO);

    dsa.faults.set_blackhole(true);
    let res = tokio::time::timeout(Duration::from_millis(300), ldap.extended(WhoAmI)).await;
    assert!(res.is_err(), "blackholed request must not be answered");
    dsa.faults.set_blackhole(false);
    let mut fresh = connect(&dsa).await;
    assert_eq!(authzid(&mut fresh).await, "");

    dsa.faults.set_refuse(true);
    let refused = async {
        let (conn, mut ldap) = LdapConnAsync::new(&dsa.url()).await?;
        ldap3::drive!(conn);
        ldap.extended(WhoAmI).await
    };
    let res = tokio::time::timeout(Duration::from_secs(5), refused)
        .await
        .expect("refusal is prompt");
    assert!(res.is_err(), "refused connection must fail");
    assert!(dsa.stats.refused_connections() >= 1);
    dsa.faults.set_refuse(false);
    assert_eq!(authzid(&mut connect(&dsa).await).await, "");

    let url = dsa.url();
    dsa.shutdown().await;
    let res = tokio::time::timeout(Duration::from_secs(5), LdapConnAsync::new(&url))
        .await
        .expect("prompt");
    assert!(res.is_err(), "stopped DSA must refuse connections");
}

#[tokio::test]
async fn unbind_closes_the_connection() {
    use futures::{SinkExt, StreamExt};
    use ldap3_proto::proto::{LdapMsg, LdapOp};
    let dsa = start("bye").await;
    let stream = tokio::net::TcpStream::connect(dsa.addr)
        .await
        .expect("connect");
    let mut framed = tokio_util::codec::Framed::new(stream, ldap3_proto::LdapCodec::default());
    framed
        .send(LdapMsg {
            msgid: 1,
            op: LdapOp::UnbindRequest,
            ctrl: vec![],
        })
        .await
        .expect("send");
    let next = tokio::time::timeout(Duration::from_secs(5), framed.next())
        .await
        .expect("closed promptly");
    assert!(next.is_none(), "expected EOF, got {next:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_directory_stream_and_abandon() {
    let _heavy = HEAVY.lock().await;
    const N: usize = 100_000;
    let t = Instant::now();
    let mut text = String::with_capacity(N * 60);
    text.push_str("dn: o=Big\nobjectClass: organization\n\n");
    for i in 0..N {
        text.push_str(&format!(
            "dn: cn=u{i},o=Big\nobjectClass: person\nuidNumber: {i}\n\n"
        ));
    }
    let dir = Directory::from_ldif(&text).expect("big LDIF");
    assert_eq!(dir.len(), N + 1);
    let load = t.elapsed();
    let dsa = TestDsa::start(dir, "127.0.0.1:0", "big")
        .await
        .expect("start");
    let mut ldap = connect(&dsa).await;

    let t = Instant::now();
    let mut stream = ldap
        .streaming_search("o=Big", Scope::Subtree, "(objectClass=person)", vec!["1.1"])
        .await
        .expect("search");
    let mut count = 0;
    while stream.next().await.expect("entry").is_some() {
        count += 1;
    }
    assert_eq!((count, stream.finish().await.rc), (N, 0));
    eprintln!("load {load:?}, stream {N} entries {:?}", t.elapsed());

    let before = dsa.stats.entries_sent();
    let mut stream = ldap
        .streaming_search("o=Big", Scope::Subtree, "(objectClass=*)", vec!["cn"])
        .await
        .expect("search");
    for _ in 0..10 {
        stream.next().await.expect("entry").expect("an entry");
    }
    let msgid = stream.ldap_handle().last_id();
    ldap.abandon(msgid).await.expect("abandon");
    let _ = stream.finish().await;
    let deadline = Instant::now() + Duration::from_secs(10);
    while dsa.stats.searches_abandoned() == 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let sent = dsa.stats.entries_sent() - before;
    assert_eq!(
        dsa.stats.searches_abandoned(),
        1,
        "search was not abandoned ({sent} entries sent)"
    );
    assert!(
        sent < N as u64,
        "abandoned search still sent all {sent} entries"
    );
    // The connection is still usable.
    assert_eq!(authzid(&mut ldap).await, "");
}
