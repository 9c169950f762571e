//! The routing table of architecture.md, "Reads", case by case, from real knowledge
//! files on disk, through the `explain --json` command line and through the
//! library. Each case writes its own source order and precedence.

#![allow(clippy::unwrap_used, clippy::panic)]

use crate::knowledge::{Dsa, Knowledge};
use dsa_router::app::cli::{explain_route, OpKind, StaticView};
use dsa_router::directory::knowledge;
use dsa_router::directory::route::{DsaStatus, Table};
use std::path::{Path, PathBuf};
use std::process::Command;

const PREFIX: &str = "<c AU><o DEMOCORP>";

fn seed_dsa(name: &str, group: &str, hub: bool, port: u16) -> Dsa {
    let flags = if hub {
        "multi-write, multi-write-group-hub, load-share"
    } else {
        "multi-write, load-share"
    };
    Dsa::new(name, port)
        .prefix(PREFIX)
        .dsa_name(&format!("{PREFIX}<cn {name}>"), "secret")
        .flags(flags)
        .load_share_group(group)
        .trust_conveyed()
}

/// Write the four DSAs (and optionally router R1 in GROUP1) and a root file
/// with the given source order, precedence and write-precedence.
fn write_knowledge(
    dir: &Path,
    order: &[&str],
    precedence: &[&str],
    write_prec: &[&str],
    with_router: bool,
) -> PathBuf {
    let files = [
        ("D1", "GROUP1", false, 19389),
        ("H1", "GROUP1", true, 19489),
        ("H2", "GROUP2", true, 19589),
        ("D2", "GROUP2", false, 19689),
        ("R1", "GROUP1", false, 3389),
    ];
    for (name, group, hub, port) in files {
        Knowledge::new()
            .dsa(seed_dsa(name, group, hub, port))
            .write_to(&dir.join(format!("{name}.dxc")));
    }
    let mut root = Knowledge::new().line("# generated for one seed case");
    if with_router {
        root = root.source("R1.dxc");
    }
    for n in order {
        root = root.source(&format!("{n}.dxc"));
    }
    if !precedence.is_empty() {
        root = root.precedence(precedence);
    }
    if !write_prec.is_empty() {
        root = root.write_precedence(write_prec);
    }
    root.write(dir)
}

struct Case {
    n: u8,
    down: &'static [&'static str],
    order: &'static [&'static str],
    precedence: &'static [&'static str],
    targets: &'static [&'static str],
    group: &'static str,
}

const TABLE: &[Case] = &[
    Case {
        n: 1,
        down: &[],
        order: &["D1", "H1", "H2", "D2"],
        precedence: &[],
        targets: &["D1", "H1"],
        group: "GROUP1",
    },
    Case {
        n: 2,
        down: &[],
        order: &["D1", "H2", "H1", "D2"],
        precedence: &[],
        targets: &["D1", "H1"],
        group: "GROUP1",
    },
    Case {
        n: 3,
        down: &[],
        order: &["D1", "H2", "D2", "H1"],
        precedence: &[],
        targets: &["D1", "H1"],
        group: "GROUP1",
    },
    Case {
        n: 4,
        down: &[],
        order: &["H2", "D1", "D2", "H1"],
        precedence: &[],
        targets: &["H2", "D2"],
        group: "GROUP2",
    },
    Case {
        n: 5,
        down: &["D1"],
        order: &["D1", "H1", "H2", "D2"],
        precedence: &[],
        targets: &["H1"],
        group: "GROUP1",
    },
    Case {
        n: 6,
        down: &["D1", "H1"],
        order: &["D1", "H1", "H2", "D2"],
        precedence: &[],
        targets: &["H2", "D2"],
        group: "GROUP2",
    },
    Case {
        n: 7,
        down: &[],
        order: &["D1", "H1", "H2", "D2"],
        precedence: &["H1"],
        targets: &["H1", "D1"],
        group: "GROUP1",
    },
    Case {
        n: 8,
        down: &[],
        order: &["D1", "H1", "H2", "D2"],
        precedence: &["H1", "H2"],
        targets: &["H1", "D1"],
        group: "GROUP1",
    },
    Case {
        n: 9,
        down: &["H1"],
        order: &["D1", "H1", "H2", "D2"],
        precedence: &["H1", "H2"],
        targets: &["D1"],
        group: "GROUP1",
    },
];

