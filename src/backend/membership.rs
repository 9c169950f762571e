//! What reads the member sets of the groups policy rules name
//! (`member_of`, [`crate::admission::policy::groups`]): every `[groups] refresh`
//! seconds (default 60), and at once when the policy file is (re-)read,
//! each group is read from a DSA of the partition that holds it (routed
//! like any read: the first group with an eligible member, the least
//! loaded in it) with a base search for `member` and `uniqueMember`, on a
//! connection of the reader's own per DSA, bound as the router's identity
//! on that DSA when knowledge gives one (`ldap-dsa-name`), else anonymous.
//! One read at a time, each within `[groups] timeout` (default 5 s);
//! operations never wait for it: sessions see the sets last stored.
//!
//! A read that fails keeps the set last read for five refresh intervals;
//! after that (or before any good read) the group is unreadable and rules
//! naming it do what their `if_group_unreadable` says.

use crate::admission::policy::groups::{member_dn, Group, Sets, Settings};
use crate::admission::policy::Policy;
use crate::backend::routing::{Backend, Routing};
use crate::backend::upstream::conn::Conn;
use crate::directory::knowledge::DsaName;
use crate::proto::dn::Dn;
use ldap3_proto::proto::{LdapFilter, LdapSearchScope};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;
use tokio::sync::watch;

/// The attributes read: groupOfNames' and groupOfUniqueNames' members.
const ATTRS: [&str; 2] = ["member", "uniqueMember"];

/// Read member sets until shutdown.
pub(crate) async fn run(router: Arc<Backend>, mut shutdown: watch::Receiver<bool>) {
    let mut conns: HashMap<DsaName, Arc<Conn>> = HashMap::new();
    loop {
        let policy = router.policies.current();
        let every = match policy.as_deref() {
            Some(p) if p.uses_groups() => {
                round(&router, p, &mut conns).await;
                Some(p.groups.refresh())
            }
            _ => {
                // No group named: nothing kept, nothing to read.
                router.policies.groups.store(Sets::new());
                for c in conns.drain().map(|(_, c)| c) {
                    c.close();
                }
                None
            }
        };
        let wait = async {
            match every {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = wait => {}
            _ = router.policies.groups.wake.notified() => {}
            _ = shutdown.changed() => break,
        }
    }
    for c in conns.values() {
        c.close();
    }
}

/// Read every group `policy` names once; store the sets.
async fn round(router: &Backend, policy: &Policy, conns: &mut HashMap<DsaName, Arc<Conn>>) {
    let settings = policy.groups;
    let old = router.policies.groups.sets();
    let routing = router.routing();
    let mut new = Sets::new();
    for (key, text) in policy.group_names() {
        let mut g = old.get(&key).cloned().unwrap_or_else(|| Group {
            name: text.clone(),
            ..Group::default()
        });
        g.name = text.clone();
        match read(router, &routing, &settings, &text, conns).await {
            Ok((members, dsa)) => {
                g.members = Some(Arc::new(members));
                g.read_at = Some(SystemTime::now());
                g.error = None;
                g.dsa = Some(dsa);
            }
            Err(e) => {
                let e = e.to_string();
                let old_enough = g
                    .read_at
                    .and_then(|t| t.elapsed().ok())
                    .is_none_or(|age| age > settings.keep());
                if old_enough {
                    g.members = None;
                }
                if g.error.as_deref() != Some(e.as_str()) {
                    tracing::warn!(group = %crate::base::logsafe::esc(&text), error = %crate::base::logsafe::esc(&e), "policy group not read");
                }
                g.error = Some(e);
            }
        }
        new.insert(key, g);
    }
    router.policies.groups.store(new);
}

/// Why a group could not be read (kept as the group's error).
#[derive(Debug)]
enum ReadError {
    /// The group's DN does not parse.
    Dn(crate::proto::dn::DnError),
    /// No partition of the knowledge holds the group.
    NoPartition,
    /// No DSA of the partition may be read.
    NoDsa,
    /// Connecting to DSA `name`, or reading from it, failed.
    Dsa {
        name: DsaName,
        error: crate::base::error::Error,
    },
    /// DSA `name` sent no entry for the group.
    NoEntry(DsaName),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Dn(e) => write!(f, "{e}"),
            ReadError::NoPartition => f.write_str("no partition of the knowledge holds it"),
            ReadError::NoDsa => f.write_str("no DSA of its partition is available"),
            ReadError::Dsa { name, error } => write!(f, "DSA {name}: {error}"),
            ReadError::NoEntry(name) => write!(
                f,
                "DSA {name} returned no entry (missing, or not readable by the router's identity)"
            ),
        }
    }
}

impl std::error::Error for ReadError {}

/// Read group `dn`: its members (normalized) and the DSA it came from.
async fn read(
    router: &Backend,
    routing: &Routing,
    settings: &Settings,
    dn: &str,
    conns: &mut HashMap<DsaName, Arc<Conn>>,
) -> Result<(HashSet<String>, String), ReadError> {
    let parsed = Dn::parse_ldap(dn).map_err(ReadError::Dn)?;
    let part = routing
        .table
        .lookup(&parsed)
        .partition()
        .ok_or(ReadError::NoPartition)?;
    let i = crate::directory::route::select_read(part, &routing.states, part.tick())
        .map_err(|_| ReadError::NoDsa)?
        .dsa;
    let pool = &routing.pools[i];
    let name = routing.snap.dsas[i].name.clone();
    let timeout = settings.timeout();
    let conn = match conns.get(&name).filter(|c| c.is_alive()) {
        Some(c) => c.clone(),
        None => {
            let limits = crate::backend::settings::Limits {
                connect_timeout: timeout,
                bind_timeout: timeout,
                ..router.settings.limits
            };
            let c = crate::backend::upstream::pool::connect_bound(
                &routing.states.0[i],
                &pool.targets,
                pool.own_identity.as_ref(),
                limits,
                pool.tls.as_ref(),
            )
            .await
            .map_err(|error| ReadError::Dsa {
                name: name.clone(),
                error,
            })?;
            conns.insert(name.clone(), c.clone());
            c
        }
    };
    let native = pool.native.as_deref();
    let base = native
        .and_then(|m| m.to_native(dn))
        .unwrap_or_else(|| dn.to_string());
    let secs = i32::try_from(settings.timeout).unwrap_or(i32::MAX);
    let pdu = crate::proto::wire::search::own_search(
        &base,
        LdapSearchScope::Base,
        (1, secs),
        LdapFilter::Present("objectClass".into()),
        &ATTRS,
    );
    let entries = match crate::backend::upstream::advertised::collect(&conn, &pdu, timeout).await {
        Ok(e) => e,
        Err(e) => {
            conn.close();
            conns.remove(&name);
            return Err(ReadError::Dsa { name, error: e });
        }
    };
    let attrs = entries
        .first()
        .and_then(|e| crate::proto::wire::response::entry_attrs(e))
        .ok_or_else(|| ReadError::NoEntry(name.clone()))?;
    let mut members = HashSet::new();
    for (_, values) in attrs
        .iter()
        .filter(|(a, _)| ATTRS.iter().any(|x| x.eq_ignore_ascii_case(a)))
    {
        for v in values {
            let Ok(v) = std::str::from_utf8(v) else {
                continue;
            };
            let v = member_dn(v);
            let v = native
                .and_then(|m| m.to_client(v))
                .unwrap_or_else(|| v.to_string());
            if let Ok(d) = Dn::parse_ldap(&v) {
                members.insert(d.normalized());
            }
        }
    }
    Ok((members, name.to_string()))
}
