//! What a person watching a session wants to see, drawn from the machine's boundary.
//!
//! [`ProgressObserver`] is an [`Observer`] that turns the raw effects and facts of a
//! [`Session`](crate::Session) into [`Event`]s: the model is thinking, it said something, a tool
//! started or finished (with its duration), a hook objected, the budget is spent, the history
//! was compacted. Every front end renders the same events — the CLI as lines or JSON, the ACP
//! agent as session updates, the demo as a story — so they never disagree about what happened.
//!
//! A streamed reply's pieces are not events (they are not facts, and the whole text follows as
//! [`Event::ModelText`]); a front end that shows text as it arrives asks for them with
//! [`ProgressObserver::with_deltas`]. Pieces of a compaction summary are never handed on: a
//! summary is not something the model says to anyone.
//!
//! A subagent's progress is the same events, drawn from its own boundary: a front end that
//! shows children asks for them with [`ProgressObserver::with_agents`] (and their reply pieces
//! with [`ProgressObserver::with_agent_deltas`]), each with the subagent's id. Without them it
//! sees the `agent` call that started a child as one tool call, and nothing of the child.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use serde_json::Value;

use crate::hooks::{Hook, ServerName};
use crate::machine::{AgentId, CallId, Effect, FinishReason, Input, Notice, Purpose, SkipReason};
use crate::ports::{Delta, Observer};
use crate::text::one_line;

/// The output of the [`Event::ToolFinished`] reported for a call still running when its prompt
/// ended (it was cancelled, or dropped with the prompt).
pub const CANCELLED_OUTPUT: &str = "cancelled";

/// One thing worth showing, in the order it happened.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Event {
    /// A model request started: a turn of the loop, or a compaction summary.
    Thinking {
        /// The request is for a compaction summary.
        summary: bool,
    },
    /// The model's text for one turn (never empty).
    ModelText {
        /// The text.
        text: String,
    },
    /// A tool call the model asked for started.
    ToolStarted {
        /// The call's id.
        id: String,
        /// The qualified tool name.
        name: String,
        /// The arguments the model gave.
        arguments: Value,
    },
    /// A tool call the model asked for began to run (the session runs a reply's calls a few
    /// at a time: a call may wait after [`ToolStarted`](Self::ToolStarted) for a free slot).
    ToolRunning {
        /// The call's id.
        id: String,
    },
    /// The user is asked whether a call of a destructive tool may run; it is shown before
    /// [`ToolStarted`](Self::ToolStarted), which follows only if the call runs.
    PermissionAsked {
        /// The call's id.
        id: String,
        /// The qualified tool name.
        name: String,
        /// The arguments the model gave.
        arguments: Value,
    },
    /// The user rejected a call (now, or with an earlier "always"); it did not run.
    ToolRejected {
        /// The call's id.
        id: String,
        /// The qualified tool name.
        tool: String,
        /// The rejection stands for the rest of the session.
        standing: bool,
    },
    /// A tool call ended.
    ToolFinished {
        /// The call that finished.
        id: String,
        /// The qualified tool name.
        name: String,
        /// The result is an error.
        is_error: bool,
        /// Its result.
        output: String,
        /// How long the call ran, in ms.
        duration_ms: u64,
    },
    /// The model called a hook or a tool that does not exist; nothing ran.
    ToolRefused {
        /// The name the model called.
        name: String,
    },
    /// A hook was called on these servers.
    HookCalled {
        /// The hook.
        hook: Hook,
        /// The servers called.
        servers: Vec<ServerName>,
    },
    /// A `_Stop` hook objected; the model is asked again.
    Objection {
        /// The server.
        server: ServerName,
        /// What the hook said.
        text: String,
        /// Objections the session may still make.
        budget_left: u32,
    },
    /// The model ended its turn and `_Stop` was not asked, for `reason`.
    StopSkipped {
        /// Why `_Stop` was not asked.
        reason: SkipReason,
    },
    /// The history was compacted.
    Compacted {
        /// Whether the model summarized the older history (otherwise the oldest turns were dropped).
        summarized: bool,
        /// Messages in the history before.
        messages_before: usize,
        /// Messages in the history after.
        messages_after: usize,
    },
    /// A `_PostCompact` answer was put into the fresh context.
    PostCompactInjected {
        /// The server.
        server: ServerName,
        /// The text put into the fresh context.
        text: String,
    },
    /// A `_SessionStart`, `_UserPromptSubmit` or `_PostToolUse` answer was injected as context,
    /// or a `_PreCompact` answer guided the summary.
    HookInjected {
        /// The hook.
        hook: Hook,
        /// The server.
        server: ServerName,
        /// The text injected.
        text: String,
    },
    /// A `_PreToolUse` answer denied a tool call; it did not run.
    ToolDenied {
        /// The server.
        server: ServerName,
        /// The qualified name of the denied tool.
        tool: String,
        /// The denial, as the hook gave it.
        text: String,
    },
    /// A hook call gave no usable answer; it counts as no objection.
    HookFailedOpen {
        /// The server.
        server: ServerName,
        /// The hook.
        hook: Hook,
        /// Why the call gave no usable answer.
        reason: String,
    },
    /// A server sat a hook round out (it was restarting); the round went on without it. Not a
    /// failure of the hook: nothing was asked of the server.
    HookSkipped {
        /// The server.
        server: ServerName,
        /// The hook.
        hook: Hook,
        /// Why the server sat the round out.
        reason: String,
    },
    /// A server was killed after its hooks timed out twice in a row.
    ServerKilled {
        /// The server.
        server: ServerName,
    },
    /// The prompt ended.
    Finished {
        /// Why the prompt ended.
        reason: FinishReason,
    },
}

