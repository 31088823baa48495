//! How a replay's records become a view's entries: each order paired with the facts that
//! answer it, requests folded against the one before, hook rounds numbered per hook.

use std::collections::BTreeMap;

use super::{AgentLane, Entry, EntryKind, HookAnswer, ServerView, ToolRun, history_bytes};
use crate::hooks::Hook;
use crate::machine::{AgentId, Catalog, Effect, Input, Machine, Media, Message, Notice};
use crate::supervisor::{self, Fact, Order};
use crate::transcript::{Event, Replayer};

/// Turns records into entries, pairing each answer with the order it answers.
#[derive(Default)]
pub(super) struct Builder {
    entries: Vec<Entry>,
    prompts: usize,
    rounds: usize,
    hook_rounds: [usize; Hook::EVERY.len()],
    /// The last request's round and time, until its answer.
    open_request: Option<(usize, u64)>,
    /// The entry of the tool round or hook round being answered.
    open_calls: Option<usize>,
    /// What the last request sent, to fold the next one's unchanged prefix.
    last_messages: Vec<Message>,
    last_tools: Option<Vec<String>>,
    /// The history's size before the fact that compacted it.
    bytes_before_fact: usize,
    /// How the session sizes media, for the byte counts.
    media: Media,
    /// Each subagent's entries, built on a lane of their own (kept by the top-level builder
    /// only) until they are nested under the `agent` call that started them.
    lanes: BTreeMap<AgentId, Builder>,
}

impl Builder {
    pub(super) fn new(media: Media) -> Self {
        Self {
            media,
            ..Self::default()
        }
    }

    /// The entries, each subagent's nested under the call that started it.
    pub(super) fn into_entries(mut self) -> Vec<Entry> {
        let mut lanes = std::mem::take(&mut self.lanes);
        nest(&mut self.entries, &mut lanes, 0);
        self.entries
    }

    pub(super) fn record(
        &mut self,
        index: usize,
        at_ms: u64,
        event: &Event,
        replayer: &Replayer,
        bytes_before: usize,
    ) {
        match event {
            Event::Effect(effect) => self.effect(index, at_ms, effect, replayer.machine()),
            Event::Fact(fact) => {
                self.bytes_before_fact = bytes_before;
                self.fact(index, at_ms, fact);
            }
            Event::Supervision(event) => self.supervision(index, at_ms, event),
            Event::AgentEffect { agent, effect } => {
                if let Some(machine) = replayer.agent(agent) {
                    self.lane(agent).effect(index, at_ms, effect, machine);
                }
            }
            Event::AgentFact { agent, fact } => {
                let lane = self.lane(agent);
                lane.bytes_before_fact = bytes_before;
                lane.fact(index, at_ms, fact);
            }
        }
    }

    fn lane(&mut self, agent: &AgentId) -> &mut Builder {
        let media = &self.media;
        self.lanes
            .entry(agent.clone())
            .or_insert_with(|| Builder::new(media.clone()))
    }

    fn supervision(&mut self, index: usize, at_ms: u64, event: &supervisor::Event) {
        let kind = match event {
            supervisor::Event::Fact(Fact::ServerStarted { server, .. }) => {
                EntryKind::ServerStarted {
                    server: server.clone(),
                }
            }
            supervisor::Event::Fact(Fact::StartFailed { server, error, .. }) => {
                EntryKind::StartFailed {
                    server: server.clone(),
                    error: error.clone(),
                }
            }
            supervisor::Event::Fact(Fact::ServerExited {
                server,
                answered,
                reason,
                ..
            }) => EntryKind::ServerExited {
                server: server.clone(),
                answered: *answered,
                reason: reason.clone(),
            },
            supervisor::Event::Order(Order::StartServer { server, after_ms }) => {
                EntryKind::RestartScheduled {
                    server: server.clone(),
                    after_ms: *after_ms,
                }
            }
            supervisor::Event::Order(Order::RetireServer { server, bad_ends }) => {
                EntryKind::ServerRetired {
                    server: server.clone(),
                    bad_ends: *bad_ends,
                }
            }
        };
        self.push(index, at_ms, kind);
    }

    fn push(&mut self, index: usize, at_ms: u64, kind: EntryKind) {
        self.entries.push(Entry { index, at_ms, kind });
    }

