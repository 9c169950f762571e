#![allow(clippy::unwrap_used)]

use super::*;

/// slapd 2.5's own descriptions (core.schema, cosine.schema) and a few
/// of other shapes.
const NAME: &str = "( 2.5.4.41 NAME 'name' DESC 'RFC4519: common supertype of name attributes' EQUALITY caseIgnoreMatch SUBSTR caseIgnoreSubstringsMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.15{32768} )";
const CN: &str = "( 2.5.4.3 NAME ( 'cn' 'commonName' ) DESC 'RFC4519: common name(s) for which the entity is known by' SUP name )";
const SN: &str = "( 2.5.4.4 NAME ( 'sn' 'surname' ) DESC 'RFC2256: last (family) name(s) for which the entity is known by' SUP name )";
const MAIL: &str = "( 0.9.2342.19200300.100.1.3 NAME ( 'mail' 'rfc822Mailbox' ) DESC 'RFC1274: RFC822 Mailbox' EQUALITY caseIgnoreIA5Match SUBSTR caseIgnoreIA5SubstringsMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.26{256} )";
const UID: &str = "( 0.9.2342.19200300.100.1.1 NAME ( 'uid' 'userid' ) EQUALITY caseIgnoreMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.15{256} )";
const OC: &str = "( 2.5.4.0 NAME 'objectClass' EQUALITY objectIdentifierMatch SYNTAX 1.3.6.1.4.1.1466.115.121.1.38 )";

fn t(oid: &str, names: &[&str], sup: Option<&str>) -> AttrType {
    AttrType {
        oid: oid.into(),
        names: names.iter().map(|n| n.to_string()).collect(),
        sup: sup.map(str::to_string),
    }
}

#[test]
fn attribute_type_descriptions_are_read() {
    let cases: [(&str, Result<AttrType, SchemaError>); 10] = [
        (NAME, Ok(t("2.5.4.41", &["name"], None))),
        (CN, Ok(t("2.5.4.3", &["cn", "commonname"], Some("name")))),
        (SN, Ok(t("2.5.4.4", &["sn", "surname"], Some("name")))),
        (
            MAIL,
            Ok(t("0.9.2342.19200300.100.1.3", &["mail", "rfc822mailbox"], None)),
        ),
        // No name, an extension list, flags, SUP by OID, odd spacing.
        (
            "(1.2.3 SUP 2.5.4.41 SINGLE-VALUE X-ORIGIN ( 'a' 'b' ) NO-USER-MODIFICATION USAGE directoryOperation)",
            Ok(t("1.2.3", &[], Some("2.5.4.41"))),
        ),
        // A DESC with parentheses and keywords inside its quotes.
        (
            "( 1.2.4 DESC 'not (NAME) SUP x' NAME 'x' )",
            Ok(t("1.2.4", &["x"], None)),
        ),
        ("1.2.3 NAME 'x'", Err(SchemaError::NotADescription)),
        ("( 1.2.3 NAME 'x )", Err(SchemaError::UnclosedQuote)),
        ("( 1.2.3 SUP )", Err(SchemaError::MissingValue("SUP"))),
        ("( 1.2.3 NAME )", Err(SchemaError::MissingValue("NAME"))),
    ];
    for (text, want) in cases {
        assert_eq!(parse(text), want, "{text}");
    }
    // Truncated anywhere, or bytes anywhere: an answer, no panic.
    for n in 0..MAIL.len() {
        let _ = parse(&MAIL[..n]);
    }
}

fn schema(complete: bool) -> Arc<Schema> {
    let types = [NAME, CN, SN, MAIL, UID, OC]
        .iter()
        .map(|d| parse(d).unwrap())
        .collect();
    Arc::new(Schema::new(types, complete))
}

