//! What the router answers itself (architecture.md, "What the router answers itself"): the root DSE, WhoAmI,
//! StartTLS (RFC 4511 4.14, RFC 4513 3), and the routing of Password
//! Modify.

use super::operation::Operation;
use super::phases::Answered;
use super::writer::{self, Link};
use super::{Flow, Identity, Session};
use crate::directory::knowledge::DsaId;
use crate::proto::tls::ClientRead;
use crate::proto::wire::request::{
    self, Op, Request, OID_PAGED_RESULTS, OID_PASSWD_MODIFY, OID_PROXIED_AUTHZ, OID_START_TLS,
    OID_WHOAMI,
};
use crate::proto::wire::response::{self, Code};
use crate::proto::wire::sasl;
use crate::proto::wire::state::OID_CANCEL;
use bytes::BytesMut;
use std::ops::ControlFlow;
use tokio_util::sync::CancellationToken;

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
        let dsa = advertised_by_dsas(&routing, self.router.tls.is_some());
        let mut all: Vec<(&str, Vec<Vec<u8>>)> = vec![
            (
                "objectClass",
                vec![b"top".to_vec(), b"extensibleObject".to_vec()],
            ),
            ("namingContexts", contexts),
            ("supportedLDAPVersion", vec![b"3".to_vec()]),
            ("supportedControl", bytes(dsa.controls)),
            ("supportedExtension", bytes(dsa.extensions)),
            ("subschemaSubentry", vec![dsa.subschema.into_bytes()]),
            ("vendorName", vec![b"dsa-router".to_vec()]),
            (
                "vendorVersion",
                vec![format!("dsa-router {}", env!("CARGO_PKG_VERSION")).into_bytes()],
            ),
        ];
        // Only mechanisms the router can carry (no security layer through
        // it: crate::proto::wire::sasl).
        let mechs: Vec<String> = dsa
            .sasl_mechanisms
            .into_iter()
            .filter(|m| sasl::classify(m) != sasl::Mech::Refused)
            .collect();
        if !mechs.is_empty() {
            all.push(("supportedSASLMechanisms", bytes(mechs)));
        }
        let want_all = attrs.is_empty() || attrs.iter().any(|a| a == "*" || a == "+");
        let mut chosen: Vec<(String, Vec<Vec<u8>>)> = all
            .into_iter()
            .filter(|(name, _)| want_all || attrs.iter().any(|a| a.eq_ignore_ascii_case(name)))
            .map(|(n, v)| (n.to_string(), v))
            .collect();
        // This process's marker, for those who ask for it by name: a probe
        // of a knowledge block that reaches this router knows it.
        use crate::base::instance;
        if attrs
            .iter()
            .any(|a| a.eq_ignore_ascii_case(instance::ATTRIBUTE))
        {
            chosen.push((
                instance::ATTRIBUTE.to_string(),
                vec![instance::marker().as_bytes().to_vec()],
            ));
        }
        let mut b = BytesMut::new();
        response::entry(req.msgid, "", chosen, &mut b);
        response::result(req.msgid, 0x65, Code::Success, "", "", &mut b);
        // Counted and logged like any search (answered by the router).
        self.router
            .backend
            .metrics
            .op(crate::observe::metrics::op_index("search"), 0, 0);
        crate::observe::access::line(|f| {
            f.head(&self.client.log_client)
                .quoted("op", "search")
                .plain("dn", "")
                .num("result", 0)
                .plain("dsa", "-")
                .quoted("note", "answered by the router: root DSE");
        });
        self.trace_answer(req, 0, "", None);
        self.client.out.send(b.freeze()).await;
    }

    /// The answer phase of an extended operation: WhoAmI, StartTLS and
    /// Cancel are the router's to answer; Password Modify, WhoAmI under
    /// proxied authorization (or for a client its DSA may restrict) and
    /// the operations the router does not know go on, aimed at the entry
    /// whose DSA must carry them out.
    pub(super) async fn extended(&mut self, op: Operation) -> Answered {
        let Op::Extended { oid, value } = &op.req.op else {
            return ControlFlow::Break(Flow::Continue);
        };
        let req = &op.req;
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
                    Some(dn) if !dn.is_empty() => {
                        let dn = dn.to_string();
                        return ControlFlow::Continue(op.aimed_at(dn, false));
                    }
                    _ => {
                        self.reply(req, Code::Other, "", "dsa-router: WhoAmI with proxied authorization needs a dn: authorization identity")
                            .await
                    }
                }
            }
            OID_WHOAMI => {
                if let Identity::Bound(b) = &self.who.identity {
                    if b.policy {
                        // The DSA answers on the client's own connection
                        // (it may restrict it: password policy).
                        let dn = b.dn.clone();
                        return ControlFlow::Continue(op.aimed_at(dn, false));
                    }
                }
                self.answer_who_am_i(req).await;
            }
            OID_START_TLS => {
                if let Some(flow) = self.start_tls_asked(req).await {
                    return ControlFlow::Break(flow);
                }
            }
            OID_PASSWD_MODIFY => {
                // Routed as a write by its user identity, else the bound DN.
                let user = value.as_deref().and_then(request::passwd_modify_user);
                let target = match (user, &self.who.identity) {
                    (Some(u), _) => Some(u.strip_prefix("dn:").unwrap_or(&u).to_string()),
                    (None, Identity::Bound(b)) if !b.dn.is_empty() => Some(b.dn.clone()),
                    (None, _) => None,
                };
                let then = self.watch_own_password_change(target.as_deref(), value.as_deref());
                match target {
                    Some(t) => {
                        let mut op = op.aimed_at(t, true);
                        op.then = then;
                        return ControlFlow::Continue(op);
                    }
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
            OID_CANCEL => self.cancel(req, value.as_deref()).await,
            _ => return self.forward_extended(op).await,
        }
        ControlFlow::Break(Flow::Continue)
    }

    /// WhoAmI answered by the router: the client's authorization identity.
    async fn answer_who_am_i(&self, req: &Request) {
        let authz = match &self.who.identity {
            Identity::Anonymous => String::new(),
            Identity::Bound(b) => b.authz.clone(),
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
        self.trace_answer(req, 0, "", None);
        self.client.out.send(b.freeze()).await;
    }

    /// StartTLS asked: refused (answered here), or accepted so far (the
    /// upgrade follows).
    async fn start_tls_asked(&self, req: &Request) -> Option<Flow> {
        let refusal = if self.router.tls.is_none() {
            Some((
                Code::Unavailable,
                "dsa-router: StartTLS is not configured on this router",
            ))
        } else if self.client.tls {
            Some((
                Code::OperationsError,
                "dsa-router: TLS is already established on this connection",
            ))
        } else if self.client.out.outstanding() > 0 {
            Some((
                Code::OperationsError,
                "dsa-router: StartTLS refused: operations are outstanding on this connection",
            ))
        } else {
            None
        };
        match refusal {
            Some((code, msg)) => {
                tracing::info!(client = %self.client.peer, "StartTLS refused: {msg}");
                self.trace_answer(req, code.clone() as u8, msg, None);
                self.start_tls_answer(req.msgid, code, msg).await;
                None
            }
            None => {
                self.trace_answer(req, 0, "", None);
                Some(Flow::StartTls(req.msgid))
            }
        }
    }
}

