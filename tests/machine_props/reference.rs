//! The reference model: the rules as plain imperative code, over a history of its own.
//!
//! It builds the conversation message by message as the rules say, so that the differential test
//! compares every request the machine makes (its whole history, or for a summary the part sent
//! and the instruction) with what the rules make. Compaction is modelled from the same facts the
//! machine sees: the size of each message (`Message::size_bytes`, the one measuring convention
//! shared with the crate), the tokens the model reported, and the budget; the decisions (when to
//! compact, what the summary request holds, which turns the cut keeps, where the summary, the
//! running prompt and `_PostCompact`'s context go) are written here afresh.

use std::collections::{BTreeMap, BTreeSet};
use std::convert::Infallible;

use hookloop::hooks::{self, Hook, ServerName};
use hookloop::machine::{
    BYTES_PER_TOKEN, CallId, Content, FinishReason, Media, Message, Policy, SUMMARY_INSTRUCTION,
    SUMMARY_PREFIX, StopReason, ToolCall, ToolOutput, unknown_tool_text,
};
use serde_json::{Map, Value, json};

use super::{Ev, HookStep, ModelStep, SYSTEM_PROMPT, Scenario, SummaryStep, ToolStep, World};

/// The rules' trace for a scenario: what the machine must do, fact for fact.
pub(super) fn run_reference(s: &Scenario) -> Vec<Ev> {
    let mut world = World::new(s);
    let mut r = Reference::new(s);
    for p in 0..s.prompts {
        let finish = r.prompt(&mut world, format!("prompt {p}"));
        r.trace.push(Ev::Finish(finish));
    }
    // Closing: `_SessionEnd` once, its answers ignored.
    let end = s.hook_servers(Hook::SessionEnd);
    if !end.is_empty() {
        // A cancelled `_SessionEnd` only stops the waiting.
        let _ = r.round(&mut world, Hook::SessionEnd, end, 0);
    }
    r.trace
}

/// Non-empty hook answers: `(subject, server, trimmed text)`, by subject, then in server order.
type Said = Vec<(usize, ServerName, String)>;

/// Where a prompt's course goes next; `Err` ends the prompt with that reason.
type Flow<T = ()> = Result<T, FinishReason>;

/// The session-wide part of the reference model.
struct Reference<'a> {
    s: &'a Scenario,
    policy: Policy,
    trace: Vec<Ev>,
    objections: u32,
    timeouts: BTreeMap<ServerName, u32>,
    session_started: bool,
    /// The conversation, as the rules build it.
    history: Vec<Message>,
    /// Input tokens the model last reported, and the history's bytes when that request was sent;
    /// forgotten when the history is replaced.
    anchor: Option<(u64, usize)>,
    /// The history's bytes when the last turn request was sent.
    request_bytes: usize,
    /// The counter behind the ids the machine gives (`call_hlN`, `hook_hlN`).
    next_id: u32,
    /// A `_PostCompact` round was cancelled: the next prompt asks it before its first request.
    post_compact_owed: bool,
    /// The model-facing tool names, and the bytes the offered tools count for.
    tools: BTreeSet<String>,
    tool_bytes: usize,
}

/// One prompt's state.
struct Turn {
    text: String,
    /// Turn requests made (summaries excluded).
    rounds: u32,
    /// A compaction happened since the model last replied.
    compacted: bool,
    /// Where the prompt's message is in the history.
    pinned: usize,
}

impl<'a> Reference<'a> {
    fn new(s: &'a Scenario) -> Self {
        // Each server offers `run` to the model; hooks and `_Private` never reach it.
        let tools: BTreeSet<String> = (0..s.servers.len()).map(|i| format!("s{i}__run")).collect();
        let schema = json!({"type": "object"}).to_string();
        let tool_bytes = tools.iter().map(|name| name.len() + 1 + schema.len()).sum();
        Self {
            s,
            policy: s.policy(),
            trace: Vec::new(),
            objections: 0,
            timeouts: BTreeMap::new(),
            session_started: false,
            history: Vec::new(),
            anchor: None,
            request_bytes: 0,
            next_id: 0,
            post_compact_owed: false,
            tools,
            tool_bytes,
        }
    }

    // -----------------------------------------------------------------------------------------
    // Hook rounds
    // -----------------------------------------------------------------------------------------

