//! Which knowledge block is the router's own, when `--name` does not say.
//!
//! A router's knowledge holds its own block beside its DSAs' (CA routers
//! have one): taken for a DSA, the router would route to itself and
//! health-check itself. Without `--name`, a block is the router's when
//! its address is one of the router's listen addresses; else one whose
//! address is a listen-only address (`0.0.0.0`, `::`: no DSA answers
//! there) looks like it. One candidate is taken, and said so; several are
//! ambiguous, and refused.

use crate::directory::knowledge::{Address, Snapshot};
use crate::directory::route::DsaId;

/// Why a block was taken for the router's own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// `--name` names it.
    Named,
    /// Its address (shown) is where this router listens.
    Listens(String),
    /// Its address (shown) is a listen-only address: no DSA answers there.
    Wildcard(String),
}

/// The router's own block, as found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Own {
    /// No block looks like the router.
    None,
    /// This block, and why.
    Block(DsaId, Why),
    /// Several blocks look alike: which is the router's is for `--name`.
    Ambiguous(Vec<(DsaId, Why)>),
}

/// Whether `a` is an address to listen on, never to connect to.
pub fn wildcard(a: &Address) -> bool {
    let h = a.host.trim_start_matches('[').trim_end_matches(']');
    h == "*"
        || h.parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_unspecified())
}

/// `host:port`, `[v6]:port`.
fn host_port(a: &Address) -> String {
    if a.host.contains(':') {
        format!("[{}]:{}", a.host, a.port)
    } else {
        format!("{}:{}", a.host, a.port)
    }
}

/// Find the router's block in `snap`: `name` when given (unknown names
/// are [`super::Table::build`]'s error), else by address; `listens` says
/// whether an address is one this router listens on.
pub fn find(snap: &Snapshot, name: Option<&str>, listens: impl Fn(&Address) -> bool) -> Own {
    if let Some(i) = name.and_then(|n| snap.dsa_index(n)) {
        return Own::Block(i, Why::Named);
    }
    let by = |test: &dyn Fn(&Address) -> bool, why: fn(String) -> Why| -> Vec<(DsaId, Why)> {
        snap.dsas
            .iter()
            .enumerate()
            .filter_map(|(i, d)| {
                d.addresses
                    .iter()
                    .find(|a| test(a))
                    .map(|a| (DsaId::new(i), why(host_port(a))))
            })
            .collect()
    };
    let mut found = by(&listens, Why::Listens);
    if found.is_empty() {
        found = by(&wildcard, Why::Wildcard);
    }
    match found.len() {
        0 => Own::None,
        1 => {
            let (i, why) = found.remove(0);
            Own::Block(i, why)
        }
        _ => Own::Ambiguous(found),
    }
}

impl Own {
    /// The block's name, when one was found.
    pub fn name<'s>(&self, snap: &'s Snapshot) -> Option<&'s str> {
        match self {
            Own::Block(i, _) => Some(snap.dsas[*i].name.as_str()),
            _ => None,
        }
    }

    /// What to tell the operator when the block was found without
    /// `--name` (nothing when `--name` said it, or no block looks like
    /// the router).
    pub fn note(&self, snap: &Snapshot) -> Option<String> {
        match self {
            Own::None | Own::Block(_, Why::Named) => None,
            Own::Block(i, why) => {
                let n = &snap.dsas[*i].name;
                Some(format!(
                    "no --name: DSA {n} is taken as the router's own block ({}), never a target; pass --name {n} to say so",
                    why.text()
                ))
            }
            Own::Ambiguous(v) => {
                let list: Vec<String> = v
                    .iter()
                    .map(|(i, w)| format!("{} ({})", snap.dsas[*i].name, w.text()))
                    .collect();
                Some(format!(
                    "no --name, and several DSAs look like the router's own block: {}; pass --name with the router's own",
                    list.join(", ")
                ))
            }
        }
    }
}

impl Why {
    fn text(&self) -> String {
        match self {
            Why::Named => "--name".to_string(),
            Why::Listens(a) => format!("its address {a} is where this router listens"),
            Why::Wildcard(a) => {
                format!("its address {a} is a listen address, where no DSA can be reached")
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::directory::knowledge::{load_from, Memory};
    use std::path::Path;

    fn dsa(name: &str, host: &str, port: u16) -> String {
        format!("set dsa {name} = {{ prefix = <o A> address = tcp \"{host}\" port {port} }};\n")
    }

    #[test]
    fn the_routers_block_is_found_by_address_or_refused_when_ambiguous() {
        let listen = |a: &Address| a.host == "127.0.0.1" && a.port == 3389;
        // (blocks, --name, the block found (name, why's start) or the
        // ambiguous names)
        type Case<'a> = (&'a [(&'a str, &'a str, u16)], Option<&'a str>, &'a str);
        let cases: &[Case] = &[
            (
                &[("R1", "127.0.0.1", 3389), ("D1", "127.0.0.1", 1389)],
                None,
                "R1 listens",
            ),
            (
                &[("D1", "127.0.0.1", 1389), ("R1", "0.0.0.0", 389)],
                None,
                "R1 wildcard",
            ),
            (&[("D1", "h", 1), ("R1", "::", 389)], None, "R1 wildcard"),
            // The listen address wins over a wildcard.
            (
                &[("R1", "127.0.0.1", 3389), ("R2", "0.0.0.0", 389)],
                None,
                "R1 listens",
            ),
            (&[("D1", "h", 1), ("D2", "h", 2)], None, "none"),
            (
                &[("D1", "h", 1), ("R1", "0.0.0.0", 389)],
                Some("D1"),
                "D1 named",
            ),
            (
                &[("R1", "0.0.0.0", 389), ("R2", "0.0.0.0", 390)],
                None,
                "ambiguous R1 R2",
            ),
            (
                &[("R1", "127.0.0.1", 3389), ("R2", "127.0.0.1", 3389)],
                None,
                "ambiguous R1 R2",
            ),
        ];
        for (blocks, name, want) in cases {
            let text: String = blocks.iter().map(|(n, h, p)| dsa(n, h, *p)).collect();
            let snap =
                load_from(Path::new("r.dxg"), &Memory::default().with("r.dxg", &text)).unwrap();
            let own = find(&snap, *name, listen);
            let got = match &own {
                Own::None => "none".to_string(),
                Own::Block(i, w) => format!(
                    "{} {}",
                    snap.dsas[*i].name,
                    match w {
                        Why::Named => "named",
                        Why::Listens(_) => "listens",
                        Why::Wildcard(_) => "wildcard",
                    }
                ),
                Own::Ambiguous(v) => {
                    let names: Vec<&str> =
                        v.iter().map(|(i, _)| snap.dsas[*i].name.as_str()).collect();
                    format!("ambiguous {}", names.join(" "))
                }
            };
            assert_eq!(&got, want, "{blocks:?} --name {name:?}");
            // Said to the operator unless --name said it.
            assert_eq!(
                own.note(&snap).is_some(),
                !matches!(own, Own::None | Own::Block(_, Why::Named))
            );
        }
    }
}
