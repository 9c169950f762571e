//! SASL through the router against real slapd, as an attacker would try it.
//!
//! Two partitions: `o=DEMOCORP,c=AU` (D1) and `o=EVIL,c=AU` (EVIL), both
//! trusting the router's conveyed originators. EVIL's administrator lets
//! its user mallory authorize as anyone (`authz-policy to`, `authzTo:
//! dn.regex:.*`) and offers PLAIN without TLS (`sasl-secprops none`); D1
//! runs slapd's default SASL security properties.
//!
//! * A SASL identity is conveyed to other DSAs only when it lies in a
//!   partition of the DSA that established it: mallory, bound on EVIL as
//!   `dn:cn=admin,o=DEMOCORP,c=AU`, reads nothing on DEMOCORP that an
//!   anonymous client cannot; alice's identity from D1 still reaches EVIL.
//! * `--require-tls-for-bind` covers SASL PLAIN; mechanisms that could
//!   negotiate a security layer or authenticate the router (EXTERNAL,
//!   GSSAPI) are refused; wrapped traffic gets a notice saying why.
//!
//! Needs slapd, ldap-utils and sasl2-bin (`scripts/install-deps.sh`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use support::inproc::tlv;
use support::knowledge::{Dsa, Knowledge};
use support::ldap::show;
use support::router::Router;
use support::slapd::{
    ldap_tool, ldif_entry, seed_ldif, user_dn, Slapd, SlapdConfig, ToolOutput, ROUTER_PW,
};

const DEMOCORP: &str = "o=DEMOCORP,c=AU";
const EVIL: &str = "o=EVIL,c=AU";
const ALICE_SASL_PW: &str = "alice-in-sasldb";
const MALLORY_PW: &str = "mallory-in-sasldb";

/// Maps SASL user `u` (PLAIN names it `u@REALM`) to `uid=u,ou=people,<suffix>`.
fn authz_regexp(suffix: &str) -> String {
    format!("authz-regexp \"^uid=([^,@]+)(@[^,]+)?(,cn=[^,]+)?,cn=[^,]+,cn=auth$\" \"uid=$1,ou=people,{suffix}\"\n")
}

/// D1: slapd's default SASL security properties; alice in its sasldb.
/// Searches by alice's DEMOCORP identity are limited to one entry on
/// EVIL (`limits`), so that her identity is seen arriving there.
fn democorp() -> Slapd {
    Slapd::start(SlapdConfig {
        global: authz_regexp(DEMOCORP),
        sasldb: vec![("alice".to_string(), ALICE_SASL_PW.to_string())],
        ..SlapdConfig::seeded("D1", &[DEMOCORP])
    })
}

fn evil() -> Slapd {
    let mut ldif = seed_ldif(EVIL, "EVIL");
    ldif.push_str(&ldif_entry(
        &user_dn(EVIL, "mallory"),
        &[
            ("objectClass", "inetOrgPerson"),
            ("uid", "mallory"),
            ("cn", "Mallory"),
            ("sn", "Mallory"),
            ("authzTo", "dn.regex:.*"),
        ],
    ));
    let alice = user_dn(DEMOCORP, "alice");
    Slapd::start(SlapdConfig {
        global: format!("{}sasl-secprops none\n", authz_regexp(EVIL)),
        database: format!("limits dn.exact=\"{alice}\" size.soft=1 size.hard=1\n"),
        sasldb: vec![("mallory".to_string(), MALLORY_PW.to_string())],
        ..SlapdConfig::new("EVIL", &[EVIL], ldif)
    })
}

fn d1_and_evil(dir: &Path, d1: &Slapd, evil: &Slapd) -> PathBuf {
    let dsa = |name: &str, prefix: &str, port: u16| {
        Dsa::new(name, port)
            .prefix(prefix)
            .router(ROUTER_PW)
            .flags("multi-write")
            .trust_conveyed()
    };
    Knowledge::new()
        .dsa(dsa("D1", "<c AU><o DEMOCORP>", d1.port))
        .dsa(dsa("EVIL", "<c AU><o EVIL>", evil.port))
        .write(dir)
}

