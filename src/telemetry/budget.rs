//! A bound on the captured content an exporter holds.
//!
//! With content captured, every `chat` span carries the whole history it sent. A batching
//! exporter keeps ended spans until its collector takes them (up to `OTEL_BSP_MAX_QUEUE_SIZE`,
//! 2048 by default), so with a collector that is slow or gone it would hold up to 2048 whole
//! histories: hundreds of megabytes with a long context window. [`ContentBudget`] stands in
//! front of the exporter's processor and keeps the content it holds under a byte budget: each
//! captured attribute of an ended span is moved into a shared string the budget counts until
//! the exporter lets go of it (sent, or dropped from its full queue); a span that would go over
//! the budget is passed on with its content replaced by [`OMITTED`], everything else intact.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::{StringValue, Value};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};

use super::names;

/// The captured bytes an exporter may hold by default: 16 MiB. A batch being sent is held
/// once more in its encoded form, so the content an exporter costs stays under twice this.
pub const DEFAULT_CONTENT_BUDGET: usize = 16 << 20;

/// What a captured attribute says when the budget had no room for it.
pub const OMITTED: &str = "[omitted: the exporter held its content budget of spans not yet sent]";

/// The attributes that hold captured content.
const CONTENT_KEYS: [&str; 3] = [
    names::INPUT_MESSAGES,
    names::OUTPUT_MESSAGES,
    names::SYSTEM_INSTRUCTIONS,
];

/// A span processor that holds the captured content of the spans it passes to `inner` under a
/// byte budget ([`DEFAULT_CONTENT_BUDGET`] by default): each captured attribute of an ended span
/// becomes a shared string it counts until `inner` lets go of it (sent, or dropped from a full
/// queue), and a span that would go over the budget is passed on with its content replaced by
/// [`OMITTED`]. Wrap the processor of an exporter whose spans may carry content:
///
/// ```ignore
/// let batch = BatchSpanProcessor::builder(exporter).build();
/// let provider = SdkTracerProvider::builder()
///     .with_span_processor(ContentBudget::new(batch, DEFAULT_CONTENT_BUDGET))
///     .build();
/// ```
#[derive(Debug)]
pub struct ContentBudget<P> {
    inner: P,
    budget: usize,
    held: Mutex<Held>,
    omitted: AtomicU64,
}

/// The content handed on and not yet let go of, and its size.
#[derive(Debug, Default)]
struct Held {
    strings: Vec<Arc<str>>,
    bytes: usize,
}

impl Held {
    /// Forgets the strings only this budget still holds: the exporter sent or dropped them.
    fn release(&mut self) {
        let mut freed = 0;
        self.strings.retain(|held| {
            let kept = Arc::strong_count(held) > 1;
            if !kept {
                freed += held.len();
            }
            kept
        });
        self.bytes -= freed;
    }
}

impl<P> ContentBudget<P> {
    /// `inner` holding at most `budget` bytes of captured content.
    pub fn new(inner: P, budget: usize) -> Self {
        Self {
            inner,
            budget,
            held: Mutex::new(Held::default()),
            omitted: AtomicU64::new(0),
        }
    }

    /// The captured bytes `inner` holds now.
    pub fn held_bytes(&self) -> usize {
        let mut held = crate::text::lock(&self.held);
        held.release();
        held.bytes
    }

    /// How many captured attributes were replaced by [`OMITTED`] so far.
    pub fn omitted(&self) -> u64 {
        self.omitted.load(Ordering::Relaxed)
    }

    /// Moves each captured attribute of `span` into a counted string, or replaces it when the
    /// budget has no room.
    fn account(&self, span: &mut SpanData) {
        let mut held = None;
        for attribute in &mut span.attributes {
            if !CONTENT_KEYS.contains(&attribute.key.as_str()) {
                continue;
            }
            let Value::String(text) = &attribute.value else {
                continue;
            };
            let held = held.get_or_insert_with(|| {
                let mut held = crate::text::lock(&self.held);
                held.release();
                held
            });
            let len = text.as_str().len();
            if held.bytes.saturating_add(len) > self.budget {
                attribute.value = Value::String(StringValue::from(OMITTED));
                if self.omitted.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(
                        budget = self.budget,
                        "the trace exporter holds its budget of captured content not yet sent; \
                         content of further spans is omitted until it sends"
                    );
                }
                continue;
            }
            let shared: Arc<str> = Arc::from(text.as_str());
            held.bytes += len;
            held.strings.push(Arc::clone(&shared));
            attribute.value = Value::String(StringValue::from(shared));
        }
    }
}

impl<P: SpanProcessor> SpanProcessor for ContentBudget<P> {
    fn on_start(&self, span: &mut Span, cx: &opentelemetry::Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, mut span: SpanData) {
        self.account(&mut span);
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests;