impl Event {
    /// One line saying what happened, for a person watching; `None` for events a person does
    /// not need to see (a model request starting, a hook being called, the prompt ending).
    pub fn describe(&self) -> Option<String> {
        self.describe_with(Hook::Stop)
    }

    /// [`describe`](Self::describe) for an event of `agent`: a subagent's line starts with its
    /// id in brackets (`[agent-1] → fs__read {}`) and names its end-of-turn hook,
    /// `_SubagentStop`; the top-level agent's (`None`) is [`describe`](Self::describe)'s.
    pub fn describe_in(&self, agent: Option<&AgentId>) -> Option<String> {
        match agent {
            None => self.describe(),
            Some(agent) => Some(format!(
                "[{agent}] {}",
                self.describe_with(Hook::SubagentStop)?
            )),
        }
    }

    /// The line, naming `stop` as the hook asked at an end of turn.
    fn describe_with(&self, stop: Hook) -> Option<String> {
        Some(match self {
            Self::Thinking { summary: true } => {
                "compacting: asking the model for a summary of the session".to_owned()
            }
            Self::Thinking { summary: false }
            | Self::HookCalled { .. }
            | Self::ToolRunning { .. }
            | Self::Finished { .. } => {
                return None;
            }
            Self::PermissionAsked { name, .. } => {
                format!("? asking the user whether {name} may run")
            }
            Self::ToolRejected { id, tool, standing } => notice_line(
                &Notice::PermissionRejected {
                    id: CallId(id.clone()),
                    tool: tool.clone(),
                    standing: *standing,
                },
                stop,
            ),
            Self::ModelText { text } => format!("model: {}", one_line(text, 200)),
            Self::ToolStarted {
                name, arguments, ..
            } => format!("→ {name} {}", one_line(&arguments.to_string(), 120)),
            Self::ToolFinished {
                name,
                is_error,
                output,
                duration_ms,
                ..
            } => {
                let mark = if *is_error { "✗" } else { "✓" };
                format!(
                    "{mark} {name} ({duration_ms} ms): {}",
                    one_line(output, 120)
                )
            }
            Self::ToolRefused { name } => {
                notice_line(&Notice::UnknownToolRefused { name: name.clone() }, stop)
            }
            Self::Objection {
                server,
                text,
                budget_left,
            } => notice_line(
                &Notice::Objection {
                    server: server.clone(),
                    text: text.clone(),
                    budget_left: *budget_left,
                },
                stop,
            ),
            Self::StopSkipped { reason } => {
                notice_line(&Notice::StopSkipped { reason: *reason }, stop)
            }
            Self::Compacted {
                summarized,
                messages_before,
                messages_after,
            } => notice_line(
                &Notice::Compacted {
                    summarized: *summarized,
                    messages_before: *messages_before,
                    messages_after: *messages_after,
                },
                stop,
            ),
            Self::PostCompactInjected { server, text } => notice_line(
                &Notice::PostCompactInjected {
                    server: server.clone(),
                    text: text.clone(),
                },
                stop,
            ),
            Self::HookInjected { hook, server, text } => notice_line(
                &Notice::HookInjected {
                    hook: *hook,
                    server: server.clone(),
                    text: text.clone(),
                },
                stop,
            ),
            Self::ToolDenied { server, tool, text } => notice_line(
                &Notice::ToolDenied {
                    server: server.clone(),
                    tool: tool.clone(),
                    text: text.clone(),
                },
                stop,
            ),
            Self::HookFailedOpen {
                server,
                hook,
                reason,
            } => notice_line(
                &Notice::HookFailedOpen {
                    server: server.clone(),
                    hook: *hook,
                    reason: reason.clone(),
                },
                stop,
            ),
            Self::HookSkipped {
                server,
                hook,
                reason,
            } => notice_line(
                &Notice::HookSkipped {
                    server: server.clone(),
                    hook: *hook,
                    reason: reason.clone(),
                },
                stop,
            ),
            Self::ServerKilled { server } => {
                format!("! server {server} killed after two hook timeouts in a row")
            }
        })
    }
}

