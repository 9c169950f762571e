//! Health: active LDAP probes per DSA plus passive signals.
//!
//! Every `interval`, each DSA of the current snapshot is probed on a probe
//! connection of its own (kept between probes, replaced when it fails): by
//! default a base-scope read of the root DSE. A DSA goes down after `fall`
//! failed probes in a row and up after `rise` good ones; each flip is logged
//! once, with its reason ([`crate::backend::dsa_state::DsaState`]). Probes are
//! anonymous; a DSA that refuses an anonymous probe for want of
//! authentication is probed as the router's name on it (`ldap-dsa-name`)
//! where the knowledge gives one. Passive signals from the data path (refused or timed-out connects, reset connections) mark a
//! DSA down at once; operation timeouts count as failed probes (persistent
//! searches never time out). Probes follow reloads: they read the snapshot
//! afresh every round. After a good probe, a DSA's root DSE is read when it
//! was not yet, or 5 minutes ago (what it advertises: SASL mechanisms,
//! controls, extensions, its schema entry). A root DSE that carries this
//! process's instance marker ([`crate::base::instance`]) is this router
//! itself, at an address that did not say so: that block is taken as the
//! router's own, out of selection and no longer probed.

use crate::admission::policy::schema;
use crate::backend::dsa_state::DsaState;
use crate::backend::routing::Backend;
use crate::backend::settings::HealthConfig;
use crate::backend::upstream::conn::Conn;
use crate::backend::upstream::pool::{self, BindPdu};
use crate::backend::upstream::{advertised, subschema};
use crate::base::error::Kind;
use crate::directory::knowledge::{DsaId, DsaName};
use crate::proto::wire::frame;
use crate::proto::wire::response::result_code;
use bytes::Bytes;
use ldap3_proto::proto::LdapSearchScope;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::watch;

/// The probe's search request PDU.
pub(crate) fn probe_pdu(cfg: &HealthConfig) -> crate::base::error::Result<Bytes> {
    let filter = ldap3_proto::parse_ldap_filter_str(&cfg.filter).map_err(|e| {
        crate::base::error::Error::config(format!("probe filter {}: {e:?}", cfg.filter))
    })?;
    Ok(crate::proto::wire::search::own_search(
        &cfg.base,
        LdapSearchScope::Base,
        (1, cfg.timeout.as_secs().max(1) as i32),
        filter,
        &["1.1"],
    ))
}

/// Why a probe failed: the DSA's result code when it answered.
struct Failed {
    code: Option<u8>,
    why: String,
}

/// The probe search on `c`: the connection back when it succeeded (kept
/// for the next probe), else why not (the connection closed).
async fn probe_on(
    c: Arc<Conn>,
    pdu: &[u8],
    timeout: std::time::Duration,
    fresh: bool,
) -> Result<Arc<Conn>, Failed> {
    let (code, why) = match pool::request(&c, pdu, timeout).await {
        Ok(resp) => match frame::header(&resp)
            .ok()
            .and_then(|h| result_code(&resp, &h))
        {
            Some(crate::proto::wire::response::rc::SUCCESS) => return Ok(c),
            Some(code) => (Some(code), format!("probe search returned result {code}")),
            None => (None, "malformed probe response".to_string()),
        },
        Err(e) if fresh && matches!(e.kind, Kind::ConnectionLost { .. }) => {
            (None, format!("probe: {e}{}", closed_at_once(&c.dsa)))
        }
        Err(e) => (None, format!("probe: {e}")),
    };
    c.close();
    Err(Failed { code, why })
}

/// Why a DSA may close a new connection before answering its first
/// request: the PROXY protocol, one side expecting a header the other
/// does not send (or the reverse). Appended to the probe's reason.
fn closed_at_once(st: &crate::backend::dsa_state::DsaState) -> &'static str {
    if st.send_proxy.load(std::sync::atomic::Ordering::Relaxed) {
        " (it closed a new connection before answering: the router sends it a PROXY protocol header first (--send-proxy-to); does its listener take one?)"
    } else {
        " (it closed a new connection before answering: if its listener expects a PROXY protocol header first (OpenLDAP pldap://), name the DSA in --send-proxy-to)"
    }
}