/// What the router's root DSE shows of what its DSAs advertise.
pub(super) struct Shown {
    /// The router's own controls and the DSAs' (which pass through).
    pub controls: Vec<String>,
    /// The router's own extended operations and the DSAs' (forwarded);
    /// StartTLS only when the router offers it.
    pub extensions: Vec<String>,
    /// The home partition's: SASL binds go there.
    pub sasl_mechanisms: Vec<String>,
    /// The home partition's schema entry (`cn=Subschema` until known).
    pub subschema: String,
}

/// Merge what the DSAs advertised (read by the health task) with what the
/// router itself does.
pub(super) fn advertised_by_dsas(routing: &crate::service::context::Routing, tls: bool) -> Shown {
    let mut controls: Vec<String> = [OID_PROXIED_AUTHZ, OID_PAGED_RESULTS]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let mut extensions: Vec<String> = [OID_WHOAMI, OID_PASSWD_MODIFY, OID_CANCEL]
        .into_iter()
        .chain(tls.then_some(OID_START_TLS))
        .map(str::to_string)
        .collect();
    let add = |v: &mut Vec<String>, items: &[String]| {
        for i in items {
            if i != OID_START_TLS && !v.contains(i) {
                v.push(i.clone());
            }
        }
    };
    for i in DsaId::all(routing.snap.dsas.len()) {
        if Some(i) == routing.table.router {
            continue;
        }
        if let Some(a) = routing.states.0[i].advertised() {
            add(&mut controls, &a.controls);
            add(&mut extensions, &a.extensions);
        }
    }
    // SASL binds and schema reads go to the home partition: its DSAs'
    // mechanisms (those all of them offer) and schema entry.
    let mut sasl_mechanisms: Option<Vec<String>> = None;
    if let Some(home) = routing.table.home() {
        for &i in &home.order {
            let Some(a) = routing.states.0[i].advertised() else {
                continue;
            };
            sasl_mechanisms = Some(match sasl_mechanisms {
                None => a.sasl_mechanisms.clone(),
                Some(m) => m
                    .into_iter()
                    .filter(|x| a.sasl_mechanisms.contains(x))
                    .collect(),
            });
        }
    }
    Shown {
        controls,
        extensions,
        sasl_mechanisms: sasl_mechanisms.unwrap_or_default(),
        subschema: subschema(routing),
    }
}

