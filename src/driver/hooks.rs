//! Hook rounds in the driver: the calls one `Effect::CallHooks` orders, all sent at once and
//! bounded by the one deadline the order carries. The driver owns that deadline, so a host need
//! not enforce it: a call still out when it passes is dropped, which cancels it on its server,
//! and answered [`HookReply::TimedOut`], the timeout as a fact like any answer. Each lane keeps
//! one timer for its rounds, re-armed at each round's deadline.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures_util::stream::{FuturesUnordered, StreamExt};
use serde_json::Value;
use tokio::time::{Instant, Sleep};
use tracing::{Instrument, Span};

use crate::hooks::{Hook, ServerName};
use crate::machine::{HookContext, HookReply, Input};
use crate::ports::{HookCall, ToolHost};
use crate::telemetry;

/// A hook round to perform: what an [`Effect::CallHooks`](crate::machine::Effect::CallHooks)
/// orders.
#[derive(Debug)]
pub(crate) struct HookOrder {
    pub(crate) hook: Hook,
    pub(crate) servers: Vec<ServerName>,
    pub(crate) timeout: Duration,
    pub(crate) context: HookContext,
    pub(crate) subjects: Vec<Value>,
}

impl HookOrder {
    /// The round's telemetry span, the parent of each call's answer span.
    pub(crate) fn span(&self) -> Span {
        telemetry::hook_round(self.hook, self.servers.len(), &self.context)
    }

    /// The calls, each with the subject it answers: every server once per subject, whose
    /// arguments are that subject, or once with `{}` when there are none.
    pub(crate) fn calls(&self) -> Vec<(Option<u32>, HookCall)> {
        let per_subject: Vec<(Option<u32>, serde_json::Map<String, Value>)> =
            if self.subjects.is_empty() {
                vec![(None, serde_json::Map::new())]
            } else {
                self.subjects
                    .iter()
                    .enumerate()
                    .map(|(i, subject)| {
                        let arguments = subject.as_object().cloned().unwrap_or_default();
                        (Some(u32::try_from(i).unwrap_or(u32::MAX)), arguments)
                    })
                    .collect()
            };
        let last = self.servers.len().saturating_sub(1);
        per_subject
            .into_iter()
            .flat_map(|(subject, arguments)| {
                // The last server's call takes the subject's arguments; the others get copies.
                let mut arguments = Some(arguments);
                self.servers.iter().enumerate().map(move |(i, server)| {
                    let arguments = if i == last {
                        arguments.take()
                    } else {
                        arguments.clone()
                    };
                    (
                        subject,
                        HookCall {
                            server: server.clone(),
                            hook: self.hook,
                            timeout: self.timeout,
                            context: self.context.clone(),
                            arguments: arguments.unwrap_or_default(),
                        },
                    )
                })
            })
            .collect()
    }
}

/// The one timer of a lane's hook rounds. Made at the first round (a tokio timer needs the
/// runtime, which a session made outside one may not have yet), then re-armed.
#[derive(Default)]
pub(crate) struct HookTimer(Option<Pin<Box<Sleep>>>);

impl HookTimer {
    fn arm(&mut self, deadline: Instant) -> Pin<&mut Sleep> {
        let sleep = self
            .0
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        sleep.as_mut().reset(deadline);
        sleep.as_mut()
    }
}

/// One call's answer, with its index in the round. Boxed: a host's call is a large future (an
/// MCP round trip), and unboxed it would be copied whole at each move into the round.
type Answer<'h> = Pin<Box<dyn Future<Output = (usize, HookReply)> + Send + 'h>>;

/// A call of the round not answered yet.
struct Out {
    server: ServerName,
    subject: Option<u32>,
    /// The call's answer span, under the round's.
    span: Span,
}

/// One hook round in flight: its calls, the deadline they share, and who has not answered.
pub(crate) struct Round<'h, 't> {
    hook: Hook,
    running: FuturesUnordered<Answer<'h>>,
    /// The calls not answered yet, by index.
    out: Vec<Option<Out>>,
    left: usize,
    timer: Pin<&'t mut Sleep>,
    /// The deadline passed: the calls still out are answered `TimedOut`, in call order.
    expired: bool,
}

