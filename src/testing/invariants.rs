//! The machine's sovereignty invariants, defined once and checked after every fact by every
//! driver that feeds the machine: the exhaustive explorer (`testing::explore`) and the
//! property tests (`tests/machine_props.rs`, `tests/hook_props.rs`).
//!
//! [`Invariants`] keeps what the rules need to remember between facts (a `_Stop` round since the
//! last work, the objection latch, consecutive timeouts per server, the slack of the bound on
//! model requests, the calls a `_PreToolUse` round denied) and nothing else, so an explorer can
//! put it in its state's fingerprint.
//!
//! Whether `_Stop` (or a subagent's `_SubagentStop`) must be asked at a genuine end of turn is
//! judged from the facts: an allowed server has it in the last catalog fed
//! ([`Invariants::knowing`] names the first), and the objections spent are the rounds whose
//! answers said words, counted here. Which tools may run is read from the same catalogs.

use std::collections::{BTreeMap, BTreeSet};

use crate::hooks::{self, Hook, HookServers, ServerName};
use crate::machine::{
    CallId, Canon, Catalog, Effect, Grain, HookReply, Input, Machine, Message, Notice, Phase,
    Policy, Purpose, SUMMARY_PREFIX, StopReason,
};

use super::check_pairing;
use super::compaction::CompactionDue;
use super::consent::Consent;
use super::liveness::{HookLiveness, stop_hook};
use super::rounds::RoundCap;
use super::runs::{Runnable, in_batch};
use super::transition::{Transition, Violation, broken, ensure};
use super::words::HookWords;

/// The invariants, with what they remember between facts. Feed it every accepted fact with
/// [`check`](Self::check), right after the machine handled it and its orders were drained.
#[derive(Clone, Debug)]
pub struct Invariants {
    budget: u32,
    allow: HookServers,
    /// A `_Stop` round happened and no prompt or reply with tool calls came since.
    stop_since_work: bool,
    /// An objection was injected and the model has not made a tool call since (nor a prompt
    /// started): the next genuine end of turn is a declined objection.
    latch: bool,
    /// Hook timeouts in a row per server, counted here from the facts.
    timeouts: BTreeMap<ServerName, u32>,
    /// (prompts + replies with tool calls or paused + `_Stop` budget + compactions) − model
    /// requests: the crate doc's bound says it never goes below zero.
    slack: i64,
    /// Where `slack` is clamped after each fact, if anywhere (see [`Self::capping_slack`]).
    slack_cap: Option<i64>,
    compactions: u32,
    session_end_rounds: u32,
    /// A `_SessionStart` round has injected its context.
    session_started: bool,
    /// The calls the open `_PreToolUse` round is about, and the subjects denied so far.
    pre_tool: Option<(Vec<CallId>, BTreeSet<usize>)>,
    /// Calls a `_PreToolUse` round denied whose error result has not been checked yet.
    denied: BTreeSet<CallId>,
    /// Calls the user rejected whose error result has not been checked yet.
    rejected: BTreeSet<CallId>,
    /// The running prompt's words: a compaction keeps them.
    prompt: String,
    /// When each hook's round must happen.
    liveness: HookLiveness,
    /// What the open hook round's servers said.
    words: HookWords,
    /// The user's permission decisions.
    consent: Consent,
    /// The running prompt's requests under the round cap.
    rounds: RoundCap,
    /// The reply's runnable calls, owed a run.
    runs: Runnable,
    /// When a compaction is due.
    compaction: CompactionDue,
    /// The `_Stop` rounds that objected, counted from the answers fed.
    objections: u32,
    /// The open `_Stop` (or `_SubagentStop`) round: answers still awaited, and whether one
    /// said words.
    stop_round: Option<(usize, bool)>,
}

