//! Tools for horizontal partitions: `hash split` writes an LDIF file per
//! slot (to load each slot's DSAs); `hash check` reads every DSA of every
//! horizontal partition and reports entries that are not on the DSA their
//! hash names.

use crate::directory::knowledge::Snapshot;
use crate::directory::route::{Lookup, Partition, Table};
use crate::proto::dn::Dn;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// (No `Debug`: it holds a password.)
#[derive(clap::Subcommand)]
pub enum HashCmd {
    /// Split an LDIF file per slot of the knowledge's horizontal
    /// partitions: `DIR/<prefix>.slot<N>.ldif`. The prefix entry goes to
    /// every slot; entries outside horizontal partitions are left out.
    Split {
        /// The root knowledge file.
        root: PathBuf,
        /// The LDIF file to split.
        ldif: PathBuf,
        /// Where the per-slot files go.
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
    /// Read the entries just below each horizontal partition's prefix on
    /// every DSA of it and report those not on the DSA their hash names.
    /// Exits 1 when any is misplaced.
    Check {
        /// The root knowledge file.
        root: PathBuf,
        /// Bind DN for reading (default: anonymous).
        #[arg(long)]
        bind_dn: Option<String>,
        /// Password for --bind-dn.
        #[arg(long, env = "DSA_ROUTER_HASH_PASSWORD", hide_env_values = true)]
        password: Option<String>,
    },
}

pub fn run(cmd: &HashCmd) -> ExitCode {
    match cmd {
        HashCmd::Split { root, ldif, out } => split(root, ldif, out),
        HashCmd::Check {
            root,
            bind_dn,
            password,
        } => check(root, bind_dn.as_deref(), password.as_deref().unwrap_or("")),
    }
}

fn load(root: &Path) -> Option<(Snapshot, Table)> {
    let snap = super::load_or_report(root)?;
    match Table::build(&snap, None) {
        Ok(t) => Some((snap, t)),
        Err(e) => {
            eprintln!("error: {e}");
            None
        }
    }
}

/// The file name of a slot: prefix with unsafe characters replaced.
fn slot_file(p: &Partition, slot: u32) -> String {
    let name: String = p
        .prefix
        .to_string()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '=' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{name}.slot{slot}.ldif")
}

/// LDIF records (blank-line separated), each with its DN.
fn records(text: &str) -> Vec<(Option<String>, String)> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for line in text.lines().chain(std::iter::once("")) {
        if line.trim().is_empty() {
            if !cur.trim().is_empty() {
                out.push((record_dn(&cur), std::mem::take(&mut cur)));
            }
            cur.clear();
            continue;
        }
        cur.push_str(line);
        cur.push('\n');
    }
    out
}

/// The DN of one LDIF record (`dn:` or base64 `dn::`, folded lines joined).
fn record_dn(rec: &str) -> Option<String> {
    let mut unfolded = String::new();
    for line in rec.lines() {
        if line.starts_with('#') {
            continue;
        }
        match line.strip_prefix(' ') {
            Some(cont) if !unfolded.is_empty() => unfolded.push_str(cont),
            _ => {
                if !unfolded.is_empty() {
                    break;
                }
                unfolded.push_str(line);
            }
        }
    }
    if let Some(b64) = unfolded.strip_prefix("dn::") {
        return base64(b64.trim()).and_then(|b| String::from_utf8(b).ok());
    }
    unfolded.strip_prefix("dn:").map(|d| d.trim().to_string())
}

/// Standard base64 (RFC 4648), as LDIF uses it.
fn base64(s: &str) -> Option<Vec<u8>> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    };
    let bytes: Vec<u8> = s.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for chunk in bytes.chunks(4) {
        let mut n = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            n |= val(c)? << (18 - 6 * i);
        }
        let take = chunk.len().saturating_sub(1);
        for i in 0..take {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    Some(out)
}

fn split(root: &Path, ldif: &Path, out_dir: &Path) -> ExitCode {
    let Some((_, table)) = load(root) else {
        return ExitCode::from(1);
    };
    let text = match std::fs::read_to_string(ldif) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", ldif.display());
            return ExitCode::from(1);
        }
    };
    let hashed: Vec<&Partition> = table
        .partitions_sorted()
        .into_iter()
        .filter(|p| p.hash.is_some())
        .collect();
    if hashed.is_empty() {
        eprintln!("error: the knowledge has no horizontal partition");
        return ExitCode::from(1);
    }
    let mut files: Vec<(String, String, usize)> = hashed
        .iter()
        .map(|p| {
            (
                slot_file(p, p.hash.as_ref().map_or(0, |h| h.slot)),
                String::new(),
                0,
            )
        })
        .collect();
    let (mut left_out, mut bad) = (0usize, 0usize);
    for (dn, rec) in records(&text) {
        let Some(dn) = dn.and_then(|d| Dn::parse_ldap(&d).ok()) else {
            bad += 1;
            continue;
        };
        let Lookup::Partition(p) = table.lookup(&dn) else {
            left_out += 1;
            continue;
        };
        if p.hash.is_none() {
            left_out += 1;
            continue;
        }
        // The prefix entry: every slot's DSA holds it.
        let targets: Vec<usize> = if dn == p.prefix {
            hashed
                .iter()
                .enumerate()
                .filter(|(_, q)| q.prefix == p.prefix)
                .map(|(i, _)| i)
                .collect()
        } else {
            hashed
                .iter()
                .position(|q| std::ptr::eq(*q, p))
                .into_iter()
                .collect()
        };
        for i in targets {
            files[i].1.push_str(&rec);
            files[i].1.push('\n');
            files[i].2 += 1;
        }
    }
    for (name, body, n) in &files {
        let path = out_dir.join(name);
        if let Err(e) = std::fs::write(&path, body) {
            eprintln!("error: cannot write {}: {e}", path.display());
            return ExitCode::from(1);
        }
        println!("{}: {n} entries", path.display());
    }
    println!("left out (outside horizontal partitions): {left_out}; records without a readable DN: {bad}");
    ExitCode::SUCCESS
}

