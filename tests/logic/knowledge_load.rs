//! Knowledge loading: real CA-style files load; every error names its file,
//! line and column exactly; a broken file never half-loads.
#![allow(clippy::unwrap_used, clippy::panic)]

use dsa_router::directory::knowledge::{self, GroupKey, Memory, Severity};
use std::path::Path;
use std::process::Command;

/// A DSA block in CA Directory's documented form, with every attribute the
/// router does not use.
const CA_STYLE: &str = r#"# CA Directory style knowledge
set dsa "D1" =
{
prefix = <c AU><o DEMOCORP>
native-prefix = <c AU><o DEMOCORP>
dsa-name = <c AU><o DEMOCORP><cn D1>
dsa-password = "se\\cret"
ldap-dsa-name = <c AU><o DEMOCORP><cn router>
ldap-dsa-password = "routerpw"
address = tcp "dsa-d1" port 19389, ipv6 "::1" port 19390
disp-psap = DISP
snmp-port = 19390
console-port = 19391
ssl-auth-port = 19392
auth-levels = anonymous, clear-password, ssl-auth
dsp-idle-time = 600
dsa-flags = multi-write,load-share,no-service-while-recovering
trust-flags = trust-conveyed-originator, allow-check-password
link-flags = dsp-ldap
load-share-group = "GROUP1"
};
set dsa H1 = { load-share-group = GROUP1 dsa-flags = load-share
  address = ipv4 "10.0.0.1" port 19489 prefix = "o=democorp test,c=au" };
"#;

#[test]
fn ca_style_knowledge_loads_without_error() {
    let src = Memory::default()
        .with("k/root.dxg", "source \"dsas/d1.dxc\";\n")
        .with("k/dsas/d1.dxc", CA_STYLE);
    let snap = knowledge::load_from(Path::new("k/root.dxg"), &src).unwrap();
    assert_eq!(snap.dsas.len(), 2);
    let d1 = &snap.dsas[0];
    assert_eq!(d1.prefix.to_string(), "o=DEMOCORP,c=AU");
    assert_eq!(
        d1.ldap_dsa_name.as_ref().unwrap().to_string(),
        "cn=router,o=DEMOCORP,c=AU"
    );
    assert_eq!(d1.dsa_password.as_ref().unwrap().expose(), "se\\cret");
    assert_eq!(format!("{:?}", d1.ldap_dsa_password), "Some(Secret(***))");
    assert_eq!(d1.addresses.len(), 2);
    assert_eq!(d1.addresses[1].to_string(), "ipv6 [::1]:19390");
    assert!(d1.trusts_conveyed_originator());
    assert_eq!(d1.group(), GroupKey::Named("GROUP1".into()));
    assert!(d1
        .other
        .iter()
        .any(|(k, v)| k == "dsp-idle-time" && v == "600"));
    let h1 = &snap.dsas[1];
    assert_eq!(h1.prefix.normalized(), "o=democorp test,c=au");
    assert_eq!(h1.group(), GroupKey::Named("GROUP1".into()));
    assert!(snap.warnings.is_empty(), "{:?}", snap.warnings);
}

#[test]
fn ca_attributes_and_flags_the_router_does_not_use_and_set_commands_warn() {
    let text = "set dsa X = { prefix = <o X> address = tcp x port 1 dsa-flags = load-share link-flags = ssl-newflag snmp-port = 3 };\nset max-users = 10;\n";
    let src = Memory::default().with("r.dxg", text);
    let snap = knowledge::load_from(Path::new("r.dxg"), &src).unwrap();
    let w: Vec<String> = snap
        .warnings
        .iter()
        .map(|d| format!("{}: {}", d.location.as_ref().unwrap(), d.message))
        .collect();
    assert_eq!(
        w,
        vec![
            "r.dxg:1:89: unknown link-flag 'ssl-newflag', kept but not used",
            "r.dxg:2:5: set max-users: not used by the router, ignored",
        ]
    );
    assert!(snap
        .warnings
        .iter()
        .all(|d| d.severity == Severity::Warning));
}

