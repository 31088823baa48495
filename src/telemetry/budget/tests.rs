use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, Span, SpanData, SpanExporter,
    SpanProcessor,
};

use super::{ContentBudget, OMITTED};
use crate::telemetry::names;

const MIB: usize = 1 << 20;

/// The budget, shared with the test that reads it while the provider owns it.
#[derive(Debug)]
struct Shared<P>(Arc<ContentBudget<P>>);

impl<P: SpanProcessor> SpanProcessor for Shared<P> {
    fn on_start(&self, span: &mut Span, cx: &opentelemetry::Context) {
        self.0.on_start(span, cx);
    }
    fn on_end(&self, span: SpanData) {
        self.0.on_end(span);
    }
    fn force_flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
}

/// A processor that keeps every span it is given, as a queue whose collector never comes.
#[derive(Debug, Default)]
struct Keeping(Mutex<Vec<SpanData>>);

impl SpanProcessor for Keeping {
    fn on_start(&self, _: &mut Span, _: &opentelemetry::Context) {}
    fn on_end(&self, span: SpanData) {
        self.0.lock().unwrap().push(span);
    }
    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }
    fn shutdown_with_timeout(&self, _: Duration) -> OTelSdkResult {
        Ok(())
    }
}

fn input(span: &SpanData) -> &str {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == names::INPUT_MESSAGES)
        .map(|kv| kv.value.as_str())
        .map(|text| match text {
            std::borrow::Cow::Borrowed(text) => text,
            std::borrow::Cow::Owned(_) => unreachable!("a string value is borrowed"),
        })
        .expect("the span has its input attribute")
}

/// Ends a `chat` span carrying `bytes` of captured input and a small attribute beside it.
fn end_chat(provider: &SdkTracerProvider, bytes: usize) {
    let tracer = provider.tracer("test");
    let mut span = tracer.start("chat");
    span.set_attribute(KeyValue::new(names::INPUT_MESSAGES, "x".repeat(bytes)));
    span.set_attribute(KeyValue::new(names::REQUEST_MODEL, "m"));
    span.end();
}

#[test]
fn content_a_queue_keeps_stays_under_the_budget_and_comes_back_once_it_is_let_go() {
    let keeping = Arc::new(ContentBudget::new(Keeping::default(), 4 * MIB));
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Shared(Arc::clone(&keeping)))
        .build();
    for _ in 0..10 {
        end_chat(&provider, MIB);
    }
    assert_eq!(keeping.held_bytes(), 4 * MIB);
    assert_eq!(keeping.omitted(), 6);
    {
        let kept = keeping.inner.0.lock().unwrap();
        assert_eq!(kept.len(), 10, "every span is passed on");
        let (whole, omitted): (Vec<_>, Vec<_>) = kept.iter().partition(|s| input(s).len() == MIB);
        assert_eq!((whole.len(), omitted.len()), (4, 6));
        assert!(omitted.iter().all(|s| input(s) == OMITTED));
        // The rest of an omitted span is untouched.
        assert!(omitted.iter().all(|s| {
            s.attributes
                .iter()
                .any(|kv| kv.key.as_str() == names::REQUEST_MODEL && kv.value.as_str() == "m")
        }));
    }
    // The queue lets go of two spans (sent, or dropped from a full queue): their room is free.
    keeping.inner.0.lock().unwrap().drain(..2);
    assert_eq!(keeping.held_bytes(), 2 * MIB);
    end_chat(&provider, MIB);
    assert_eq!(keeping.held_bytes(), 3 * MIB);
    let kept = keeping.inner.0.lock().unwrap();
    assert_eq!(
        input(kept.last().unwrap()).len(),
        MIB,
        "content is captured again"
    );
}

/// An exporter that does not return until it is let go, and keeps only the size of each span's
/// input (keeping the span would hold its content).
#[derive(Debug, Clone, Default)]
struct Stalled {
    gate: Arc<(Mutex<bool>, Condvar)>,
    seen: Arc<Mutex<Vec<usize>>>,
}

impl Stalled {
    fn open(&self) {
        *self.gate.0.lock().unwrap() = true;
        self.gate.1.notify_all();
    }
}

impl SpanExporter for Stalled {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        let (lock, open) = &*self.gate;
        let mut gate = lock.lock().unwrap();
        while !*gate {
            gate = open.wait(gate).unwrap();
        }
        drop(gate);
        self.seen
            .lock()
            .unwrap()
            .extend(batch.iter().map(|span| input(span).len()));
        drop(batch);
        std::future::ready(Ok(()))
    }

    fn set_resource(&mut self, _: &Resource) {}
}

#[test]
fn a_batching_exporter_whose_collector_stalls_holds_at_most_the_budget_of_content() {
    let exporter = Stalled::default();
    let batch = BatchSpanProcessor::builder(exporter.clone())
        .with_batch_config(
            BatchConfigBuilder::default()
                .with_max_queue_size(64)
                .with_max_export_batch_size(8)
                .with_scheduled_delay(Duration::from_millis(5))
                .build(),
        )
        .build();
    let budget = Arc::new(ContentBudget::new(batch, 8 * MIB));
    let provider = SdkTracerProvider::builder()
        .with_span_processor(Shared(Arc::clone(&budget)))
        .build();
    // 40 MiB of histories while the exporter is stuck on its first batch: the old processor held
    // them all.
    for _ in 0..40 {
        end_chat(&provider, MIB);
    }
    assert!(budget.held_bytes() <= 8 * MIB, "{}", budget.held_bytes());
    assert_eq!(budget.omitted(), 32);
    exporter.open();
    budget.force_flush().unwrap();
    let seen = exporter.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 40, "every span reaches the collector");
    assert_eq!(seen.iter().filter(|&&len| len == MIB).count(), 8);
    assert_eq!(budget.held_bytes(), 0, "what was sent is let go of");
    end_chat(&provider, MIB);
    budget.force_flush().unwrap();
    assert_eq!(exporter.seen.lock().unwrap().last(), Some(&MIB));
    provider.shutdown().unwrap();
}

#[test]
fn the_binarys_exporter_holds_at_most_the_default_budget_of_content() {
    // The binary's own provider, its exporter stalled: of 40 spans of 1 MiB each, the first 16
    // keep their content (the old provider held all 40, and 2048 at most).
    let exporter = Stalled::default();
    let provider =
        crate::telemetry::export::provider(exporter.clone(), Resource::builder().build());
    for _ in 0..40 {
        end_chat(&provider, MIB);
    }
    exporter.open();
    provider.force_flush().unwrap();
    let seen = exporter.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 40, "every span reaches the collector");
    assert_eq!(
        seen.iter().filter(|&&len| len == MIB).count(),
        super::DEFAULT_CONTENT_BUDGET / MIB
    );
    assert!(seen.iter().all(|&len| len == MIB || len == OMITTED.len()));
    provider.shutdown().unwrap();
}