/// `ldapsearch` of `base`'s subtree for `attrs`, bound by `bind` (SASL
/// arguments; empty: anonymous).
fn search(url: &str, bind: &[&str], base: &str, attrs: &[&str]) -> ToolOutput {
    let mut args = vec!["-LLL", "-H", url];
    if bind.is_empty() {
        args.push("-x");
    } else {
        args.push("-Q");
        args.extend_from_slice(bind);
    }
    args.extend(["-b", base, "(objectClass=*)"]);
    args.extend_from_slice(attrs);
    ldap_tool("ldapsearch", &args, None)
}

const ADMIN_AUTHZ: &str = "dn:cn=admin,o=DEMOCORP,c=AU";

/// mallory's SASL PLAIN bind on EVIL (the bind name routes it there),
/// authorizing as DEMOCORP's administrator.
fn as_forged_admin() -> Vec<&'static str> {
    let mut args = mallory_as_admin().to_vec();
    args.extend(["-D", EVIL]);
    args
}

/// mallory's SASL PLAIN credentials, authorizing as DEMOCORP's
/// administrator (EVIL's `authzTo` lets her).
fn mallory_as_admin() -> [&'static str; 10] {
    [
        "-Y",
        "PLAIN",
        "-O",
        "none",
        "-U",
        "mallory",
        "-w",
        MALLORY_PW,
        "-X",
        ADMIN_AUTHZ,
    ]
}

#[test]
fn a_sasl_identity_is_conveyed_only_from_a_dsa_that_holds_it() {
    let (d1, evil) = (democorp(), evil());
    let dir = tempfile::tempdir().unwrap();
    let router = Router::start(&d1_and_evil(dir.path(), &d1, &evil), dir.path());

    // The premise: EVIL vouches for DEMOCORP's administrator.
    let mut args = vec!["-Q", "-H", &evil.url];
    args.extend(mallory_as_admin());
    let out = ldap_tool("ldapwhoami", &args, None);
    assert_eq!(
        out.stdout.trim(),
        ADMIN_AUTHZ.to_ascii_lowercase(),
        "{}\n{}",
        show("direct", &out),
        evil.log()
    );

    // An anonymous client reads no password on DEMOCORP; neither does
    // mallory's forged identity, which DEMOCORP never sees.
    let anon = search(&router.url, &[], DEMOCORP, &["userPassword"]);
    assert!(anon.success(), "{}", show("anonymous", &anon));
    assert!(!anon.stdout.contains("userPassword"), "{}", anon.stdout);
    let forged = search(&router.url, &as_forged_admin(), DEMOCORP, &["userPassword"]);
    assert!(
        !forged.stdout.contains("userPassword"),
        "{}",
        show("forged", &forged)
    );
    assert_eq!(forged.code, Some(50), "{}", show("forged", &forged));
    assert!(
        forged.stderr.contains("used on that DSA only"),
        "{}",
        show("forged", &forged)
    );
    // The identity still serves on the DSA that made it.
    let own = search(&router.url, &as_forged_admin(), EVIL, &["cn"]);
    assert!(own.success(), "{}", show("forged on EVIL", &own));
    assert!(own.stdout.contains("cn: Mallory"), "{}", own.stdout);

    // alice's identity, made by D1 which holds it, is conveyed to EVIL:
    // EVIL limits her searches to one entry, not an anonymous client's.
    let alice_bind = ["-Y", "SCRAM-SHA-256", "-U", "alice", "-w", ALICE_SASL_PW];
    let theirs = search(&router.url, &alice_bind, EVIL, &["cn"]);
    assert_eq!(theirs.code, Some(4), "{}", show("alice on EVIL", &theirs));
    let anon = search(&router.url, &[], EVIL, &["cn"]);
    assert!(anon.success(), "{}", show("anonymous on EVIL", &anon));
    // And on D1 she is herself, as before.
    let mine = search(
        &router.url,
        &alice_bind,
        &user_dn(DEMOCORP, "alice"),
        &["userPassword"],
    );
    assert!(
        mine.stdout.contains("userPassword"),
        "{}",
        show("alice's own", &mine)
    );
}