/// (files, expected first error "file:line:column: message-start")
const ERRORS: &[(&[(&str, &str)], &str)] = &[
    (&[("r.dxg", "set dsa A = {\n  prefix = <c AU>\n  address = tcp h prot 1\n};\n")], "r.dxg:3:19: expected 'port'"),
    (&[("r.dxg", "source \"a.dxc\";\n"), ("a.dxc", "# a\nset dsa A = {\n  prefix = <c AU><o X\n};\n")], "a.dxc:3:18: unterminated '<'"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU> address = tcp h port 1 };\nset dsa \"A\" = { prefix = <c AU> address = tcp h port 2 };\n")], "r.dxg:2:9: duplicate DSA name \"A\""),
    (&[("r.dxg", "set dsa A = { address = tcp h port 1 };\n")], "r.dxg:1:9: set dsa \"A\" has no prefix"),
    (&[("r.dxg", "\n  set dsa A = { prefix = <c AU> };\n")], "r.dxg:2:11: set dsa \"A\" has no address"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU> address = tcp h port 1 };\nset precedence = A, B;\n")], "r.dxg:2:21: unknown DSA \"B\" in set precedence"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU> address = tcp h port 1 };\nset write-precedence = Z;\n")], "r.dxg:2:24: unknown DSA \"Z\" in set write-precedence"),
    (&[("r.dxg", "source \"b.dxc\";\n"), ("b.dxc", "source \"r.dxg\";\n")], "b.dxc:1:8: source cycle"),
    (&[("r.dxg", "source \"missing.dxc\";\n")], "r.dxg:1:8: cannot read missing.dxc"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU> address = tcp h port 99999 };\n")], "r.dxg:1:52: expected a port number"),
    (&[("r.dxg", "set dsa A = { prefix = \"cn=x,,o=y\" address = tcp h port 1 };\n")], "r.dxg:1:30: invalid DN"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU><o> address = tcp h port 1 };\n")], "r.dxg:1:32: invalid DN"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU> prefix = <c NZ> address = tcp h port 1 };\n")], "r.dxg:1:31: 'prefix' given twice"),
    (&[("r.dxg", "sett dsa A = { };\n")], "r.dxg:1:1: expected 'set', 'source' or 'clear', found 'sett' (did you mean 'set'?)"),
    // A misspelt attribute: an error (DXserver refuses it), its cause named.
    (&[("r.dxg", "set dsa A = { prefix = <c AU> adress = tcp h port 1 };\n")], "r.dxg:1:31: unknown attribute 'adress' in set dsa \"A\" (did you mean 'address'?)"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU> address = tcp h port 1 dsa-flag = load-share };\n")], "r.dxg:1:54: unknown attribute 'dsa-flag' in set dsa \"A\" (did you mean 'dsa-flags'?)"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU> address = tcp h port 1 colour = blue };\n")], "r.dxg:1:54: unknown attribute 'colour' in set dsa \"A\" (CA Directory does not know it"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU> address = tcp h port 1 dsa-flags = lod-share };\n")], "r.dxg:1:66: unknown dsa-flag 'lod-share' (did you mean 'load-share'?)"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU> address = tcp h port 1 dsa-flags = sparkly };\n")], "r.dxg:1:66: unknown dsa-flag 'sparkly': CA Directory knows load-share,"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU> address = tcp h port 1 trust-flags = allow-check-pasword };\n")], "r.dxg:1:68: unknown trust-flag 'allow-check-pasword' (did you mean 'allow-check-password'?)"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU> address = tcp h port 1 link-flags = dsp-ldp };\n")], "r.dxg:1:67: unknown link-flag 'dsp-ldp' (did you mean 'dsp-ldap'?)"),
    // A required attribute missing.
    (&[("r.dxg", "set dsa A = { prefix = <c AU> disp-psap = DISP };\n")], "r.dxg:1:9: set dsa \"A\" has no address"),
    // The root cause first, the knock-on error after it and marked.
    (&[("r.dxg", "source \"a.dxc\";\nset write-precedence = A;\n"), ("a.dxc", "set dsa A = { prefix = <c AU> adress = tcp h port 1 };\n")], "a.dxc:1:31: unknown attribute 'adress'"),
    (&[("r.dxg", "set write-precedence = B;\nset dsa A = { prefix = <c AU> address = tcp h port 1 }\nset dsa B = { prefix = <c NZ> address = tcp h port 2 };\n")], "r.dxg:3:1: expected ';' after '}'"),
    (&[("r.dxg", "set dsa Alpha = { prefix = <c AU> address = tcp h port 1 };\nset precedence = Alpah;\n")], "r.dxg:2:18: unknown DSA \"Alpah\" in set precedence: no set dsa block has that name (did you mean \"Alpha\"?)"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU> address = tcp \" \" port 1 };\n")], "r.dxg:1:45: empty host name"),
    // Horizontal partitions: every slot held, one total, all or none.
    (&[("r.dxg", "set dsa A = { prefix = <c AU><uid \"[hash1(3)=0]\"> address = tcp h port 1 };\nset dsa B = { prefix = <c AU><uid \"[hash1(3)=2]\"> address = tcp h port 2 };\n")], "r.dxg:1:9: horizontal partition of c=AU (hash1 of 3): no DSA holds slot(s) 1"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU><uid \"[hash1(2)=0]\"> address = tcp h port 1 };\nset dsa B = { prefix = <c AU><uid \"[hash2(2)=1]\"> address = tcp h port 2 };\n")], "r.dxg:2:9: DSA \"B\" partitions c=AU as <uid \"[hash2(2)=1]\">, but DSA \"A\" as <uid \"[hash1(2)=0]\">"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU><uid \"[hash1(1)=0]\"> address = tcp h port 1 };\nset dsa B = { prefix = <c AU> address = tcp h port 2 };\n")], "r.dxg:2:9: DSA \"B\" holds c=AU whole"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU><uid \"[hash1(2)=2]\"> address = tcp h port 1 };\n")], "r.dxg:1:30: horizontal-partition slot 2 is not in 0..2"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU> address = tcp h port 1 }\n")], "r.dxg:1:55: expected ';' after '}' (at end of file)"),
    (&[("r.dxg", "set dsa A = { prefix = <c AU> address = tcp h port 1 dsa-flags = load-share, };\n")], "r.dxg:1:76: expected a dsa-flag after ','"),
];

