//! The accept loop and per-connection I/O.
//!
//! Each connection runs a reader and a writer concurrently in one task. The
//! reader decodes requests with `LdapCodec`; bind is handled inline (a
//! client must not send other requests while a bind is in progress), abandon
//! sets the target's flag, unbind ends the connection, and every other
//! operation runs in its own task, held in a `JoinSet` so that it is aborted
//! when the connection ends. Operations send responses through a bounded
//! channel drained by the writer, which batches them before flushing. The
//! connections themselves live in a `JoinSet` of the accept loop, so
//! aborting the server task tears down all of them.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use ldap3_proto::proto::{LdapMsg, LdapOp};
use ldap3_proto::LdapCodec;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::codec::{FramedRead, FramedWrite};
use tracing::debug;

use super::ops::{self, lock, Conn, Ctx};

/// Largest request PDU accepted.
const MAX_REQUEST: usize = 4 << 20;
/// Depth of a connection's response queue.
const QUEUE: usize = 256;
/// Most responses written before a flush.
const BATCH: usize = 512;

/// Accepts connections until the task is aborted.
pub(crate) async fn accept_loop(listener: TcpListener, ctx: Arc<Ctx>) {
    let mut conns = JoinSet::new();
    debug!(name = %ctx.name, addr = ?listener.local_addr().ok(), "testdsa listening");
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    if ctx.faults.refuse() {
                        debug!(name = %ctx.name, %peer, "testdsa refusing connection");
                        ctx.stats.refused();
                        drop(stream);
                        continue;
                    }
                    ctx.stats.connected();
                    let _ = stream.set_nodelay(true);
                    conns.spawn(connection(Arc::clone(&ctx), stream, peer));
                }
                Err(e) => {
                    debug!(name = %ctx.name, error = %e, "testdsa accept failed");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn connection(ctx: Arc<Ctx>, stream: TcpStream, peer: SocketAddr) {
    debug!(name = %ctx.name, %peer, "testdsa connection opened");
    let _open = ctx.stats.open();
    let (rd, wr) = stream.into_split();
    let reader = FramedRead::new(rd, LdapCodec::new(Some(MAX_REQUEST), None));
    let writer = FramedWrite::new(wr, LdapCodec::default());
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::join!(read_loop(&ctx, reader, tx), write_loop(writer, rx));
    debug!(name = %ctx.name, %peer, "testdsa connection closed");
}

fn is_request(op: &LdapOp) -> bool {
    matches!(
        op,
        LdapOp::SearchRequest(_)
            | LdapOp::ModifyRequest(_)
            | LdapOp::AddRequest(_)
            | LdapOp::DelRequest(_)
            | LdapOp::ModifyDNRequest(_)
            | LdapOp::CompareRequest(_)
            | LdapOp::ExtendedRequest(_)
    )
}

async fn read_loop(
    ctx: &Arc<Ctx>,
    mut reader: FramedRead<OwnedReadHalf, LdapCodec>,
    tx: mpsc::Sender<LdapMsg>,
) {
    let conn = Arc::new(Conn::default());
    let mut ops = JoinSet::new();
    while let Some(next) = reader.next().await {
        while ops.try_join_next().is_some() {}
        let msg = match next {
            Ok(msg) => msg,
            Err(e) => {
                debug!(name = %ctx.name, error = %e, "testdsa undecodable request; closing");
                break;
            }
        };
        ctx.stats.operation();
        if matches!(msg.op, LdapOp::BindRequest(_)) {
            ctx.stats.bind();
        }
        if matches!(msg.op, LdapOp::UnbindRequest) {
            debug!(name = %ctx.name, "testdsa unbind");
            break;
        }
        if ctx.faults.blackhole() {
            debug!(name = %ctx.name, msgid = msg.msgid, "testdsa blackhole: dropping request");
            continue;
        }
        match msg.op {
            LdapOp::AbandonRequest(id) => {
                debug!(name = %ctx.name, id, "testdsa abandon");
                if let Some(flag) = lock(&conn.running).get(&id) {
                    flag.store(true, Ordering::Relaxed);
                }
            }
            LdapOp::BindRequest(_) if ctx.faults.hang_binds() => {
                debug!(name = %ctx.name, msgid = msg.msgid, "testdsa hanging a bind");
            }
            LdapOp::BindRequest(req) => {
                let delay = ctx.faults.delay();
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                let op = ops::bind(ctx, &conn, req);
                let resp = LdapMsg {
                    msgid: msg.msgid,
                    op,
                    ctrl: Vec::new(),
                };
                if tx.send(resp).await.is_err() {
                    break;
                }
            }
            ref op if is_request(op) => {
                let cancel = Arc::new(AtomicBool::new(false));
                lock(&conn.running).insert(msg.msgid, Arc::clone(&cancel));
                ops.spawn(ops::run(
                    Arc::clone(ctx),
                    Arc::clone(&conn),
                    msg,
                    tx.clone(),
                    cancel,
                ));
            }
            other => {
                debug!(name = %ctx.name, ?other, "testdsa unexpected PDU; closing");
                break;
            }
        }
    }
}

async fn write_loop(
    mut writer: FramedWrite<OwnedWriteHalf, LdapCodec>,
    mut rx: mpsc::Receiver<LdapMsg>,
) {
    'outer: while let Some(msg) = rx.recv().await {
        if writer.feed(msg).await.is_err() {
            break;
        }
        for _ in 0..BATCH {
            match rx.try_recv() {
                Ok(msg) => {
                    if writer.feed(msg).await.is_err() {
                        break 'outer;
                    }
                }
                Err(_) => break,
            }
        }
        if writer.flush().await.is_err() {
            break;
        }
    }
    let _ = writer.close().await;
}