    /// One round of `hook`, one call per server and subject (one when `subjects` is 0).
    fn round(
        &mut self,
        world: &mut World,
        hook: Hook,
        servers: Vec<ServerName>,
        subjects: usize,
    ) -> Flow<Said> {
        self.trace.push(Ev::Hooks(hook, servers.clone()));
        let mut answers = Vec::new();
        for subject in 0..subjects.max(1) {
            for server in &servers {
                answers.push((server.clone(), subject, world.hook(hook)));
            }
        }
        if self.s.reverse_answers {
            answers.reverse();
        }
        let mut said = Vec::new();
        for (server, subject, step) in answers {
            match step {
                HookStep::Cancel => return Err(FinishReason::Cancelled),
                HookStep::Timeout => {
                    let n = self.timeouts.entry(server.clone()).or_insert(0);
                    *n += 1;
                    if *n == 2 {
                        *n = 0;
                        self.trace.push(Ev::Kill(server));
                    }
                }
                HookStep::Object(text) => {
                    self.timeouts.remove(&server);
                    let text = text.trim();
                    if !text.is_empty() {
                        said.push((subject, server, text.to_owned()));
                    }
                }
                HookStep::Empty | HookStep::Blank | HookStep::ErrorResult => {
                    self.timeouts.remove(&server);
                }
                HookStep::Failed => {}
            }
        }
        // Answers are taken by subject, then in configuration order, however they arrived.
        said.sort_by_key(|(subject, server, _)| {
            let at = servers.iter().position(|s| s == server);
            (*subject, at)
        });
        Ok(said)
    }

    /// A round of `hook` on the servers that have it, if any.
    fn maybe_round(&mut self, world: &mut World, hook: Hook, subjects: usize) -> Flow<Said> {
        let servers = self.s.hook_servers(hook);
        if servers.is_empty() {
            return Ok(Vec::new());
        }
        self.round(world, hook, servers, subjects)
    }