#[test]
fn errors_name_file_line_and_column() {
    for (files, want) in ERRORS {
        let mut src = Memory::default();
        for (p, t) in *files {
            src = src.with(p, t);
        }
        let err = match knowledge::load_from(Path::new("r.dxg"), &src) {
            Ok(_) => panic!("{want}: loaded"),
            Err(e) => e,
        };
        let first = &err.errors[0];
        let got = format!("{}: {}", first.location.as_ref().unwrap(), first.message);
        assert!(
            got.starts_with(want),
            "want {want}\n got {got}\nfull:\n{err}"
        );
        // The rendered diagnostic shows the line with a caret under the column.
        let rendered = first.to_string();
        if let (Some(loc), Some(line)) = (&first.location, &first.source_line) {
            let caret_line = rendered.lines().last().unwrap();
            let bar = caret_line.find('|').unwrap();
            assert_eq!(
                caret_line.len() - bar - 2,
                loc.column,
                "caret position in\n{rendered}"
            );
            assert!(rendered.contains(line.as_str()));
        }
    }
}

#[test]
fn knock_on_errors_are_marked() {
    let src = Memory::default()
        .with("r.dxg", "set write-precedence = B;\nset dsa A = { prefix = <c AU> address = tcp h port 1 }\nset dsa B = { prefix = <c NZ> address = tcp h port 2 };\n");
    let err = knowledge::load_from(Path::new("r.dxg"), &src).unwrap_err();
    assert_eq!(err.errors.len(), 2, "{err}");
    assert!(
        err.errors[1]
            .message
            .ends_with("(this may follow from an error above)"),
        "{err}"
    );
}

/// Every attribute of CA's `set dsa` reference, in its documented order,
/// and `clear dsas;` as CA's DSA initialization files use it.
const CA_FULL: &str = r#"set dsa "OLD" = { prefix = <c NZ> address = tcp "old" port 1 };
clear dsas;
set dsa "D1" =
{
    prefix              = <c AU><o DEMOCORP>
    native-prefix       = <c AU><o DEMOCORP>
    dsa-name            = <c AU><o DEMOCORP><cn D1>
    dsa-password        = "secret"
    ldap-dsa-name       = <c AU><o DEMOCORP><cn router>
    ldap-dsa-password   = "routerpw"
    address             = tcp " dsa-d1 " port 19389
    tsap                = "TSAP"
    ssap                = "SSAP"
    osi-psap            = "PSAP"
    disp-psap           = DISP
    cmip-psap           = "CMIP"
    snmp-port           = 19390
    console-port        = 19391
    remote-console-port = 19392
    remote-console-ssl  = true
    console-password    = "console-secret"
    auth-levels         = anonymous, clear-password, ssl-auth
    dsp-idle-time       = 600
    dsa-flags           = multi-write, load-share
    trust-flags         = trust-conveyed-originator, allow-check-password
    link-flags          = dsp-ldap
    load-share-group    = "GROUP1"
};
"#;

