//! The OpenTelemetry side of a `tracing` span: its W3C trace context, for MCP requests, and
//! attributes `tracing` cannot record (string arrays).

use opentelemetry::propagation::{Injector, TextMapPropagator};
use opentelemetry::trace::TraceContextExt;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::names;

/// `traceparent` (and `tracestate` if any) of `span`; empty when no OpenTelemetry layer
/// records it.
pub(super) fn trace_context(span: &Span) -> Vec<(&'static str, String)> {
    let context = span.context();
    if !context.span().span_context().is_valid() {
        return Vec::new();
    }
    let mut carrier = Carrier(Vec::new());
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier.0
}

/// The OpenTelemetry context of `span`, to parent a later span on; `None` when no
/// OpenTelemetry layer records it.
pub(super) fn context_of(span: &Span) -> Option<opentelemetry::Context> {
    let context = span.context();
    context.span().span_context().is_valid().then_some(context)
}

/// Makes `parent` the parent of `span`, a span just made (not yet entered).
pub(super) fn set_parent(span: &Span, parent: &opentelemetry::Context) {
    // It fails only where no OpenTelemetry layer records the span: nothing to parent then.
    let _ = span.set_parent(parent.clone());
}

/// Sets `key` to an array of strings on `span`'s OpenTelemetry span; `false` when no
/// OpenTelemetry layer records it.
pub(super) fn set_strings(span: &Span, key: &'static str, values: &[String]) -> bool {
    if !span.context().span().span_context().is_valid() {
        return false;
    }
    let values: Vec<opentelemetry::StringValue> = values.iter().map(|v| v.clone().into()).collect();
    span.set_attribute(
        key,
        opentelemetry::Value::Array(opentelemetry::Array::String(values)),
    );
    true
}

/// Keeps the two keys of the W3C trace context, under the names `params._meta` takes.
struct Carrier(Vec<(&'static str, String)>);

impl Injector for Carrier {
    fn set(&mut self, key: &str, value: String) {
        let key = match key {
            "traceparent" => names::META_TRACEPARENT,
            "tracestate" if !value.is_empty() => names::META_TRACESTATE,
            _ => return,
        };
        self.0.push((key, value));
    }
}