/// A notice's line for a person watching: its headline, then the hook's words on the same line,
/// cut to fit.
fn notice_line(notice: &Notice, stop: Hook) -> String {
    let headline = notice.headline(stop);
    match notice.said() {
        Some(said) => format!("{headline}: {}", one_line(said, 200)),
        None => headline,
    }
}

/// Receives the pieces of a reply as they stream in.
type DeltaSink = Box<dyn FnMut(Duration, &Delta) + Send>;

/// Receives a subagent's events.
type AgentSink = Box<dyn FnMut(Duration, &AgentId, Event) + Send>;

/// Receives the pieces of a subagent's reply as they stream in.
type AgentDeltaSink = Box<dyn FnMut(Duration, &AgentId, &Delta) + Send>;

/// An [`Observer`] that hands each [`Event`] to `sink`, with the time since the session started.
pub struct ProgressObserver<F> {
    sink: F,
    top: Track,
    deltas: Option<DeltaSink>,
    /// What is followed of each subagent still running, when a sink takes their events.
    agents: HashMap<AgentId, Track>,
    agent_sink: Option<AgentSink>,
    agent_deltas: Option<AgentDeltaSink>,
}

impl<F: FnMut(Duration, Event) + Send> ProgressObserver<F> {
    /// An observer feeding `sink` the top-level agent's events.
    pub fn new(sink: F) -> Self {
        Self {
            sink,
            top: Track::default(),
            deltas: None,
            agents: HashMap::new(),
            agent_sink: None,
            agent_deltas: None,
        }
    }

    /// The same observer, also handing the pieces of each turn's reply to `sink` as they
    /// stream in (never those of a compaction summary). The reply's whole text still follows
    /// as [`Event::ModelText`]: a front end that showed the pieces need not show it again.
    #[must_use]
    pub fn with_deltas(mut self, sink: impl FnMut(Duration, &Delta) + Send + 'static) -> Self {
        self.deltas = Some(Box::new(sink));
        self
    }

    /// The same observer, also handing each subagent's events to `sink`, with its id. They are
    /// drawn from the subagent's boundary as the top-level agent's are from the session's, and
    /// come before the event that ends the `agent` call that started it.
    #[must_use]
    pub fn with_agents(
        mut self,
        sink: impl FnMut(Duration, &AgentId, Event) + Send + 'static,
    ) -> Self {
        self.agent_sink = Some(Box::new(sink));
        self
    }

