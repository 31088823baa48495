//! A cap on the answers to a server's requests that wait to be sent over streamable HTTP.
//!
//! rmcp's client answers every request a server sends (a ping, a roots or sampling request)
//! with a send task of its own, and its streamable HTTP worker posts them while it goes on
//! reading the server's streams. A server that floods requests faster than their answers are
//! posted piles the answers up without bound. The reader cannot simply stop: the worker waits
//! for the reader before it posts anything, so holding the reader back would stall the posts
//! it waits for. So [`Backlogged`] counts the messages given to the transport and not yet sent,
//! and past [`MAX_QUEUED_ANSWERS`] an answer to the server is dropped (the server asked faster
//! than it could be answered; its request goes unanswered). The client's own requests and
//! notifications always go out: their number is the agent's own.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rmcp::model::JsonRpcMessage;
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;

use crate::hooks::ServerName;

/// Messages given to the transport and not yet sent, past which answers to the server's
/// requests are dropped.
pub(crate) const MAX_QUEUED_ANSWERS: usize = 64;

/// A transport whose answers to the server wait in a bounded number.
pub(crate) struct Backlogged<T> {
    inner: T,
    server: ServerName,
    queued: Arc<AtomicUsize>,
}

impl<T> Backlogged<T> {
    /// `inner`, the transport of server `server`.
    pub(crate) fn new(inner: T, server: &ServerName) -> Self {
        Self {
            inner,
            server: server.clone(),
            queued: Arc::default(),
        }
    }
}

/// One message waiting to be sent; counted until its send ends or is dropped.
struct Queued(Arc<AtomicUsize>);

impl Drop for Queued {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Backlogged<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        let is_answer = matches!(item, JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_));
        let full = self.queued.load(Ordering::Acquire) >= MAX_QUEUED_ANSWERS;
        let send = if is_answer && full {
            tracing::debug!(server = %self.server, "dropping an answer to the server: too many wait to be sent");
            None
        } else {
            self.queued.fetch_add(1, Ordering::AcqRel);
            Some((Queued(Arc::clone(&self.queued)), self.inner.send(item)))
        };
        async move {
            match send {
                Some((_queued, send)) => send.await,
                None => Ok(()),
            }
        }
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}
