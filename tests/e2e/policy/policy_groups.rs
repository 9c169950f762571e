//! Policy rules by group membership (`member_of`)
//! against a real slapd holding the groups under `ou=restricted`, which
//! only `cn=router` (the router's identity in knowledge) may read:
//! * a member of a groupOfNames (`member`) or of a groupOfUniqueNames
//!   (`uniqueMember`, with its optional UID) gets the rule (a subtree
//!   search at the suffix); a non-member falls to the default (people
//!   only, refused at the suffix);
//! * after `ldapmodify` takes the member out of the group and the refresh
//!   (1 s here) has read it again, the rule no longer applies, on the
//!   connection bound before too; the member put in is served;
//! * on reload, a deny rule naming a group that cannot be read (missing)
//!   with `if_group_unreadable = "match"` refuses every bound client,
//!   and anonymous clients fall to the default; `/status` shows the
//!   group's error;
//! * `explain` names the DSA each group is read from and says membership
//!   is read at run time (or takes it from `--member-of`).
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::policy::rules::{bind, connect, eq, router, rt, search};
use crate::support::ldap::get;
use ldap3_proto::proto::{LdapResultCode, LdapSearchScope};
use std::path::Path;
use std::time::{Duration, Instant};
use support::slapd::{ldap_tool, user_dn, Slapd, SlapdConfig, ADMIN_PW, ALICE_PW, BOB_PW, USER_PW};

use crate::support;

const DEMOCORP: &str = "o=DEMOCORP,c=AU";
const ADMINS: &str = "cn=admins,ou=restricted,o=DEMOCORP,c=AU";
const AUDITORS: &str = "cn=auditors,ou=restricted,o=DEMOCORP,c=AU";

fn policy(extra_first: &str) -> String {
    format!(
        r#"
[groups]
refresh = 1
timeout = 2
{extra_first}
[[rule]]
name = "staff"
member_of = ["{ADMINS}", "{AUDITORS}"]

[default]
allow = ["read"]
subtrees = ["ou=people,{DEMOCORP}"]
"#
    )
}

/// The groups: alice in admins (groupOfNames), user0001 in auditors
/// (groupOfUniqueNames, with a UID).
fn groups_ldif() -> String {
    format!(
        "dn: {ADMINS}\nobjectClass: groupOfNames\ncn: admins\nmember: {}\n\n\
         dn: {AUDITORS}\nobjectClass: groupOfUniqueNames\ncn: auditors\nuniqueMember: {}#'0101'B\n\n",
        user_dn(DEMOCORP, "alice"),
        user_dn(DEMOCORP, "user0001"),
    )
}

