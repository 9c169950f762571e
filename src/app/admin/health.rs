//! `GET /healthz` and `GET /readyz`: what a supervisor, a load balancer
//! or a container runtime asks, with no token and no names of clients.
//!
//! * `/healthz`: 200 while the process serves its API (liveness: restart
//!   it when this fails).
//! * `/readyz`: 200 when the router can route: its knowledge is loaded
//!   and (`--ready-when every-partition`, the default) every partition has
//!   at least one DSA up by health; else 503, naming each partition
//!   (its prefix) with no DSA up. A draining router is not ready either.
//!   `--ready-when knowledge` asks the knowledge only: for a router whose
//!   clients would rather get the router's own answer than none.

use crate::service::context::Context;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::json;

/// What `/readyz` asks (`--ready-when`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum ReadyWhen {
    /// Knowledge loaded and every partition with a DSA up.
    #[default]
    EveryPartition,
    /// Knowledge loaded.
    Knowledge,
}

/// Each partition as `/readyz` and `dsa_router_partition_available` see
/// it: its name (the prefix, and the slot in a horizontal partition) and
/// whether a DSA of it is up. The router's own block is no DSA of it; a
/// partition only the router holds is left out.
pub fn partitions(router: &Context) -> Vec<(String, bool)> {
    let r = router.routing();
    r.table
        .partitions_sorted()
        .into_iter()
        .filter_map(|p| {
            let dsas: Vec<_> = p
                .order
                .iter()
                .filter(|&&i| Some(i) != r.table.router)
                .collect();
            if dsas.is_empty() {
                return None;
            }
            let up = dsas.iter().any(|&&i| r.states.0[i].is_up());
            let name = match &p.hash {
                Some(h) => format!("{} (slot {})", p.text, h.slot),
                None => p.text.clone(),
            };
            Some((name, up))
        })
        .collect()
}

/// Why the router is not ready, or `None` when it is.
pub fn not_ready(router: &Context, when: ReadyWhen) -> Option<(String, Vec<String>)> {
    if router.lifecycle.drain.is_draining() {
        return Some(("the router is draining".to_string(), Vec::new()));
    }
    if when == ReadyWhen::Knowledge {
        return None;
    }
    let down: Vec<String> = partitions(router)
        .into_iter()
        .filter(|(_, up)| !up)
        .map(|(name, _)| name)
        .collect();
    if down.is_empty() {
        return None;
    }
    let why = format!("no DSA up for partition {}", down.join(", partition "));
    Some((why, down))
}

/// `GET /healthz`.
pub(super) async fn get_healthz() -> Response {
    Json(json!({"ok": true})).into_response()
}

/// `GET /readyz`.
pub(super) fn readyz(router: &Context, when: ReadyWhen) -> Response {
    match not_ready(router, when) {
        None => Json(json!({"ok": true, "ready": true})).into_response(),
        Some((why, down)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "ok": false,
                "ready": false,
                "error": format!("not ready: {why}"),
                "unavailable_partitions": down,
            })),
        )
            .into_response(),
    }
}
