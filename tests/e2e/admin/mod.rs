//! Operating the router: the admin API and `ctl`, the status page,
//! metrics, the access log and OpenTelemetry traces.

mod access_log;
mod admin_api;
mod health;
mod metrics;
mod prefix_contexts;
mod reload_guard;
mod settings_file;
mod status_page;
mod traces;
mod traces_binds;
mod traces_cap;