impl Invariants {
    /// The invariants of a new session under `policy`.
    pub fn new(policy: &Policy) -> Self {
        Self {
            budget: policy.stop_max_rejections,
            allow: policy.hook_servers.clone(),
            stop_since_work: false,
            latch: false,
            timeouts: BTreeMap::new(),
            slack: i64::from(policy.stop_max_rejections),
            slack_cap: None,
            compactions: 0,
            session_end_rounds: 0,
            session_started: false,
            pre_tool: None,
            denied: BTreeSet::new(),
            rejected: BTreeSet::new(),
            prompt: String::new(),
            liveness: HookLiveness::new(policy.hook_servers.clone()),
            words: HookWords::default(),
            consent: Consent::new(policy),
            rounds: RoundCap::new(policy),
            runs: Runnable::default(),
            compaction: CompactionDue::default(),
            objections: 0,
            stop_round: None,
        }
    }

    /// The same invariants, knowing the catalog fed before the first fact they see: every
    /// rule that reads the catalog (the tools offered, the destructive ones, the servers of
    /// each hook) judges from the start, not only after a `CatalogChanged` fact. Without it
    /// those rules read the machine's own sets until a catalog is fed.
    pub fn knowing(mut self, catalog: &Catalog) -> Self {
        self.runs = Runnable::knowing(catalog);
        self.consent = std::mem::take(&mut self.consent).knowing(catalog);
        self.liveness = self.liveness.knowing(catalog);
        self
    }

    /// The same invariants, for a subagent that starts holding its parent's "always" decisions
    /// (`standing`, by tool: true allows): the consent rules count them as the child's own.
    pub fn inheriting(mut self, standing: &BTreeMap<String, bool>) -> Self {
        self.consent = self.consent.inheriting(standing);
        self.runs = self.runs.inheriting(standing);
        self
    }

    /// Clamps the slack of the bound on model requests at `cap` after every fact, so that an
    /// explorer's states stay finite: a session of tool calls cut short by cancels piles up
    /// slack without end. Clamping only lowers the slack, so the check gets stricter, never
    /// laxer: the clamped slack after any sequence of facts is at most the true one (each fact
    /// adds the same amount to both, and the clamp then takes the smaller of the sum and `cap`),
    /// so a sequence that breaks the bound also breaks the clamped check. A cap too low would
    /// show as a violation the true count does not have, never hide one.
    pub fn capping_slack(mut self, cap: i64) -> Self {
        self.slack_cap = Some(cap);
        self.slack = self.slack.min(cap);
        self
    }

    /// Checks every invariant on one accepted fact: `before` is the phase the machine was in
    /// when `fact` came and `history_before` its history then, `m` the machine after it,
    /// `effects` every order it gave for it.
    pub fn check(
        &mut self,
        before: Phase,
        fact: &Input,
        m: &Machine,
        effects: &[Effect],
        history_before: &[Message],
    ) -> Result<(), Violation> {
        let turn_phase = matches!(before, Phase::Prompting | Phase::Objected);
        if before == Phase::Done {
            ensure(
                matches!(fact, Input::Closed) && effects.is_empty() && m.phase() == Phase::Done,
                "Done is absorbing",
                || {
                    format!(
                        "{} in Done gave {effects:?}, now {}",
                        fact.kind(),
                        m.phase()
                    )
                },
            )?;
            return Ok(());
        }
        self.liveness.learn(fact);
        self.check_orders(m, effects)?;
        let step = Transition {
            before,
            fact,
            machine: m,
            effects,
            history_before,
        };
        self.liveness.check(&step, self.runs.post_tool_owed())?;
        self.check_kills(fact, effects)?;
        self.check_stop(before, fact, m, effects)?;
        self.check_injections(fact, m, effects, history_before)?;
        self.check_denials(before, fact, m, effects)?;
        self.check_rejections(before, m, effects)?;
        self.words.check(&step)?;
        self.consent.check(&step)?;
        self.rounds.check(&step)?;
        self.runs.check(&step)?;
        self.compaction.check(&step)?;

        // Work and prompts move the slack of the bound up; every model request moves it down.
        match fact {
            Input::Prompted { .. } => self.slack += 1,
            Input::LlmReplied { reply }
                if turn_phase
                    && (!reply.tool_calls.is_empty() || reply.stop == StopReason::PauseTurn) =>
            {
                self.slack += 1;
            }
            _ => {}
        }
        let compactions = m.counters().compactions;
        self.slack += i64::from(compactions.saturating_sub(self.compactions));
        self.compactions = compactions;
        for effect in effects {
            if let Effect::CallLlm { .. } = effect {
                self.slack -= 1;
            }
        }
        ensure(
            self.slack >= 0,
            "model requests <= replies with tool calls or paused + prompts + _Stop budget + compactions",
            || format!("one request too many after {}", fact.kind()),
        )?;
        if let Some(cap) = self.slack_cap {
            self.slack = self.slack.min(cap);
        }
        ensure(
            m.counters().objections <= self.budget,
            "objections never exceed the budget",
            || {
                format!(
                    "{} objections, budget {}",
                    m.counters().objections,
                    self.budget
                )
            },
        )
    }

