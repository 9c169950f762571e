//! The connection-state model: what a request needs of the DSA connection
//! it runs on.
//!
//! The router multiplexes clients on shared DSA connections (anonymous, or
//! the router's own with proxied authorization). That is right for what a
//! DSA forgets once it has answered; whatever a DSA keeps *per connection*
//! needs a connection of the client's own, bound as the client. This module
//! is the one list of which requests are which (docs/protocol.md, "Connection
//! state"); the session acts on its [`Needs`] in one place.
//!
//! | request carries | own connection | same DSA again | no timeout | one partition only |
//! |---|---|---|---|---|
//! | nothing stateful (plain reads, writes) | | | | |
//! | paged results (RFC 2696) | yes | yes | | (the router pages across) |
//! | server-side sort (RFC 2891) | yes | | | yes |
//! | VLV (draft-ietf-ldapext-ldapv3-vlv) | yes | yes | | yes |
//! | persistent search | yes | | yes | yes |
//! | sync, refreshOnly (RFC 4533) | yes | yes | | yes |
//! | sync, refreshAndPersist | yes | yes | yes | yes |
//! | transaction specification (RFC 5805) | yes | yes | | yes |
//! | the client's own proxied authorization | yes | | | |
//! | an extended operation the router does not know | yes | yes | | |
//!
//! Binds are apart: they always run on a new connection, which becomes the
//! client's own when the bind succeeds (SASL exchanges step by step on it).

use super::ber;
use super::request::{
    Op, Request, OID_PAGED_RESULTS, OID_PASSWD_MODIFY, OID_PROXIED_AUTHZ, OID_WHOAMI,
};

/// Server-side sort request (RFC 2891).
pub const OID_SORT: &str = "1.2.840.113556.1.4.473";
/// Virtual list view request.
pub const OID_VLV: &str = "2.16.840.1.113730.3.4.9";
/// Persistent search (draft-ietf-ldapext-psearch).
pub const OID_PSEARCH: &str = "2.16.840.1.113730.3.4.3";
/// Sync request (RFC 4533, syncrepl).
pub const OID_SYNC: &str = "1.3.6.1.4.1.4203.1.9.1.1";
/// Transaction specification (RFC 5805).
pub const OID_TXN_SPEC: &str = "1.3.6.1.1.21.2";
/// Start and end transaction extended operations (RFC 5805).
pub const OID_START_TXN: &str = "1.3.6.1.1.21.1";
pub const OID_END_TXN: &str = "1.3.6.1.1.21.3";
/// Cancel extended operation (RFC 3909).
pub const OID_CANCEL: &str = "1.3.6.1.1.8";

/// What a request needs of its DSA connection.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Needs {
    /// A connection of the client's own, bound as the client: the DSA
    /// keeps state for it on the connection.
    pub own_conn: bool,
    /// The DSA that holds the client's state in this partition (where its
    /// earlier stateful request went), while that DSA is eligible: the
    /// next page, the next VLV window, the rest of a transaction.
    pub sticky: bool,
    /// It may run without end (persistent search, refreshAndPersist): no
    /// operation timeout, never a health signal, never re-sent.
    pub persistent: bool,
    /// A control the router cannot carry across partitions (its OID): a
    /// search with it that spans partitions is refused when the control is
    /// critical and runs without it otherwise.
    pub one_partition: Option<&'static str>,
}

/// What `req` needs of the DSA connection it runs on.
pub fn needs(req: &Request) -> Needs {
    let mut n = Needs::default();
    for c in &req.controls {
        match c.oid.as_str() {
            OID_PAGED_RESULTS => {
                n.own_conn = true;
                n.sticky = true;
            }
            OID_PROXIED_AUTHZ => n.own_conn = true,
            OID_SORT => {
                n.own_conn = true;
                n.one_partition.get_or_insert(OID_SORT);
            }
            OID_VLV => {
                n.own_conn = true;
                n.sticky = true;
                n.one_partition = Some(OID_VLV);
            }
            OID_PSEARCH => {
                n.own_conn = true;
                n.persistent = true;
                n.one_partition = Some(OID_PSEARCH);
            }
            OID_SYNC => {
                n.own_conn = true;
                n.sticky = true;
                n.persistent |= c.value.as_deref().and_then(sync_mode) == Some(SYNC_PERSIST);
                n.one_partition = Some(OID_SYNC);
            }
            OID_TXN_SPEC => {
                n.own_conn = true;
                n.sticky = true;
                n.one_partition = Some(OID_TXN_SPEC);
            }
            _ => {}
        }
    }
    if let Op::Extended { oid, .. } = &req.op {
        // Extended operations the router does not know: the DSA may keep
        // state for them (a transaction does). Password Modify and WhoAmI
        // are stateless.
        if ![OID_PASSWD_MODIFY, OID_WHOAMI].contains(&oid.as_str()) {
            n.own_conn = true;
            n.sticky = true;
        }
    }
    n
}

/// Whether the control `oid` cannot be carried across partitions (the
/// DSA's state is the partition's alone: a sort order, a list view, a
/// change stream, a transaction).
pub fn one_partition_only(oid: &str) -> bool {
    [OID_SORT, OID_VLV, OID_PSEARCH, OID_SYNC, OID_TXN_SPEC].contains(&oid)
}

/// A readable name for a control the router knows, for messages.
pub fn control_name(oid: &str) -> &str {
    match oid {
        OID_SORT => "server-side sort",
        OID_VLV => "virtual list view",
        OID_PSEARCH => "persistent search",
        OID_SYNC => "sync (syncrepl)",
        OID_TXN_SPEC => "transaction specification",
        OID_PAGED_RESULTS => "paged results",
        OID_PROXIED_AUTHZ => "proxied authorization",
        other => other,
    }
}