#[test]
fn names_oids_supertypes_and_subtypes_resolve() {
    use Why::*;
    let s = schema(true);
    let hide = |h: &[&str]| s.hidden(&h.iter().map(|x| x.to_string()).collect::<Vec<_>>());
    // (hide, name in a filter, refused why, stripped from entries)
    let cases: [(&[&str], &str, Option<Why>, bool); 20] = [
        (&["mail"], "mail", Some(Hidden), true),
        (&["mail"], "MAIL", Some(Hidden), true),
        (&["mail"], "rfc822Mailbox", Some(Hidden), true),
        (&["mail"], "0.9.2342.19200300.100.1.3", Some(Hidden), true),
        (&["mail"], "mail;lang-en", Some(Hidden), true),
        (&["mail"], "cn", None, false),
        (&["mail"], "name", None, false),
        (&["sn"], "surname", Some(Hidden), true),
        (&["sn"], "2.5.4.4", Some(Hidden), true),
        (&["sn"], "sn;lang-en", Some(Hidden), true),
        (&["sn"], "name", Some(Supertype), false),
        (&["sn"], "2.5.4.41;x-y", Some(Supertype), false),
        (&["sn"], "cn", None, false),
        // Hidden by another of its names, or by OID.
        (&["surname"], "sn", Some(Hidden), true),
        (&["2.5.4.4"], "surname", Some(Hidden), true),
        // A supertype hidden: its subtypes with it.
        (&["name"], "cn", Some(Hidden), true),
        (&["name"], "commonName;lang-de", Some(Hidden), true),
        (&["name"], "uid", None, false),
        // Names no DSA knows: free when every schema was read.
        (&["mail"], "mailAlternate", None, false),
        (&[], "mail", None, false),
    ];
    for (h, name, why, strip) in cases {
        let hd = hide(h);
        assert_eq!(hd.refuses(name), why, "hide {h:?}, {name}");
        assert_eq!(hd.strips(name.as_bytes()), strip, "hide {h:?}, {name}");
    }
}

#[test]
fn an_unread_schema_refuses_the_names_it_does_not_know() {
    let hide = vec!["mail".to_string()];
    let part = schema(false).hidden(&hide);
    assert_eq!(part.refuses("mailAlternate"), Some(Why::Unknown));
    assert_eq!(part.refuses("rfc822mailbox"), Some(Why::Hidden));
    assert_eq!(part.refuses("uid"), None);
    // Nothing read at all: only what the rule names is known hidden, and
    // every other name refused.
    let none = Arc::new(Schema::new(Vec::new(), false)).hidden(&hide);
    assert_eq!(none.refuses("mail"), Some(Why::Hidden));
    assert!(none.strips(b"Mail;binary"));
    assert_eq!(none.refuses("rfc822Mailbox"), Some(Why::Unknown));
    assert_eq!(none.refuses("cn"), Some(Why::Unknown));
    // Nothing hidden: nothing refused, whatever was read.
    let open = Arc::new(Schema::new(Vec::new(), false)).hidden(&[]);
    assert_eq!(open.refuses("anything"), None);
}

#[test]
fn merged_schemas_hide_a_name_any_dsa_gives_a_hidden_type() {
    // DSA 2 calls mail "email" too; DSA 1 does not know "email".
    let mut types = vec![parse(MAIL).unwrap()];
    types.push(t("0.9.2342.19200300.100.1.3", &["email"], None));
    let h = Arc::new(Schema::new(types, true)).hidden(&["rfc822mailbox".to_string()]);
    for n in ["mail", "email", "rfc822mailbox"] {
        assert_eq!(h.refuses(n), Some(Why::Hidden), "{n}");
    }
}

#[test]
fn a_supertype_loop_ends() {
    let types = vec![t("1.1.1", &["a"], Some("b")), t("1.1.2", &["b"], Some("a"))];
    let h = Arc::new(Schema::new(types, true)).hidden(&["a".to_string()]);
    assert_eq!(h.refuses("b"), Some(Why::Hidden), "a subtype of a");
}