    /// Appends what the invariants remember to `e`, for an explorer's fingerprint. At the
    /// coarse and abstract grains the compaction count is left out: it only mirrors the
    /// machine's, to measure its growth.
    pub fn fingerprint(&self, e: &mut Canon) {
        e.bool(self.stop_since_work);
        e.bool(self.latch);
        e.int(self.slack);
        if e.grain() == Grain::Exact {
            e.num(self.compactions.into());
        }
        e.num(self.session_end_rounds.into());
        e.bool(self.session_started);
        e.num(self.timeouts.len() as u64);
        for (server, count) in &self.timeouts {
            e.str(server.as_str());
            e.num((*count).into());
        }
        match &self.pre_tool {
            None => e.tag(0),
            Some((ids, said)) => {
                e.tag(1);
                e.num(ids.len() as u64);
                for id in ids {
                    e.id(id);
                }
                e.num(said.len() as u64);
                for subject in said {
                    e.num(*subject as u64);
                }
            }
        }
        for set in [&self.denied, &self.rejected] {
            e.id_set(set.iter());
        }
        self.liveness.fingerprint(e);
        self.words.fingerprint(e);
        self.consent.fingerprint(e);
        self.rounds.fingerprint(e);
        self.runs.fingerprint(e);
        self.compaction.fingerprint(e);
        e.num(self.objections.into());
        match self.stop_round {
            None => e.tag(0),
            Some((left, said)) => {
                e.tag(1);
                e.num(left as u64);
                e.bool(said);
            }
        }
    }

