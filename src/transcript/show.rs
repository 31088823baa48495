//! A transcript as a person reads it: the session rebuilt by replaying its facts, one entry per
//! step — prompts, model requests as sent, replies, tool calls, hook rounds, objections,
//! compactions — each with its recorded time.
//!
//! [`SessionView::build`] replays the records through a [`Replayer`], so the requests it shows
//! are the machine's own (the record pins them only by digest). A transcript that was cut
//! short or that diverges is shown up to its last good record, and [`End`] says where it
//! stops. The view serialises to JSON for tools; [`SessionView::to_text`] renders it for a
//! terminal and [`render_html`](crate::transcript::render_html) for a browser.

use std::fmt;

use serde::Serialize;
use serde_json::Value;

use crate::hooks::{Hook, ServerName};
use crate::machine::{
    AgentId, CallId, FinishReason, HookContext, HookReply, LlmReply, Media, Message,
    PermissionDecision, Policy, Purpose, SkipReason, ToolCall, ToolOutput,
};
use crate::transcript::{Replayer, Transcript};

use self::build::Builder;

mod build;

/// A whole session, ready to read.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct SessionView {
    /// The engine that wrote the transcript.
    pub engine: String,
    /// The transcript's format version.
    pub version: u32,
    /// The settings the session ran under.
    pub policy: Policy,
    /// The system prompt, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    /// Every step, in record order.
    pub entries: Vec<Entry>,
    /// How far the view goes.
    pub end: End,
}

/// One step of the session.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct Entry {
    /// The record it starts at (0 = the first record after the header).
    pub index: usize,
    /// Its recorded time, in ms since the session started.
    pub at_ms: u64,
    /// What the step was.
    #[serde(flatten)]
    pub kind: EntryKind,
}

