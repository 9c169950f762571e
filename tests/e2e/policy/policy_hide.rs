//! Hidden attributes and subtrees against real slapd 2.5 with its default
//! schema (core, cosine, inetorgperson, nis) and the sssvlv overlay,
//! probed with ldap-utils as an attacker would:
//! * anonymous clients (the default rule hides `mail` and `sn`, under
//!   `ou=people`): a filter on another name or OID of a hidden attribute,
//!   on a supertype (`name`), a typeless extensible match, the assertion
//!   and matched-values controls, a compare on an alias or OID, each with
//!   a value that matches and one that does not: the same answer
//!   (refused) for both; sort keys on a hidden attribute are refused; an
//!   alias under `ou=people` dereferenced returns nothing outside it;
//! * `cn=writer` (a rule hiding `rfc822Mailbox` and `surname`, names
//!   slapd never returns, under `ou=people`): entries lose `mail` and
//!   `sn`; the pre-read and post-read controls asking for them, or for
//!   every attribute, are refused, its writes without them go on (with
//!   the router's own post-read for read-your-writes); a filter on `gn`
//!   is refused (`refuse_filters_on = ["givenName"]`); a modify DN with
//!   a newSuperior outside `ou=people` is refused, one inside is done.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::time::{Duration, Instant};
use support::slapd::{
    ldap_tool, ldif_entry, seed_ldif, user_dn, writer_dn, Slapd, SlapdConfig, ToolOutput,
    LDAPSEARCH, WRITER_PW,
};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";

const POLICY: &str = r#"
[[rule]]
name = "writer"
identity = ["cn=writer,o=DEMOCORP,c=AU"]
subtrees = ["ou=people,o=DEMOCORP,c=AU"]
hide = ["rfc822Mailbox", "surname"]
refuse_filters_on = ["givenName"]

[default]
subtrees = ["ou=people,o=DEMOCORP,c=AU"]
hide = ["mail", "sn"]
"#;

/// The seed data, an alias under `ou=people` to `cn=served-by` (outside
/// it), `ou=moved` under the suffix and the sssvlv overlay.
fn slapd() -> Slapd {
    let s = DEMOCORP;
    let mut ldif = seed_ldif(s, "HIDE");
    ldif.push_str(&ldif_entry(
        &format!("cn=escape,ou=people,{s}"),
        &[
            ("objectClass", "alias"),
            ("objectClass", "extensibleObject"),
            ("cn", "escape"),
            ("aliasedObjectName", &format!("cn=served-by,{s}")),
        ],
    ));
    ldif.push_str(&ldif_entry(
        &format!("ou=moved,{s}"),
        &[("objectClass", "organizationalUnit"), ("ou", "moved")],
    ));
    let mut cfg = SlapdConfig::new("HIDE", &[s], ldif);
    cfg.global = "moduleload sssvlv\n".into();
    cfg.database = "overlay sssvlv\n".into();
    Slapd::start(cfg)
}

fn tool(program: &str, url: &str, writer: bool, args: &[&str], stdin: Option<&str>) -> ToolOutput {
    let who = writer_dn(DEMOCORP);
    let mut all = vec!["-x", "-H", url];
    if writer {
        all.extend(["-D", who.as_str(), "-w", WRITER_PW]);
    }
    all.extend_from_slice(args);
    ldap_tool(program, &all, stdin)
}

/// `ldapsearch -LLL` under `ou=people` with `extra` options and `filter`.
fn search(url: &str, writer: bool, extra: &[&str], filter: &str, attrs: &[&str]) -> ToolOutput {
    search_at(
        url,
        writer,
        &format!("ou=people,{DEMOCORP}"),
        extra,
        filter,
        attrs,
    )
}

/// `ldapsearch -LLL` at `base` with `extra` options and `filter`.
fn search_at(
    url: &str,
    writer: bool,
    base: &str,
    extra: &[&str],
    filter: &str,
    attrs: &[&str],
) -> ToolOutput {
    let mut args = vec!["-LLL", "-o", "ldif-wrap=no", "-b", base];
    args.extend_from_slice(extra);
    args.push(filter);
    args.extend_from_slice(attrs);
    tool(LDAPSEARCH, url, writer, &args, None)
}