    /// At most one awaited order per fact, last; each in the phase that waits for it; requests
    /// paired, never offering a hook; tools never hooks; hooks only on allowed servers.
    fn check_orders(&mut self, m: &Machine, effects: &[Effect]) -> Result<(), Violation> {
        let awaited: Vec<usize> = effects
            .iter()
            .enumerate()
            .filter(|(_, e)| {
                matches!(
                    e,
                    Effect::CallLlm { .. } | Effect::CallTools { .. } | Effect::CallHooks { .. }
                )
            })
            .map(|(i, _)| i)
            .collect();
        ensure(
            awaited.len() <= 1,
            "at most one awaited order per fact",
            || format!("{effects:?}"),
        )?;
        if let Some(&last) = awaited.last() {
            ensure(
                last == effects.len() - 1,
                "the awaited order comes last",
                || format!("{effects:?}"),
            )?;
        }
        for effect in effects {
            match effect {
                Effect::CallLlm {
                    purpose, messages, ..
                } => {
                    let request = m.request(*purpose);
                    ensure(
                        *messages == m.history().len(),
                        "a request pins the history",
                        || format!("{messages} messages, history {}", m.history().len()),
                    )?;
                    check_pairing(request.messages).map_err(|detail| Violation {
                        rule: "every tool result answers exactly one earlier call of its request",
                        detail,
                    })?;
                    if let Some(tool) = request
                        .tools
                        .iter()
                        .find(|t| hooks::is_hook(hooks::bare_name(&t.name)))
                    {
                        return broken("hooks are never offered to the model", tool.name.clone());
                    }
                    let expected = match purpose {
                        Purpose::Turn => [Phase::Prompting, Phase::Objected].contains(&m.phase()),
                        Purpose::Summary { .. } => {
                            m.phase() == Phase::Summarizing && request.tools.is_empty()
                        }
                    };
                    ensure(
                        expected,
                        "each order in the phase that waits for it",
                        || format!("{purpose:?} in {}", m.phase()),
                    )?;
                }
                Effect::CallTools { calls } => {
                    for call in calls {
                        ensure(
                            !hooks::is_hook(hooks::bare_name(&call.name)),
                            "hooks are never run by the model",
                            || call.name.clone(),
                        )?;
                        ensure(
                            self.liveness.offers(&call.name, m),
                            "only offered tools run",
                            || call.name.clone(),
                        )?;
                    }
                    ensure(
                        m.phase() == Phase::RunningTools,
                        "each order in the phase that waits for it",
                        || format!("tools in {}", m.phase()),
                    )?;
                }
                Effect::AskPermission { call } => {
                    ensure(
                        !hooks::is_hook(hooks::bare_name(&call.name)),
                        "hooks are never run by the model",
                        || call.name.clone(),
                    )?;
                    ensure(
                        m.phase() == Phase::AwaitingPermission,
                        "each order in the phase that waits for it",
                        || format!("permission for {} in {}", call.name, m.phase()),
                    )?;
                }
                Effect::CallHooks { hook, servers, .. } => {
                    for server in servers {
                        ensure(
                            self.allow.allows(server.as_str()),
                            "hooks run only on allowed servers",
                            || format!("{hook} on {server}"),
                        )?;
                    }
                    ensure(
                        m.phase() == Phase::of_hook(*hook),
                        "each order in the phase that waits for it",
                        || format!("{hook} round in {}", m.phase()),
                    )?;
                    if *hook == Hook::SessionEnd {
                        self.session_end_rounds += 1;
                        ensure(
                            self.session_end_rounds <= 1,
                            "_SessionEnd is called at most once",
                            String::new,
                        )?;
                    }
                }
                Effect::Finish { .. } => {
                    ensure(
                        matches!(
                            m.phase(),
                            Phase::Idle | Phase::Done | Phase::AwaitingHook(Hook::SessionEnd)
                        ),
                        "a finished prompt leaves the machine idle (or closing)",
                        || format!("finished in {}", m.phase()),
                    )?;
                }
                Effect::KillServer { .. } | Effect::Notify { .. } => {}
            }
        }
        Ok(())
    }