    /// The same observer, also handing the pieces of each subagent's turn replies to `sink` as
    /// they stream in, with its id, as [`with_deltas`](Self::with_deltas) does for the
    /// top-level agent's. Only with [`with_agents`](Self::with_agents).
    #[must_use]
    pub fn with_agent_deltas(
        mut self,
        sink: impl FnMut(Duration, &AgentId, &Delta) + Send + 'static,
    ) -> Self {
        self.agent_deltas = Some(Box::new(sink));
        self
    }
}

impl<F: FnMut(Duration, Event) + Send> Observer for ProgressObserver<F> {
    fn on_effect(&mut self, at: Duration, effect: &Effect) {
        let sink = &mut self.sink;
        self.top
            .effect(at, effect, &mut |at, event| sink(at, event));
    }

    fn on_call_started(&mut self, at: Duration, id: &CallId) {
        if let Some(event) = self.top.call_started(id) {
            (self.sink)(at, event);
        }
    }

    fn on_delta(&mut self, at: Duration, delta: &Delta) {
        if let (Purpose::Turn, Some(sink)) = (self.top.purpose, self.deltas.as_mut()) {
            sink(at, delta);
        }
    }

    fn on_fact(&mut self, at: Duration, fact: &Input) {
        if let Some(event) = self.top.fact(at, fact) {
            (self.sink)(at, event);
        }
    }

    fn on_agent_effect(&mut self, at: Duration, agent: &AgentId, effect: &Effect) {
        let Some(sink) = self.agent_sink.as_mut() else {
            return;
        };
        let track = self.agents.entry(agent.clone()).or_default();
        track.effect(at, effect, &mut |at, event| sink(at, agent, event));
        // A subagent's finish is its last order that shows: nothing of it is followed after.
        if matches!(effect, Effect::Finish { .. }) {
            self.agents.remove(agent);
        }
    }

    fn on_agent_fact(&mut self, at: Duration, agent: &AgentId, fact: &Input) {
        let (Some(sink), Some(track)) = (self.agent_sink.as_mut(), self.agents.get_mut(agent))
        else {
            return;
        };
        if let Some(event) = track.fact(at, fact) {
            sink(at, agent, event);
        }
    }

    fn on_agent_delta(&mut self, at: Duration, agent: &AgentId, delta: &Delta) {
        let (Some(sink), Some(track)) = (self.agent_deltas.as_mut(), self.agents.get(agent)) else {
            return;
        };
        if track.purpose == Purpose::Turn {
            sink(at, agent, delta);
        }
    }

    fn on_agent_call_started(&mut self, at: Duration, agent: &AgentId, id: &CallId) {
        let (Some(sink), Some(track)) = (self.agent_sink.as_mut(), self.agents.get(agent)) else {
            return;
        };
        if let Some(event) = track.call_started(id) {
            sink(at, agent, event);
        }
    }
}

/// What is followed of one agent's boundary to draw its events: what its model request is for,
/// and its calls still running.
struct Track {
    purpose: Purpose,
    running: HashMap<CallId, (String, Duration)>,
}

impl Default for Track {
    fn default() -> Self {
        Self {
            purpose: Purpose::Turn,
            running: HashMap::new(),
        }
    }
}

