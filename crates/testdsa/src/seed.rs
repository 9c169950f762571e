//! The seed data of `dsa-router demo` and the tests: what one DSA of the
//! seed's setup holds.

/// Test data for one DSA holding `suffix` (LDAP string), marked with the
/// DSA's name so a client can see who answered: `cn=served-by,<suffix>` has
/// `description: <name>`. `cn=router` is the identity the router binds as
/// (password `routerpw`), allowed to use proxied authorization; users
/// `alice` and `bob` have passwords `alicepw` and `bobpw`;
/// `ou=Restricted` is readable by `cn=router` only.
pub fn seed_ldif(suffix: &str, dsa: &str) -> String {
    let first = suffix.split(',').next().unwrap_or(suffix);
    let (attr, value) = first.split_once('=').unwrap_or(("o", first));
    let oc = match attr.to_ascii_lowercase().as_str() {
        "ou" => "organizationalUnit",
        "dc" => "domain",
        _ => "organization",
    };
    let mut s = format!("dn: {suffix}\nobjectClass: top\nobjectClass: {oc}\n{attr}: {value}\n\n");
    s += &format!("dn: cn=served-by,{suffix}\nobjectClass: top\nobjectClass: applicationProcess\ncn: served-by\ndescription: {dsa}\n\n");
    s += &format!("dn: cn=router,{suffix}\nobjectClass: top\nobjectClass: person\ncn: router\nsn: router\nuserPassword: routerpw\ntestAclProxy: TRUE\n\n");
    s += &format!(
        "dn: ou=People,{suffix}\nobjectClass: top\nobjectClass: organizationalUnit\nou: People\n\n"
    );
    for (uid, pw, name) in [
        ("alice", "alicepw", "Alice Example"),
        ("bob", "bobpw", "Bob Example"),
    ] {
        s += &format!(
            "dn: uid={uid},ou=People,{suffix}\nobjectClass: top\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {name}\nsn: Example\nmail: {uid}@example.com\nuserPassword: {pw}\n\n"
        );
    }
    for i in 0..20 {
        s += &format!(
            "dn: uid=user{i:04},ou=People,{suffix}\nobjectClass: top\nobjectClass: inetOrgPerson\nuid: user{i:04}\ncn: User {i}\nsn: User\nuserPassword: pw\n\n"
        );
    }
    s += &format!(
        "dn: ou=Restricted,{suffix}\nobjectClass: top\nobjectClass: organizationalUnit\nou: Restricted\ntestAclReaders: cn=router,{suffix}\n\n"
    );
    s += &format!(
        "dn: cn=secret,ou=Restricted,{suffix}\nobjectClass: top\nobjectClass: applicationProcess\ncn: secret\ndescription: only the router identity reads this\ntestAclReaders: cn=router,{suffix}\n\n"
    );
    s
}
