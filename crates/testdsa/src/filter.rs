//! Search filter evaluation and attribute selection.
//!
//! Matching is case-insensitive for attribute types and values (values are
//! compared after trimming and lower-casing). Ordering (`>=`, `<=`)
//! compares as integers when both sides parse as integers, as lower-cased
//! strings otherwise. Approximate match is equality. Extensible matches
//! never match.

use std::cmp::Ordering;

use ldap3_proto::proto::{
    LdapFilter, LdapPartialAttribute, LdapSearchResultEntry, LdapSubstringFilter,
};

use super::directory::{norm_value, Entry};

/// The virtual operational attribute returned for `+`.
pub const ENTRY_DN: &str = "entryDN";

/// True when `entry` matches `filter`.
pub fn matches(filter: &LdapFilter, entry: &Entry) -> bool {
    match filter {
        LdapFilter::And(fs) => fs.iter().all(|f| matches(f, entry)),
        LdapFilter::Or(fs) => fs.iter().any(|f| matches(f, entry)),
        LdapFilter::Not(f) => !matches(f, entry),
        LdapFilter::Equality(a, v) | LdapFilter::Approx(a, v) => {
            let want = v.trim().to_lowercase();
            values(entry, a).any(|x| x == want)
        }
        LdapFilter::Substring(a, sub) => values(entry, a).any(|x| substring_match(&x, sub)),
        LdapFilter::GreaterOrEqual(a, v) => {
            values(entry, a).any(|x| order(&x, v) != Ordering::Less)
        }
        LdapFilter::LessOrEqual(a, v) => {
            values(entry, a).any(|x| order(&x, v) != Ordering::Greater)
        }
        LdapFilter::Present(a) => a.eq_ignore_ascii_case(ENTRY_DN) || entry.get(a).is_some(),
        LdapFilter::Extensible(_) => false,
    }
}

/// The normalized values of attribute `name`, including the virtual entryDN.
fn values<'a>(entry: &'a Entry, name: &str) -> Box<dyn Iterator<Item = String> + 'a> {
    if name.eq_ignore_ascii_case(ENTRY_DN) {
        return Box::new(std::iter::once(norm_value(entry.dn.as_bytes())));
    }
    match entry.get(name) {
        Some(a) => Box::new(a.vals.iter().map(|v| norm_value(v))),
        None => Box::new(std::iter::empty()),
    }
}

fn order(have: &str, want: &str) -> Ordering {
    let want = want.trim().to_lowercase();
    match (have.parse::<i64>(), want.parse::<i64>()) {
        (Ok(a), Ok(b)) => a.cmp(&b),
        _ => have.cmp(want.as_str()),
    }
}

fn substring_match(value: &str, sub: &LdapSubstringFilter) -> bool {
    let mut rest = value;
    if let Some(initial) = &sub.initial {
        match rest.strip_prefix(initial.to_lowercase().as_str()) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    for any in &sub.any {
        let any = any.to_lowercase();
        match rest.find(any.as_str()) {
            Some(i) => rest = &rest[i + any.len()..],
            None => return false,
        }
    }
    match &sub.final_ {
        Some(f) => rest.ends_with(f.to_lowercase().as_str()),
        None => true,
    }
}

/// Which attributes a search asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Selection {
    all_user: bool,
    operational: bool,
    names: Vec<String>,
    types_only: bool,
}

impl Selection {
    /// From the request's attribute list: empty or `*` means all user
    /// attributes, `+` adds the operational ones (only entryDN here), `1.1`
    /// alone means none, otherwise the listed types.
    pub fn new(attrs: &[String], types_only: bool) -> Selection {
        let names: Vec<String> = attrs
            .iter()
            .map(|a| a.trim().to_string())
            .filter(|a| !a.is_empty() && a != "1.1")
            .collect();
        let no_attrs = attrs.iter().any(|a| a.trim() == "1.1");
        Selection {
            all_user: (attrs.is_empty() && !no_attrs) || names.iter().any(|a| a == "*"),
            operational: names.iter().any(|a| a == "+"),
            names,
            types_only,
        }
    }