/// What a step was.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "entry", rename_all = "snake_case")]
#[non_exhaustive]
pub enum EntryKind {
    /// The servers and their tools, at start-up or after a change (a server gone or back).
    Catalog {
        /// Each server with its tools.
        servers: Vec<ServerView>,
    },
    /// The user's prompt; `number` counts from 1.
    Prompt {
        /// Prompts so far, this one included.
        number: usize,
        /// The prompt.
        text: String,
    },
    /// A model request, as the machine built it. Messages the previous request also began
    /// with are folded: `folded` counts them and `messages` holds the rest.
    Request {
        /// Model requests so far, this one included.
        round: usize,
        /// What the request is for.
        purpose: Purpose,
        /// Leading messages shared with the previous request and not shown again.
        folded: usize,
        /// The rest of the messages.
        messages: Vec<Message>,
        /// The tools offered, when they differ from the previous request's; `None` when they
        /// are the same.
        #[serde(skip_serializing_if = "Option::is_none")]
        tools: Option<Vec<String>>,
        /// How many tools were offered.
        tools_offered: usize,
        /// The final instruction of a summary request.
        #[serde(skip_serializing_if = "Option::is_none")]
        instruction: Option<String>,
    },
    /// The model's answer to request `round`, `latency_ms` after it was sent.
    Reply {
        /// The request answered.
        round: usize,
        /// How long after it was sent, in ms.
        latency_ms: u64,
        /// The answer.
        reply: LlmReply,
    },
    /// Request `round` failed after the client's retries.
    ModelFailed {
        /// The request that failed.
        round: usize,
        /// How long after it was sent, in ms.
        latency_ms: u64,
        /// What went wrong.
        error: String,
    },
    /// Tool calls run together, each with its result when it came.
    Tools {
        /// Each call with its result.
        calls: Vec<ToolRun>,
    },
    /// A hook called on each server at once, with each server's answer: one call per server
    /// and subject (one per server when the round has no subjects).
    HookRound {
        /// The hook.
        hook: Hook,
        /// Rounds of this hook so far, this one included.
        number: usize,
        /// The timeout of each call, in ms.
        timeout_ms: u64,
        /// The session facts sent with the calls.
        context: HookContext,
        /// What each call was about (a `_PreToolUse` or `_PostToolUse` tool call, say); empty
        /// when the calls carry no arguments.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        subjects: Vec<Value>,
        /// Each server's answers.
        answers: Vec<HookAnswer>,
    },
    /// A `_Stop` answer objected: the model is asked again.
    Objection {
        /// The server.
        server: ServerName,
        /// What the hook said.
        text: String,
        /// Objections the session may still make.
        budget_left: u32,
    },
    /// The history was compacted; sizes in messages and in bytes of content.
    Compaction {
        /// Whether the model summarized the older history (otherwise the oldest turns were dropped).
        summarized: bool,
        /// Messages in the history before.
        messages_before: usize,
        /// Messages in the history after.
        messages_after: usize,
        /// Bytes of content before.
        bytes_before: usize,
        /// Bytes of content after.
        bytes_after: usize,
    },
    /// A `_PostCompact` answer was put into the fresh context.
    PostCompactInjected {
        /// The server.
        server: ServerName,
        /// The text put into the fresh context.
        text: String,
    },
    /// A `_SessionStart`, `_UserPromptSubmit` or `_PostToolUse` answer was injected as
    /// context, or a `_PreCompact` answer added to the summary instruction.
    HookInjected {
        /// The hook.
        hook: Hook,
        /// The server.
        server: ServerName,
        /// The text injected.
        text: String,
    },
    /// A `_PreToolUse` answer denied a tool call: it did not run, the model got the denial.
    ToolDenied {
        /// The server.
        server: ServerName,
        /// The qualified name of the denied tool.
        tool: String,
        /// The denial, as the hook gave it.
        text: String,
    },
    /// The user was asked whether a call of a destructive tool may run, and what they decided
    /// (`None` when the record ends, or the prompt was cancelled, first).
    Permission {
        /// The call asked about.
        call: ToolCall,
        /// What the user decided; `None` when the record ends first.
        decision: Option<PermissionDecision>,
    },
    /// A call the user rejected (now, or with an earlier "always") did not run.
    PermissionRejected {
        /// The rejected call.
        id: CallId,
        /// The qualified name of the rejected tool.
        tool: String,
        /// The rejection stands for the rest of the session.
        standing: bool,
    },
    /// A server sat a hook round out (it was between lives); the round went on without it.
    HookSkipped {
        /// The server.
        server: ServerName,
        /// The hook.
        hook: Hook,
        /// Why the server sat the round out.
        reason: String,
    },
    /// A hook call ended without a usable answer and counted as none.
    HookFailedOpen {
        /// The server.
        server: ServerName,
        /// The hook.
        hook: Hook,
        /// Why the call gave no usable answer.
        reason: String,
    },
    /// The model ended its turn and `_Stop` was not asked.
    StopSkipped {
        /// Why `_Stop` was not asked.
        reason: SkipReason,
    },
    /// The model called a hook or an unknown tool; it was refused.
    UnknownToolRefused {
        /// The name the model called.
        name: String,
    },
    /// The engine killed a server (it comes back on its next use).
    ServerKilled {
        /// The server.
        server: ServerName,
    },
    /// Supervision: a life of the server started.
    ServerStarted {
        /// The server.
        server: ServerName,
    },
    /// Supervision: a start of the server failed.
    StartFailed {
        /// The server.
        server: ServerName,
        /// Why it could not start.
        error: String,
    },
    /// Supervision: the server's life ended; `answered` says whether it answered any call.
    ServerExited {
        /// The server.
        server: ServerName,
        /// It was answering a call when it ended.
        answered: bool,
        /// Why it ended, as the host saw it.
        reason: String,
    },
    /// Supervision: the server is to be started again after `after_ms`.
    RestartScheduled {
        /// The server.
        server: ServerName,
        /// The backoff before the start, in ms.
        after_ms: u64,
    },
    /// Supervision: the server ran out of restarts; its tools are gone for good.
    ServerRetired {
        /// The server.
        server: ServerName,
        /// Bad ends in a row that retired it.
        bad_ends: u32,
    },
    /// The user cancelled the prompt.
    Cancelled,
    /// The prompt was cut by the end of the process that ran it, and closed when its record
    /// was loaded (`prompt_interrupted`).
    Interrupted,
    /// The prompt ended.
    Finish {
        /// Why the prompt ended.
        reason: FinishReason,
    },
    /// The session was closed.
    Closed,
}

/// One server of a catalog.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ServerView {
    /// The server.
    pub server: ServerName,
    /// Its tools' bare names, hooks included.
    pub tools: Vec<String>,
}