fn explain_json(
    root: &Path,
    dn: &str,
    op: &str,
    down: &[&str],
    name: Option<&str>,
) -> serde_json::Value {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_dsa-router"));
    cmd.arg("explain")
        .arg(root)
        .arg(dn)
        .args(["--op", op, "--json"]);
    if !down.is_empty() {
        cmd.arg("--down").arg(down.join(","));
    }
    if let Some(n) = name {
        cmd.args(["--name", n]);
    }
    let out = cmd.output().expect("run dsa-router explain");
    assert!(
        out.status.success(),
        "explain failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("explain --json prints one JSON object")
}

fn names(v: &serde_json::Value) -> Vec<String> {
    v.as_array()
        .expect("array")
        .iter()
        .map(|s| s.as_str().expect("string").to_string())
        .collect()
}

#[test]
fn seed_table_through_explain_json() {
    for with_router in [false, true] {
        for c in TABLE {
            let dir = tempfile::tempdir().expect("tempdir");
            let root = write_knowledge(dir.path(), c.order, c.precedence, &[], with_router);
            let name = with_router.then_some("R1");
            for op in ["search", "compare", "bind"] {
                let j = explain_json(&root, "cn=Someone, o=DemoCorp, c=AU", op, c.down, name);
                let ctx = format!("case {} op {op} router {with_router}: {j}", c.n);
                assert_eq!(names(&j["targets"]), c.targets, "{ctx}");
                assert_eq!(j["group"], c.group, "{ctx}");
                assert_eq!(j["partition"], "o=DEMOCORP,c=AU", "{ctx}");
                assert!(j["error"].is_null(), "{ctx}");
                assert!(!names(&j["order"]).contains(&"R1".to_string()), "{ctx}");
            }
        }
    }
}

fn view(snap: &knowledge::Snapshot, down: &[&str]) -> StaticView {
    let mut v = StaticView::all_up(snap);
    let down: Vec<String> = down.iter().map(|s| s.to_string()).collect();
    v.mark(snap, &down, DsaStatus::Down).expect("known names");
    v
}

#[test]
fn seed_table_through_the_library_with_rotation() {
    for c in TABLE {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = write_knowledge(dir.path(), c.order, c.precedence, &[], true);
        let snap = knowledge::load(&root).expect("load");
        let table = Table::build(&snap, Some("R1")).expect("table");
        let v = view(&snap, c.down);
        let x = explain_route(&snap, &table, &v, "o=democorp,c=au", OpKind::Search);
        assert_eq!(x.targets, c.targets, "case {}", c.n);
        // Sequential picks with nothing in flight rotate over exactly the
        // targets, evenly.
        let dsapos = match table
            .lookup(&dsa_router::proto::dn::Dn::parse_ldap("o=democorp,c=au").expect("dn"))
        {
            dsa_router::directory::route::Lookup::Partition(p) => p,
            other => panic!("no partition: {other:?}"),
        };
        let mut counts = std::collections::HashMap::new();
        for _ in 0..(c.targets.len() * 50) {
            let ch = dsa_router::directory::route::select_read(dsapos, &v, dsapos.tick())
                .expect("target");
            *counts.entry(snap.dsas[ch.dsa].name.clone()).or_insert(0) += 1;
        }
        let mut got: Vec<&str> = counts.keys().map(|n| n.as_str()).collect();
        got.sort();
        let mut want: Vec<&str> = c.targets.to_vec();
        want.sort();
        assert_eq!(got, want, "case {}", c.n);
        assert!(
            counts.values().all(|&n| n == 50),
            "case {}: {counts:?}",
            c.n
        );
    }
}

#[test]
fn all_down_is_unavailable_naming_each_state() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = write_knowledge(dir.path(), &["D1", "H1", "H2", "D2"], &[], &[], false);
    let j = explain_json(
        &root,
        "o=DEMOCORP,c=AU",
        "search",
        &["D1", "H1", "H2", "D2"],
        None,
    );
    assert_eq!(j["error"], "unavailable");
    assert_eq!(
        j["message"],
        "dsa-router: no DSA available for partition o=DEMOCORP,c=AU (D1 down, H1 down, H2 down, D2 down)"
    );
    assert!(names(&j["targets"]).is_empty());
}

