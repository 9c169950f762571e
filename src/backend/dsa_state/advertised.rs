//! What a DSA's root DSE advertises (SASL mechanisms, controls,
//! extensions, its schema entry, its naming contexts), read after a good
//! probe.

use super::DsaState;
use std::sync::Arc;
use std::time::Duration;

/// What one DSA's root DSE said.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Advertised {
    pub sasl_mechanisms: Vec<String>,
    pub extensions: Vec<String>,
    pub controls: Vec<String>,
    pub subschema: Option<String>,
    /// The DNs of the entries it holds at the top of its trees
    /// (`namingContexts`): a partition's prefix is compared with them.
    pub naming_contexts: Vec<String>,
    /// A dsa-router's instance marker ([`crate::base::instance`]): the
    /// DSA is a dsa-router, this one when the marker is this process's.
    pub router_instance: Option<String>,
}

impl Advertised {
    /// From the attributes of a root DSE entry.
    pub fn from_attrs(attrs: &[(String, Vec<Vec<u8>>)]) -> Advertised {
        let mut a = Advertised::default();
        for (name, values) in attrs {
            let values: Vec<String> = values
                .iter()
                .filter_map(|v| std::str::from_utf8(v).ok())
                .map(str::to_string)
                .collect();
            match name.to_ascii_lowercase().as_str() {
                "supportedsaslmechanisms" => a.sasl_mechanisms = values,
                "supportedextension" => a.extensions = values,
                "supportedcontrol" => a.controls = values,
                "subschemasubentry" => a.subschema = values.into_iter().next(),
                "namingcontexts" => a.naming_contexts = values,
                "dsarouterinstance" => a.router_instance = values.into_iter().next(),
                _ => {}
            }
        }
        a
    }
}

impl DsaState {
    /// What the DSA's root DSE advertised, if it was read.
    pub fn advertised(&self) -> Option<Arc<Advertised>> {
        let a = self.advertised.lock().unwrap_or_else(|p| p.into_inner());
        a.as_ref().map(|(_, a)| a.clone())
    }

    /// Whether the DSA advertises the trace context control (its root
    /// DSE's `supportedControl`): requests of traced operations carry it
    /// there.
    pub fn accepts_trace_context(&self) -> bool {
        self.advertised().is_some_and(|a| {
            a.controls
                .iter()
                .any(|c| c == crate::observe::otel::OID_TRACE_CONTEXT)
        })
    }

    /// Whether its root DSE should be read (again): never read, or read
    /// longer than `refresh` ago.
    pub fn advertised_stale(&self, refresh: Duration) -> bool {
        let a = self.advertised.lock().unwrap_or_else(|p| p.into_inner());
        a.as_ref().is_none_or(|(at, _)| at.elapsed() > refresh)
    }

    pub fn set_advertised(&self, a: Advertised) {
        *self.advertised.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((std::time::Instant::now(), Arc::new(a)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_dse_attributes_are_read_whatever_their_case() {
        let attrs = vec![
            (
                "supportedSASLMechanisms".to_string(),
                vec![b"SCRAM-SHA-256".to_vec(), b"DIGEST-MD5".to_vec()],
            ),
            (
                "SUPPORTEDEXTENSION".to_string(),
                vec![b"1.3.6.1.1.8".to_vec()],
            ),
            ("supportedcontrol".to_string(), vec![b"1.2.3".to_vec()]),
            (
                "subschemaSubentry".to_string(),
                vec![b"cn=Subschema".to_vec()],
            ),
            ("namingContexts".to_string(), vec![b"o=A".to_vec()]),
        ];
        let a = Advertised::from_attrs(&attrs);
        assert_eq!(a.sasl_mechanisms, ["SCRAM-SHA-256", "DIGEST-MD5"]);
        assert_eq!(a.extensions, ["1.3.6.1.1.8"]);
        assert_eq!(a.controls, ["1.2.3"]);
        assert_eq!(a.subschema.as_deref(), Some("cn=Subschema"));
        assert_eq!(a.naming_contexts, ["o=A"]);
        let st = DsaState::new("D1");
        assert!(st.advertised_stale(Duration::from_secs(300)));
        st.set_advertised(a.clone());
        assert!(!st.advertised_stale(Duration::from_secs(300)));
        assert_eq!(st.advertised().as_deref(), Some(&a));
    }
}