#[test]
fn the_whole_documented_set_dsa_grammar_loads() {
    let src = Memory::default().with("r.dxg", CA_FULL);
    let snap = knowledge::load_from(Path::new("r.dxg"), &src).unwrap();
    let names: Vec<&str> = snap.dsas.iter().map(|d| d.name.as_str()).collect();
    assert_eq!(names, ["D1"], "clear dsas forgets OLD");
    let d1 = &snap.dsas[0];
    assert_eq!(d1.addresses[0].host, "dsa-d1", "spaces trimmed");
    let msgs: Vec<&str> = snap.warnings.iter().map(|w| w.message.as_str()).collect();
    assert!(!msgs.iter().any(|m| m.contains("unknown")), "{msgs:?}");
    assert!(
        msgs.iter().any(|m| m.contains("has spaces around it")),
        "{msgs:?}"
    );
    assert!(
        msgs.iter().any(|m| m.contains("clear dsas: forgets the 1")),
        "{msgs:?}"
    );
    // The console password is kept only as ***.
    assert!(d1
        .other
        .iter()
        .any(|(k, v)| k == "console-password" && v == "***"));
    assert!(!format!("{d1:?}").contains("console-secret"));
}

#[test]
fn typos_get_did_you_mean_and_lone_near_names_warn() {
    let text = "set dsa A = { prefix = <o CUSTOMER> address = tcp h port 1 };
                set dsa B = { prefix = <o CUSTOMR> address = tcp h port 3 };
                set dsa C = { prefix = <o X> address = tcp h port 4 dsa-flags = load-share load-share-group = GROUP1 };
                set dsa D = { prefix = <o X> address = tcp h port 5 dsa-flags = load-share load-share-group = GROUP2 };
                set precedense = A;
";
    let snap =
        knowledge::load_from(Path::new("r.dxg"), &Memory::default().with("r.dxg", text)).unwrap();
    let msgs: Vec<&str> = snap.warnings.iter().map(|w| w.message.as_str()).collect();
    for want in [
        "set precedense: not used by the router, ignored (did you mean 'set precedence'?)",
        "partition \"o=CUSTOMR\" has one DSA (B) and is close to partition \"o=CUSTOMER\": a typo?",
    ] {
        assert!(msgs.contains(&want), "missing {want:?} in {msgs:?}");
    }
    // GROUP1 and GROUP2 are a series, not a typo.
    assert!(!msgs.iter().any(|m| m.contains("GROUP")), "{msgs:?}");
}