#[test]
fn writes_follow_write_precedence_then_the_ordered_list() {
    struct W {
        precedence: &'static [&'static str],
        write_prec: &'static [&'static str],
        down: &'static [&'static str],
        target: &'static str,
    }
    let cases = [
        // No write-precedence: the first eligible DSA of the ordered list.
        W {
            precedence: &[],
            write_prec: &[],
            down: &[],
            target: "D1",
        },
        W {
            precedence: &["H1", "H2"],
            write_prec: &[],
            down: &[],
            target: "H1",
        },
        W {
            precedence: &["H1", "H2"],
            write_prec: &[],
            down: &["H1"],
            target: "H2",
        },
        // write-precedence wins for writes only.
        W {
            precedence: &["H1"],
            write_prec: &["D2"],
            down: &[],
            target: "D2",
        },
        W {
            precedence: &[],
            write_prec: &["D2", "H2"],
            down: &["D2"],
            target: "H2",
        },
        W {
            precedence: &[],
            write_prec: &["D2", "H2"],
            down: &["D2", "H2"],
            target: "D1",
        },
    ];
    for (i, w) in cases.iter().enumerate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = write_knowledge(
            dir.path(),
            &["D1", "H1", "H2", "D2"],
            w.precedence,
            w.write_prec,
            true,
        );
        for op in ["add", "delete", "modify", "moddn"] {
            let j = explain_json(&root, "cn=new,o=DEMOCORP,c=AU", op, w.down, Some("R1"));
            assert_eq!(
                names(&j["targets"]),
                vec![w.target.to_string()],
                "write case {i} op {op}: {j}"
            );
        }
        // Reads ignore write-precedence.
        let r = explain_json(&root, "cn=new,o=DEMOCORP,c=AU", "search", &[], Some("R1"));
        let first_read = names(&r["order"])[0].clone();
        let expected_first = w.precedence.first().copied().unwrap_or("D1");
        assert_eq!(
            first_read, expected_first,
            "write case {i}: reads keep the ordered list"
        );
    }
}

#[test]
fn dn_outside_every_partition_is_no_such_object() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = write_knowledge(dir.path(), &["D1", "H1", "H2", "D2"], &[], &[], true);
    let j = explain_json(&root, "o=Elsewhere,c=US", "search", &[], Some("R1"));
    assert_eq!(j["error"], "noSuchObject");
    assert!(j["partition"].is_null());
    let j = explain_json(
        &root,
        "<c AU><o DEMOCORP><ou \"Human Resources\">",
        "compare",
        &[],
        Some("R1"),
    );
    assert_eq!(j["partition"], "o=DEMOCORP,c=AU");
}

#[test]
fn router_never_target_even_alone_in_its_partition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = write_knowledge(dir.path(), &["D1"], &[], &[], true);
    // R1's prefix equals D1's: with D1 down, nothing is eligible, R1 is not
    // a fallback.
    let j = explain_json(&root, "o=DEMOCORP,c=AU", "search", &["D1"], Some("R1"));
    assert_eq!(j["error"], "unavailable", "{j}");
    assert_eq!(names(&j["order"]), vec!["D1"]);
}

/// `explain --after-write DSA`: read-your-writes affinity chooses the DSA
/// that took the client's write while it is eligible (whatever the usual
/// selection), and says so; when it is down, ejected, or holds no copy of
/// the partition, the usual selection stands and the reason is given.
#[test]
fn explain_says_when_read_your_writes_affinity_chooses_the_target() {
    let dir = tempfile::tempdir().expect("tempdir");
    let order = &["D1", "H1", "H2", "D2"];
    let root = write_knowledge(dir.path(), order, &[], &[], false);
    let run = |extra: &[&str]| -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
            .arg("explain")
            .arg(&root)
            .arg("cn=Someone, o=DemoCorp, c=AU")
            .arg("--json")
            .args(extra)
            .output()
            .expect("run dsa-router explain");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("one JSON object")
    };
    // (arguments, targets, affinity starts with)
    let rows: &[(&[&str], &[&str], &str)] = &[
        (&[], &["D1", "H1"], ""),
        (
            &["--after-write", "H2"],
            &["H2"],
            "read-your-writes: the client's write went to H2",
        ),
        (&["--after-write", "h1"], &["H1"], "read-your-writes"),
        (
            &["--after-write", "H2", "--down", "H2"],
            &["D1", "H1"],
            "none: H2 took the client's write but is down",
        ),
        (
            &["--after-write", "H1", "--ejected", "H1"],
            &["D1"],
            "none: H1 took the client's write but is ejected",
        ),
    ];
    for (args, targets, affinity) in rows {
        let j = run(args);
        assert_eq!(names(&j["targets"]), *targets, "{args:?}: {j}");
        let a = j["affinity"].as_str().unwrap_or("");
        assert!(a.starts_with(affinity), "{args:?}: affinity {a:?}");
    }
}