    fn effect(&mut self, index: usize, at_ms: u64, effect: &Effect, machine: &Machine) {
        let kind = match effect {
            Effect::CallLlm { purpose, .. } => {
                self.rounds += 1;
                self.open_request = Some((self.rounds, at_ms));
                let request = machine.request(*purpose);
                let folded = self
                    .last_messages
                    .iter()
                    .zip(request.messages)
                    .take_while(|(a, b)| a == b)
                    .count();
                let tools: Vec<String> = request.tools.iter().map(|t| t.name.clone()).collect();
                let changed = self.last_tools.as_ref() != Some(&tools);
                let kind = EntryKind::Request {
                    round: self.rounds,
                    purpose: *purpose,
                    folded,
                    messages: request.messages[folded..].to_vec(),
                    tools_offered: tools.len(),
                    tools: changed.then(|| tools.clone()),
                    instruction: request.instruction.map(str::to_owned),
                };
                self.last_messages = request.messages.to_vec();
                self.last_tools = Some(tools);
                kind
            }
            Effect::CallTools { calls } => {
                self.open_calls = Some(self.entries.len());
                EntryKind::Tools {
                    calls: calls
                        .iter()
                        .map(|call| ToolRun {
                            call: call.clone(),
                            output: None,
                            done_ms: None,
                            agent: None,
                        })
                        .collect(),
                }
            }
            Effect::CallHooks {
                hook,
                servers,
                timeout,
                context,
                subjects,
            } => {
                let count = &mut self.hook_rounds[hook.index()];
                *count += 1;
                self.open_calls = Some(self.entries.len());
                let calls: Vec<Option<u32>> = if subjects.is_empty() {
                    vec![None]
                } else {
                    (0..subjects.len())
                        .map(|i| Some(u32::try_from(i).unwrap_or(u32::MAX)))
                        .collect()
                };
                EntryKind::HookRound {
                    hook: *hook,
                    number: *count,
                    timeout_ms: crate::millis::of(*timeout),
                    context: context.clone(),
                    subjects: subjects.clone(),
                    answers: servers
                        .iter()
                        .flat_map(|server| {
                            calls.iter().map(move |subject| HookAnswer {
                                server: server.clone(),
                                subject: *subject,
                                reply: None,
                                latency_ms: None,
                            })
                        })
                        .collect(),
                }
            }
            Effect::AskPermission { call } => {
                self.open_calls = Some(self.entries.len());
                EntryKind::Permission {
                    call: call.clone(),
                    decision: None,
                }
            }
            Effect::KillServer { server } => EntryKind::ServerKilled {
                server: server.clone(),
            },
            Effect::Notify { notice } => self.notice(notice, machine.history()),
            Effect::Finish { reason } => EntryKind::Finish {
                reason: reason.clone(),
            },
        };
        self.push(index, at_ms, kind);
    }

    fn notice(&self, notice: &Notice, history: &[Message]) -> EntryKind {
        match notice {
            Notice::Objection {
                server,
                text,
                budget_left,
            } => EntryKind::Objection {
                server: server.clone(),
                text: text.clone(),
                budget_left: *budget_left,
            },
            Notice::StopSkipped { reason } => EntryKind::StopSkipped { reason: *reason },
            Notice::PostCompactInjected { server, text } => EntryKind::PostCompactInjected {
                server: server.clone(),
                text: text.clone(),
            },
            Notice::Compacted {
                summarized,
                messages_before,
                messages_after,
            } => EntryKind::Compaction {
                summarized: *summarized,
                messages_before: *messages_before,
                messages_after: *messages_after,
                bytes_before: self.bytes_before_fact,
                bytes_after: history_bytes(history, &self.media),
            },
            Notice::HookFailedOpen {
                server,
                hook,
                reason,
            } => EntryKind::HookFailedOpen {
                server: server.clone(),
                hook: *hook,
                reason: reason.clone(),
            },
            Notice::HookInjected { hook, server, text } => EntryKind::HookInjected {
                hook: *hook,
                server: server.clone(),
                text: text.clone(),
            },
            Notice::ToolDenied { server, tool, text } => EntryKind::ToolDenied {
                server: server.clone(),
                tool: tool.clone(),
                text: text.clone(),
            },
            Notice::HookSkipped {
                server,
                hook,
                reason,
            } => EntryKind::HookSkipped {
                server: server.clone(),
                hook: *hook,
                reason: reason.clone(),
            },
            Notice::UnknownToolRefused { name } => {
                EntryKind::UnknownToolRefused { name: name.clone() }
            }
            Notice::PermissionRejected { id, tool, standing } => EntryKind::PermissionRejected {
                id: id.clone(),
                tool: tool.clone(),
                standing: *standing,
            },
        }
    }