/// The cancelID of a Cancel request value (`SEQUENCE { cancelID }`).
pub fn cancel_id(v: &[u8]) -> Option<i32> {
    let seq = ber::tagged(v, 0x30)?;
    let id = ber::tagged(seq.body, 0x02)?;
    i32::try_from(ber::int(id.body)?).ok()
}

/// A Cancel request value naming `id`.
pub fn cancel_value(id: i32) -> Vec<u8> {
    let be = id.to_be_bytes();
    // Minimal two's complement: drop leading zero octets while the next
    // octet's high bit is clear.
    let mut s = 0;
    while s < 3 && be[s] == 0 && be[s + 1] & 0x80 == 0 {
        s += 1;
    }
    let n = 4 - s;
    let mut v = vec![0x30, (n + 2) as u8, 0x02, n as u8];
    v.extend_from_slice(&be[s..]);
    v
}

/// Sync request mode refreshAndPersist (RFC 4533 2.2).
const SYNC_PERSIST: i64 = 3;

/// The mode of a sync request control value
/// (`SEQUENCE { mode ENUMERATED, cookie, reloadHint }`).
fn sync_mode(v: &[u8]) -> Option<i64> {
    let seq = ber::tagged(v, 0x30)?;
    let mode = ber::tagged(seq.body, 0x0a)?;
    ber::int(mode.body)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::proto::wire::request::Control;

    type Ctrls = Vec<(&'static str, Option<Vec<u8>>)>;

    fn search(ctrls: &[(&str, Option<Vec<u8>>)]) -> Request {
        Request {
            msgid: 1,
            op: Op::Search {
                base: "o=A".into(),
                scope: 2,
                attrs: vec![],
                filter_is_present_oc: true,
            },
            controls: ctrls
                .iter()
                .map(|(oid, value)| Control {
                    oid: oid.to_string(),
                    critical: true,
                    value: value.clone(),
                })
                .collect(),
        }
    }

    fn sync(mode: u8) -> Option<Vec<u8>> {
        Some(vec![0x30, 0x03, 0x0a, 0x01, mode])
    }

    const NONE: Needs = Needs {
        own_conn: false,
        sticky: false,
        persistent: false,
        one_partition: None,
    };

    #[test]
    fn each_stateful_request_gets_what_it_needs() {
        let own = Needs {
            own_conn: true,
            ..NONE
        };
        let cases: Vec<(&str, Ctrls, Needs)> = vec![
            ("plain", vec![], NONE),
            ("manageDsaIT", vec![("2.16.840.1.113730.3.4.2", None)], NONE),
            (
                "paged",
                vec![(OID_PAGED_RESULTS, None)],
                Needs {
                    sticky: true,
                    ..own
                },
            ),
            ("proxied", vec![(OID_PROXIED_AUTHZ, None)], own),
            (
                "sort",
                vec![(OID_SORT, None)],
                Needs {
                    one_partition: Some(OID_SORT),
                    ..own
                },
            ),
            (
                "sort+vlv",
                vec![(OID_SORT, None), (OID_VLV, None)],
                Needs {
                    sticky: true,
                    one_partition: Some(OID_VLV),
                    ..own
                },
            ),
            (
                "psearch",
                vec![(OID_PSEARCH, None)],
                Needs {
                    persistent: true,
                    one_partition: Some(OID_PSEARCH),
                    ..own
                },
            ),
            (
                "sync refreshOnly",
                vec![(OID_SYNC, sync(1))],
                Needs {
                    sticky: true,
                    one_partition: Some(OID_SYNC),
                    ..own
                },
            ),
            (
                "sync refreshAndPersist",
                vec![(OID_SYNC, sync(3))],
                Needs {
                    sticky: true,
                    persistent: true,
                    one_partition: Some(OID_SYNC),
                    ..own
                },
            ),
            (
                "sync, value unreadable",
                vec![(OID_SYNC, Some(vec![0x04, 0x00]))],
                Needs {
                    sticky: true,
                    one_partition: Some(OID_SYNC),
                    ..own
                },
            ),
            (
                "txn",
                vec![(OID_TXN_SPEC, None)],
                Needs {
                    sticky: true,
                    one_partition: Some(OID_TXN_SPEC),
                    ..own
                },
            ),
        ];
        for (name, ctrls, want) in cases {
            assert_eq!(needs(&search(&ctrls)), want, "{name}");
        }
    }

    #[test]
    fn cancel_values_round_trip() {
        for id in [0, 1, 127, 128, 255, 256, 65_535, i32::MAX] {
            assert_eq!(cancel_id(&cancel_value(id)), Some(id), "{id}");
        }
        assert_eq!(cancel_value(5), vec![0x30, 0x03, 0x02, 0x01, 0x05]);
        assert_eq!(cancel_value(128), vec![0x30, 0x04, 0x02, 0x02, 0x00, 0x80]);
        assert_eq!(cancel_id(&[0x30, 0x00]), None);
        assert_eq!(cancel_id(b"junk"), None);
    }

    #[test]
    fn extended_operations_pin_the_client() {
        let mut r = search(&[]);
        r.op = Op::Extended {
            oid: OID_START_TXN.into(),
            value: None,
        };
        assert_eq!(
            needs(&r),
            Needs {
                own_conn: true,
                sticky: true,
                ..NONE
            }
        );
        for known in [OID_PASSWD_MODIFY, OID_WHOAMI] {
            r.op = Op::Extended {
                oid: known.into(),
                value: None,
            };
            assert_eq!(needs(&r), NONE, "{known}");
        }
    }
}