#[test]
fn require_tls_for_bind_covers_sasl_plain_and_layered_mechanisms_are_refused() {
    let (d1, evil) = (democorp(), evil());
    let dir = tempfile::tempdir().unwrap();
    let k = d1_and_evil(dir.path(), &d1, &evil);
    let router = Router::start_with(&k, dir.path(), &["--require-tls-for-bind"]);
    let whoami = |mech: &str, user: &str, pw: &str, name: &str| {
        let args = [
            "-Q",
            "-O",
            "none",
            "-H",
            &router.url,
            "-Y",
            mech,
            "-U",
            user,
            "-w",
            pw,
            "-D",
            name,
        ];
        ldap_tool("ldapwhoami", &args, None)
    };
    // PLAIN sends the password: refused without TLS, as a simple bind is.
    let out = whoami("PLAIN", "mallory", MALLORY_PW, EVIL);
    assert_eq!(out.code, Some(13), "{}", show("PLAIN", &out));
    assert!(out.stderr.contains("need TLS"), "{}", show("PLAIN", &out));
    // SCRAM never sends it: served.
    let out = whoami("SCRAM-SHA-256", "alice", ALICE_SASL_PW, DEMOCORP);
    assert!(out.success(), "{}", show("SCRAM", &out));
    // EXTERNAL would be the router's connection, not the client; GSSAPI
    // protects its layer negotiation. Neither reaches a DSA.
    for mech in ["EXTERNAL", "GSSAPI"] {
        let (code, text) = raw_bind(&router, &sasl_bind(DEMOCORP, mech, None));
        assert_eq!(code, 7, "{mech}: {text}");
        assert!(
            text.contains("not offered through the router"),
            "{mech}: {text}"
        );
    }
    let dse = ldap_tool(
        "ldapsearch",
        &[
            "-x",
            "-LLL",
            "-H",
            &router.url,
            "-s",
            "base",
            "-b",
            "",
            "supportedSASLMechanisms",
        ],
        None,
    );
    assert!(dse.stdout.contains("SCRAM-SHA-256"), "{}", dse.stdout);
    assert!(
        !dse.stdout.contains("EXTERNAL") && !dse.stdout.contains("GSSAPI"),
        "{}",
        dse.stdout
    );
}

/// A SASL BindRequest (message ID 1) named `name`.
fn sasl_bind(name: &str, mech: &str, creds: Option<&[u8]>) -> Vec<u8> {
    let mut sasl = tlv(0x04, mech.as_bytes());
    if let Some(c) = creds {
        sasl.extend(tlv(0x04, c));
    }
    let mut op = tlv(0x02, &[3]);
    op.extend(tlv(0x04, name.as_bytes()));
    op.extend(tlv(0xa3, &sasl));
    let mut msg = tlv(0x02, &[1]);
    msg.extend(tlv(0x60, &op));
    tlv(0x30, &msg)
}

fn connect(router: &Router) -> TcpStream {
    let s = TcpStream::connect(router.url.trim_start_matches("ldap://")).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// Send `pdu` (a bind) on `s`: the response's result code and its text.
fn bind_on(s: &mut TcpStream, pdu: &[u8]) -> (u8, String) {
    s.write_all(pdu).unwrap();
    let mut resp = [0u8; 1024];
    let n = s.read(&mut resp).unwrap();
    // BindResponse: 61 len 0a 01 code.
    let at = resp[..n].windows(3).position(|w| w[0] == 0x0a && w[1] == 1);
    let code = at.map_or(255, |i| resp[i + 2]);
    (code, String::from_utf8_lossy(&resp[..n]).into_owned())
}

fn raw_bind(router: &Router, pdu: &[u8]) -> (u8, String) {
    bind_on(&mut connect(router), pdu)
}

#[test]
fn traffic_wrapped_in_a_security_layer_gets_a_notice_saying_so() {
    let (d1, evil) = (democorp(), evil());
    let dir = tempfile::tempdir().unwrap();
    let router = Router::start(&d1_and_evil(dir.path(), &d1, &evil), dir.path());
    let mut s = connect(&router);
    let creds = format!("\0mallory\0{MALLORY_PW}");
    let (code, text) = bind_on(&mut s, &sasl_bind(EVIL, "PLAIN", Some(creds.as_bytes())));
    assert_eq!(code, 0, "{text}");
    // A SASL buffer: a 4-octet length, then the wrapped PDU.
    s.write_all(&[0, 0, 0, 12, 5, 4, 0xff, 0, 1, 2, 3, 4, 5, 6, 7, 8])
        .unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    let text = String::from_utf8_lossy(&got);
    assert!(
        text.contains("1.3.6.1.4.1.1466.20036") && text.contains("SASL security layer"),
        "{text:?}"
    );
}