impl Track {
    /// The events an order makes, each handed to `emit`.
    fn effect(&mut self, at: Duration, effect: &Effect, emit: &mut dyn FnMut(Duration, Event)) {
        let event = match effect {
            Effect::CallLlm { purpose, .. } => {
                self.purpose = *purpose;
                Event::Thinking {
                    summary: matches!(purpose, Purpose::Summary { .. }),
                }
            }
            Effect::CallTools { calls } => {
                for call in calls {
                    self.running
                        .insert(call.id.clone(), (call.name.clone(), at));
                    emit(
                        at,
                        Event::ToolStarted {
                            id: call.id.to_string(),
                            name: call.name.clone(),
                            arguments: call.arguments.clone(),
                        },
                    );
                }
                return;
            }
            Effect::CallHooks { hook, servers, .. } => Event::HookCalled {
                hook: *hook,
                servers: servers.clone(),
            },
            Effect::AskPermission { call } => Event::PermissionAsked {
                id: call.id.to_string(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            },
            Effect::KillServer { server } => Event::ServerKilled {
                server: server.clone(),
            },
            Effect::Notify { notice } => notice_event(notice),
            Effect::Finish { reason } => {
                // Calls still running when a prompt ends were cancelled: say so, so no front
                // end leaves a call spinning forever.
                let mut left: Vec<_> = self.running.drain().collect();
                left.sort_by(|a, b| a.0.cmp(&b.0));
                for (id, (name, started)) in left {
                    emit(
                        at,
                        Event::ToolFinished {
                            id: id.to_string(),
                            name,
                            is_error: true,
                            output: CANCELLED_OUTPUT.into(),
                            duration_ms: crate::millis::of(at.saturating_sub(started)),
                        },
                    );
                }
                Event::Finished {
                    reason: reason.clone(),
                }
            }
        };
        emit(at, event);
    }

    /// The event of a call that begins to run, if it is one this track started.
    fn call_started(&self, id: &CallId) -> Option<Event> {
        self.running
            .contains_key(id)
            .then(|| Event::ToolRunning { id: id.to_string() })
    }

    /// The event a fact makes, if any.
    fn fact(&mut self, at: Duration, fact: &Input) -> Option<Event> {
        Some(match fact {
            Input::LlmReplied { reply } => {
                // A summary's text is the compacted context, not something the model says.
                if matches!(self.purpose, Purpose::Summary { .. }) || reply.text.trim().is_empty() {
                    return None;
                }
                Event::ModelText {
                    text: reply.text.clone(),
                }
            }
            Input::ToolFinished { id, output } => {
                let (name, started) = self.running.remove(id)?;
                Event::ToolFinished {
                    id: id.to_string(),
                    name,
                    is_error: output.is_error,
                    output: output.joined_text(),
                    duration_ms: crate::millis::of(at.saturating_sub(started)),
                }
            }
            Input::Prompted { .. }
            | Input::CatalogChanged { .. }
            | Input::LlmFailed { .. }
            | Input::HookAnswered { .. }
            | Input::PermissionDecided { .. }
            | Input::PermissionSettingChanged { .. }
            | Input::Cancelled
            | Input::PromptInterrupted
            | Input::Closed => return None,
        })
    }
}

fn notice_event(notice: &Notice) -> Event {
    match notice {
        Notice::Objection {
            server,
            text,
            budget_left,
        } => Event::Objection {
            server: server.clone(),
            text: text.clone(),
            budget_left: *budget_left,
        },
        Notice::StopSkipped { reason } => Event::StopSkipped { reason: *reason },
        Notice::PostCompactInjected { server, text } => Event::PostCompactInjected {
            server: server.clone(),
            text: text.clone(),
        },
        Notice::HookInjected { hook, server, text } => Event::HookInjected {
            hook: *hook,
            server: server.clone(),
            text: text.clone(),
        },
        Notice::ToolDenied { server, tool, text } => Event::ToolDenied {
            server: server.clone(),
            tool: tool.clone(),
            text: text.clone(),
        },
        Notice::Compacted {
            summarized,
            messages_before,
            messages_after,
        } => Event::Compacted {
            summarized: *summarized,
            messages_before: *messages_before,
            messages_after: *messages_after,
        },
        Notice::HookFailedOpen {
            server,
            hook,
            reason,
        } => Event::HookFailedOpen {
            server: server.clone(),
            hook: *hook,
            reason: reason.clone(),
        },
        Notice::HookSkipped {
            server,
            hook,
            reason,
        } => Event::HookSkipped {
            server: server.clone(),
            hook: *hook,
            reason: reason.clone(),
        },
        Notice::UnknownToolRefused { name } => Event::ToolRefused { name: name.clone() },
        Notice::PermissionRejected { id, tool, standing } => Event::ToolRejected {
            id: id.to_string(),
            tool: tool.clone(),
            standing: *standing,
        },
    }
}

#[cfg(all(test, feature = "testing"))]
mod tests {
    use std::sync::{Arc, Mutex};

    use serde_json::json;

    use super::*;
    use crate::testing::{HookStep, InProcessHost, ScriptedLlm, Step, echo};
    use crate::{Config, HookServers, PromptStop, Session};

    type Recorded = Arc<Mutex<Vec<Event>>>;

