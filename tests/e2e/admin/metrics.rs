//! The metrics: every query of the shipped Grafana dashboard names a metric
//! the router exports.
#![allow(clippy::unwrap_used, clippy::panic)]

use crate::dsas::inproc_checks::sees;
use crate::support::inproc::*;
use ldap3::Scope;
use std::collections::BTreeSet;

/// The Grafana dashboard in `docker/` asks only for metrics the router
/// exports: every `dsa_router_*` name in its queries appears in `/metrics`
/// (histogram series by their base name), as samples or, for a family
/// with none yet, its type line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_queries_metrics_that_exist() {
    let h = Builder::default().democorp(&["D1"]).start().await;
    let mut l = ldap(&h.url()).await;
    let _ = sees(&mut l, DEMOCORP, Scope::Base).await;
    let text = dsa_router::app::admin::metrics_text(&h.router);
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docker/grafana-dashboard.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let mut names = BTreeSet::new();
    for p in dash["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            let expr = t["expr"].as_str().unwrap();
            for (i, _) in expr.match_indices("dsa_router_") {
                let name: String = expr[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                names.insert(name);
            }
        }
    }
    assert!(names.len() >= 10, "{names:?}");
    for n in names {
        let base = n.strip_suffix("_bucket").unwrap_or(&n);
        // A family with no sample yet (the last reload's, before one) is
        // still exported: its `# TYPE` line.
        let typed = format!("# TYPE {base} ");
        assert!(
            text.lines()
                .any(|l| l.starts_with(base) || l.starts_with(&typed)),
            "the dashboard queries {n}, which /metrics does not export"
        );
    }
}