/// Results by which a DSA refuses an anonymous probe for want of
/// authentication (confidentialityRequired, inappropriateAuthentication,
/// insufficientAccessRights, unwillingToPerform as slapd's `require
/// authc` answers).
fn wants_authentication(code: Option<u8>) -> bool {
    matches!(code, Some(13 | 48 | 50 | 53))
}

/// What one DSA's probe needs.
struct Probe {
    st: Arc<crate::backend::dsa_state::DsaState>,
    targets: Vec<pool::Target>,
    tls: Option<crate::proto::tls::DsaTls>,
    /// The probes' own bind, when configured.
    bind: Option<BindPdu>,
    /// The router's name on this DSA (`ldap-dsa-name`).
    own: Option<BindPdu>,
    limits: crate::backend::settings::Limits,
    timeout: std::time::Duration,
}

impl Probe {
    async fn connect(&self, bind: Option<&BindPdu>) -> Result<Arc<Conn>, Failed> {
        let lim = crate::backend::settings::Limits {
            connect_timeout: self.timeout,
            op_timeout: self.timeout,
            bind_timeout: self.timeout,
            ..self.limits
        };
        pool::connect_bound(&self.st, &self.targets, bind, lim, self.tls.as_ref())
            .await
            .map_err(|e| Failed {
                code: None,
                why: match e.kind {
                    Kind::ConnectionLost { .. } => format!("{e}{}", closed_at_once(&self.st)),
                    Kind::Unreachable => e.text,
                    _ => e.to_string(),
                },
            })
    }

    /// One probe, on the connection kept from the last (`existing`, with
    /// whether it is bound as the router) or a new one. Probes are
    /// anonymous unless a probe bind is configured; a DSA that refuses an
    /// anonymous probe for want of authentication is probed again at once
    /// bound as the router's name on it, where the knowledge gives one
    /// (that connection is kept for the next probes).
    async fn run(
        &self,
        existing: Option<(Arc<Conn>, bool)>,
        pdu: &[u8],
    ) -> Result<(Arc<Conn>, bool), Failed> {
        let fresh = existing.is_none();
        let (conn, bound) = match existing {
            Some(e) => e,
            None => (self.connect(self.bind.as_ref()).await?, self.bind.is_some()),
        };
        match probe_on(conn, pdu, self.timeout, fresh).await {
            Ok(c) => Ok((c, bound)),
            Err(f) if !bound && wants_authentication(f.code) => match &self.own {
                Some(own) => {
                    let c = self.connect(Some(own)).await?;
                    probe_on(c, pdu, self.timeout, true)
                        .await
                        .map(|c| (c, true))
                }
                None => Err(f),
            },
            Err(f) => Err(f),
        }
    }
}

/// After a good probe on `c` (`fresh`: a new connection): read the DSA's
/// root DSE when stale, and its schema when a policy rule hides
/// attributes and it is due (with the root DSE, on a new connection, after
/// a reload, until read). A schema not read is recorded as such: filters
/// naming attributes it may call hidden are then refused.
async fn read_dse(router: &Backend, st: &DsaState, c: &Arc<Conn>, fresh: bool, timeout: Duration) {
    let schemas = &router.policies.schemas;
    let stale = st.advertised_stale(advertised::REFRESH);
    let schema = router.policies.hides() && (stale || fresh || schemas.due(&st.name));
    if stale || schema {
        match advertised::read(c, timeout).await {
            Ok(a) if a.router_instance.as_deref() == Some(crate::base::instance::marker()) => {
                // Our own marker: the probe reached this router.
                st.found_itself("its root DSE carries this process's instance marker");
                return;
            }
            Ok(a) => st.set_advertised(a),
            Err(e) => {
                tracing::debug!(dsa = %st.name, error = %crate::base::logsafe::esc(&e), "root DSE not read");
                if schema && schemas.set(&st.name, None) {
                    tracing::warn!(dsa = %st.name, "its root DSE is not read: its schema is not read");
                }
                return;
            }
        }
    }
    if !schema {
        return;
    }
    let Some(dn) = st.advertised().and_then(|a| a.subschema.clone()) else {
        if schemas.set(&st.name, None) {
            tracing::warn!(dsa = %st.name, "its root DSE names no subschemaSubentry: its schema is not read");
        }
        return;
    };
    match subschema::read(c, &dn, timeout).await {
        Ok(values) => {
            let parsed: Vec<_> = values.iter().map(|v| schema::parse(v)).collect();
            let whole = parsed.iter().all(Result::is_ok);
            let types: Vec<_> = parsed.into_iter().flatten().collect();
            let n = types.len();
            if schemas.set(&st.name, Some((types, whole))) {
                tracing::info!(dsa = %st.name, attribute_types = n, whole, "schema read");
            }
        }
        Err(e) => {
            if schemas.set(&st.name, None) {
                tracing::warn!(dsa = %st.name, error = %crate::base::logsafe::esc(&e), "its schema is not read");
            }
        }
    }
}