    fn fact(&mut self, index: usize, at_ms: u64, fact: &Input) {
        match fact {
            Input::Prompted { text } => {
                self.prompts += 1;
                let number = self.prompts;
                self.push(
                    index,
                    at_ms,
                    EntryKind::Prompt {
                        number,
                        text: text.clone(),
                    },
                );
            }
            Input::CatalogChanged { catalog } => {
                self.push(index, at_ms, catalog_entry(catalog));
            }
            Input::LlmReplied { reply } => {
                let (round, sent) = self.open_request.take().unwrap_or((self.rounds, at_ms));
                self.push(
                    index,
                    at_ms,
                    EntryKind::Reply {
                        round,
                        latency_ms: at_ms.saturating_sub(sent),
                        reply: reply.clone(),
                    },
                );
            }
            Input::LlmFailed { error } => {
                let (round, sent) = self.open_request.take().unwrap_or((self.rounds, at_ms));
                self.push(
                    index,
                    at_ms,
                    EntryKind::ModelFailed {
                        round,
                        latency_ms: at_ms.saturating_sub(sent),
                        error: error.clone(),
                    },
                );
            }
            Input::ToolFinished { id, output } => {
                if let Some(Entry {
                    kind: EntryKind::Tools { calls },
                    ..
                }) = self.open_calls.and_then(|i| self.entries.get_mut(i))
                    && let Some(run) = calls.iter_mut().find(|run| run.call.id == *id)
                {
                    run.output = Some(output.clone());
                    run.done_ms = Some(at_ms);
                }
            }
            Input::HookAnswered {
                server,
                reply,
                subject,
                ..
            } => {
                if let Some(Entry {
                    kind: EntryKind::HookRound { answers, .. },
                    at_ms: started,
                    ..
                }) = self.open_calls.and_then(|i| self.entries.get_mut(i))
                    && let Some(answer) = answers.iter_mut().find(|answer| {
                        answer.server == *server
                            && answer.subject == *subject
                            && answer.reply.is_none()
                    })
                {
                    answer.reply = Some(reply.clone());
                    answer.latency_ms = Some(at_ms.saturating_sub(*started));
                }
            }
            Input::PermissionDecided { id, decision } => {
                if let Some(Entry {
                    kind:
                        EntryKind::Permission {
                            call,
                            decision: slot,
                        },
                    ..
                }) = self.open_calls.and_then(|i| self.entries.get_mut(i))
                    && call.id == *id
                {
                    *slot = Some(*decision);
                }
            }
            // A setting of the session, not a step of its conversation; the questions asked
            // (or not) after it show what it changed.
            Input::PermissionSettingChanged { .. } => {}
            Input::Cancelled => self.push(index, at_ms, EntryKind::Cancelled),
            Input::PromptInterrupted => self.push(index, at_ms, EntryKind::Interrupted),
            Input::Closed => self.push(index, at_ms, EntryKind::Closed),
        }
    }
}

/// How deep the view nests subagents. A live session nests at most its policy's
/// `Subagents::max_depth` (1 unless configured), but a file may claim any depth, and each level
/// is a frame of every walk over the view (building it, text, HTML, JSON, dropping it): past
/// this depth an `agent` call shows without its subagent's lane.
pub(super) const MAX_NESTING: usize = 32;

/// Puts each subagent's entries under the tool run of the `agent` call that started it, its
/// own subagents' under its calls in turn, `depth` levels below the session (0 for its own
/// entries) and at most [`MAX_NESTING`] deep.
fn nest(entries: &mut [Entry], lanes: &mut BTreeMap<AgentId, Builder>, depth: usize) {
    if depth >= MAX_NESTING {
        return;
    }
    for entry in entries {
        let EntryKind::Tools { calls } = &mut entry.kind else {
            continue;
        };
        for run in calls {
            let id = AgentId(run.call.id.0.clone());
            if let Some(lane) = lanes.remove(&id) {
                let mut entries = lane.entries;
                nest(&mut entries, lanes, depth + 1);
                run.agent = Some(AgentLane { id, entries });
            }
        }
    }
}

fn catalog_entry(catalog: &Catalog) -> EntryKind {
    EntryKind::Catalog {
        servers: catalog
            .servers
            .iter()
            .map(|server| ServerView {
                server: server.server.clone(),
                tools: server.tools.iter().map(|t| t.name.clone()).collect(),
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::machine::{CallId, ToolCall};

    /// Steps holding one `agent` call with the id `id`.
    fn calling(id: &str) -> Vec<Entry> {
        let call = ToolCall {
            id: CallId(id.to_owned()),
            name: "agent".to_owned(),
            arguments: json!({}),
        };
        vec![Entry {
            index: 0,
            at_ms: 0,
            kind: EntryKind::Tools {
                calls: vec![ToolRun {
                    call,
                    output: None,
                    done_ms: None,
                    agent: None,
                }],
            },
        }]
    }

    #[test]
    fn a_file_claiming_subagents_nested_without_end_is_shown_to_a_bounded_depth() {
        // Each subagent starts the next: far deeper than a thread's stack could follow.
        const CHAIN: usize = 200_000;
        let mut top = Builder::new(Media::default());
        top.entries = calling("a0");
        for i in 0..CHAIN {
            let mut lane = Builder::new(Media::default());
            lane.entries = calling(&format!("a{}", i + 1));
            top.lanes.insert(AgentId(format!("a{i}")), lane);
        }
        let entries = top.into_entries();
        let mut depth = 0;
        let mut at = &entries;
        while let Some(lane) = at[0].kind.agent_lanes().next() {
            depth += 1;
            at = &lane.entries;
        }
        assert_eq!(depth, MAX_NESTING);
    }
}
