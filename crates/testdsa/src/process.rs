//! One test DSA as a process of its own (`dsa-router testdsa`), so tests
//! can kill, stop and restart it.

use std::path::Path;
use std::process::ExitCode;

use crate::{seed_ldif, serve_traced, Directory, Faults, Stats, TraceContext};

/// Serves generated seed data for `suffixes` and/or the LDIF file `ldif`
/// as DSA `name` on `listen` until killed. Prints `ready ADDR` when
/// listening; every response is delayed by `delay_ms`. With
/// `trace_context` it advertises and accepts the trace context control;
/// `trace_log` records the trace context controls it receives
/// ([`TraceContext`]).
pub fn run(
    listen: &str,
    name: &str,
    suffixes: &[String],
    ldif: Option<&Path>,
    delay_ms: u64,
    trace_context: bool,
    trace_log: Option<&Path>,
) -> ExitCode {
    let mut text = String::new();
    for s in suffixes {
        text += &seed_ldif(s, name);
    }
    if let Some(f) = ldif {
        match std::fs::read_to_string(f) {
            Ok(t) => text += &t,
            Err(e) => {
                eprintln!("error: {}: {e}", f.display());
                return ExitCode::from(1);
            }
        }
    }
    let dir = match Directory::from_ldif(&text) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    rt.block_on(async {
        let listener = match tokio::net::TcpListener::bind(listen).await {
            Ok(l) => l,
            Err(e) => {
                eprintln!("error: cannot listen on {listen}: {e}");
                return ExitCode::from(1);
            }
        };
        if let Ok(a) = listener.local_addr() {
            println!("ready {a}");
        }
        let faults = Faults::default();
        faults.set_delay(std::time::Duration::from_millis(delay_ms));
        let trace = TraceContext::default();
        trace.accept(trace_context);
        if let Some(f) = trace_log {
            trace.log_to(f.to_path_buf());
        }
        let stats = Stats::default();
        serve_traced(listener, dir, faults, stats, trace, name.to_string()).await;
        ExitCode::SUCCESS
    })
}