fn check(root: &Path, bind_dn: Option<&str>, password: &str) -> ExitCode {
    let Some((snap, table)) = load(root) else {
        return ExitCode::from(1);
    };
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    let mut report = String::new();
    let (mut checked, mut misplaced, mut failed) = (0usize, 0usize, 0usize);
    for p in table.partitions_sorted() {
        let Some(h) = &p.hash else {
            continue;
        };
        for &i in &p.order {
            let d = &snap.dsas[i];
            let dns = match rt.block_on(children(d, &p.prefix, bind_dn, password)) {
                Ok(v) => v,
                Err(e) => {
                    failed += 1;
                    let _ = writeln!(report, "DSA {}: cannot read it: {e}", d.name);
                    continue;
                }
            };
            // A DSA holding the partition under a native prefix: its DNs
            // as clients see them.
            let map = d
                .native_prefix
                .as_ref()
                .filter(|n| **n != p.prefix)
                .map(|n| crate::proto::wire::dnmap::PrefixMap {
                    prefix: p.prefix.clone(),
                    native: n.clone(),
                });
            for dn in dns {
                checked += 1;
                let dn = map.as_ref().and_then(|m| m.to_client(&dn)).unwrap_or(dn);
                let Ok(parsed) = Dn::parse_ldap(&dn) else {
                    continue;
                };
                match table.slot_of(p, &parsed) {
                    Some(s) if s == h.slot => {}
                    Some(s) => {
                        misplaced += 1;
                        let _ = writeln!(
                            report,
                            "misplaced: {dn} is on DSA {} (slot {}) but hashes to slot {s}",
                            d.name, h.slot
                        );
                    }
                    None => {
                        let _ = writeln!(
                            report,
                            "unhashable: {dn} on DSA {} has no {} in its RDN",
                            d.name,
                            h.attr.as_deref().unwrap_or("value")
                        );
                    }
                }
            }
        }
    }
    print!("{report}");
    println!("checked {checked} entries: {misplaced} misplaced; {failed} DSA(s) not read");
    if misplaced > 0 || failed > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    }
}

/// The DNs just below `prefix` on DSA `d`.
async fn children(
    d: &crate::directory::knowledge::DsaDef,
    prefix: &Dn,
    bind_dn: Option<&str>,
    password: &str,
) -> Result<Vec<String>, crate::base::error::Error> {
    let state = std::sync::Arc::new(crate::backend::dsa_state::DsaState::new(d.name.clone()));
    let limits = crate::service::config::Config::default().limits();
    let bind = bind_dn.map(|dn| {
        crate::backend::upstream::pool::BindPdu::new(
            dn.to_string(),
            crate::backend::upstream::pool::bind_pdu(dn, password.as_bytes()).freeze(),
        )
    });
    let addrs = crate::backend::upstream::pool::targets(d);
    let conn =
        crate::backend::upstream::pool::connect_bound(&state, &addrs, bind.as_ref(), limits, None)
            .await?;
    let base = d
        .native_prefix
        .as_ref()
        .filter(|n| **n != *prefix)
        .unwrap_or(prefix)
        .to_string();
    let got =
        crate::backend::upstream::advertised::one_level(&conn, &base, limits.op_timeout).await;
    conn.close();
    got
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn ldif_records_and_their_dns() {
        let text = "version: 1\n\ndn: uid=a,o=X\nuid: a\n\n# c\ndn:: dWlkPWIsbz1Y\nuid: b\n\ndn: uid=long\n ,o=X\ncn: x\n";
        let r = records(text);
        let dns: Vec<Option<String>> = r.iter().map(|(d, _)| d.clone()).collect();
        assert_eq!(
            dns,
            [
                None,
                Some("uid=a,o=X".into()),
                Some("uid=b,o=X".into()),
                Some("uid=long,o=X".into())
            ]
        );
        assert_eq!(base64("aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64("aGk=").unwrap(), b"hi");
    }
}
