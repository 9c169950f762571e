//! Reading a DSA's schema (its subschema entry's `attributeTypes`, RFC
//! 4512 4.2), where its root DSE's `subschemaSubentry` says it is: the
//! names and supertypes hidden attributes are known by
//! ([`crate::admission::policy::schema`]). The health task reads it with the root
//! DSE, on its probe connection.

use super::conn::Conn;
use crate::base::error::{Error, Kind};
use ldap3_proto::proto::{LdapFilter, LdapSearchScope};
use std::sync::Arc;
use std::time::Duration;

/// The `attributeTypes` values of the subschema entry `dn` on `conn`'s
/// DSA, within `timeout`; an error when it returns none (the entry not
/// found, or not readable by the router).
pub(crate) async fn read(
    conn: &Arc<Conn>,
    dn: &str,
    timeout: Duration,
) -> Result<Vec<String>, Error> {
    let pdu = crate::proto::wire::search::own_search(
        dn,
        LdapSearchScope::Base,
        (1, 0),
        LdapFilter::Equality("objectClass".into(), "subschema".into()),
        &["attributeTypes"],
    );
    let entries = super::advertised::collect(conn, &pdu, timeout).await?;
    let attrs = entries
        .first()
        .and_then(|e| crate::proto::wire::response::entry_attrs(e))
        .unwrap_or_default();
    let values: Vec<String> = attrs
        .into_iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("attributeTypes"))
        .flat_map(|(_, values)| values)
        .map(|v| String::from_utf8_lossy(&v).into_owned())
        .collect();
    if values.is_empty() {
        return Err(Error::new(
            Kind::BadResponse,
            format!("no attributeTypes read from {dn}"),
        ));
    }
    Ok(values)
}
