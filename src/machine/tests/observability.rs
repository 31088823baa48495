//! What the machine shows of itself: its debug form and its transition traces.

use super::*;

#[test]
fn a_machine_debugs_as_its_phase_history_counters_and_pending_orders() {
    let mut m = machine();
    m.handle(Input::Prompted {
        text: "hello".into(),
    })
    .unwrap();
    let shown = format!("{m:?}");
    assert!(shown.starts_with("Machine {"), "{shown}");
    for field in [
        "phase: Prompting",
        "messages: 1",
        "counters: Counters {",
        "pending_effects: 1",
    ] {
        assert!(shown.contains(field), "{field} in {shown}");
    }
}

/// The events of the machine's own targets, each as its `field=value` pairs in order.
#[derive(Clone, Default)]
struct Transitions(std::sync::Arc<std::sync::Mutex<Vec<String>>>);

impl tracing::Subscriber for Transitions {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        struct Fields(Vec<String>);
        impl tracing::field::Visit for Fields {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
                self.0.push(format!("{}={value:?}", field.name()));
            }
        }
        if !event.metadata().target().starts_with("hookloop::machine") {
            return;
        }
        let mut fields = Fields(Vec::new());
        event.record(&mut fields);
        self.0.lock().unwrap().push(fields.0.join(" "));
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn each_transition_is_traced_with_the_phases_it_joins() {
    let session = || {
        let mut m = machine();
        prompt(&mut m, "hello");
        feed(&mut m, reply("hi", StopReason::EndTurn));
    };
    let seen = Transitions::default();
    tracing::subscriber::with_default(seen.clone(), || {
        // A callsite caches its interest when first hit, asking that thread's subscriber while
        // only one exists: another test thread may have cached "never" for the line under test.
        // The first session registers every line on its path; the cache is then recomputed
        // under this subscriber, and the second session is the one judged.
        session();
        tracing::callsite::rebuild_interest_cache();
        seen.0.lock().unwrap().clear();
        session();
    });
    let seen = seen.0.lock().unwrap();
    for transition in [
        "message=transition from=idle to=prompting",
        "message=transition from=prompting to=awaiting _Stop",
    ] {
        assert!(
            seen.iter().any(|line| line == transition),
            "{transition} in {seen:#?}"
        );
    }
}
