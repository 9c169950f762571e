//! Passwords in knowledge never show in its diagnostics: the value of any
//! attribute ending in `-password` is `***` in the echoed line and the
//! message, however the line is broken, while the error still names file,
//! line and column and its caret stays under the column.
#![allow(clippy::unwrap_used, clippy::panic)]

use dsa_router::directory::knowledge::{self, Memory};
use std::path::Path;
use std::process::Command;

/// The password of every file below (no part of it may show).
const PW: &str = "Hunter2-S3cret";

/// A file with a password, where its first error is, and the character the
/// caret must stand under in the line shown.
const BROKEN: &[(&str, &str, char)] = &[
    // Unterminated: the lexer's error, at the opening quote (masked).
    (
        "set dsa \"D1\" = {\n  prefix = <c AU>\n  ldap-dsa-password = \"Hunter2-S3cret\n  address = tcp h port 1 };\n",
        "r.dxg:3:23: unterminated string",
        '*',
    ),
    (
        "set dsa D1 = { prefix = <c AU> ldap-dsa-password = \"Hunter2-S3cret",
        "r.dxg:1:52: unterminated string",
        '*',
    ),
    // No '=': the message would quote the password.
    (
        "set dsa D1 = { ldap-dsa-password \"Hunter2-S3cret\" prefix = <c AU> address = tcp h port 1 };\n",
        "r.dxg:1:34: expected '=' after 'ldap-dsa-password', found ***",
        '*',
    ),
    (
        "set dsa D1 = { DSA-PASSWORD Hunter2-S3cret prefix = <c AU> address = tcp h port 1 };\n",
        "r.dxg:1:29: expected '=' after 'dsa-password', found '***'",
        '*',
    ),
    // Two values.
    (
        "set dsa D1 = { prefix = <c AU> dsa-password = \"Hunter2-S3cret\" \"more\" address = tcp h port 1 };\n",
        "r.dxg:1:47: 'dsa-password' takes one name or quoted string",
        '*',
    ),
    // The value on the line below its attribute.
    (
        "set dsa D1 = { prefix = <c AU>\n  ldap-dsa-password =\n    Hunter2-S3cret bogus address = tcp h port 1 };\n",
        "r.dxg:3:5: 'ldap-dsa-password' takes one name or quoted string",
        '*',
    ),
    // The value below its attribute with comment and blank lines between
    // (more lines than a diagnostic's neighbourhood).
    (
        "set dsa D1 = { prefix = <c AU>\n  ldap-dsa-password =\n  # the DSA's password, from the vault\n\n  # rotated yearly\n  # by the directory team\n    Hunter2-S3cret bogus address = tcp h port 1 };\n",
        "r.dxg:7:5: 'ldap-dsa-password' takes one name or quoted string",
        '*',
    ),
    (
        "set dsa D1 = { prefix = <c AU> ldap-dsa-password # see below\n # and here\n # and here\n = \"Hunter2-S3cret\" address = tcp h port x };\n",
        "r.dxg:4:42: expected a port number",
        'x',
    ),
    // An error later on the line: the caret moves left with the mask.
    (
        "set dsa D1 = { prefix = <c AU> console-password = \"Hunter2-S3cret\" address = tcp h port 99999 };\n",
        "r.dxg:1:89: expected a port number",
        '9',
    ),
    (
        "set dsa D1 = { prefix = <c AU> snmp-Password = Hunter2-S3cret address = tcp h port x };\n",
        "r.dxg:1:84: expected a port number",
        'x',
    ),
];

#[test]
fn errors_on_password_lines_name_the_place_and_mask_the_password() {
    for (text, want, under) in BROKEN {
        let src = Memory::default().with("r.dxg", text);
        let err = match knowledge::load_from(Path::new("r.dxg"), &src) {
            Ok(_) => panic!("{want}: loaded"),
            Err(e) => e,
        };
        let first = &err.errors[0];
        let got = format!("{}: {}", first.location.as_ref().unwrap(), first.message);
        assert!(got.starts_with(want), "want {want}\n got {got}");
        let rendered = err.to_string();
        assert!(
            !rendered.contains("Hunter2") && !rendered.contains("S3cret"),
            "the password shows:\n{rendered}"
        );
        assert!(rendered.contains("***"), "{rendered}");
        // The caret stands under the column's character in the line shown.
        let shown = first.to_string();
        let mut it = shown.lines().rev();
        let caret = it.next().unwrap();
        let line = it.next().unwrap();
        let at = caret.find('^').unwrap();
        assert_eq!(
            line.chars().nth(at),
            Some(*under),
            "caret under the wrong character:\n{shown}"
        );
    }
}

#[test]
fn errors_about_password_attributes_show_no_password() {
    let text = "set dsa D1 = { prefix = <c AU> address = tcp h port 1\n  ldap-dsa-pasword = \"Hunter2-S3cret\"\n  bind-password = Hunter2-S3cret\n  dsa-flags = load-share, Hunter2-S3cret-flag\n  trust-flags = allow-check-password };\n";
    let err = knowledge::load_from(Path::new("r.dxg"), &Memory::default().with("r.dxg", text))
        .err()
        .unwrap();
    let all: String = err.errors.iter().map(|w| w.to_string()).collect();
    assert!(all.contains("ldap-dsa-pasword"), "{all}");
    assert!(all.contains("bind-password"), "{all}");
    assert!(
        all.contains("Hunter2-S3cret-flag"),
        "a flag is no secret: {all}"
    );
    assert!(
        !all.replace("Hunter2-S3cret-flag", "").contains(PW),
        "the password shows:\n{all}"
    );
}

#[test]
fn the_check_command_names_the_place_of_a_broken_password_line_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("router.dxg");
    std::fs::write(&root, BROKEN[0].0).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .arg("check")
        .arg(&root)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let want = format!("{}:3:23", root.display());
    assert!(text.contains(&want), "lacks {want}:\n{text}");
    assert!(text.contains("unterminated string"), "{text}");
    assert!(text.contains("ldap-dsa-password = ***"), "{text}");
    assert!(!text.contains("Hunter2"), "the password shows:\n{text}");
}