impl<'h, 't> Round<'h, 't> {
    /// Sends every call of `order`, each in its answer span under `round` (made here, not when
    /// the future is first polled, so that its parent is the round whichever span polls it),
    /// and arms `timer` at the round's deadline: `order.timeout` from now.
    pub(crate) fn start(
        host: &'h impl ToolHost,
        order: &HookOrder,
        round: &Span,
        timer: &'t mut HookTimer,
    ) -> Self {
        let now = Instant::now();
        // A timeout too long to add is a deadline that never comes (thirty years, as tokio's
        // own far future).
        let deadline = now
            .checked_add(order.timeout)
            .unwrap_or_else(|| now + Duration::from_secs(86_400 * 365 * 30));
        let mut out = Vec::new();
        let running = FuturesUnordered::new();
        for (index, (subject, call)) in order.calls().into_iter().enumerate() {
            let span = round.in_scope(|| telemetry::hook_answer(call.hook, &call.server));
            out.push(Some(Out {
                server: call.server.clone(),
                subject,
                span: span.clone(),
            }));
            let answer: Answer<'h> = Box::pin(async move {
                let reply = host.call_hook(&call).instrument(span).await;
                (index, reply)
            });
            running.push(answer);
        }
        Self {
            hook: order.hook,
            running,
            left: out.len(),
            out,
            timer: timer.arm(deadline),
            expired: false,
        }
    }

    /// Whether every call is answered.
    pub(crate) fn is_done(&self) -> bool {
        self.left == 0
    }

    /// The next answer, as the fact that answers the machine; at the deadline, `TimedOut` for
    /// each call still out, one at a time. `None` once every call is answered. Cancel-safe.
    pub(crate) async fn next(&mut self) -> Option<Input> {
        if self.left == 0 {
            return None;
        }
        if !self.expired {
            // An answer that is ready at the deadline counts: the answers are polled first.
            tokio::select! {
                biased;
                Some((index, reply)) = self.running.next() => {
                    return self.answered(index, reply);
                }
                () = self.timer.as_mut() => {
                    self.expired = true;
                    // Dropped, each call is cancelled on its server.
                    self.running = FuturesUnordered::new();
                }
            }
        }
        let index = self.out.iter().position(Option::is_some)?;
        self.answered(index, HookReply::TimedOut)
    }

    fn answered(&mut self, index: usize, reply: HookReply) -> Option<Input> {
        let Out {
            server,
            subject,
            span,
        } = self.out.get_mut(index)?.take()?;
        self.left -= 1;
        telemetry::hook_answered(&span, &reply);
        Some(Input::HookAnswered {
            server,
            hook: self.hook,
            reply,
            subject,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::machine::{Catalog, ToolCall, ToolOutput};

    /// A host whose `_Stop` on `slow` never answers and on every other server answers at once;
    /// it counts the calls it dropped unanswered.
    #[derive(Default)]
    struct Slow {
        dropped: Mutex<u32>,
    }

    struct Dropped<'a>(&'a Mutex<u32>);

    impl Drop for Dropped<'_> {
        fn drop(&mut self) {
            *crate::text::lock(self.0) += 1;
        }
    }

    impl ToolHost for Slow {
        fn catalog_generation(&self) -> u64 {
            0
        }

        fn catalog(&self) -> Catalog {
            Catalog::default()
        }

        async fn call_tool(&self, _call: &ToolCall) -> ToolOutput {
            ToolOutput::text("")
        }

        async fn call_hook(&self, call: &HookCall) -> HookReply {
            if call.server.as_str() == "slow" {
                let _dropped = Dropped(&self.dropped);
                std::future::pending::<()>().await;
            }
            HookReply::Text {
                text: call.server.to_string(),
            }
        }

        async fn kill_server(&self, _server: &ServerName) {}
    }

    fn order(servers: &[&str], timeout: Duration) -> HookOrder {
        HookOrder {
            hook: Hook::Stop,
            servers: servers
                .iter()
                .map(|name| ServerName::new(*name).unwrap())
                .collect(),
            timeout,
            context: HookContext::default(),
            subjects: Vec::new(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_still_out_at_the_deadline_is_dropped_and_answered_timed_out() {
        let host = Slow::default();
        let mut timer = HookTimer::default();
        let order = order(&["slow", "fast"], Duration::from_millis(2_500));
        let start = Instant::now();
        let mut round = Round::start(&host, &order, &Span::none(), &mut timer);
        let mut facts = Vec::new();
        while let Some(Input::HookAnswered { server, reply, .. }) = round.next().await {
            facts.push((server.to_string(), reply, start.elapsed()));
        }
        assert!(round.is_done());
        let quiet = |text: &str| HookReply::Text { text: text.into() };
        assert_eq!(
            facts,
            [
                ("fast".to_owned(), quiet("fast"), Duration::ZERO),
                (
                    "slow".to_owned(),
                    HookReply::TimedOut,
                    Duration::from_millis(2_500)
                ),
            ]
        );
        assert_eq!(*crate::text::lock(&host.dropped), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_lane_timer_is_re_armed_for_each_round() {
        let host = Slow::default();
        let mut timer = HookTimer::default();
        let start = Instant::now();
        for (round, timeout) in [(1_u32, 100), (2, 40)] {
            let order = order(&["slow"], Duration::from_millis(timeout));
            let mut calls = Round::start(&host, &order, &Span::none(), &mut timer);
            let fact = calls.next().await;
            assert!(matches!(
                fact,
                Some(Input::HookAnswered {
                    reply: HookReply::TimedOut,
                    ..
                })
            ));
            assert_eq!(calls.next().await, None, "round {round}");
        }
        assert_eq!(start.elapsed(), Duration::from_millis(140));
    }

    #[test]
    fn each_server_is_asked_once_per_subject() {
        let mut order = order(&["a", "b"], Duration::from_millis(1));
        assert_eq!(order.calls().len(), 2);
        order.subjects = vec![serde_json::json!({"x": 1}), serde_json::json!({"x": 2})];
        let calls = order.calls();
        let asked: Vec<(Option<u32>, &str)> = calls
            .iter()
            .map(|(subject, call)| (*subject, call.server.as_str()))
            .collect();
        assert_eq!(
            asked,
            [
                (Some(0), "a"),
                (Some(0), "b"),
                (Some(1), "a"),
                (Some(1), "b")
            ]
        );
        assert_eq!(calls[3].1.arguments["x"], 2);
    }
}
