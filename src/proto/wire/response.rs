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

/// A message of the router's own: `op` under `msgid`, no controls.
fn encode_op(msgid: i32, op: LdapOp, out: &mut BytesMut) {
    encode(
        LdapMsg {
            msgid,
            op,
            ctrl: Vec::new(),
        },
        out,
    );
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
    encode_op(msgid, op, out);
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
    encode_op(msgid, op, out);
}

/// An ExtendedRequest the router sends itself (a cancel re-addressed to
/// the DSA's message ID).
pub fn extended_request(msgid: i32, oid: &str, value: Option<Vec<u8>>, out: &mut BytesMut) {
    let op = LdapOp::ExtendedRequest(ldap3_proto::proto::LdapExtendedRequest {
        name: oid.to_string(),
        value,
    });
    encode_op(msgid, op, out);
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
    encode_op(msgid, op, out);
}

/// A SearchResultReference (continuation reference) to `urls`.
pub fn search_reference(msgid: i32, urls: &[String], out: &mut BytesMut) {
    let op = LdapOp::SearchResultReference(ldap3_proto::proto::LdapSearchResultReference {
        uris: urls.to_vec(),
    });
    encode_op(msgid, op, out);
}

/// A successful SearchResultDone carrying the encoded `control`.
pub fn search_done_with_control(msgid: i32, message: &str, control: &[u8], out: &mut BytesMut) {
    let mut b = BytesMut::new();
    result(msgid, 0x65, Code::Success, "", message, &mut b);
    match super::frame::header(&b) {
        Ok(h) => out.extend_from_slice(&super::search::with_paged(&b, &h, msgid, Some(control))),
        Err(_) => out.extend_from_slice(&b),
    }
}

/// Decode a response PDU the router must look inside (rare: referrals and
/// diagnostics of spanning searches).
fn decode_msg(pdu: &[u8]) -> Option<LdapMsg> {
    let (_, tag) = lber::parse::Parser::new(32).parse(pdu).ok()?;
    LdapMsg::try_from(tag).ok()
}

fn ldap_result(op: &LdapOp) -> Option<&LdapResult> {
    match op {
        LdapOp::SearchResultDone(r)
        | LdapOp::ModifyResponse(r)
        | LdapOp::AddResponse(r)
        | LdapOp::DelResponse(r)
        | LdapOp::ModifyDNResponse(r)
        | LdapOp::CompareResult(r) => Some(r),
        LdapOp::BindResponse(b) => Some(&b.res),
        LdapOp::ExtendedResponse(e) => Some(&e.res),
        _ => None,
    }
}

/// The referral URLs of a result PDU (result code referral).
pub fn referral_urls(pdu: &[u8], _h: &super::frame::Header) -> Vec<String> {
    decode_msg(pdu)
        .and_then(|m| ldap_result(&m.op).map(|r| r.referral.clone()))
        .unwrap_or_default()
}

/// The attributes of a SearchResultEntry PDU (the router reads its DSAs'
/// root DSEs).
pub fn entry_attrs(pdu: &[u8]) -> Option<Vec<(String, Vec<Vec<u8>>)>> {
    match decode_msg(pdu)?.op {
        LdapOp::SearchResultEntry(e) => Some(
            e.attributes
                .into_iter()
                .map(|a| (a.atype, a.vals.into_iter().map(|v| v.to_vec()).collect()))
                .collect(),
        ),
        _ => None,
    }
}

/// The responseValue of an ExtendedResponse PDU (WhoAmI's authzId).
pub fn extended_value(pdu: &[u8]) -> Option<Vec<u8>> {
    match decode_msg(pdu)?.op {
        LdapOp::ExtendedResponse(e) => e.value.map(|v| v.to_vec()),
        _ => None,
    }
}

/// The DN of a SearchResultEntry PDU.
pub fn entry_dn(pdu: &[u8]) -> Option<String> {
    match decode_msg(pdu)?.op {
        LdapOp::SearchResultEntry(e) => Some(e.dn),
        _ => None,
    }
}

/// The diagnosticMessage of a result PDU.
pub fn diagnostic(pdu: &[u8], _h: &super::frame::Header) -> Option<String> {
    decode_msg(pdu).and_then(|m| ldap_result(&m.op).map(|r| r.message.clone()))
}

/// Result codes as the numbers a response PDU carries, named by [`Code`]
/// (for `match` patterns on what [`result_code`] reads).
pub mod rc {
    use super::Code;
    pub const SUCCESS: u8 = Code::Success as u8;
    pub const TIME_LIMIT: u8 = Code::TimeLimitExceeded as u8;
    pub const SIZE_LIMIT: u8 = Code::SizeLimitExceeded as u8;
    pub const REFERRAL: u8 = Code::Referral as u8;
    pub const SASL_IN_PROGRESS: u8 = Code::SaslBindInProgress as u8;
    pub const NO_SUCH_OBJECT: u8 = Code::NoSuchObject as u8;
    pub const INVALID_CREDENTIALS: u8 = Code::InvalidCredentials as u8;
    pub const BUSY: u8 = Code::Busy as u8;
    pub const UNAVAILABLE: u8 = Code::Unavailable as u8;
    pub const OTHER: u8 = Code::Other as u8;
}

/// The resultCode of a response PDU (LDAPResult's first element).
pub fn result_code(pdu: &[u8], h: &super::frame::Header) -> Option<u8> {
    let op = pdu.get(h.op_start..h.op_end)?;
    match super::ber::tlv(op).ok()?.body {
        [0x0a, 0x01, code, ..] => Some(*code),
        _ => None,
    }
}