/// Probe every DSA until shutdown.
pub(crate) async fn run(
    router: Arc<Backend>,
    cfg: HealthConfig,
    mut shutdown: watch::Receiver<bool>,
) {
    let pdu = match probe_pdu(&cfg) {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %crate::base::logsafe::esc(&e), "health probes disabled");
            return;
        }
    };
    let bind = cfg.bind.as_ref().map(|(dn, pw)| {
        BindPdu::new(
            dn.clone(),
            pool::bind_pdu(dn, pw.expose().as_bytes()).freeze(),
        )
    });
    // What the root DSEs read here say of the knowledge's prefixes.
    tokio::spawn(crate::backend::contexts::run(
        router.clone(),
        shutdown.clone(),
    ));
    let mut conns: HashMap<DsaName, (Arc<Conn>, bool)> = HashMap::new();
    let mut tick = tokio::time::interval(cfg.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = shutdown.changed() => break,
        }
        let routing = router.routing();
        if router.policies.hides() {
            let names: Vec<String> = routing
                .snap
                .dsas
                .iter()
                .enumerate()
                .filter(|(i, _)| Some(DsaId::new(*i)) != routing.table.router)
                .filter(|(i, _)| !routing.states.0[*i].is_itself())
                .map(|(_, d)| d.name.to_string())
                .collect();
            router.policies.schemas.expect(&names);
        }
        let probes = routing
            .snap
            .dsas
            .iter()
            .enumerate()
            .map(|(i, d)| (DsaId::new(i), d))
            .filter(|(i, _)| Some(*i) != routing.table.router)
            // A block found to be this router: never probed again.
            .filter(|(i, _)| !routing.states.0[*i].is_itself())
            .map(|(i, d)| {
                let st = routing.states.0[i].clone();
                let probe = Probe {
                    st: st.clone(),
                    targets: routing.pools[i].targets.clone(),
                    tls: routing.pools[i].tls.clone(),
                    bind: bind.clone(),
                    own: routing.pools[i].own_identity.clone(),
                    limits: router.settings.limits,
                    timeout: cfg.timeout,
                };
                let existing = conns.get(&d.name).filter(|(c, _)| c.is_alive()).cloned();
                let fresh = existing.is_none();
                let router = router.clone();
                let (pdu, cfg) = (pdu.clone(), cfg.clone());
                // The hold-down keeps a recovering DSA out while another
                // serves its partitions; a partition with no other eligible
                // DSA takes it back at once.
                let covered = routing
                    .table
                    .partitions()
                    .iter()
                    .filter(|p| p.order.contains(&i))
                    .all(|p| {
                        p.order
                            .iter()
                            .any(|&j| j != i && routing.states.0[j].status().eligible())
                    });
                let hold = if covered {
                    cfg.failback_hold
                } else {
                    std::time::Duration::ZERO
                };
                async move {
                    let started = Instant::now();
                    let result = probe.run(existing, &pdu).await;
                    match &result {
                        Ok((c, _)) => {
                            st.probe_ok(started.elapsed(), cfg.rise, hold);
                            read_dse(&router, &st, c, fresh, cfg.timeout).await;
                        }
                        Err(f) => st.probe_failed(&f.why, cfg.fall),
                    }
                    (st.name.clone(), result.ok())
                }
            });
        let results = futures::future::join_all(probes).await;
        conns.clear();
        for (name, c) in results {
            if let Some(c) = c {
                conns.insert(name, c);
            }
        }
    }
    for (c, _) in conns.into_values() {
        c.close();
    }
}