/// `/status`'s `policy.groups`, once `ready` holds of it (20 s at most).
fn groups_when(
    admin: &str,
    what: &str,
    ready: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let status: serde_json::Value = serde_json::from_str(&get(admin, "/status")).unwrap();
        let g = status["policy"]["groups"].clone();
        if ready(&g) {
            return g;
        }
        assert!(Instant::now() < deadline, "{what}: {g}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn members(g: &serde_json::Value, name: &str) -> Option<u64> {
    g.as_array()?
        .iter()
        .find(|x| x["group"].as_str() == Some(name))?["members"]
        .as_u64()
}

/// A subtree search at the suffix as `dn` (bound on `c` first when not
/// yet): its result code and message.
async fn at_suffix(c: &mut support::inproc::Raw) -> (LdapResultCode, String) {
    let g = search(
        c,
        DEMOCORP,
        LdapSearchScope::Subtree,
        eq("uid", "bob"),
        &["cn"],
    )
    .await;
    (g.code, g.message)
}

fn explain(dir: &Path, identity: &str, member_of: &[&str]) -> String {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_dsa-router"));
    cmd.arg("explain")
        .arg(dir.join("router.dxg"))
        .args([
            DEMOCORP,
            "--op",
            "search",
            "--scope",
            "sub",
            "--client",
            "127.0.0.1",
        ])
        .args(["--identity", identity, "--policy"])
        .arg(dir.join("policy.toml"));
    for g in member_of {
        cmd.args(["--member-of", g]);
    }
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn members_of_groups_read_from_the_dsa_get_the_rule() {
    let mut cfg = SlapdConfig::seeded("GROUPS", &[DEMOCORP]);
    cfg.ldif.push_str(&groups_ldif());
    let s = Slapd::start(cfg);
    let dir = tempfile::tempdir().unwrap();
    let (r, admin) = router(&s, dir.path(), &policy(""));
    let (alice, bob) = (user_dn(DEMOCORP, "alice"), user_dn(DEMOCORP, "bob"));
    let user1 = user_dn(DEMOCORP, "user0001");
    let g = groups_when(&admin, "both groups read", |g| {
        members(g, ADMINS) == Some(1) && members(g, AUDITORS) == Some(1)
    });
    assert!(g[0]["dsa"] == "D1" && g[0]["error"].is_null(), "{g}");

    rt().block_on(async {
        let mut a = connect([127, 0, 0, 1], &r.url).await;
        assert_eq!(
            bind(&mut a, &alice, ALICE_PW).await.0,
            LdapResultCode::Success
        );
        let got = at_suffix(&mut a).await;
        assert_eq!(got.0, LdapResultCode::Success, "alice, a member: {}", got.1);
        let mut u = connect([127, 0, 0, 1], &r.url).await;
        assert_eq!(
            bind(&mut u, &user1, USER_PW).await.0,
            LdapResultCode::Success
        );
        let got = at_suffix(&mut u).await;
        assert_eq!(
            got.0,
            LdapResultCode::Success,
            "user0001, a unique member: {}",
            got.1
        );
        let mut b = connect([127, 0, 0, 1], &r.url).await;
        assert_eq!(bind(&mut b, &bob, BOB_PW).await.0, LdapResultCode::Success);
        let got = at_suffix(&mut b).await;
        assert_eq!(got.0, LdapResultCode::InsufficentAccessRights, "{}", got.1);
        assert!(got.1.contains("policy rule \"default\""), "{}", got.1);

        // alice out of admins, bob in: once read again, the sessions
        // bound before see it.
        let ldif = format!(
            "dn: {ADMINS}\nchangetype: modify\nreplace: member\nmember: {bob}\nmember: {}\n",
            user_dn(DEMOCORP, "user0002")
        );
        let out = ldap_tool(
            "ldapmodify",
            &[
                "-x",
                "-H",
                &s.url,
                "-D",
                &format!("cn=admin,{DEMOCORP}"),
                "-w",
                ADMIN_PW,
            ],
            Some(&ldif),
        );
        assert!(out.success(), "{out:?}");
        groups_when(&admin, "admins read again", |g| {
            members(g, ADMINS) == Some(2)
        });
        let got = at_suffix(&mut a).await;
        assert_eq!(
            got.0,
            LdapResultCode::InsufficentAccessRights,
            "alice, no longer a member: {}",
            got.1
        );
        assert!(got.1.contains("policy rule \"default\""), "{}", got.1);
        let got = at_suffix(&mut b).await;
        assert_eq!(
            got.0,
            LdapResultCode::Success,
            "bob, now a member: {}",
            got.1
        );
    });

    // explain: where each group is read, and membership from --member-of.
    let text = explain(dir.path(), &alice, &[]);
    assert!(
        text.contains(&format!(
            "group {ADMINS}: membership is read at run time (read from DSA D1)"
        )),
        "{text}"
    );
    assert!(text.contains("policy rule: default"), "{text}");
    let text = explain(dir.path(), &alice, &[ADMINS]);
    assert!(text.contains("policy rule: staff"), "{text}");
    assert!(
        text.contains(&format!("group {ADMINS}: the identity is a member")),
        "{text}"
    );

    // Reloaded with a deny rule first whose group cannot be read: it
    // applies to every bound client; anonymous ones go on.
    let missing = format!("cn=missing,ou=restricted,{DEMOCORP}");
    let deny = format!(
        "[[rule]]\nname = \"blocked\"\nmember_of = [\"{missing}\"]\nif_group_unreadable = \"match\"\nallow = []\n"
    );
    std::fs::write(dir.path().join("policy.toml"), policy(&deny)).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["ctl", "--admin", &admin, "reload", "--control-socket"])
        .arg(&r.control)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let g = groups_when(&admin, "the missing group tried", |g| {
        g.as_array().is_some_and(|a| {
            a.iter()
                .any(|x| x["group"] == missing.as_str() && x["error"].is_string())
        })
    });
    assert!(members(&g, &missing).is_none(), "{g}");
    rt().block_on(async {
        let mut b = connect([127, 0, 0, 1], &r.url).await;
        assert_eq!(bind(&mut b, &bob, BOB_PW).await.0, LdapResultCode::Success);
        let got = at_suffix(&mut b).await;
        assert_eq!(got.0, LdapResultCode::InsufficentAccessRights, "{}", got.1);
        assert!(got.1.contains("policy rule \"blocked\""), "{}", got.1);
        let mut anon = connect([127, 0, 0, 1], &r.url).await;
        let g = search(
            &mut anon,
            &format!("ou=people,{DEMOCORP}"),
            LdapSearchScope::Subtree,
            eq("uid", "bob"),
            &["cn"],
        )
        .await;
        assert_eq!(
            (g.code, g.entries.len()),
            (LdapResultCode::Success, 1),
            "{}",
            g.message
        );
    });
}