    /// Each answer of a context hook goes into the history as a synthetic call of
    /// `<server>__<hook>` and its result.
    fn inject(&mut self, hook: Hook, said: Said) {
        for (_, server, text) in said {
            let id = self.fresh_id("hook");
            self.history.push(Message::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: id.clone(),
                    name: hooks::qualify(server.as_str(), hook.tool_name()),
                    arguments: Value::Object(Map::new()),
                }],
            });
            self.history.push(Message::ToolResult {
                call_id: id,
                output: ToolOutput::text(hooks::encode_hook_body(hook, server.as_str(), &text)),
            });
        }
    }

    /// `_PostCompact` on the fresh context; a cancel leaves it owed to the next prompt.
    fn post_compact(&mut self, world: &mut World) -> Flow {
        self.post_compact_owed = false;
        match self.maybe_round(world, Hook::PostCompact, 0) {
            Ok(said) => {
                self.inject(Hook::PostCompact, said);
                Ok(())
            }
            Err(reason) => {
                self.post_compact_owed = true;
                Err(reason)
            }
        }
    }

    // -----------------------------------------------------------------------------------------
    // A prompt
    // -----------------------------------------------------------------------------------------

    /// One prompt, from its hooks to its finish.
    fn prompt(&mut self, world: &mut World, text: String) -> FinishReason {
        let mut turn = Turn {
            text: text.clone(),
            rounds: 0,
            compacted: false,
            pinned: self.history.len(),
        };
        self.history.push(Message::user(text));
        match self.course(world, &mut turn) {
            Ok(never) => match never {},
            Err(reason) => reason,
        }
    }

    fn course(&mut self, world: &mut World, turn: &mut Turn) -> Flow<Infallible> {
        // `_SessionStart` at the first prompt only, then `_UserPromptSubmit`: context, after
        // the prompt; then a `_PostCompact` a cancel left owed.
        if !self.session_started {
            self.session_started = true;
            let said = self.maybe_round(world, Hook::SessionStart, 0)?;
            self.inject(Hook::SessionStart, said);
        }
        let said = self.maybe_round(world, Hook::UserPromptSubmit, 1)?;
        self.inject(Hook::UserPromptSubmit, said);
        if self.post_compact_owed {
            self.post_compact(world)?;
        }
        // The last reply ended its turn after an objection.
        let mut objected = false;
        loop {
            self.request(world, turn)?;
            let step = world.model();
            turn.compacted = false;
            let reply = match step {
                ModelStep::Cancel => return Err(FinishReason::Cancelled),
                ModelStep::Fail => {
                    return Err(FinishReason::Failed {
                        error: String::new(),
                    });
                }
                step => world.reply(&step),
            };
            if let Some(usage) = reply.usage.filter(|usage| usage.input_tokens > 0) {
                self.anchor = Some((usage.input_tokens, self.request_bytes));
            }
            let cut_short = match &reply.stop {
                StopReason::MaxTokens => Some(FinishReason::MaxTokens),
                StopReason::Refusal | StopReason::ContentFilter => Some(FinishReason::Refusal),
                // An unknown reason ends the prompt without `_Stop`, like `max_tokens`.
                StopReason::Other(reason) => Some(FinishReason::OtherStop {
                    stop_reason: reason.clone(),
                }),
                // Ends of a whole reply, and paused turns.
                _ => None,
            };
            if !reply.tool_calls.is_empty() {
                let calls = self.unique_ids(reply.tool_calls);
                self.history.push(Message::Assistant {
                    text: reply.text,
                    tool_calls: calls.clone(),
                });
                if let Some(reason) = cut_short {
                    // Calls of a reply cut short may be truncated: answered unrun.
                    for call in calls {
                        self.history.push(Message::ToolResult {
                            call_id: call.id,
                            output: ToolOutput::error(format!(
                                "not run: the reply ended with {:?}",
                                reply.stop
                            )),
                        });
                    }
                    return Err(reason);
                }
                self.tools(world, calls)?;
                objected = false;
                continue;
            }
            if !reply.text.is_empty() {
                self.history.push(Message::Assistant {
                    text: reply.text,
                    tool_calls: Vec::new(),
                });
            }
            if let Some(reason) = cut_short {
                return Err(reason);
            }
            match reply.stop {
                StopReason::PauseTurn => continue,
                StopReason::ToolUse => return Err(FinishReason::EndTurn),
                _ => {}
            }
            // A genuine end of turn.
            let stop_servers = self.s.hook_servers(Hook::Stop);
            let budget = self.policy.stop_max_rejections;
            if stop_servers.is_empty() || budget == 0 || objected || self.objections >= budget {
                return Err(FinishReason::EndTurn);
            }
            let said = self.round(world, Hook::Stop, stop_servers, 0)?;
            if said.is_empty() {
                return Err(FinishReason::EndTurn);
            }
            self.objections += 1;
            self.inject(Hook::Stop, said);
            objected = true;
        }
    }

    /// A turn request: the round cap ends the prompt; a history over budget is compacted first,
    /// at most once between two replies, and only when something older than its newest unit
    /// could go.
    fn request(&mut self, world: &mut World, turn: &mut Turn) -> Flow {
        let cap = self.policy.max_rounds;
        if cap != 0 && turn.rounds >= cap {
            return Err(FinishReason::MaxTurnRequests);
        }
        if !turn.compacted && self.over_budget() && self.fitting_suffix(0) > 0 {
            turn.compacted = true;
            self.compact(world, turn)?;
        }
        turn.rounds += 1;
        self.request_bytes = self.bytes();
        self.trace.push(Ev::Llm(self.history.clone()));
        Ok(())
    }

    /// `_PreCompact` (guidance for this summary only), the summary request of the newest
    /// history that fits beside the instruction, then the fresh context: [summary, running
    /// prompt], or without a summary the oldest turns cut; then `_PostCompact`.
    fn compact(&mut self, world: &mut World, turn: &mut Turn) -> Flow {
        let mut instruction = SUMMARY_INSTRUCTION.to_owned();
        // Answers are at most 12 bytes here: far below the cut of a hook's text.
        for (_, server, text) in self.maybe_round(world, Hook::PreCompact, 0)? {
            instruction.push_str(&format!(
                "\n\nThe summary must also keep what server {server} asks for:\n{text}"
            ));
        }
        let budget = self.policy.context_budget();
        let fixed = SYSTEM_PROMPT.len() + instruction.len();
        let from = self.fitting_suffix(budget.saturating_sub(tokens(fixed)));
        self.trace.push(Ev::Summary {
            messages: self.history[from..].to_vec(),
            instruction,
        });
        let summary = match world.summary() {
            SummaryStep::Text => Some("summary"),
            SummaryStep::Empty | SummaryStep::Fail => None,
            SummaryStep::Cancel => return Err(FinishReason::Cancelled),
        };
        match summary {
            Some(summary) => {
                self.replace(vec![
                    Message::user(format!("{SUMMARY_PREFIX}{summary}")),
                    Message::user(turn.text.clone()),
                ]);
                turn.pinned = 1;
            }
            // Aim at half the budget, so the next request does not compact again at once.
            None => turn.pinned = self.cut(turn.pinned, budget / 2),
        }
        self.post_compact(world)
    }

    /// The calls of one reply: refused (unknown tool, arguments not an object), gated by
    /// `_PreToolUse`, run, answered in call order, then `_PostToolUse` on those that ran.
    fn tools(&mut self, world: &mut World, calls: Vec<ToolCall>) -> Flow {
        let mut results: Vec<Option<ToolOutput>> = Vec::new();
        let mut run = Vec::new();
        for (i, call) in calls.iter().enumerate() {
            let refusal = if !self.tools.contains(&call.name) {
                Some(unknown_tool_text(&call.name))
            } else if let Value::String(raw) = &call.arguments {
                Some(format!(
                    "invalid arguments for {}: not a JSON object: {raw:?}",
                    call.name
                ))
            } else {
                None
            };
            if refusal.is_none() {
                run.push(i);
            }
            results.push(refusal.map(ToolOutput::error));
        }
        let mut ran = Vec::new();
        if !run.is_empty() {
            let said = match self.maybe_round(world, Hook::PreToolUse, run.len()) {
                Ok(said) => said,
                Err(reason) => {
                    self.record(&calls, results);
                    return Err(reason);
                }
            };
            // A call any server denies never runs: it is answered with every denial.
            let mut denials: Vec<Vec<Content>> = vec![Vec::new(); run.len()];
            for (subject, server, text) in said {
                denials[subject].push(Content::Text {
                    text: hooks::encode_hook_body(Hook::PreToolUse, server.as_str(), &text),
                });
            }
            for (i, denial) in run.into_iter().zip(denials) {
                if denial.is_empty() {
                    ran.push(i);
                } else {
                    results[i] = Some(ToolOutput {
                        content: denial,
                        is_error: true,
                    });
                }
            }
        }
        if ran.is_empty() {
            self.record(&calls, results);
            return Ok(());
        }
        self.trace.push(Ev::Tools(ran.len()));
        let mut answers: Vec<(usize, ToolStep)> = ran.iter().map(|&i| (i, world.tool())).collect();
        if self.s.reverse_answers {
            answers.reverse();
        }
        for (i, step) in answers {
            results[i] = Some(match step {
                ToolStep::Ok(bytes) => ToolOutput::text("r".repeat(bytes)),
                ToolStep::Error => ToolOutput::error("failed"),
                ToolStep::Cancel => {
                    self.record(&calls, results);
                    return Err(FinishReason::Cancelled);
                }
            });
        }
        self.record(&calls, results);
        let said = self.maybe_round(world, Hook::PostToolUse, ran.len())?;
        self.inject(Hook::PostToolUse, said);
        Ok(())
    }

    /// Every call's result, in call order; a call still unanswered gets `cancelled`.
    fn record(&mut self, calls: &[ToolCall], results: Vec<Option<ToolOutput>>) {
        for (call, output) in calls.iter().zip(results) {
            self.history.push(Message::ToolResult {
                call_id: call.id.clone(),
                output: output.unwrap_or_else(|| ToolOutput::error("cancelled")),
            });
        }
    }

    // -----------------------------------------------------------------------------------------
    // Ids
    // -----------------------------------------------------------------------------------------

    /// Ids unique in the history: an empty or repeated one is replaced by a fresh one.
    fn unique_ids(&mut self, calls: Vec<ToolCall>) -> Vec<ToolCall> {
        let mut seen = BTreeSet::new();
        calls
            .into_iter()
            .map(|mut call| {
                if call.id.as_str().is_empty() || self.has_id(&call.id) || seen.contains(&call.id) {
                    call.id = self.fresh_id("call");
                }
                seen.insert(call.id.clone());
                call
            })
            .collect()
    }

    fn fresh_id(&mut self, prefix: &str) -> CallId {
        loop {
            self.next_id += 1;
            let id = CallId(format!("{prefix}_hl{}", self.next_id));
            if !self.has_id(&id) {
                return id;
            }
        }
    }

    fn has_id(&self, id: &CallId) -> bool {
        self.history.iter().any(|message| match message {
            Message::Assistant { tool_calls, .. } => tool_calls.iter().any(|call| call.id == *id),
            Message::User { .. } | Message::ToolResult { .. } => false,
        })
    }

    // -----------------------------------------------------------------------------------------
    // Sizes
    // -----------------------------------------------------------------------------------------

    fn bytes(&self) -> usize {
        self.history.iter().map(size).sum()
    }

    /// The context estimate is over the budget: the tokens last reported plus what was added
    /// since, or, before any report, every byte (system prompt and tools included).
    fn over_budget(&self) -> bool {
        let estimate = match self.anchor {
            Some((reported, at)) => reported + tokens(self.bytes().saturating_sub(at)),
            None => tokens(self.bytes() + SYSTEM_PROMPT.len() + self.tool_bytes),
        };
        estimate > self.policy.context_budget()
    }

    /// Replaces the history; the tokens reported for the old one no longer apply.
    fn replace(&mut self, messages: Vec<Message>) {
        self.history = messages;
        self.anchor = None;
        self.request_bytes = 0;
    }

    /// Where the newest whole units that fit in `max` tokens start (the newest unit always
    /// counts). A unit is a message with the tool results that follow it.
    fn fitting_suffix(&self, max: u64) -> usize {
        let starts = unit_starts(&self.history, 0..self.history.len());
        newest_fitting(&self.history, &starts, self.history.len(), max, true)
            .unwrap_or(self.history.len())
    }

    /// The cut fallback: keeps the prompt at `pinned`; drops the oldest units after it until
    /// the rest fits in `max` (the newest unit always stays), and only if all of them stay,
    /// keeps the newest whole turns before it that still fit. Returns where the prompt is now.
    fn cut(&mut self, pinned: usize, max: u64) -> usize {
        let h = &self.history;
        let prompt = tokens_of(&h[pinned..=pinned]);
        let after = unit_starts(h, pinned + 1..h.len());
        let kept_after =
            newest_fitting(h, &after, h.len(), max.saturating_sub(prompt), true).unwrap_or(h.len());
        let first_kept = if kept_after == pinned + 1 || pinned + 1 == h.len() {
            let used = prompt + tokens_of(&h[pinned + 1..]);
            let turns: Vec<usize> = (0..pinned)
                .filter(|&i| matches!(h[i], Message::User { .. }))
                .collect();
            newest_fitting(h, &turns, pinned, max.saturating_sub(used), false).unwrap_or(pinned)
        } else {
            pinned
        };
        let mut kept = h[first_kept..=pinned].to_vec();
        kept.extend_from_slice(&h[kept_after..]);
        self.replace(kept);
        pinned - first_kept
    }
}

fn size(message: &Message) -> usize {
    message.size_bytes(&Media::default())
}

fn tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(BYTES_PER_TOKEN)
}

/// Tokens of messages, each rounded up on its own as the estimate counts them.
fn tokens_of(messages: &[Message]) -> u64 {
    messages.iter().map(|m| tokens(size(m))).sum()
}

/// The indexes in `range` where a unit starts: any message but a tool result.
fn unit_starts(history: &[Message], range: std::ops::Range<usize>) -> Vec<usize> {
    range
        .filter(|&i| !matches!(history[i], Message::ToolResult { .. }))
        .collect()
}

/// The earliest of `starts` such that `history[start..end]` fits in `max` tokens, taking starts
/// newest first and stopping at the first that does not fit; with `keep_newest` the newest
/// start counts whatever its size. `None` when none is taken.
fn newest_fitting(
    history: &[Message],
    starts: &[usize],
    end: usize,
    max: u64,
    keep_newest: bool,
) -> Option<usize> {
    let mut taken = None;
    for (n, &start) in starts.iter().rev().enumerate() {
        let newest = n == 0;
        if tokens_of(&history[start..end]) > max && !(newest && keep_newest) {
            break;
        }
        taken = Some(start);
    }
    taken
}
