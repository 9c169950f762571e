//! What the router answers itself (spec 3.6): the root DSE, WhoAmI,
//! StartTLS (not configured), and the routing of Password Modify.

use super::{Flow, Identity, Session};
use crate::wire::frame::Header;
use crate::wire::request::{
    self, Op, Request, OID_PAGED_RESULTS, OID_PASSWD_MODIFY, OID_PROXIED_AUTHZ, OID_START_TLS,
    OID_WHOAMI,
};
use crate::wire::response::{self, Code};
use bytes::{Bytes, BytesMut};

impl Session {
    pub(super) async fn root_dse(&self, req: &Request) {
        let Op::Search { attrs, .. } = &req.op else {
            return;
        };
        let routing = self.router.routing();
        let mut contexts: Vec<Vec<u8>> = routing
            .table
            .partitions_sorted()
            .iter()
            .map(|p| p.prefix.to_string().into_bytes())
            .collect();
        contexts.dedup();
        let all: Vec<(&str, Vec<Vec<u8>>)> = vec![
            (
                "objectClass",
                vec![b"top".to_vec(), b"extensibleObject".to_vec()],
            ),
            ("namingContexts", contexts),
            ("supportedLDAPVersion", vec![b"3".to_vec()]),
            (
                "supportedControl",
                vec![
                    OID_PROXIED_AUTHZ.as_bytes().to_vec(),
                    OID_PAGED_RESULTS.as_bytes().to_vec(),
                ],
            ),
            (
                "supportedExtension",
                vec![
                    OID_WHOAMI.as_bytes().to_vec(),
                    OID_PASSWD_MODIFY.as_bytes().to_vec(),
                ],
            ),
            ("vendorName", vec![b"dsa-router".to_vec()]),
            (
                "vendorVersion",
                vec![format!("dsa-router {}", env!("CARGO_PKG_VERSION")).into_bytes()],
            ),
        ];
        let want_all = attrs.is_empty() || attrs.iter().any(|a| a == "*" || a == "+");
        let chosen = all
            .into_iter()
            .filter(|(name, _)| want_all || attrs.iter().any(|a| a.eq_ignore_ascii_case(name)))
            .map(|(n, v)| (n.to_string(), v))
            .collect();
        let mut b = BytesMut::new();
        response::entry(req.msgid, "", chosen, &mut b);
        response::result(req.msgid, 0x65, Code::Success, "", "", &mut b);
        self.out.send(b.freeze()).await;
    }

    pub(super) async fn extended(&mut self, pdu: &Bytes, h: &Header, req: &Request) -> Flow {
        let Op::Extended { oid, value } = &req.op else {
            return Flow::Continue;
        };
        match oid.as_str() {
            OID_WHOAMI if req.control(OID_PROXIED_AUTHZ).is_some() => {
                // The DSA holding the proxied identity judges the control
                // against the client's own identity.
                let authz = req
                    .control(OID_PROXIED_AUTHZ)
                    .and_then(|c| c.value.as_deref())
                    .map(|v| String::from_utf8_lossy(v).into_owned())
                    .unwrap_or_default();
                match authz.strip_prefix("dn:") {
                    Some(dn) if !dn.is_empty() => self.forward(pdu, h, req, Some(dn), false).await,
                    _ => {
                        self.reply(req, Code::Other, "", "dsa-router: WhoAmI with proxied authorization needs a dn: authorization identity")
                            .await
                    }
                }
            }
            OID_WHOAMI => {
                let authz = match &self.identity {
                    Identity::Anonymous => String::new(),
                    Identity::Bound(b) => format!("dn:{}", b.dn),
                };
                let mut b = BytesMut::new();
                response::extended(
                    req.msgid,
                    Code::Success,
                    "",
                    None,
                    Some(authz.into_bytes()),
                    &mut b,
                );
                self.out.send(b.freeze()).await;
            }
            OID_START_TLS => {
                self.reply(
                    req,
                    Code::Unavailable,
                    "",
                    "dsa-router: StartTLS is not configured on this router",
                )
                .await;
            }
            OID_PASSWD_MODIFY => {
                // Routed as a write by its user identity, else the bound DN.
                let user = value.as_deref().and_then(request::passwd_modify_user);
                let target = match (user, &self.identity) {
                    (Some(u), _) => Some(u.strip_prefix("dn:").unwrap_or(&u).to_string()),
                    (None, Identity::Bound(b)) => Some(b.dn.clone()),
                    (None, Identity::Anonymous) => None,
                };
                match target {
                    Some(t) => self.forward(pdu, h, req, Some(&t), true).await,
                    None => {
                        self.reply(
                            req,
                            Code::UnwillingToPerform,
                            "",
                            "dsa-router: password modify needs a user identity or a bound client",
                        )
                        .await
                    }
                }
            }
            other => {
                let msg = format!("dsa-router: extended operation {other} is not supported: it names no entry to route by");
                self.reply(req, Code::ProtocolError, "", &msg).await;
            }
        }
        Flow::Continue
    }
}
