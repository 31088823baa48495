//! The JSON-RPC id of each traced `tools/call`, for its span (`jsonrpc.request.id`).
//!
//! rmcp gives a request its id as the request is queued, inside `call_tool`, and does not say
//! which it gave: its `Peer::send_request_with_option` returns the id, but calling it instead of
//! `call_tool` would forgo the `input_required` rounds and the cancel-on-drop that `call_tool`
//! performs. The id is plain to see one layer down, on the message the transport sends. So a
//! traced call registers its span under the `traceparent` it put in `params._meta` (unique to
//! the span), and [`Traced`], around the life's transport, records the id of the request that
//! carries it on that span as it goes out. An untraced call (no OpenTelemetry layer records it)
//! carries no `traceparent`, registers nothing, and costs the transport one look at the
//! message.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use rmcp::model::{ClientRequest, JsonRpcMessage};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tracing::Span;

use crate::telemetry::names;
use crate::text::lock;

/// The spans of traced calls whose request has not gone out yet, by their `traceparent`.
#[derive(Clone, Debug, Default)]
pub(super) struct Pending(Arc<Mutex<HashMap<String, Span>>>);

impl Pending {
    /// Waits for the request that carries `traceparent`, to record its id on `span`; until the
    /// returned guard drops (the call ended, whether or not its request went out).
    pub(super) fn expect(&self, traceparent: &str, span: &Span) -> Expected {
        lock(&self.0).insert(traceparent.to_owned(), span.clone());
        Expected {
            pending: self.clone(),
            traceparent: traceparent.to_owned(),
        }
    }

    /// The span waiting for the request that carries `traceparent`, no longer waiting.
    fn take(&self, traceparent: &str) -> Option<Span> {
        lock(&self.0).remove(traceparent)
    }
}

/// A span waiting for its request's id; it stops waiting when dropped, so a call that ends
/// before its request is sent (the server died, the call was cancelled) leaves nothing behind.
#[derive(Debug)]
pub(super) struct Expected {
    pending: Pending,
    traceparent: String,
}

impl Drop for Expected {
    fn drop(&mut self) {
        self.pending.take(&self.traceparent);
    }
}

/// A life's transport that records the id of each traced `tools/call` on its span.
pub(super) struct Traced<T> {
    inner: T,
    pending: Pending,
}

impl<T> Traced<T> {
    /// `inner`, telling the spans in `pending` their requests' ids.
    pub(super) fn new(inner: T, pending: &Pending) -> Self {
        Self {
            inner,
            pending: pending.clone(),
        }
    }
}

impl<T: Transport<RoleClient>> Transport<RoleClient> for Traced<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let JsonRpcMessage::Request(request) = &item
            && let ClientRequest::CallToolRequest(call) = &request.request
            && let Some(traceparent) = call.params.meta.as_ref().and_then(|m| m.get_traceparent())
            && let Some(span) = self.pending.take(traceparent)
        {
            span.record(names::JSONRPC_REQUEST_ID, request.id.to_string().as_str());
        }
        self.inner.send(item)
    }

    fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
        self.inner.receive()
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use rmcp::model::{
        CallToolRequest, CallToolRequestParams, JsonRpcRequest, NumberOrString, RequestMetaObject,
    };

    use super::*;

    /// A transport that keeps what it is given.
    #[derive(Default)]
    struct Sink(Vec<TxJsonRpcMessage<RoleClient>>);

    impl Transport<RoleClient> for Sink {
        type Error = std::io::Error;

        fn send(
            &mut self,
            item: TxJsonRpcMessage<RoleClient>,
        ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
            self.0.push(item);
            std::future::ready(Ok(()))
        }

        fn receive(&mut self) -> impl Future<Output = Option<RxJsonRpcMessage<RoleClient>>> + Send {
            std::future::ready(None)
        }

        fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
            std::future::ready(Ok(()))
        }
    }

    fn call(id: i64, traceparent: Option<&str>) -> TxJsonRpcMessage<RoleClient> {
        let mut params = CallToolRequestParams::new("echo");
        if let Some(traceparent) = traceparent {
            let mut meta = RequestMetaObject::new();
            meta.set_traceparent(traceparent);
            params.meta = Some(meta);
        }
        JsonRpcMessage::Request(JsonRpcRequest::new(
            NumberOrString::Number(id),
            ClientRequest::CallToolRequest(CallToolRequest::new(params)),
        ))
    }

    /// The values given to one field of any span, as they are recorded.
    #[derive(Clone, Default)]
    struct Recorded(Arc<Mutex<Vec<String>>>);

    impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Recorded {
        fn on_record(
            &self,
            _span: &tracing::span::Id,
            values: &tracing::span::Record<'_>,
            _ctx: tracing_subscriber::layer::Context<'_, S>,
        ) {
            values.record(
                &mut |field: &tracing::field::Field, value: &dyn std::fmt::Debug| {
                    if field.name() == names::JSONRPC_REQUEST_ID {
                        lock(&self.0).push(format!("{value:?}"));
                    }
                },
            );
        }
    }

    #[tokio::test]
    async fn a_traced_request_leaves_its_id_on_its_span_and_nothing_pending() {
        use tracing_subscriber::layer::SubscriberExt;

        let recorded = Recorded::default();
        let subscriber = tracing_subscriber::registry().with(recorded.clone());
        let _default = tracing::subscriber::set_default(subscriber);
        let pending = Pending::default();
        let mut transport = Traced::new(Sink::default(), &pending);
        let span = crate::telemetry::mcp_call("mem", "echo", None, true);
        let traceparent = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";
        let expected = pending.expect(traceparent, &span);

        transport.send(call(7, None)).await.unwrap();
        transport.send(call(8, Some(traceparent))).await.unwrap();
        transport.send(call(9, Some(traceparent))).await.unwrap();
        assert_eq!(transport.inner.0.len(), 3, "every message goes out");
        assert!(lock(&pending.0).is_empty(), "the span stopped waiting");
        assert_eq!(
            *lock(&recorded.0),
            ["\"8\""],
            "the id of its own request, once"
        );
        drop(expected);

        // A call that ends before its request goes out leaves nothing behind.
        let expected = pending.expect("00-other", &span);
        assert_eq!(lock(&pending.0).len(), 1);
        drop(expected);
        assert!(lock(&pending.0).is_empty());
    }
}