/// One tool call and, once it came, its result.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct ToolRun {
    /// The call.
    pub call: ToolCall,
    /// Its result; `None` when the record ends first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<ToolOutput>,
    /// When the result came, in ms since the session started.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub done_ms: Option<u64>,
    /// The subagent an `agent` call ran, with its own steps; `None` for any other call.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agent: Option<AgentLane>,
}

/// A subagent's own steps, shown under the `agent` call that started it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct AgentLane {
    /// The subagent's id: the id of its call.
    pub id: AgentId,
    /// Its steps, in record order: hook rounds, requests, replies, tool calls (its own
    /// subagents nested in turn), its finish.
    pub entries: Vec<Entry>,
}

/// One server's answer in a hook round.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[non_exhaustive]
pub struct HookAnswer {
    /// The server.
    pub server: ServerName,
    /// Which of the round's subjects the call was about; `None` when the round has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub subject: Option<u32>,
    /// `None` while the server has not answered (the transcript stops before it did).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reply: Option<HookReply>,
    /// How long it took to answer, in ms; `None` when it did not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
}

/// Where the view stops.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "end", rename_all = "snake_case")]
pub enum End {
    /// Every record replayed.
    Complete {
        /// Records read.
        records: usize,
    },
    /// The last line was cut short; every record before it replayed.
    Truncated {
        /// Records read.
        records: usize,
        /// The line cut short.
        line: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// The machine parted from the record at record `index`; the view shows what came before.
    Diverged {
        /// The record index where it diverged.
        index: usize,
        /// Its line in the file.
        line: usize,
        /// The divergence, said plainly.
        message: String,
    },
}

impl End {
    /// Whether the whole transcript replayed.
    pub fn is_complete(&self) -> bool {
        matches!(self, Self::Complete { .. })
    }
}

impl fmt::Display for End {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Complete { records } => write!(f, "all {records} records replayed"),
            Self::Truncated {
                records,
                line,
                reason,
            } => write!(
                f,
                "the transcript stops after {records} records: line {line} was cut short \
                 ({reason})"
            ),
            Self::Diverged {
                index,
                line,
                message,
            } => write!(
                f,
                "shown up to record {index} (line {line}), where the replay diverged: {message}"
            ),
        }
    }
}

impl SessionView {
    /// Rebuilds the session by replaying `transcript`, up to its last good record.
    pub fn build(transcript: &Transcript) -> Self {
        let header = &transcript.header;
        let media = header.config.policy.media.clone();
        let mut builder = Builder::new(media.clone());
        let mut replayer = Replayer::new(header);
        let mut end = None;
        for (index, record) in transcript.records.iter().enumerate() {
            let lane = match record.event.agent() {
                Some(agent) => replayer.agent(agent),
                None => Some(replayer.machine()),
            };
            let bytes_before = lane.map_or(0, |machine| history_bytes(machine.history(), &media));
            if let Err(divergence) = replayer.step(record) {
                // The message names the record: it is formatted once the record is placed.
                let line = transcript.line_of(index);
                end = Some(End::Diverged {
                    index,
                    line,
                    message: divergence.locate(index, line).to_string(),
                });
                break;
            }
            builder.record(index, record.at_ms, &record.event, &replayer, bytes_before);
        }
        let records = transcript.records.len();
        let end = end.unwrap_or_else(|| match &transcript.truncated {
            Some(cut) => End::Truncated {
                records,
                line: cut.line,
                reason: cut.reason.clone(),
            },
            None => match replayer.finish(false) {
                Ok(_) => End::Complete { records },
                Err(divergence) => {
                    let line = transcript.line_of(records);
                    End::Diverged {
                        index: records,
                        line,
                        message: divergence.locate(records, line).to_string(),
                    }
                }
            },
        });
        Self {
            engine: header.engine.clone(),
            version: header.version,
            policy: header.config.policy.clone(),
            system_prompt: header.config.system_prompt.clone(),
            entries: builder.into_entries(),
            end,
        }
    }

    /// Model requests in the view.
    pub fn rounds(&self) -> usize {
        self.count(|kind| matches!(kind, EntryKind::Request { .. }))
    }

    /// Hook rounds in the view, of every hook.
    pub fn hook_rounds(&self) -> usize {
        self.count(|kind| matches!(kind, EntryKind::HookRound { .. }))
    }