/// The schema entry the router's root DSE names: the home partition's
/// (`cn=Subschema` until one of its DSAs was read).
pub(super) fn subschema(routing: &crate::service::context::Routing) -> String {
    routing
        .table
        .home()
        .and_then(|home| {
            home.order
                .iter()
                .filter_map(|&i| routing.states.0[i].advertised())
                .find_map(|a| a.subschema.clone())
        })
        .unwrap_or_else(|| "cn=Subschema".to_string())
}

fn bytes(v: Vec<String>) -> Vec<Vec<u8>> {
    v.into_iter().map(String::into_bytes).collect()
}

impl Session {
    /// A bound client changing its own password: once the DSA accepts the
    /// change, binds replayed on other DSAs carry the new password (a
    /// client pinned to its own connections would otherwise fail there).
    fn watch_own_password_change(
        &mut self,
        target: Option<&str>,
        value: Option<&[u8]>,
    ) -> Option<super::out::Rebind> {
        let Identity::Bound(b) = &self.who.identity else {
            return None;
        };
        let (Some(old), Some(target)) = (&b.bind, target) else {
            return None;
        };
        let same = |a: &str, b: &str| match (
            crate::proto::dn::Dn::parse_ldap(a),
            crate::proto::dn::Dn::parse_ldap(b),
        ) {
            (Ok(x), Ok(y)) => x == y,
            _ => false,
        };
        if !same(&old.dn, target) {
            return None;
        }
        let slot = self
            .who
            .rebind
            .get_or_insert_with(|| std::sync::Arc::new(std::sync::Mutex::new(None)))
            .clone();
        Some(super::out::Rebind {
            slot,
            dn: old.dn.clone(),
            new_password: value.and_then(request::passwd_modify_new),
        })
    }

    /// Answer a StartTLS request (the response carries the StartTLS OID,
    /// RFC 4511 4.14.2).
    async fn start_tls_answer(&self, msgid: i32, code: Code, msg: &str) {
        self.router.backend.metrics.op(
            crate::observe::metrics::op_index("extended"),
            code.clone() as u8,
            0,
        );
        crate::observe::access::line(|f| {
            f.head(&self.client.log_client)
                .quoted("op", "extended")
                .num("result", code.clone() as u64)
                .plain("dsa", "-")
                .quoted("note", &format!("answered by the router: StartTLS {msg}"));
        });
        let mut b = BytesMut::new();
        response::extended(msgid, code, msg, Some(OID_START_TLS), None, &mut b);
        self.client.out.send(b.freeze()).await;
    }

    /// Finish StartTLS: answer, flush, and run the TLS handshake on the
    /// connection. `idle` says no request follows the StartTLS request in
    /// the read buffer (one would be outstanding: refused). `Err` means the
    /// connection is lost (the handshake failed; it is logged).
    pub(super) async fn start_tls(
        &mut self,
        msgid: i32,
        idle: bool,
        link: Link,
        done: &CancellationToken,
    ) -> Result<Link, Link> {
        let Some(tls) = self.router.tls.as_ref() else {
            return Ok(link);
        };
        if !idle {
            let msg = "dsa-router: StartTLS refused: requests follow it on this connection";
            tracing::info!(client = %self.client.peer, "{msg}");
            self.start_tls_answer(msgid, Code::OperationsError, msg)
                .await;
            return Ok(link);
        }
        self.start_tls_answer(msgid, Code::Success, "").await;
        let (rd, writer, pause) = link;
        let lost = || -> Link {
            (
                ClientRead::Closed,
                tokio::spawn(async { None }),
                CancellationToken::new(),
            )
        };
        pause.cancel();
        let Ok(Some(wr)) = writer.await else {
            return Err(lost());
        };
        let Some(crate::proto::tls::ClientStream::Plain(tcp)) = crate::proto::tls::reunite(rd, wr)
        else {
            return Err(lost());
        };
        match tls.accept(tcp, self.router.cfg.pdu_timeout).await {
            Ok(stream) => {
                tracing::info!(client = %self.client.peer, "StartTLS: TLS established");
                self.client.tls = true;
                self.client.listed.tls();
                let (rd, wr) = crate::proto::tls::ClientStream::Tls(Box::new(stream)).split();
                let pause = CancellationToken::new();
                let writer = tokio::spawn(writer::writer(
                    wr,
                    self.client.out.clone(),
                    done.clone(),
                    pause.clone(),
                ));
                Ok((rd, writer, pause))
            }
            Err(e) => {
                tracing::warn!(client = %self.client.peer, error = %crate::base::logsafe::esc(&e), "StartTLS: TLS handshake failed; closing the connection");
                Err(lost())
            }
        }
    }
}