    /// A server is killed exactly on its second consecutive hook timeout, and at no other time.
    fn check_kills(&mut self, fact: &Input, effects: &[Effect]) -> Result<(), Violation> {
        let kills: Vec<&ServerName> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::KillServer { server } => Some(server),
                _ => None,
            })
            .collect();
        const RULE: &str = "a server is killed exactly on its second consecutive timeout";
        match fact {
            Input::HookAnswered { server, reply, .. } => match reply {
                HookReply::TimedOut => {
                    let count = self.timeouts.entry(server.clone()).or_insert(0);
                    *count += 1;
                    if *count == 2 {
                        self.timeouts.remove(server);
                        ensure(kills == [server], RULE, || {
                            format!("second timeout of {server}, kills {kills:?}")
                        })
                    } else {
                        ensure(kills.is_empty(), RULE, || {
                            format!("first timeout of {server}, kills {kills:?}")
                        })
                    }
                }
                HookReply::Text { .. } | HookReply::ErrorResult { .. } => {
                    self.timeouts.remove(server);
                    ensure(kills.is_empty(), RULE, || {
                        format!("an answer of {server}, kills {kills:?}")
                    })
                }
                HookReply::Failed { .. } | HookReply::Skipped { .. } => {
                    ensure(kills.is_empty(), RULE, || {
                        format!("no timeout, kills {kills:?}")
                    })
                }
            },
            _ => ensure(kills.is_empty(), RULE, || {
                format!("{}, kills {kills:?}", fact.kind())
            }),
        }
    }

    /// `_Stop` is asked at a genuine end of turn exactly when the rules allow it: not when off,
    /// at budget 0 or spent, not right after an objection the model declined, never twice
    /// without work or a prompt between.
    fn check_stop(
        &mut self,
        before: Phase,
        fact: &Input,
        m: &Machine,
        effects: &[Effect],
    ) -> Result<(), Violation> {
        let turn_phase = matches!(before, Phase::Prompting | Phase::Objected);
        let stop = stop_hook(m);
        // The objections, counted from the answers: a round of the end-of-turn hook in which a
        // server said words.
        if let Input::HookAnswered { hook, reply, .. } = fact
            && *hook == stop
            && before == Phase::of_hook(stop)
            && let Some((left, said)) = &mut self.stop_round
        {
            *said |= matches!(reply, HookReply::Text { text } if !text.trim().is_empty());
            *left = left.saturating_sub(1);
            if *left == 0 {
                self.objections += u32::from(*said);
                self.stop_round = None;
            }
        }
        if matches!(
            fact,
            Input::Cancelled | Input::Closed | Input::PromptInterrupted
        ) {
            self.stop_round = None;
        }
        let round = effects.iter().find_map(|e| match e {
            Effect::CallHooks {
                hook,
                servers,
                subjects,
                ..
            } if *hook == stop => Some(servers.len() * subjects.len().max(1)),
            _ => None,
        });
        let asked = round.is_some();
        match fact {
            Input::Prompted { .. } => {
                self.stop_since_work = false;
                self.latch = false;
            }
            Input::LlmReplied { reply } if turn_phase => {
                if !reply.tool_calls.is_empty() {
                    self.stop_since_work = false;
                    self.latch = false;
                } else if matches!(reply.stop, StopReason::EndTurn | StopReason::StopSequence) {
                    let objections = self.objections;
                    let has = self.liveness.has(stop, m);
                    let expected =
                        has && self.budget > 0 && objections < self.budget && !self.latch;
                    ensure(
                        asked == expected,
                        "_Stop is asked at a genuine end of turn exactly when the rules allow",
                        || {
                            format!(
                                "asked: {asked}; an allowed server has {stop} in the catalog fed: \
                                 {has}, budget {}, objections answered {objections}, right after \
                                 an objection: {}",
                                self.budget, self.latch
                            )
                        },
                    )?;
                }
            }
            _ => {}
        }
        if let Some(left) = round {
            ensure(self.budget > 0, "no _Stop with budget 0", String::new)?;
            ensure(
                self.objections < self.budget,
                "no _Stop with the budget spent",
                || format!("{} objections answered", self.objections),
            )?;
            self.stop_round = Some((left, false));
            ensure(
                !self.stop_since_work,
                "never two _Stop rounds without work or a prompt between",
                String::new,
            )?;
            self.stop_since_work = true;
        }
        if effects.iter().any(|e| {
            matches!(
                e,
                Effect::Notify {
                    notice: Notice::Objection { .. }
                }
            )
        }) {
            self.latch = true;
        }
        Ok(())
    }

    /// Hook answers enter the history only as the pair of the hook whose round this fact
    /// completed, and only for the hooks that inject (`_SessionStart`, `_UserPromptSubmit`,
    /// `_PostToolUse`, `_Stop`, `_PostCompact`); user messages only with a prompt or a
    /// compaction; `_SessionStart` at most once per server.
    fn check_injections(
        &mut self,
        fact: &Input,
        m: &Machine,
        effects: &[Effect],
        history_before: &[Message],
    ) -> Result<(), Violation> {
        const RULE: &str = "injections only at their points";
        if let Input::Prompted { text } = fact {
            self.prompt.clone_from(text);
        }
        let compacted = effects.iter().find_map(|e| match e {
            Effect::Notify {
                notice: Notice::Compacted { summarized, .. },
            } => Some(*summarized),
            _ => None,
        });
        let after = m.history();
        if let Some(summarized) = compacted {
            return self.check_compacted(summarized, after, history_before);
        }
        ensure(
            after.len() >= history_before.len() && after[..history_before.len()] == *history_before,
            "the history only grows between compactions",
            || format!("{} messages, then {}", history_before.len(), after.len()),
        )?;
        let mut reply_message = matches!(fact, Input::LlmReplied { .. });
        let mut session_start = false;
        for message in &after[history_before.len()..] {
            match message {
                Message::User { .. } => {
                    ensure(matches!(fact, Input::Prompted { .. }), RULE, || {
                        format!("a user message after {}", fact.kind())
                    })?
                }
                Message::Assistant { tool_calls, .. } => {
                    if std::mem::take(&mut reply_message) {
                        continue;
                    }
                    for call in tool_calls {
                        let hook = hooks::split_qualified(&call.name)
                            .and_then(|(_, bare)| Hook::from_tool_name(bare));
                        let answered = match fact {
                            Input::HookAnswered { hook, .. } => Some(*hook),
                            _ => None,
                        };
                        let injects = matches!(
                            hook,
                            Some(
                                Hook::SessionStart
                                    | Hook::UserPromptSubmit
                                    | Hook::PostToolUse
                                    | Hook::Stop
                                    | Hook::PostCompact
                                    | Hook::SubagentStart
                                    | Hook::SubagentStop
                            )
                        );
                        ensure(injects && hook == answered, RULE, || {
                            format!("{} added after {}", call.name, fact.kind())
                        })?;
                        session_start |=
                            matches!(hook, Some(Hook::SessionStart | Hook::SubagentStart));
                    }
                }
                Message::ToolResult { .. } => {}
            }
        }
        if session_start {
            // One round, whose answers are all injected on the fact that completes it.
            ensure(
                !self.session_started,
                "_SessionStart is injected once per session",
                String::new,
            )?;
            self.session_started = true;
        }
        Ok(())
    }

    /// A fresh context holds the summary and the running prompt, nothing else; without a
    /// summary, the newest messages kept as they were, the running prompt among them, every
    /// result still answering a call kept with it.
    fn check_compacted(
        &self,
        summarized: bool,
        after: &[Message],
        history_before: &[Message],
    ) -> Result<(), Violation> {
        const RULE: &str = "a compacted context keeps the running prompt and nothing new";
        let prompt = Message::user(self.prompt.clone());
        if summarized {
            return ensure(
                after.len() == 2
                    && matches!(&after[0], Message::User { text } if text.starts_with(SUMMARY_PREFIX))
                    && after[1] == prompt,
                RULE,
                || format!("summarized into {after:?}"),
            );
        }
        // Kept: a run of whole turns ending at the prompt, then the newest units after it.
        let kept = after.iter().rposition(|m| *m == prompt).is_some_and(|at| {
            let (head, tail) = after.split_at(at + 1);
            let rest = history_before.len().saturating_sub(tail.len());
            history_before.ends_with(tail)
                && history_before[..rest]
                    .iter()
                    .rposition(|m| *m == prompt)
                    .is_some_and(|q| history_before[..=q].ends_with(head))
        });
        ensure(kept, RULE, || {
            format!("{} messages cut to {after:?}", history_before.len())
        })?;
        check_pairing(after).map_err(|detail| Violation { rule: RULE, detail })
    }

    /// A call a `_PreToolUse` round denied never runs, and is answered exactly once, with an
    /// error carrying the denial.
    fn check_denials(
        &mut self,
        before: Phase,
        fact: &Input,
        m: &Machine,
        effects: &[Effect],
    ) -> Result<(), Violation> {
        const NEVER_RUNS: &str = "a denied call never runs";
        for effect in effects {
            if let Effect::CallHooks {
                hook: Hook::PreToolUse,
                subjects,
                ..
            } = effect
            {
                // The subjects are the reply's runnable calls, in order: the newest assistant
                // message's calls with the same name and arguments.
                let calls = m.history().iter().rev().find_map(|message| match message {
                    Message::Assistant { tool_calls, .. } => Some(tool_calls),
                    _ => None,
                });
                let mut ids = Vec::new();
                let mut rest = calls.map_or(&[][..], Vec::as_slice).iter();
                for subject in subjects {
                    let found = rest.by_ref().find(|call| {
                        subject["tool"] == call.name.as_str()
                            && subject["arguments"] == call.arguments
                    });
                    match found {
                        Some(call) => ids.push(call.id.clone()),
                        None => {
                            return broken(
                                NEVER_RUNS,
                                format!("subject {subject} is no call of the reply"),
                            );
                        }
                    }
                }
                self.pre_tool = Some((ids, BTreeSet::new()));
            }
        }
        if let Input::HookAnswered {
            hook: Hook::PreToolUse,
            reply: HookReply::Text { text },
            subject,
            ..
        } = fact
            && before == Phase::AwaitingHook(Hook::PreToolUse)
            && !text.trim().is_empty()
            && let Some((_, said)) = &mut self.pre_tool
        {
            said.insert(subject.map_or(0, |s| s as usize));
        }
        if before == Phase::AwaitingHook(Hook::PreToolUse)
            && m.phase() != Phase::AwaitingHook(Hook::PreToolUse)
            && let Some((ids, said)) = self.pre_tool.take()
            && matches!(fact, Input::HookAnswered { .. })
        {
            for subject in said {
                if let Some(id) = ids.get(subject) {
                    self.denied.insert(id.clone());
                }
            }
        }
        if matches!(fact, Input::Cancelled | Input::Closed) {
            // A round cut short denies nothing.
            self.pre_tool = None;
        }
        for effect in effects {
            if let Effect::CallTools { calls } = effect
                && let Some(call) = calls.iter().find(|c| self.denied.contains(&c.id))
            {
                return broken(NEVER_RUNS, format!("{} ({}) ran", call.id, call.name));
            }
        }
        // Once the batch's results are in the history, each denied call has exactly one, an
        // error carrying the `_PreToolUse` body.
        if !self.denied.is_empty() && !in_batch(m.phase()) {
            let denied = std::mem::take(&mut self.denied);
            for id in &denied {
                let results: Vec<_> = m
                    .history()
                    .iter()
                    .filter_map(|message| match message {
                        Message::ToolResult { call_id, output } if call_id == id => Some(output),
                        _ => None,
                    })
                    .collect();
                ensure(
                    results.len() == 1
                        && results[0].is_error
                        && results[0]
                            .joined_text()
                            .contains("\"hook\":\"_PreToolUse\""),
                    "a denial is answered exactly once, with an error carrying it",
                    || format!("{id}: {results:?}"),
                )?;
            }
        }
        Ok(())
    }

    /// A call the user rejected never runs, and is answered exactly once, with an error; and
    /// once a batch is over, every call in the history is answered exactly once.
    fn check_rejections(
        &mut self,
        before: Phase,
        m: &Machine,
        effects: &[Effect],
    ) -> Result<(), Violation> {
        const NEVER_RUNS: &str = "a rejected call never runs";
        for effect in effects {
            match effect {
                Effect::Notify {
                    notice: Notice::PermissionRejected { id, .. },
                } => {
                    ensure(self.rejected.insert(id.clone()), NEVER_RUNS, || {
                        format!("{id} rejected twice")
                    })?;
                }
                Effect::CallTools { calls } => {
                    if let Some(call) = calls.iter().find(|c| self.rejected.contains(&c.id)) {
                        return broken(NEVER_RUNS, format!("{} ({}) ran", call.id, call.name));
                    }
                }
                _ => {}
            }
        }
        if in_batch(m.phase()) {
            return Ok(());
        }
        for id in std::mem::take(&mut self.rejected) {
            let results: Vec<_> = m
                .history()
                .iter()
                .filter_map(|message| match message {
                    Message::ToolResult { call_id, output } if *call_id == id => Some(output),
                    _ => None,
                })
                .collect();
            ensure(
                results.len() == 1 && results[0].is_error,
                "a rejection is answered exactly once, with an error",
                || format!("{id}: {results:?}"),
            )?;
        }
        if in_batch(before) {
            check_pairing(m.history()).map_err(|detail| Violation {
                rule: "once a batch is over, every call is answered exactly once",
                detail,
            })?;
        }
        Ok(())
    }
}
