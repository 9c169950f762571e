//! The example Prometheus configuration and alert rules of
//! `docs/monitoring/`: `promtool check config` and `check rules` accept
//! them, `promtool test rules` (alerts_test.yml) shows each alert firing
//! when it should, and every `dsa_router_*` metric they name is one the
//! router exports (the catalog `docs/reference.md` lists).
//!
//! Needs promtool (Debian's prometheus: `scripts/install-deps.sh`).
#![allow(clippy::panic)]

use std::path::{Path, PathBuf};
use std::process::Command;

fn monitoring() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/monitoring")
}

/// `promtool ARGS` in `dir`: its output, or a failure naming it.
fn promtool(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("promtool: {e} (scripts/install-deps.sh installs Debian's prometheus)")
        });
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?}: {said}");
    said
}

#[test]
fn the_example_config_and_rules_pass_promtool() {
    let dir = monitoring();
    let said = promtool(&dir, &["check", "rules", "alerts.yml"]);
    assert!(said.contains("SUCCESS: 6 rules found"), "{said}");
    let said = promtool(&dir, &["test", "rules", "alerts_test.yml"]);
    assert!(said.contains("SUCCESS"), "{said}");
    // The scrape config names its token file relative to itself: a copy
    // with a token beside it.
    let tmp = tempfile::tempdir().expect("tempdir");
    for f in ["prometheus.yml", "alerts.yml"] {
        std::fs::copy(dir.join(f), tmp.path().join(f)).expect(f);
    }
    std::fs::write(tmp.path().join("dsa-router-read-token"), "t\n").expect("token");
    let said = promtool(tmp.path(), &["check", "config", "prometheus.yml"]);
    assert!(
        said.contains("is valid prometheus config file syntax"),
        "{said}"
    );
}

#[test]
fn the_rules_and_the_dashboard_name_exported_metrics_only() {
    let names: Vec<&str> = dsa_router::observe::catalog::ALL
        .iter()
        .map(|f| f.name)
        .collect();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for file in [
        "docs/monitoring/alerts.yml",
        "docker/grafana-dashboard.json",
        "docs/monitoring.md",
    ] {
        let text = std::fs::read_to_string(root.join(file)).expect(file);
        let mut seen = 0;
        for (i, _) in text.match_indices("dsa_router_") {
            let name: String = text[i..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name == "dsa_router_" {
                continue;
            }
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|b| names.contains(b))
                .unwrap_or(&name);
            assert!(
                names.contains(&base),
                "{file} names {name}, which the router does not export"
            );
            seen += 1;
        }
        assert!(seen >= 5, "{file}: {seen}");
    }
}
