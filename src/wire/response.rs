//! PDUs the router writes itself: results, the root DSE, WhoAmI, the
//! Notice of Disconnection. Encoded with `ldap3_proto`.

use super::request::OID_NOTICE_OF_DISCONNECTION;
use bytes::BytesMut;
pub use ldap3_proto::proto::LdapResultCode as Code;
use ldap3_proto::proto::{
    LdapBindResponse, LdapExtendedResponse, LdapMsg, LdapOp, LdapPartialAttribute, LdapResult,
    LdapSearchResultEntry,
};

fn encode(msg: LdapMsg, out: &mut BytesMut) {
    let tag: lber::structure::StructureTag = msg.into();
    // Encoding into memory cannot fail.
    let _ = lber::write::encode_into(out, tag);
}

fn res(code: Code, matched: &str, message: &str) -> LdapResult {
    LdapResult {
        code,
        matcheddn: matched.to_string(),
        message: message.to_string(),
        referral: Vec::new(),
    }
}

/// An LDAPResult of the response type `resp_tag` (e.g. 0x65 SearchResultDone).
pub fn result(
    msgid: i32,
    resp_tag: u8,
    code: Code,
    matched: &str,
    message: &str,
    out: &mut BytesMut,
) {
    let r = res(code, matched, message);
    let op = match resp_tag {
        0x61 => LdapOp::BindResponse(LdapBindResponse {
            res: r,
            saslcreds: None,
        }),
        0x65 => LdapOp::SearchResultDone(r),
        0x67 => LdapOp::ModifyResponse(r),
        0x69 => LdapOp::AddResponse(r),
        0x6b => LdapOp::DelResponse(r),
        0x6d => LdapOp::ModifyDNResponse(r),
        0x6f => LdapOp::CompareResult(r),
        _ => LdapOp::ExtendedResponse(LdapExtendedResponse {
            res: r,
            name: None,
            value: None,
        }),
    };
    encode(
        LdapMsg {
            msgid,
            op,
            ctrl: Vec::new(),
        },
        out,
    );
}

/// An ExtendedResponse with a value (WhoAmI).
pub fn extended(
    msgid: i32,
    code: Code,
    message: &str,
    name: Option<&str>,
    value: Option<Vec<u8>>,
    out: &mut BytesMut,
) {
    let op = LdapOp::ExtendedResponse(LdapExtendedResponse {
        res: res(code, "", message),
        name: name.map(str::to_string),
        value,
    });
    encode(
        LdapMsg {
            msgid,
            op,
            ctrl: Vec::new(),
        },
        out,
    );
}

/// The unsolicited Notice of Disconnection (RFC 4511 4.4.1).
pub fn notice_of_disconnection(code: Code, message: &str, out: &mut BytesMut) {
    extended(
        0,
        code,
        message,
        Some(OID_NOTICE_OF_DISCONNECTION),
        None,
        out,
    );
}

/// One SearchResultEntry.
pub fn entry(msgid: i32, dn: &str, attrs: Vec<(String, Vec<Vec<u8>>)>, out: &mut BytesMut) {
    let op = LdapOp::SearchResultEntry(LdapSearchResultEntry {
        dn: dn.to_string(),
        attributes: attrs
            .into_iter()
            .map(|(atype, vals)| LdapPartialAttribute { atype, vals })
            .collect(),
    });
    encode(
        LdapMsg {
            msgid,
            op,
            ctrl: Vec::new(),
        },
        out,
    );
}