/// Load-share group names that differ only in case are one group (names
/// compare as DXserver compares DSA names), with a warning naming both
/// spellings; distinct names stay distinct groups.
#[test]
fn group_names_differing_only_in_case_are_one_group_with_a_warning() {
    let text = "set dsa A = { prefix = <o X> address = tcp h port 1 dsa-flags = load-share load-share-group = \"GROUP1\" };
                set dsa B = { prefix = <o X> address = tcp h port 2 dsa-flags = load-share load-share-group = \"group1\" };
                set dsa C = { prefix = <o X> address = tcp h port 3 dsa-flags = load-share load-share-group = \"GROUP2\" };
";
    let snap =
        knowledge::load_from(Path::new("r.dxg"), &Memory::default().with("r.dxg", text)).unwrap();
    let msgs: Vec<&str> = snap.warnings.iter().map(|w| w.message.as_str()).collect();
    let want = "load-share group \"group1\" of DSA B is also written \"GROUP1\": names are compared ignoring case, so they are one group";
    assert!(msgs.contains(&want), "missing {want:?} in {msgs:?}");
    assert_eq!(
        msgs.iter().filter(|m| m.contains("also written")).count(),
        1,
        "{msgs:?}"
    );
    let table = dsa_router::directory::route::Table::build(&snap, None).unwrap();
    let groups: Vec<(Option<String>, Vec<usize>)> = table.partitions()[0]
        .groups
        .iter()
        .map(|g| {
            (
                g.name.clone(),
                g.members.iter().map(|d| d.index()).collect(),
            )
        })
        .collect();
    assert_eq!(
        groups,
        vec![
            (Some("GROUP1".into()), vec![0, 1]),
            (Some("GROUP2".into()), vec![2])
        ]
    );
    assert_eq!(snap.dsas[0].group(), snap.dsas[1].group());
    assert_ne!(snap.dsas[0].group(), snap.dsas[2].group());
    assert_ne!(snap.dsas[0].group(), GroupKey::Unnamed);
}

#[test]
fn all_errors_reported_and_nothing_half_loads() {
    let text = "set dsa A = { prefix = <c AU> address = tcp h port 1 };\nset dsa B = { prefix = <c AU> };\nset dsa C = { address = tcp h port 1 };\n";
    let err = knowledge::load_from(Path::new("r.dxg"), &Memory::default().with("r.dxg", text))
        .unwrap_err();
    assert_eq!(err.errors.len(), 2, "{err}");
}

fn write(dir: &Path, name: &str, text: &str) {
    std::fs::write(dir.join(name), text).unwrap();
}

#[test]
fn check_command_reports_errors_in_sourced_files_and_exits_nonzero() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("dsas")).unwrap();
    write(
        dir.path(),
        "router.dxg",
        "# root\nsource \"dsas/d1.dxc\";\n",
    );
    write(&dir.path().join("dsas"), "d1.dxc", "set dsa D1 =\n{\n    prefix = <c AU><o DEMOCORP>\n    address = tcp \"h\" port x19389\n};\n");
    let root = dir.path().join("router.dxg");
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .arg("check")
        .arg(&root)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    let want = format!("{}:4:28", dir.path().join("dsas/d1.dxc").display());
    assert!(stderr.contains(&want), "stderr lacks {want}:\n{stderr}");
    assert!(
        stderr.contains("    address = tcp \"h\" port x19389\n"),
        "{stderr}"
    );
    assert!(out.stdout.is_empty(), "nothing printed as loaded");

    // The shipped knowledge is valid.
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("knowledge/router.dxg");
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .arg("check")
        .arg(&shipped)
        .args(["--name", "R1"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("partition o=DEMOCORP,c=AU"), "{stdout}");
    assert!(stdout.contains("partition o=CUSTOMER,c=AU"), "{stdout}");
    assert!(stdout.contains("router R1"), "{stdout}");
}

/// The router's own settings for a DSA in a file only the router sources:
/// the DSA's CA knowledge stays exactly as a DXserver reads it.
#[test]
fn router_settings_live_apart_from_ca_knowledge() {
    let src = Memory::default()
        .with(
            "k/router.dxg",
            "source \"D1.dxc\";\nsource \"router-only.dxc\";\n",
        )
        .with(
            "k/D1.dxc",
            "set dsa \"D1\" = { prefix = <c AU> dsa-name = <c AU><cn D1> address = tcp h port 1 };\n",
        )
        .with(
            "k/router-only.dxc",
            "set dsa-router-dsa \"d1\" = { tls = starttls concurrency-limit = 7 };\n",
        );
    let snap = knowledge::load_from(Path::new("k/router.dxg"), &src).unwrap();
    let d1 = &snap.dsas[0];
    assert_eq!(d1.tls, Some(knowledge::TlsMode::StartTls));
    assert_eq!(d1.concurrency_limit, Some(7));
    assert!(snap.warnings.is_empty(), "{:?}", snap.warnings);

    for (text, want) in [
        (
            "set dsa-router-dsa \"D2\" = { tls = ldaps };\n",
            "unknown DSA \"D2\" in set dsa-router-dsa: no set dsa block has that name",
        ),
        (
            "set dsa-router-dsa \"D1\" = { tlss = ldaps };\n",
            "unknown setting 'tlss' in set dsa-router-dsa \"D1\": it takes tls and concurrency-limit (did you mean 'tls'?)",
        ),
    ] {
        let src = Memory::default()
            .with("k/router.dxg", "source \"D1.dxc\";\nsource \"router-only.dxc\";\n")
            .with(
                "k/D1.dxc",
                "set dsa \"D1\" = { prefix = <c AU> address = tcp h port 1 };\n",
            )
            .with("k/router-only.dxc", text);
        let err = knowledge::load_from(Path::new("k/router.dxg"), &src).unwrap_err();
        assert!(err.errors[0].message.starts_with(want), "{err}");
    }
}

/// Knowledge that would hang or exhaust a load is refused quickly with a
/// clear error: a FIFO or a device (behind a symlink) as a sourced file, a
/// diamond of sources (each file sourcing the next twice, 40 deep: 2^40
/// reads), a file with 100,000 errors. The bound is a hang check, not a
/// performance figure: each takes milliseconds.
#[test]
fn knowledge_that_would_hang_a_load_is_refused_quickly() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let fifo = d.join("fifo.dxc");
    let made = std::process::Command::new("mkfifo").arg(&fifo).status();
    assert!(made.is_ok_and(|s| s.success()), "mkfifo");
    std::os::unix::fs::symlink("/dev/zero", d.join("zero.dxc")).unwrap();
    for i in 0..40 {
        std::fs::write(
            d.join(format!("dia{i}.dxg")),
            format!(
                "source \"dia{n}.dxg\";\nsource \"dia{n}.dxg\";\n",
                n = i + 1
            ),
        )
        .unwrap();
    }
    std::fs::write(d.join("dia40.dxg"), "# the bottom\n").unwrap();
    std::fs::write(d.join("errors.dxg"), "set dsa = ;\n".repeat(100_000)).unwrap();
    // Near misses of the router's own commands warn one by one (typos).
    std::fs::write(
        d.join("warnings.dxg"),
        "set precedense = 1;\n".repeat(100_000),
    )
    .unwrap();
    // DXserver's own commands (a .dxi's) are counted: one line.
    std::fs::write(
        d.join("skipped.dxg"),
        "set nonsense = 1;\nschema set attribute x = { name = x };\n".repeat(100_000),
    )
    .unwrap();
    let rows = [
        ("fifo.dxc", "not a regular file"),
        ("zero.dxc", "not a regular file"),
        ("dia0.dxg", "files read"),
        ("errors.dxg", "loading stopped"),
    ];
    // 100,000 warnings: it loads, with the first ones and a count.
    let snap = knowledge::load(&d.join("warnings.dxg")).expect("only warnings");
    assert!(
        snap.warnings.len() <= 201,
        "{} warnings kept",
        snap.warnings.len()
    );
    let last = &snap.warnings.last().unwrap().message;
    assert!(last.contains("more warnings not shown"), "{last}");
    let snap = knowledge::load(&d.join("skipped.dxg")).expect("only warnings");
    let msgs: Vec<&str> = snap.warnings.iter().map(|w| w.message.as_str()).collect();
    assert_eq!(
        msgs,
        [
            "set: 100000 commands not used by the router (nonsense), ignored; the first is here",
            "schema: 100000 commands not used by the router, ignored; the first is here"
        ]
    );
    for (root, want) in rows {
        let path = d.join(root);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(
                dsa_router::directory::knowledge::load(&path)
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
            );
        });
        let got = rx
            .recv_timeout(std::time::Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("{root}: the load hangs"));
        let e = got.expect_err(root);
        assert!(e.contains(want), "{root}: {}", &e[..e.len().min(2000)]);
        assert!(e.len() < 200_000, "{root}: {} bytes of errors", e.len());
    }
}

