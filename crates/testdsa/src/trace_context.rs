//! The trace context control (the router's W3C Trace Context control,
//! OID [`TRACE_CONTEXT_OID`]): a test DSA that [`TraceContext::accept`]s
//! it advertises it in its root DSE's `supportedControl`; either way it
//! records the value of every one it receives (an operation's
//! `traceparent`, and `tracestate` if any), which a test reads with
//! [`TraceContext::received`] or, for a test DSA process, from the file
//! given to [`TraceContext::log_to`] (one line per request: the value,
//! with a tab for its line feed). Anything else about the request is
//! unchanged: the control is not critical and changes no answer.

use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use ldap3_proto::control::LdapControl;

/// The router's trace context control (`dsa_router::observe::otel::OID_TRACE_CONTEXT`).
pub const TRACE_CONTEXT_OID: &str = "2.25.65172751917474745695309622528529703499";

#[derive(Debug, Default)]
struct Inner {
    accept: AtomicBool,
    received: Mutex<Vec<String>>,
    log: Mutex<Option<PathBuf>>,
}

/// The switch and the record, shared by all clones.
#[derive(Debug, Clone, Default)]
pub struct TraceContext {
    inner: Arc<Inner>,
}

impl TraceContext {
    /// Advertise (and accept) the control, or not.
    pub fn accept(&self, on: bool) {
        self.inner.accept.store(on, Ordering::Relaxed);
    }

    pub fn accepted(&self) -> bool {
        self.inner.accept.load(Ordering::Relaxed)
    }

    /// Also append each value received to `file`.
    pub fn log_to(&self, file: PathBuf) {
        *self.inner.log.lock().unwrap_or_else(|p| p.into_inner()) = Some(file);
    }

    /// The values received so far, oldest first.
    pub fn received(&self) -> Vec<String> {
        self.inner
            .received
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Record the trace context control among a request's `ctrl`.
    pub(crate) fn record(&self, ctrl: &[LdapControl]) {
        for c in ctrl {
            let LdapControl::Unknown { oid, value, .. } = c else {
                continue;
            };
            if oid != TRACE_CONTEXT_OID {
                continue;
            }
            let v = String::from_utf8_lossy(value.as_deref().unwrap_or_default()).into_owned();
            tracing::debug!(value = %v, "testdsa trace context received");
            let log = self.inner.log.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(f) = log.as_ref() {
                let line = v.replace('\n', "\t");
                let w = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(f);
                if let Err(e) = w.and_then(|mut w| writeln!(w, "{line}")) {
                    eprintln!("testdsa: {}: {e}", f.display());
                }
            }
            drop(log);
            self.inner
                .received
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(v);
        }
    }
}
