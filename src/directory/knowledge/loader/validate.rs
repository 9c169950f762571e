//! Whole-load validation, once every file is read: DSA names unique,
//! the precedence lists and `set dsa-router-dsa` naming defined DSAs,
//! horizontal partitions complete, and warnings for names that look like
//! typos of others.

use super::Loader;
use crate::directory::knowledge::diag::{self, Diagnostic};
use crate::directory::knowledge::DsaDef;
use std::collections::HashMap;

impl Loader<'_> {
    /// Check the whole load (errors sorted: root causes first).
    pub(super) fn validate(&mut self) {
        let mut seen: HashMap<String, usize> = HashMap::new();
        for (i, (d, text)) in self.dsas.iter().enumerate() {
            let key = d.name.to_ascii_lowercase();
            if let Some(&first) = seen.get(&key) {
                let prev = &self.dsas[first].0.defined_at;
                self.errors.push(Diagnostic::error(
                    format!(
                        "duplicate DSA name \"{}\" (first defined at {prev})",
                        d.name
                    ),
                    Some(d.defined_at.clone()),
                    Some(text),
                ));
            } else {
                seen.insert(key, i);
            }
        }
        // Root causes first, in file order; then the errors that may only
        // follow from them (a precedence list naming a block that did not
        // load, or that a missing ';' swallowed), marked as such.
        let mut errors = std::mem::take(&mut self.errors);
        errors.sort_by_key(|d| self.position(d));
        self.errors = errors;
        let caused = !self.errors.is_empty();
        let names: Vec<String> = self.dsas.iter().map(|(d, _)| d.name.to_string()).collect();
        for (list, what) in [
            (&self.precedence, "set precedence"),
            (&self.write_precedence, "set write-precedence"),
        ] {
            for n in list.iter().flatten() {
                let key = n.name.to_ascii_lowercase();
                if seen.contains_key(&key) {
                    continue;
                }
                let msg = self.unknown_dsa(&n.name, what, &names, caused);
                self.errors.push(Diagnostic::error(
                    msg,
                    Some(n.at.clone()),
                    Some(&n.line_text),
                ));
            }
        }
        self.apply_router_dsas(caused);
        self.horizontal_sets();
        self.near_duplicates();
    }

    /// Horizontal partitions: the DSAs sharing a prefix with a hash part
    /// are one set; it needs one algorithm, one total and one attribute,
    /// every slot covered, and no DSA of that prefix without a part.
    fn horizontal_sets(&mut self) {
        let mut sets: Vec<(String, Vec<usize>)> = Vec::new();
        let mut index: HashMap<String, usize> = HashMap::new();
        for (i, (d, _)) in self.dsas.iter().enumerate() {
            let key = d.prefix.normalized();
            match index.get(&key) {
                Some(&at) => sets[at].1.push(i),
                None => {
                    index.insert(key.clone(), sets.len());
                    sets.push((key, vec![i]));
                }
            }
        }
        for (_, members) in sets {
            let parts: Vec<(usize, &crate::directory::knowledge::hash::HashPart)> = members
                .iter()
                .filter_map(|&i| self.dsas[i].0.hash.as_ref().map(|h| (i, h)))
                .collect();
            let Some(&(first_i, first)) = parts.first() else {
                continue;
            };
            let mut errs = Vec::new();
            let at = |i: usize| (self.dsas[i].0.defined_at.clone(), self.dsas[i].1.clone());
            let prefix = self.dsas[first_i].0.prefix.to_string();
            for &i in &members {
                let d = &self.dsas[i].0;
                match &d.hash {
                    None => errs.push((i, format!(
                        "DSA \"{}\" holds {prefix} whole, but DSA \"{}\" holds it as a horizontal partition ({}): a prefix is partitioned by hash on all its DSAs or on none",
                        d.name, self.dsas[first_i].0.name, first.describe()
                    ))),
                    Some(h) if (h.algo, h.total, &h.attr) != (first.algo, first.total, &first.attr) => {
                        errs.push((i, format!(
                            "DSA \"{}\" partitions {prefix} as {}, but DSA \"{}\" as {}: one set has one attribute, algorithm and total",
                            d.name, h.describe(), self.dsas[first_i].0.name, first.describe()
                        )))
                    }
                    Some(_) => {}
                }
            }
            if errs.is_empty() {
                let missing: Vec<String> = (0..first.total)
                    .filter(|s| !parts.iter().any(|(_, h)| h.slot == *s))
                    .map(|s| s.to_string())
                    .collect();
                if !missing.is_empty() {
                    errs.push((
                        first_i,
                        format!(
                            "horizontal partition of {prefix} ({} of {}): no DSA holds slot(s) {}",
                            first.algo.name(),
                            first.total,
                            missing.join(", ")
                        ),
                    ));
                }
            }
            for (i, msg) in errs {
                let (loc, text) = at(i);
                self.errors
                    .push(Diagnostic::error(msg, Some(loc), Some(&text)));
            }
        }
    }

    /// A DSA name in `what` that no `set dsa` block has: the error's text,
    /// with the closest name, and whether it may follow from an earlier
    /// error (`caused`) or from its own block's.
    fn unknown_dsa(&self, name: &str, what: &str, names: &[String], caused: bool) -> String {
        let mut msg = format!("unknown DSA \"{name}\" in {what}: no set dsa block has that name");
        if let Some(c) = diag::closest(name, names.iter().map(String::as_str)) {
            msg += &format!(" (did you mean \"{c}\"?)");
        }
        if self.broken.contains(&name.to_ascii_lowercase()) {
            msg += " (its set dsa block did not load: see the error above)";
        } else if caused {
            msg += " (this may follow from an error above)";
        }
        msg
    }

    /// The router's own settings for DSAs, kept apart from CA knowledge.
    fn apply_router_dsas(&mut self, caused: bool) {
        for r in std::mem::take(&mut self.router_dsas) {
            let names: Vec<String> = self.dsas.iter().map(|(d, _)| d.name.to_string()).collect();
            let Some((d, _)) = self
                .dsas
                .iter_mut()
                .find(|(d, _)| d.name.eq_ignore_ascii_case(&r.name))
            else {
                let msg = self.unknown_dsa(&r.name, "set dsa-router-dsa", &names, caused);
                self.errors
                    .push(Diagnostic::error(msg, Some(r.at), Some(&r.line_text)));
                continue;
            };
            if r.tls.is_some() {
                d.tls = r.tls;
            }
            if r.concurrency_limit.is_some() {
                d.concurrency_limit = r.concurrency_limit;
            }
        }
    }

    /// A diagnostic's place: file (in load order), line, column.
    fn position(&self, d: &Diagnostic) -> Option<(Option<usize>, usize, usize)> {
        d.location.as_ref().map(|l| {
            (
                self.files.iter().position(|f| **f == *l.file),
                l.line,
                l.column,
            )
        })
    }

    /// A prefix or a load-share group with one member whose name is close
    /// to another's: likely a typo that made a partition or group of its
    /// own. Pairwise, so only while the pairs stay under
    /// [`NEAR_DUPLICATE_PAIRS`]: beyond, knowledge this large is generated,
    /// not typed, and the check is skipped (said in a warning) so that
    /// loading stays linear.
    fn near_duplicates(&mut self) {
        let mut found = Vec::new();
        for (label, key) in [
            (
                "partition",
                (|d: &DsaDef| Some(d.prefix.to_string())) as fn(&DsaDef) -> Option<String>,
            ),
            ("load-share group", |d: &DsaDef| d.load_share_group.clone()),
        ] {
            // Each name (case-insensitive): as first written, how many
            // DSAs, the first DSA's index, its letters (digits removed).
            let mut index: HashMap<String, usize> = HashMap::new();
            let mut count: Vec<(String, usize, usize, String)> = Vec::new();
            for (i, (d, _)) in self.dsas.iter().enumerate() {
                let Some(k) = key(d) else {
                    continue;
                };
                let lower = k.to_ascii_lowercase();
                match index.get(&lower) {
                    Some(&at) => {
                        count[at].1 += 1;
                        if k != count[at].0 && label == "load-share group" {
                            let (d, text) = &self.dsas[i];
                            found.push(Diagnostic::warning(
                                format!(
                                    "{label} \"{k}\" of DSA {} is also written \"{}\": names are compared ignoring case, so they are one group",
                                    d.name, count[at].0
                                ),
                                Some(d.defined_at.clone()),
                                Some(text),
                            ));
                        }
                    }
                    None => {
                        index.insert(lower, count.len());
                        // Names that differ only in their digits are a
                        // series (GROUP1, GROUP2), not a typo.
                        let letters = k
                            .chars()
                            .filter(|c| !c.is_ascii_digit())
                            .collect::<String>()
                            .to_ascii_lowercase();
                        count.push((k, 1, i, letters));
                    }
                }
            }
            let singles = count.iter().filter(|c| c.1 == 1).count();
            if singles.saturating_mul(count.len()) > NEAR_DUPLICATE_PAIRS {
                found.push(Diagnostic::warning(
                    format!(
                        "{} {label}s: the check for names close to another's (typos) is skipped above {NEAR_DUPLICATE_PAIRS} pairs",
                        count.len()
                    ),
                    None,
                    None,
                ));
                continue;
            }
            for (k, n, i, letters) in &count {
                if *n != 1 {
                    continue;
                }
                let others = count
                    .iter()
                    .filter(|(o, _, _, l)| o != k && l != letters)
                    .map(|(o, _, _, _)| o.as_str());
                if let Some(c) = diag::closest(k, others) {
                    let (d, text) = &self.dsas[*i];
                    found.push(Diagnostic::warning(
                        format!(
                            "{label} \"{k}\" has one DSA ({}) and is close to {label} \"{c}\": a typo?",
                            d.name
                        ),
                        Some(d.defined_at.clone()),
                        Some(text),
                    ));
                }
            }
        }
        self.warnings.extend(found);
    }
}

/// Pairs of names the typo check of [`Loader::near_duplicates`] compares
/// at most (some four million: well under a second).
const NEAR_DUPLICATE_PAIRS: usize = 4_000_000;