/// What a client sees of one answer: the exit code and both outputs.
fn seen(o: &ToolOutput) -> (Option<i32>, String, String) {
    (o.code, o.stdout.clone(), o.stderr.clone())
}

/// Wait until every DSA's schema is read: until then filters on names
/// the router cannot place are refused for clients with hidden
/// attributes.
fn schema_read(url: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let o = search(url, false, &[], "(uid=user0001)", &["uid"]);
        if o.success() {
            return;
        }
        assert!(Instant::now() < deadline, "schema never read: {o:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `(matching, not matching)` probes: each pair must be answered alike,
/// and refused.
fn search_probes() -> Vec<(Vec<&'static str>, &'static str, &'static str)> {
    let none: Vec<&str> = Vec::new();
    vec![
        (
            none.clone(),
            "(rfc822Mailbox=user0001*)",
            "(rfc822Mailbox=nobody*)",
        ),
        (
            none.clone(),
            "(0.9.2342.19200300.100.1.3=user0001@example.com)",
            "(0.9.2342.19200300.100.1.3=nobody@example.com)",
        ),
        (none.clone(), "(surname=User0001)", "(surname=Nobody)"),
        (none.clone(), "(2.5.4.4=User0001)", "(2.5.4.4=Nobody)"),
        (none.clone(), "(sn;lang-en=User0001)", "(sn;lang-en=Nobody)"),
        (none.clone(), "(name=User0001)", "(name=Nobody)"),
        (
            none.clone(),
            "(:caseIgnoreIA5Match:=user0001@example.com)",
            "(:caseIgnoreIA5Match:=nobody@example.com)",
        ),
        (
            none.clone(),
            "(:dn:caseIgnoreMatch:=User0001)",
            "(:dn:caseIgnoreMatch:=Nobody)",
        ),
        (
            vec!["-e", "assert=(mail=user0001*)"],
            "(uid=user0001)",
            "(uid=user0001)",
        ),
        (
            vec!["-e", "assert=(rfc822Mailbox=user0001*)"],
            "(uid=user0001)",
            "(uid=user0001)",
        ),
        (
            vec!["-E", "mv=(name=User0001)"],
            "(uid=user0001)",
            "(uid=user0001)",
        ),
    ]
}

#[test]
fn hidden_attributes_answer_alike_under_every_name_and_control() {
    let s = slapd();
    let dir = tempfile::tempdir().unwrap();
    let (r, _admin) = crate::policy::rules::router(&s, dir.path(), POLICY);
    let url = r.url.clone();
    schema_read(&url);
    // Every probe that leaks, each named (all are tried).
    let mut bad: Vec<String> = Vec::new();

    for (extra, yes, no) in search_probes() {
        // The assertion pairs differ in the control, not the filter.
        let (ey, en): (Vec<&str>, Vec<String>) = match extra.as_slice() {
            ["-e", a] => (
                extra.clone(),
                vec!["-e".into(), a.replace("user0001", "nobody")],
            ),
            ["-E", a] => (
                extra.clone(),
                vec!["-E".into(), a.replace("User0001", "Nobody")],
            ),
            _ => (extra.clone(), Vec::new()),
        };
        let en: Vec<&str> = en.iter().map(String::as_str).collect();
        // An assertion is on the search's base entry: user0001's.
        let base = match extra.first() {
            Some(&"-e") => user_dn(DEMOCORP, "user0001"),
            _ => format!("ou=people,{DEMOCORP}"),
        };
        let a = search_at(&url, false, &base, &ey, yes, &["uid"]);
        let b = search_at(&url, false, &base, &en, no, &["uid"]);
        if a.code != Some(53) || !a.stderr.contains("policy rule \"default\"") {
            bad.push(format!("search {extra:?} {yes}: not refused: {a:?}"));
        }
        if seen(&a) != seen(&b) {
            bad.push(format!("search {extra:?} {yes} / {no}: {a:?} / {b:?}"));
        }
    }

    // Compares on another name or the OID: the same answer either way.
    let alice = user_dn(DEMOCORP, "user0001");
    for (yes, no) in [
        (
            "rfc822Mailbox:user0001@example.com",
            "rfc822Mailbox:nobody@example.com",
        ),
        (
            "0.9.2342.19200300.100.1.3:user0001@example.com",
            "0.9.2342.19200300.100.1.3:x@y",
        ),
        ("2.5.4.4:User0001", "2.5.4.4:Nobody"),
        ("name:User0001", "name:Nobody"),
    ] {
        let a = tool("ldapcompare", &url, false, &[&alice, yes], None);
        let b = tool("ldapcompare", &url, false, &[&alice, no], None);
        if a.code != Some(53) {
            bad.push(format!("compare {yes}: not refused: {a:?}"));
        }
        if seen(&a) != seen(&b) {
            bad.push(format!("compare {yes} / {no}: {a:?} / {b:?}"));
        }
    }

    // Sort keys on a hidden attribute tell its order: refused, by any
    // name (with VLV too); on another attribute the search goes on.
    for key in ["sn", "surname", "2.5.4.4", "name"] {
        let sss = format!("sss={key}");
        let o = search(&url, false, &["-E", &sss], "(objectClass=person)", &["uid"]);
        if o.code != Some(53) {
            bad.push(format!("sort on {key}: not refused: {o:?}"));
        }
    }
    let o = search(&url, false, &["-E", "sss=uid"], "(uid=user000*)", &["uid"]);
    assert_ne!(o.code, Some(53), "{o:?}");

    // Entries lose mail and sn, asked for by name, OID, supertype or *.
    for attrs in [
        &["*"][..],
        &["rfc822Mailbox", "surname"],
        &["0.9.2342.19200300.100.1.3"],
        &["name"],
    ] {
        for writer in [false, true] {
            let o = search(&url, writer, &[], "(uid=user0001)", attrs);
            assert!(o.success(), "{attrs:?}: {o:?}");
            let text = o.stdout.to_ascii_lowercase();
            assert!(text.contains("dn: uid=user0001"), "{attrs:?}: {o:?}");
            if text.contains("example.com") || text.contains("sn:") {
                bad.push(format!(
                    "entry asked for {attrs:?} (writer {writer}): {o:?}"
                ));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} probes leak:\n{}",
        bad.len(),
        bad.join("\n")
    );
    drop(r);
}

#[test]
fn an_alias_under_an_allowed_subtree_leads_nowhere_outside_it() {
    let s = slapd();
    let dir = tempfile::tempdir().unwrap();
    let (r, _admin) = crate::policy::rules::router(&s, dir.path(), POLICY);
    let url = r.url.clone();
    schema_read(&url);
    for deref in ["always", "search", "find"] {
        let o = search(
            &url,
            false,
            &["-a", deref, "-s", "sub"],
            "(objectClass=*)",
            &["1.1"],
        );
        assert!(o.success(), "{deref}: {o:?}");
        let dns: Vec<&str> = o
            .stdout
            .lines()
            .filter_map(|l| l.strip_prefix("dn: "))
            .collect();
        assert!(dns.len() > 100, "{deref}: {dns:?}");
        assert!(
            dns.iter().all(|d| d
                .to_ascii_lowercase()
                .ends_with("ou=people,o=democorp,c=au")),
            "{deref}: {dns:?}"
        );
        let base = format!("cn=escape,ou=people,{DEMOCORP}");
        let o = tool(
            LDAPSEARCH,
            &url,
            false,
            &[
                "-LLL",
                "-a",
                deref,
                "-b",
                &base,
                "-s",
                "base",
                "(objectClass=*)",
                "1.1",
            ],
            None,
        );
        assert!(!o.stdout.contains("served-by"), "{deref}: {o:?}");
    }
    // Directly on slapd, the alias does lead outside.
    let o = ldap_tool(
        LDAPSEARCH,
        &[
            "-x",
            "-LLL",
            "-H",
            &s.url,
            "-a",
            "always",
            "-b",
            &format!("cn=escape,ou=people,{DEMOCORP}"),
            "-s",
            "base",
            "(objectClass=*)",
            "1.1",
        ],
        None,
    );
    assert!(o.stdout.contains("served-by"), "{o:?}");
    drop(r);
}

#[test]
fn read_controls_naming_hidden_attributes_are_refused() {
    let s = slapd();
    let dir = tempfile::tempdir().unwrap();
    let (r, _admin) = crate::policy::rules::router(&s, dir.path(), POLICY);
    let url = r.url.clone();
    schema_read(&url);
    let user = user_dn(DEMOCORP, "user0002");
    let mut bad: Vec<String> = Vec::new();
    let change = format!("dn: {user}\nchangetype: modify\nreplace: description\ndescription: x\n");
    for ctl in [
        "preread=mail",
        "preread=rfc822Mailbox",
        "preread",
        "preread=*",
        "postread=sn",
        "postread=name",
        "postread=+",
        "assert=(mail=user0002*)",
    ] {
        let o = tool("ldapmodify", &url, true, &["-e", ctl], Some(&change));
        let refused = o.code == Some(53) && o.stderr.contains("policy rule \"writer\"");
        if !refused || o.stdout.contains("example.com") {
            bad.push(format!("ldapmodify -e {ctl}: {o:?}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{} controls leak:\n{}",
        bad.len(),
        bad.join("\n")
    );
    // A modify that deletes or adds a hidden value answers by what the
    // entry holds (noSuchAttribute, attributeOrValueExists): refused
    // alike for a right and a wrong value, under any name; a replace goes.
    for (op, attr) in [
        ("delete", "mail"),
        ("delete", "rfc822Mailbox"),
        ("add", "0.9.2342.19200300.100.1.3"),
        ("delete", "sn"),
    ] {
        let mut codes = Vec::new();
        for value in ["user0002@example.com", "nobody@example.com"] {
            let change = format!("dn: {user}\nchangetype: modify\n{op}: {attr}\n{attr}: {value}\n");
            let o = tool("ldapmodify", &url, true, &[], Some(&change));
            codes.push(o.code);
        }
        if codes != [Some(53), Some(53)] {
            bad.push(format!("modify {op} {attr}: answers {codes:?}"));
        }
    }
    let replace =
        format!("dn: {user}\nchangetype: modify\nreplace: mail\nmail: user0002@example.com\n");
    let o = tool("ldapmodify", &url, true, &[], Some(&replace));
    assert!(o.success(), "a replace of a hidden attribute: {o:?}");
    assert!(
        bad.is_empty(),
        "{} modifies leak:\n{}",
        bad.len(),
        bad.join("\n")
    );
    // refuse_filters_on by another name (gn is givenName).
    let o = search(&url, true, &[], "(gn=x)", &["uid"]);
    assert_eq!(o.code, Some(53), "{o:?}");
    assert!(o.stderr.contains("refuse_filters_on"), "{o:?}");
    // Asking for other attributes, or none, the write goes on.
    for ctl in [
        &["-e", "preread=cn"][..],
        &["-e", "postread=description"],
        &[],
    ] {
        let o = tool("ldapmodify", &url, true, ctl, Some(&change));
        assert!(o.success(), "{ctl:?}: {o:?}");
    }

    drop(r);
}

#[test]
fn a_modify_dn_may_not_move_an_entry_out_of_the_subtrees() {
    let s = slapd();
    let dir = tempfile::tempdir().unwrap();
    let (r, _admin) = crate::policy::rules::router(&s, dir.path(), POLICY);
    let url = r.url.clone();
    schema_read(&url);
    let user = user_dn(DEMOCORP, "user0002");
    // Out of ou=people (newSuperior) refused; within, done.
    let out = tool(
        "ldapmodrdn",
        &url,
        true,
        &["-s", &format!("ou=moved,{DEMOCORP}"), &user, "uid=user0002"],
        None,
    );
    assert_eq!(out.code, Some(50), "{out:?}");
    assert!(out.stdout.contains("outside the subtrees"), "{out:?}");
    let o = ldap_tool(
        LDAPSEARCH,
        &["-x", "-LLL", "-H", &s.url, "-b", &user, "-s", "base", "1.1"],
        None,
    );
    assert!(o.stdout.contains("dn: uid=user0002"), "still there: {o:?}");
    let out = tool(
        "ldapmodrdn",
        &url,
        true,
        &["-r", &user, "uid=user0002b"],
        None,
    );
    assert!(out.success(), "{out:?}");
    drop(r);
}
