//! The groups of `serve` settings: the headings of `serve --help` and the
//! tables of the settings file, one for the other ([`GROUPS`]).

pub const ROUTER: &str = "Router";
pub const LISTEN: &str = "Listen";
pub const TLS: &str = "TLS";
pub const DSAS: &str = "DSAs and probes";
pub const LIMITS: &str = "Limits";
pub const REPLICATION: &str = "Replication";
pub const POLICY: &str = "Policy";
pub const ADMIN: &str = "Admin";
pub const LOGS: &str = "Logs";
pub const TRACES: &str = "Traces";

/// Each help heading and its settings file table, in the order of both.
pub const GROUPS: [(&str, &str); 10] = [
    (ROUTER, "router"),
    (LISTEN, "listen"),
    (TLS, "tls"),
    (DSAS, "dsas"),
    (LIMITS, "limits"),
    (REPLICATION, "replication"),
    (POLICY, "policy"),
    (ADMIN, "admin"),
    (LOGS, "logs"),
    (TRACES, "traces"),
];

/// The settings file table of a help heading.
pub fn table(heading: &str) -> Option<&'static str> {
    GROUPS.iter().find(|(h, _)| *h == heading).map(|(_, t)| *t)
}