    fn recorder() -> (
        Recorded,
        ProgressObserver<impl FnMut(Duration, Event) + Send>,
    ) {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        let observer = ProgressObserver::new(move |_, event| sink.lock().unwrap().push(event));
        (events, observer)
    }

    #[tokio::test]
    async fn a_prompt_with_a_tool_and_an_objection_reads_in_order() {
        let llm = ScriptedLlm::new([
            Step::tools(1, &[("fs__read", json!({"path": "a"}))]),
            Step::text("Done."),
            Step::text("Really done."),
        ]);
        let host = InProcessHost::new().tool("fs", "read", echo).hook(
            "todo",
            Hook::Stop,
            [HookStep::Say("1 open".into())],
        );
        let config = Config::builder()
            .hook_servers(HookServers::All)
            .build()
            .unwrap();
        let mut session = Session::new(config, llm, host);
        let (events, observer) = recorder();
        session.add_observer(observer);
        assert_eq!(session.prompt("go").await.unwrap(), PromptStop::EndTurn);

        let events = events.lock().unwrap().clone();
        let kinds: Vec<&str> = events
            .iter()
            .map(|e| match e {
                Event::Thinking { .. } => "thinking",
                Event::ModelText { .. } => "text",
                Event::ToolStarted { .. } => "tool_started",
                Event::ToolRunning { .. } => "tool_running",
                Event::ToolFinished { .. } => "tool_finished",
                Event::HookCalled { .. } => "hook",
                Event::Objection { .. } => "objection",
                Event::StopSkipped { .. } => "skipped",
                Event::Finished { .. } => "finished",
                other => panic!("unexpected {other:?}"),
            })
            .collect();
        assert_eq!(
            kinds,
            [
                "thinking",
                "tool_started",
                "tool_running",
                "tool_finished",
                "thinking",
                "text",
                "hook",
                "objection",
                "thinking",
                "text",
                "skipped",
                "finished"
            ]
        );
        assert!(matches!(
            &events[3],
            Event::ToolFinished { name, is_error: false, output, .. }
                if name == "fs__read" && output.contains("\"path\"")
        ));
        assert!(matches!(
            &events[7],
            Event::Objection { text, budget_left: 2, .. } if text == "1 open"
        ));
    }

    #[tokio::test]
    async fn a_cancelled_tool_call_is_reported_finished_with_an_error() {
        let llm = ScriptedLlm::new([Step::tools(1, &[("fs__read", json!({}))])]);
        let host = InProcessHost::new()
            .tool("fs", "read", echo)
            .tool_delay(Duration::from_secs(3600));
        let mut session = Session::new(Config::default(), llm, host);
        let (events, observer) = recorder();
        session.add_observer(observer);
        let cancel = session.cancel_handle();
        let prompt = session.prompt("go");
        let canceller = async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            cancel.cancel();
        };
        let (stop, ()) = tokio::join!(prompt, canceller);
        assert_eq!(stop.unwrap(), PromptStop::Cancelled);
        let events = events.lock().unwrap().clone();
        let n = events.len();
        assert!(matches!(
            &events[n - 2],
            Event::ToolFinished { is_error: true, output, .. } if output == "cancelled"
        ));
        assert_eq!(
            events[n - 1],
            Event::Finished {
                reason: FinishReason::Cancelled
            }
        );
    }

    #[tokio::test]
    async fn a_subagents_events_go_to_the_agent_sink_with_its_id_and_never_to_the_top_one() {
        let llm = ScriptedLlm::new([
            Step::tools(
                1,
                &[("agent", json!({"description": "look", "prompt": "read a"}))],
            ),
            Step::tools(1, &[("fs__read", json!({"path": "a"}))]),
            Step::text("a says hi"),
            Step::text("Done."),
        ]);
        let host = InProcessHost::new().tool("fs", "read", echo);
        let config = Config::builder()
            .subagents(crate::machine::Subagents::new(1))
            .build()
            .unwrap();
        let mut session = Session::new(config, llm, host);
        let children = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&children);
        let (events, observer) = recorder();
        session.add_observer(observer.with_agents(move |_, agent, event| {
            sink.lock().unwrap().push((agent.clone(), event));
        }));
        assert_eq!(session.prompt("go").await.unwrap(), PromptStop::EndTurn);