/// `explain --scope`: a search below its base reaches the partitions under
/// it, as the router fans it out; one at a DN no partition holds (`c=AU`)
/// is answered from the partitions below it, not `noSuchObject`.
#[test]
fn explain_scope_shows_the_partitions_a_search_reaches() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("knowledge/router.dxg");
    let run = |args: &[&str]| -> serde_json::Value {
        let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
            .arg("explain")
            .arg(&root)
            .args(args)
            .args(["--name", "R1", "--json"])
            .output()
            .expect("run dsa-router explain");
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("one JSON object")
    };
    let spans = |j: &serde_json::Value| -> Vec<String> {
        j["spans"]
            .as_array()
            .expect("spans")
            .iter()
            .map(|s| {
                format!(
                    "{} {} {} [{}]",
                    s["partition"].as_str().unwrap_or(""),
                    s["scope"].as_str().unwrap_or(""),
                    s["base"].as_str().unwrap_or(""),
                    names(&s["targets"]).join(",")
                )
            })
            .collect()
    };
    const DEMO: &str = "o=DEMOCORP,c=AU";
    const CUST: &str = "o=CUSTOMER,c=AU";
    // (arguments, error, spans)
    let rows: &[(&[&str], Option<&str>, &[&str])] = &[
        (&["c=AU"], Some("noSuchObject"), &[]),
        (&["c=AU", "--scope", "base"], Some("noSuchObject"), &[]),
        (
            &["c=AU", "--scope", "sub"],
            None,
            &[
                "o=CUSTOMER,c=AU sub o=CUSTOMER,c=AU [C1,C2]",
                "o=DEMOCORP,c=AU sub o=DEMOCORP,c=AU [H1,D1]",
            ],
        ),
        (
            &["c=AU", "--scope", "one"],
            None,
            &[
                "o=CUSTOMER,c=AU base o=CUSTOMER,c=AU [C1,C2]",
                "o=DEMOCORP,c=AU base o=DEMOCORP,c=AU [H1,D1]",
            ],
        ),
        (
            &["c=AU", "--scope", "sub", "--down", "C1,C2"],
            None,
            &[
                "o=CUSTOMER,c=AU sub o=CUSTOMER,c=AU []",
                "o=DEMOCORP,c=AU sub o=DEMOCORP,c=AU [H1,D1]",
            ],
        ),
        // Within one partition: an ordinary search, explained by its DN.
        (&[DEMO, "--scope", "sub"], None, &[]),
        (&[CUST, "--scope", "one"], None, &[]),
    ];
    for (args, error, want) in rows {
        let j = run(args);
        assert_eq!(j["error"].as_str(), *error, "{args:?}: {j}");
        assert_eq!(spans(&j), *want, "{args:?}: {j}");
    }
    let j = run(&["c=AU", "--scope", "sub"]);
    assert!(
        j["reason"]
            .as_str()
            .is_some_and(|r| r.contains("subtree search at this DN spans 2 partitions")),
        "{j}"
    );
}

/// A CA layout as it is (`knowledge/ca`: the router's `.dxi` sourcing
/// logging, schema, knowledge, settings, limits, access and TLS files):
/// the precedence CA keeps in the `.dxi` is honoured (reads to H2, D2;
/// writes to H2), where the shared knowledge alone gives D1, H1; the
/// DXserver-only commands are skipped with one warning per kind.
#[test]
fn a_ca_layout_with_precedence_only_in_the_dxi_routes_as_ca_does() {
    let ca = Path::new(env!("CARGO_MANIFEST_DIR")).join("knowledge/ca/config");
    let dxi = ca.join("servers/R1.dxi");
    let shared = ca.join("knowledge/router.dxg");
    let dn = "cn=Someone,o=DEMOCORP,c=AU";
    for (root, op, want) in [
        (&dxi, "search", ["H2", "D2"].as_slice()),
        (&dxi, "modify", &["H2"]),
        (&shared, "search", &["D1", "H1"]),
        (&shared, "modify", &["D1"]),
    ] {
        let j = explain_json(root, dn, op, &[], Some("R1"));
        assert_eq!(names(&j["targets"]), want, "{} {op}: {j}", root.display());
    }
    let out = Command::new(env!("CARGO_BIN_EXE_dsa-router"))
        .args(["check", "--name", "R1"])
        .arg(&dxi)
        .output()
        .expect("run dsa-router check");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    for kind in ["set: ", "clear: ", "schema: "] {
        let lines = err
            .lines()
            .filter(|l| l.starts_with(&format!("warning: {kind}")));
        assert_eq!(lines.count(), 1, "one summary line for {kind:?}:\n{err}");
    }
    assert_eq!(err.matches("warning:").count(), 3, "{err}");
}
