//! `explain --after-write CSN`: which DSAs may serve a read after a
//! client's write whose position is CSN (read-your-writes by position,
//! docs/replication.md): the eligible DSAs of the partition
//! whose known position has reached it. The positions are given with
//! `--position DSA=CSN[;CSN...]` or read from a running router's
//! `/status` (`--positions-from ADMIN`).

use super::explain::Explanation;
use crate::directory::knowledge::Snapshot;
use crate::directory::replication::csn::Csn;
use crate::directory::replication::positions::Position;
use crate::directory::route::{DsaView, Lookup, Table};
use crate::proto::dn::Dn;
use std::collections::HashMap;
use std::fmt;

/// Known positions by DSA name (lower case).
#[derive(Debug, Default)]
pub(super) struct Known(HashMap<String, Position>);

/// Why `CSN[;CSN...]` is no position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CsnError {
    /// This part is not a CSN.
    NotACsn(String),
    /// Nothing but separators.
    NoneGiven,
}

impl fmt::Display for CsnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CsnError::NotACsn(c) => write!(f, "not a CSN: \"{c}\""),
            CsnError::NoneGiven => f.write_str("no CSN given"),
        }
    }
}

impl std::error::Error for CsnError {}

/// Why a `--position` value (as given) is not `DSA=CSN[;CSN...]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum PositionError {
    /// No `=`.
    Form(String),
    /// The CSNs after it.
    Csn { arg: String, error: CsnError },
}

impl fmt::Display for PositionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PositionError::Form(a) => write!(f, "--position {a}: expected DSA=CSN"),
            PositionError::Csn { arg, error } => write!(f, "--position {arg}: {error}"),
        }
    }
}

impl std::error::Error for PositionError {}

/// A position from `CSN[;CSN...]` (one CSN per server ID).
pub(super) fn parse_csns(text: &str) -> Result<Position, CsnError> {
    let mut p = Position::default();
    for c in text.split(';').map(str::trim).filter(|c| !c.is_empty()) {
        p.note(Csn::parse(c).ok_or_else(|| CsnError::NotACsn(c.to_string()))?);
    }
    if p.is_empty() {
        return Err(CsnError::NoneGiven);
    }
    Ok(p)
}

/// Whether `text` is a CSN (and not a DSA name).
pub(super) fn is_csn(text: &str) -> bool {
    text.split(';').next().and_then(Csn::parse).is_some()
}

impl Known {
    /// From `--position DSA=CSN[;CSN...]` values.
    pub(super) fn from_args(args: &[String]) -> Result<Known, PositionError> {
        let mut k = Known::default();
        for a in args {
            let (name, csns) = a
                .split_once('=')
                .ok_or_else(|| PositionError::Form(a.clone()))?;
            let p = parse_csns(csns).map_err(|error| PositionError::Csn {
                arg: a.clone(),
                error,
            })?;
            k.0.entry(name.trim().to_ascii_lowercase())
                .or_default()
                .merge(&p);
        }
        Ok(k)
    }

    /// From a `/status` answer: the positions of the DSAs of the partition
    /// with this prefix.
    pub(super) fn from_status(status: &serde_json::Value, prefix: &str) -> Known {
        let mut k = Known::default();
        let parts = status["partitions"].as_array().into_iter().flatten();
        for part in parts.filter(|p| p["prefix"].as_str() == Some(prefix)) {
            for d in part["dsas"].as_array().into_iter().flatten() {
                let (Some(name), Some(pos)) = (
                    d["name"].as_str(),
                    d["replication"]["positions"].as_object(),
                ) else {
                    continue;
                };
                let p = Position::from_values(pos.values().filter_map(|v| v.as_str()));
                k.0.entry(name.to_ascii_lowercase()).or_default().merge(&p);
            }
        }
        k
    }

    fn of(&self, name: &str) -> Option<&Position> {
        self.0.get(&name.to_ascii_lowercase())
    }
}

/// A read of `x`'s DN after a write at `target`: the DSAs that may serve
/// it become the targets, and why.
pub(super) fn after_csn(
    x: &mut Explanation,
    snap: &Snapshot,
    table: &Table,
    view: &impl DsaView,
    target: &Position,
    known: &Known,
) {
    if x.op.is_write() || x.partition.is_none() || x.error.is_some() {
        return;
    }
    let Ok(dn) = Dn::parse_any(&x.dn) else {
        return;
    };
    let Lookup::Partition(p) = table.lookup(&dn) else {
        return;
    };
    let (mut serve, mut lines, mut all) = (Vec::new(), Vec::new(), true);
    for &i in &p.order {
        let name = &snap.dsas[i].name;
        let eligible = view.status(i).eligible();
        let (reached, shown) = match known.of(name) {
            Some(pos) if pos.reached(target) => (true, "has reached it"),
            Some(_) => (false, "is behind it"),
            None => (false, "has no known position"),
        };
        all &= reached || !eligible;
        if reached && eligible {
            serve.push(name.to_string());
        }
        let state = if eligible {
            String::new()
        } else {
            format!(" ({}: serves no reads)", view.status(i).as_str())
        };
        lines.push(format!("{name} {shown}{state}"));
    }
    let csns: Vec<String> = target.csns().iter().map(Csn::to_string).collect();
    let head = format!(
        "read-your-writes by position: the write is at {}; {}",
        csns.join(";"),
        lines.join(", ")
    );
    x.affinity = Some(if all {
        format!("{head}; every eligible DSA has it, so the read goes by the usual selection")
    } else if serve.is_empty() {
        format!("{head}; none has it yet, so the read goes to the DSA that took the write (the router knows which; explain does not) until one has")
    } else {
        x.targets = serve;
        format!("{head}; the read goes to the least busy of those that have it; such reads are never hedged")
    });
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const A: &str = "20261203101010.000001Z#000000#000#000000";
    const B: &str = "20261203101011.000001Z#000000#000#000000";
    const C1: &str = "20261203101011.000001Z#000000#001#000000";

    #[test]
    fn positions_parse_from_arguments_and_status() {
        assert!(is_csn(A) && is_csn(&format!("{A};{C1}")) && !is_csn("D1"));
        assert!(parse_csns("").is_err() && parse_csns("x").is_err());
        let k =
            Known::from_args(&[format!("D1={A}"), format!("d1={C1}"), format!("D2={B}")]).unwrap();
        assert_eq!(k.of("d1").unwrap().csns().len(), 2);
        assert!(k.of("D2").unwrap().reached(&parse_csns(A).unwrap()));
        assert!(!k.of("D1").unwrap().reached(&parse_csns(B).unwrap()));
        assert!(Known::from_args(&["D1".into()]).is_err());
        let st = serde_json::json!({"partitions": [
            {"prefix": "o=X", "dsas": [{"name": "D9", "replication": {"positions": {"000": A}}}]},
            {"prefix": "o=Y", "dsas": [
                {"name": "D1", "replication": {"positions": {"000": B, "001": C1}}},
                {"name": "D2", "replication": null}]}]});
        let k = Known::from_status(&st, "o=Y");
        assert_eq!(k.of("D1").unwrap().csns().len(), 2);
        assert!(k.of("D2").is_none() && k.of("D9").is_none());
    }
}
