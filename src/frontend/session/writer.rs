//! The client connection's writer task: what the session could not write
//! to the client at once, drained in batches; paused (and its write half
//! handed back) for StartTLS.

use super::out::ClientOut;
use crate::proto::tls::{ClientRead, ClientWrite};
use bytes::BytesMut;
use std::sync::Arc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// What a paused writer hands back: the write half and the client's queue.
pub(super) type Paused = Option<ClientWrite>;

/// A client connection's I/O: the read half, the writer task, and the
/// token that pauses the writer (for StartTLS).
pub(super) type Link = (ClientRead, JoinHandle<Paused>, CancellationToken);

/// Drain what could not be written to the client at once, in batches.
/// On `pause` (StartTLS), flush and hand the write half back.
pub(super) async fn writer(
    wr: crate::proto::tls::ClientWrite,
    out: Arc<ClientOut>,
    done: CancellationToken,
    pause: CancellationToken,
) -> Paused {
    use crate::base::outbox::{Step, WriteEnd};
    let mut wire = match wr {
        ClientWrite::Plain(w) => WriteEnd::direct(w, &out.ob),
        tls => WriteEnd::Stream(tls),
    };
    let kill = out.kill.clone();
    let mut buf = BytesMut::new();
    loop {
        match wire.drain_step(&out.ob, &mut buf, &kill).await {
            Step::Wrote => continue,
            Step::Failed => {
                kill.cancel();
                break;
            }
            Step::Idle => {}
        }
        tokio::select! {
            biased;
            _ = out.ob.notified() => {}
            _ = kill.cancelled() => break,
            _ = done.cancelled() => {
                // Flush what is queued (a final notice), then close.
                while out.ob.take(&mut buf) {
                    if wire.write_all(&buf).await.is_err() {
                        break;
                    }
                    buf.clear();
                }
                break;
            }
            _ = pause.cancelled() => {
                out.ob.detach();
                while out.ob.take(&mut buf) {
                    if wire.write_all(&buf).await.is_err() {
                        out.ob.close();
                        return None;
                    }
                    buf.clear();
                }
                return match wire.into_inner() {
                    Some(Ok(w)) => Some(ClientWrite::Plain(w)),
                    Some(Err(w)) => Some(w),
                    None => None,
                };
            }
        }
    }
    out.ob.close();
    wire.shutdown().await;
    None
}
