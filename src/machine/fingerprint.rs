//! A canonical encoding of everything the machine's future depends on, for an explorer that
//! visits each distinct state once (feature `testing`).
//!
//! # Why it is sound
//!
//! Two machines with the same encoding accept the same facts and answer each with the same
//! orders, except for words inside messages and the digests that pin them. The encoding keeps:
//! the state and its data (the outstanding calls of a batch and which have results, the hook,
//! servers and answers of a round, the continuation); the session counters; the prompt's round
//! count, compaction latch and pinned index; the owed `_PostCompact`, `_SessionStart` and
//! `_SessionEnd` flags; the id counter; the catalog as the machine uses it (model tool names,
//! their size, the servers of each hook); and the *shape* of the history: each message's kind,
//! its size, every call's id and name, each result's call id and error flag.
//!
//! It drops the words (prompt, reply and hook text, arguments, tool output). The machine reads
//! words only through (a) their size, which decides compaction and is kept, per message and in
//! the estimate's figures; (b) whether a hook answer or a summary is empty once trimmed, decided
//! when the fact arrives and kept as its outcome (a round's answer is quiet or said, a summary
//! is a user message or the fallback's dropped turns); (c) call ids and tool names, kept. It
//! also drops the history's lineage and the catalog's, which are identities that no decision
//! reads, and the outbox, which a driver has drained before it feeds the next fact.
//!
//! `Done` is encoded alone: it is absorbing, refuses every fact but `Closed`, and answers that
//! with nothing, whatever led there.

use super::round::{Answer, HookRound, ToolBatch};
use super::{Machine, Message, Resume, State, Then};
use crate::hooks::Hook;

impl Machine {
    /// Appends the machine's canonical encoding to `out` (see the module docs for what it keeps
    /// and why dropping the rest is sound).
    pub(crate) fn fingerprint(&self, out: &mut Vec<u8>) {
        let mut e = Enc(out);
        let state = self.sm.state();
        if let State::Done {} = state {
            e.tag(0xD0);
            return;
        }
        match state {
            State::Idle {} => e.tag(1),
            State::Prompting {} => e.tag(2),
            State::Objected {} => e.tag(3),
            State::Summarizing { resume } => {
                e.tag(4);
                e.resume(*resume);
            }
            State::RunningTools { batch } => {
                e.tag(5);
                e.batch(batch);
            }
            State::Hooking { round, then } => {
                e.tag(6);
                e.round(round);
                e.then(then);
            }
            State::AwaitingPermission { batch, at } => {
                e.tag(7);
                e.batch(batch);
                e.num(*at as u64);
            }
            State::Done {} => e.tag(0xD0),
        }
        let core = self.sm.inner();
        e.num(core.counters.objections.into());
        e.num(core.counters.compactions.into());
        e.num(core.counters.consecutive_timeouts.len() as u64);
        for (server, count) in &core.counters.consecutive_timeouts {
            e.str(server.as_str());
            e.num((*count).into());
        }
        e.num(core.turn.rounds.into());
        e.num(core.turn.text.len() as u64);
        e.bool(core.turn.compacted);
        e.num(core.turn.pinned as u64);
        e.bool(core.post_compact_owed);
        e.bool(core.session_started);
        e.bool(core.session_ended);
        e.num(core.summary_instruction.len() as u64);
        e.num(core.next_id);
        let mut names: Vec<&String> = core.tools.names.iter().collect();
        names.sort();
        e.num(names.len() as u64);
        for name in names {
            e.str(name);
        }
        let mut destructive: Vec<&String> = core.tools.destructive.iter().collect();
        destructive.sort();
        e.num(destructive.len() as u64);
        for name in destructive {
            e.str(name);
        }
        let mut standing: Vec<(&String, &bool)> = core.standing.iter().collect();
        standing.sort();
        e.num(standing.len() as u64);
        for (name, allows) in standing {
            e.str(name);
            e.bool(*allows);
        }
        e.num(core.tools.bytes as u64);
        for hook in Hook::ALL {
            let servers = core.tools.servers(hook);
            e.num(servers.len() as u64);
            for server in servers {
                e.str(server.as_str());
            }
        }
        let (bytes, anchor, request_bytes) = core.history.accounting();
        e.num(bytes as u64);
        match anchor {
            Some((tokens, at)) => {
                e.tag(1);
                e.num(tokens);
                e.num(at as u64);
            }
            None => e.tag(0),
        }
        e.num(request_bytes as u64);
        let media = &core.policy.media;
        e.num(core.history.len() as u64);
        for message in core.history.messages() {
            e.num(message.size_bytes(media) as u64);
            match message {
                Message::User { .. } => e.tag(1),
                Message::Assistant { tool_calls, .. } => {
                    e.tag(2);
                    e.num(tool_calls.len() as u64);
                    for call in tool_calls {
                        e.str(call.id.as_str());
                        e.str(&call.name);
                    }
                }
                Message::ToolResult { call_id, output } => {
                    e.tag(3);
                    e.str(call_id.as_str());
                    e.bool(output.is_error);
                }
            }
        }
    }
}

/// The encoder: fixed-width numbers, length-prefixed strings, so no two inputs meet.
struct Enc<'a>(&'a mut Vec<u8>);

impl Enc<'_> {
    fn tag(&mut self, tag: u8) {
        self.0.push(tag);
    }

    fn num(&mut self, n: u64) {
        self.0.extend_from_slice(&n.to_le_bytes());
    }

    fn bool(&mut self, b: bool) {
        self.0.push(u8::from(b));
    }

    fn str(&mut self, s: &str) {
        self.num(s.len() as u64);
        self.0.extend_from_slice(s.as_bytes());
    }

    fn resume(&mut self, resume: Resume) {
        self.tag(match resume {
            Resume::Prompting => 0,
            Resume::Objected => 1,
        });
    }

    fn batch(&mut self, batch: &ToolBatch) {
        self.num(batch.ids.len() as u64);
        for (id, result) in batch.ids.iter().zip(&batch.results) {
            self.str(id.as_str());
            match result {
                None => self.tag(0),
                Some(output) => {
                    self.tag(1);
                    self.bool(output.is_error);
                    self.num(output.joined_text().len() as u64);
                }
            }
        }
        self.num(batch.ran.len() as u64);
        for call in &batch.ran {
            self.str(call.id.as_str());
            self.str(&call.name);
        }
    }

    fn round(&mut self, round: &HookRound) {
        self.num(
            Hook::ALL
                .iter()
                .position(|h| *h == round.hook)
                .unwrap_or(usize::MAX) as u64,
        );
        self.num(round.servers.len() as u64);
        for server in &round.servers {
            self.str(server.as_str());
        }
        self.num(round.answers.len() as u64);
        for answer in &round.answers {
            match answer {
                Answer::Waiting => self.tag(0),
                Answer::Quiet => self.tag(1),
                Answer::Said(text) => {
                    self.tag(2);
                    self.num(text.len() as u64);
                }
            }
        }
    }

    fn then(&mut self, then: &Then) {
        match then {
            Then::SessionStart => self.tag(0),
            Then::UserPromptSubmit => self.tag(1),
            Then::PreToolUse { batch } => {
                self.tag(2);
                self.batch(batch);
            }
            Then::PostToolUse => self.tag(3),
            Then::Stop => self.tag(4),
            Then::PreCompact { resume } => {
                self.tag(5);
                self.resume(*resume);
            }
            Then::PostCompact { resume } => {
                self.tag(6);
                self.resume(*resume);
            }
            Then::SessionEnd => self.tag(7),
        }
    }
}