    /// Hook rounds of `hook` in the view.
    pub fn hook_rounds_of(&self, hook: Hook) -> usize {
        self.count(|kind| matches!(kind, EntryKind::HookRound { hook: h, .. } if *h == hook))
    }

    /// Supervision entries in the view: servers started, failed, exited, restarted, retired.
    pub fn supervision_events(&self) -> usize {
        self.count(|kind| {
            matches!(
                kind,
                EntryKind::ServerStarted { .. }
                    | EntryKind::StartFailed { .. }
                    | EntryKind::ServerExited { .. }
                    | EntryKind::RestartScheduled { .. }
                    | EntryKind::ServerRetired { .. }
            )
        })
    }

    /// Objections in the view.
    pub fn objections(&self) -> usize {
        self.count(|kind| matches!(kind, EntryKind::Objection { .. }))
    }

    /// Compactions in the view.
    pub fn compactions(&self) -> usize {
        self.count(|kind| matches!(kind, EntryKind::Compaction { .. }))
    }

    fn count(&self, pick: impl Fn(&EntryKind) -> bool) -> usize {
        self.entries
            .iter()
            .filter(|entry| pick(&entry.kind))
            .count()
    }
}

pub(super) fn history_bytes(messages: &[Message], media: &Media) -> usize {
    messages
        .iter()
        .map(|message| message.size_bytes(media))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::machine::{Digest, Effect, Input, RequestDigest};
    use crate::supervisor::{self, Fact, Order};
    use crate::transcript::{Header, Record};

    #[test]
    fn supervision_records_are_shown_as_server_lives() {
        let todo = ServerName::new("todo").unwrap();
        let records = vec![
            Record::supervision(
                790,
                supervisor::Event::Fact(Fact::ServerExited {
                    server: todo.clone(),
                    at_ms: 790,
                    answered: true,
                    reason: "connection closed".into(),
                    jitter: supervisor::Jitter(500),
                }),
            ),
            Record::supervision(
                790,
                supervisor::Event::Order(Order::StartServer {
                    server: todo.clone(),
                    after_ms: 143,
                }),
            ),
            Record::supervision(
                933,
                supervisor::Event::Fact(Fact::ServerStarted {
                    server: todo.clone(),
                    at_ms: 933,
                }),
            ),
            Record::supervision(
                990,
                supervisor::Event::Order(Order::RetireServer {
                    server: todo,
                    bad_ends: 4,
                }),
            ),
        ];
        let header = Header::from_parts(Policy::default(), None);
        let view = SessionView::build(&Transcript::new(header, records));
        assert!(view.end.is_complete(), "{:?}", view.end);
        assert_eq!(view.supervision_events(), 4);
        let text = view.to_text();
        for line in [
            "server todo exited (it had answered): connection closed",
            "server todo restart scheduled in 143 ms",
            "server todo started",
            "server todo retired after 4 bad end(s)",
        ] {
            assert!(text.contains(line), "{line:?} not in {text}");
        }
        let html = crate::transcript::render_html(&view, "t");
        assert!(html.contains("entry-server_retired"), "{html}");
    }

    #[test]
    fn a_divergence_shows_the_records_before_it_and_says_where() {
        let records = vec![
            Record::fact(0, Input::Prompted { text: "hi".into() }),
            // The machine asks for one message with another digest.
            Record::effect(
                5,
                Effect::CallLlm {
                    purpose: Purpose::Turn,
                    messages: 1,
                    digest: RequestDigest {
                        system: Digest::default(),
                        messages: Digest::default(),
                        tools: Digest::default(),
                        instruction: Digest::default(),
                        limits: Digest::default(),
                    },
                },
            ),
        ];
        let header = Header::from_parts(Policy::default(), None);
        let view = SessionView::build(&Transcript::new(header, records));
        assert_eq!(view.entries.len(), 1);
        assert!(matches!(
            view.entries[0].kind,
            EntryKind::Prompt { number: 1, .. }
        ));
        assert!(
            matches!(
                view.end,
                End::Diverged {
                    index: 1,
                    line: 3,
                    ..
                }
            ),
            "{:?}",
            view.end
        );
        let text = view.to_text();
        assert!(text.contains("shown up to record 1 (line 3)"), "{text}");
        // The divergence's own words name the same record, not record 0.
        assert!(text.contains("diverged at record 1 (line 3)"), "{text}");
        assert!(!text.contains("record 0 (line 0)"), "{text}");
    }
}