    fn wants(&self, name: &str) -> bool {
        self.all_user || self.names.iter().any(|n| n.eq_ignore_ascii_case(name))
    }

    /// Builds the search result entry for `entry`.
    pub fn project(&self, entry: &Entry) -> LdapSearchResultEntry {
        let mut attributes: Vec<LdapPartialAttribute> = entry
            .attrs
            .iter()
            .filter(|a| self.wants(&a.name))
            .map(|a| LdapPartialAttribute {
                atype: a.name.clone(),
                vals: if self.types_only {
                    Vec::new()
                } else {
                    a.vals.clone()
                },
            })
            .collect();
        if self.operational || self.names.iter().any(|n| n.eq_ignore_ascii_case(ENTRY_DN)) {
            attributes.push(LdapPartialAttribute {
                atype: ENTRY_DN.to_string(),
                vals: if self.types_only {
                    Vec::new()
                } else {
                    vec![entry.dn.clone().into_bytes()]
                },
            });
        }
        LdapSearchResultEntry {
            dn: entry.dn.clone(),
            attributes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ldap3_proto::parse_ldap_filter_str;

    fn entry() -> Entry {
        let mut e = Entry::new("cn=Alice_Smith,o=Acme");
        for (a, v) in [
            ("cn", "Alice_Smith"),
            ("sn", "Smith"),
            ("mail", "alice@acme.example"),
            ("uidNumber", "1001"),
            ("objectClass", "person"),
        ] {
            e.add_value(a, v.as_bytes().to_vec());
        }
        e
    }

    #[test]
    fn filter_table() {
        let e = entry();
        for (f, want) in [
            ("(cn=alice_smith)", true),
            ("(CN=ALICE_SMITH)", true),
            ("(cn=bob)", false),
            ("(cn~=alice_smith)", true),
            ("(sn=*)", true),
            ("(telephoneNumber=*)", false),
            ("(cn=ali*)", true),
            ("(cn=*smi*)", true),
            ("(cn=*th)", true),
            ("(cn=a*e*h)", true),
            ("(cn=a*x*h)", false),
            ("(uidNumber>=1000)", true),
            ("(uidNumber>=999)", true),
            ("(uidNumber<=999)", false),
            ("(sn>=a)", true),
            ("(sn<=b)", false),
            ("(&(objectClass=person)(sn=smith))", true),
            ("(&(objectClass=person)(sn=jones))", false),
            ("(|(sn=jones)(mail=alice@acme.example))", true),
            ("(!(sn=smith))", false),
        ] {
            let parsed = parse_ldap_filter_str(f).expect(f);
            assert_eq!(matches(&parsed, &e), want, "{f}");
        }
        // The string filter parser rejects ',' and ' ' in values.
        let dn = LdapFilter::Equality("entryDN".into(), " CN=alice_smith,o=acme".into());
        assert!(matches(&dn, &e));
    }

    #[test]
    fn selection_table() {
        let e = entry();
        let names = |attrs: &[&str], types_only: bool| -> Vec<(String, usize)> {
            let attrs: Vec<String> = attrs.iter().map(|s| s.to_string()).collect();
            Selection::new(&attrs, types_only)
                .project(&e)
                .attributes
                .into_iter()
                .map(|a| (a.atype, a.vals.len()))
                .collect()
        };
        assert_eq!(names(&[], false).len(), 5);
        assert_eq!(names(&["*"], false).len(), 5);
        assert_eq!(names(&["*", "+"], false).len(), 6);
        assert_eq!(names(&["+"], false), vec![("entryDN".to_string(), 1)]);
        assert!(names(&["1.1"], false).is_empty());
        assert_eq!(
            names(&["SN", "nothing"], false),
            vec![("sn".to_string(), 1)]
        );
        assert_eq!(names(&["sn"], true), vec![("sn".to_string(), 0)]);
    }
}