/// 64,000 `set dsa` blocks (generated knowledge) load and make a routing
/// table in well under the 20 s a hung load is allowed: loading is linear
/// (the partition table, horizontal sets and duplicate checks are hashed;
/// the pairwise typo check is skipped at this size, with a warning). The
/// quadratic code took 51 s here.
#[test]
fn sixty_four_thousand_dsa_blocks_load_in_linear_time() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.dxg");
    let mut text = String::new();
    for i in 0..64_000 {
        text += &format!(
            "set dsa \"D{i}\" =\n{{\n    prefix = <c AU><o ORG{i}>\n    address = tcp \"127.0.0.1\" port {}\n    dsa-flags = load-share\n}};\n",
            10_000 + i % 50_000
        );
    }
    std::fs::write(&path, text).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let r = dsa_router::directory::knowledge::load(&path).map_err(|e| e.to_string());
        let r = r.and_then(|snap| {
            let table = dsa_router::directory::route::Table::build(&snap, None)
                .map_err(|e| e.to_string())?;
            Ok((snap, table.partitions().len()))
        });
        let _ = tx.send(r);
    });
    let (snap, partitions) = rx
        .recv_timeout(std::time::Duration::from_secs(20))
        .expect("64,000 DSA blocks: the load hangs")
        .expect("it loads");
    assert_eq!((snap.dsas.len(), partitions), (64_000, 64_000));
    assert!(
        snap.warnings
            .iter()
            .any(|w| w.message.contains("is skipped above")),
        "{:?}",
        snap.warnings.first()
    );
}