        let top = events.lock().unwrap().clone();
        let started = |events: &[Event], name: &str| {
            events
                .iter()
                .any(|e| matches!(e, Event::ToolStarted { name: n, .. } if n == name))
        };
        assert!(started(&top, "agent"), "{top:?}");
        assert!(!started(&top, "fs__read"), "{top:?}");
        assert!(top.iter().any(|e| matches!(e,
            Event::ToolFinished { name, output, is_error: false, .. }
                if name == "agent" && output == "a says hi")));
        let children = children.lock().unwrap().clone();
        assert!(!children.is_empty());
        assert!(children.iter().all(|(agent, _)| agent.0 == "agent-1"));
        let child: Vec<Event> = children.into_iter().map(|(_, e)| e).collect();
        assert!(started(&child, "fs__read"), "{child:?}");
        assert!(
            child
                .iter()
                .any(|e| matches!(e, Event::ModelText { text } if text == "a says hi"))
        );
        assert!(matches!(
            child.last(),
            Some(Event::Finished {
                reason: FinishReason::EndTurn
            })
        ));
        assert!(
            !top.iter()
                .any(|e| matches!(e, Event::ModelText { text } if text == "a says hi")),
            "{top:?}"
        );
    }

    #[test]
    fn a_subagents_line_names_it_and_its_stop_hook() {
        let event = Event::Objection {
            server: ServerName::new("todo").unwrap(),
            text: "1 open".into(),
            budget_left: 2,
        };
        let agent = AgentId("agent-1".into());
        assert_eq!(
            event.describe_in(Some(&agent)).unwrap(),
            "[agent-1] ⚑ _SubagentStop objection from todo (2 left in the budget): 1 open"
        );
        assert_eq!(event.describe_in(None), event.describe());
        assert!(event.describe().unwrap().starts_with("⚑ _Stop objection"));
        assert!(
            Event::Thinking { summary: false }
                .describe_in(Some(&agent))
                .is_none()
        );
    }

    #[test]
    fn deltas_of_turns_are_handed_on_and_those_of_a_summary_are_not() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&seen);
        let mut observer = ProgressObserver::new(|_, _| {})
            .with_deltas(move |_, delta| sink.lock().unwrap().push(delta.clone()));
        let digest_of = || crate::machine::RequestDigest {
            system: crate::machine::Digest(1),
            messages: crate::machine::Digest(2),
            tools: crate::machine::Digest(3),
            instruction: crate::machine::Digest(4),
            limits: crate::machine::Digest(5),
        };
        let call = |purpose| Effect::CallLlm {
            purpose,
            messages: 1,
            digest: digest_of(),
        };
        let at = Duration::ZERO;
        observer.on_effect(at, &call(Purpose::Turn));
        observer.on_delta(at, &Delta::Text("turn".into()));
        observer.on_effect(at, &call(Purpose::Summary { from: 0 }));
        observer.on_delta(at, &Delta::Text("summary".into()));
        observer.on_effect(at, &call(Purpose::Turn));
        observer.on_delta(at, &Delta::Thinking("again".into()));
        assert_eq!(
            *seen.lock().unwrap(),
            [Delta::Text("turn".into()), Delta::Thinking("again".into())]
        );
    }

    #[test]
    fn descriptions_are_single_lines() {
        let event = Event::ToolFinished {
            id: "c1".into(),
            name: "todo__complete".into(),
            is_error: false,
            output: "done:\n  #1".into(),
            duration_ms: 3,
        };
        assert_eq!(
            event.describe().unwrap(),
            "✓ todo__complete (3 ms): done: #1"
        );
        assert!(Event::Thinking { summary: false }.describe().is_none());
    }

    #[test]
    fn events_serialise_with_a_tag() {
        let text = serde_json::to_string(&Event::Objection {
            server: ServerName::new("todo").unwrap(),
            text: "2 open".into(),
            budget_left: 1,
        })
        .unwrap();
        assert_eq!(
            text,
            r#"{"event":"objection","server":"todo","text":"2 open","budget_left":1}"#
        );
    }
}
