//! Liveness of the hook rounds: a round of hook H happens on exactly the allowed servers that
//! have H, with exactly the subjects its rule names, exactly when its rule says. Computed from
//! the facts and the orders alone, beside the safety rules of [`Invariants`](super::Invariants),
//! which hold one [`HookLiveness`] and feed it every fact.
//!
//! Each hook's trigger, as the spec and the crate doc state it:
//!
//! | hook | a round is opened on |
//! |---|---|
//! | `_SessionStart` | the session's first prompt |
//! | `_UserPromptSubmit` | every prompt, right after `_SessionStart`'s round if there is one |
//! | `_PreToolUse` | a reply with calls that can run (offered tools, object arguments), before any runs |
//! | `_PostToolUse` | the last result of a batch in which at least one call ran; one subject per call the facts allowed (`Runnable::post_tool_owed`) |
//! | `_Stop` | a genuine end of turn the budget rules allow (checked by `Invariants::check_stop`) |
//! | `_PreCompact` | the start of a compaction, before the summary is asked for |
//! | `_PostCompact` | the compaction itself; and a prompt after one whose round a cancel cut short |
//! | `_SessionEnd` | the first close of the session |
//!
//! When no allowed server has the hook, the round is skipped and the rule goes on to what the
//! round would have led to; a skipped round never shows as an order.
//!
//! Which servers have a hook, and which model tools a reply's calls may run, are read from the
//! catalogs fed (the first named by [`HookLiveness::knowing`], the others by `CatalogChanged`
//! facts), never from the machine's own sets: a machine that forgets a server's hook, or keeps
//! offering a tool a catalog took away, is judged by the catalog. Before any catalog is known
//! the machine's sets stand in (a driver of the invariants that names no first catalog).

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::hooks::{self, Hook, ServerName};
use crate::machine::{
    AGENT_TOOL, Catalog, Effect, Input, Machine, Notice, Phase, Purpose, StopReason,
};

use super::transition::{Transition, Violation, ensure};

/// The rule a missing, extra or misplaced hook round breaks.
pub const RULE: &str =
    "a round of each hook on exactly the allowed servers that have it, exactly when its rule says";

/// What the liveness rules remember between facts.
#[derive(Clone, Debug)]
pub struct HookLiveness {
    allow: hooks::HookServers,
    /// A prompt has come: `_SessionStart` had its chance.
    prompted: bool,
    /// The session was closed once: `_SessionEnd` had its chance.
    closed: bool,
    /// A `_PostCompact` round was cut short by a cancel: the next prompt asks it again.
    post_compact_owed: bool,
    /// The open hook round and how many answers it still waits for.
    open: Option<(Hook, usize)>,
    /// How many calls the open batch ran (the subjects `_PostToolUse` is owed).
    ran: usize,
    /// Compactions seen so far (the machine's counter, to see one start).
    compactions: u32,
    /// The `agent` calls the session's replies started, counted from the facts as the policy's
    /// limits count them.
    agents_run: u32,
    /// What the last catalog fed says; `None` until one is known. Shared between the clones an
    /// explorer makes: it changes only with a catalog.
    fed: Option<Arc<Fed>>,
}

/// What a catalog says that the liveness rules read.
#[derive(Debug, PartialEq, Eq)]
struct Fed {
    /// Per hook of [`Hook::EVERY`], by [`Hook::index`], the allowed servers that have it.
    servers: Vec<Vec<ServerName>>,
    /// The model-facing tools it offers (`agent` aside: the policy offers that one).
    offered: BTreeSet<String>,
}

impl Fed {
    fn of(catalog: &Catalog, allow: &hooks::HookServers) -> Self {
        let mut servers = vec![Vec::new(); Hook::EVERY.len()];
        for hook in Hook::EVERY {
            servers[hook.index()] = servers_of(catalog, allow, hook);
        }
        Self {
            servers,
            offered: super::runs::offered_by(catalog),
        }
    }
}

/// Where the start of a prompt is, as [`HookLiveness::prompt_start`] walks it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stage {
    SessionStart,
    UserPromptSubmit,
    OwedPostCompact,
}

impl HookLiveness {
    /// The rules of a new session whose allowlist is `allow`.
    pub fn new(allow: hooks::HookServers) -> Self {
        Self {
            allow,
            prompted: false,
            closed: false,
            post_compact_owed: false,
            open: None,
            ran: 0,
            compactions: 0,
            agents_run: 0,
            fed: None,
        }
    }

    /// The same rules, knowing the catalog fed before the first fact they see.
    pub fn knowing(mut self, catalog: &Catalog) -> Self {
        self.fed = Some(Arc::new(Fed::of(catalog, &self.allow)));
        self
    }

    /// Takes in what a fact says of the catalog, before any rule judges the orders it led to.
    pub fn learn(&mut self, fact: &Input) {
        if let Input::CatalogChanged { catalog } = fact {
            let fed = Fed::of(catalog, &self.allow);
            if self.fed.as_deref() != Some(&fed) {
                self.fed = Some(Arc::new(fed));
            }
        }
    }

    /// The allowed servers that have `hook` in the last catalog fed (the machine's, before
    /// any is known).
    pub fn servers<'a>(&'a self, hook: Hook, m: &'a Machine) -> &'a [ServerName] {
        match &self.fed {
            Some(fed) => fed.servers.get(hook.index()).map_or(&[], Vec::as_slice),
            None => m.hook_servers(hook),
        }
    }

    /// Whether an allowed server has `hook` in the last catalog fed.
    pub fn has(&self, hook: Hook, m: &Machine) -> bool {
        !self.servers(hook, m).is_empty()
    }

    /// Whether the model may call `name`: a tool the last catalog fed offers (the machine's
    /// tools, before any is known). `agent` is no catalog's: the policy offers it by the
    /// agent's depth, which only the machine knows, so its offer is read from the machine.
    pub fn offers(&self, name: &str, m: &Machine) -> bool {
        if name == AGENT_TOOL {
            return m.model_tools().iter().any(|t| t.name == name);
        }
        match &self.fed {
            Some(fed) => fed.offered.contains(name),
            None => m.model_tools().iter().any(|t| t.name == name),
        }
    }

    /// How many calls of a turn reply (`fact`, in `before`) run or reach `_PreToolUse`: those
    /// of an offered tool with object arguments, and of them an `agent` call only with a
    /// well-formed task, within the policy's calls per reply and subagents per session (which
    /// it counts toward, as the machine does).
    fn runnable(&mut self, before: Phase, fact: &Input, m: &Machine) -> usize {
        let Input::LlmReplied { reply } = fact else {
            return 0;
        };
        let starts = matches!(
            reply.stop,
            StopReason::ToolUse
                | StopReason::EndTurn
                | StopReason::StopSequence
                | StopReason::PauseTurn
        );
        if !matches!(before, Phase::Prompting | Phase::Objected) || !starts {
            return 0;
        }
        let limits = m.policy().subagents;
        let (mut count, mut agents) = (0, 0);
        for call in &reply.tool_calls {
            if !self.offers(&call.name, m) || !call.arguments.is_object() {
                continue;
            }
            if call.name == AGENT_TOOL {
                let Some(limits) = limits else { continue };
                if !well_formed_task(&call.arguments)
                    || self.agents_run >= limits.max_total
                    || agents >= limits.concurrency
                {
                    continue;
                }
                agents += 1;
                self.agents_run += 1;
            }
            count += 1;
        }
        count
    }

    /// Appends what the rules remember to `e`, for an explorer's fingerprint.
    pub fn fingerprint(&self, e: &mut crate::machine::Canon) {
        e.bool(self.prompted);
        e.bool(self.closed);
        e.bool(self.post_compact_owed);
        match self.open {
            None => e.tag(0),
            Some((hook, left)) => {
                e.tag(1);
                e.num(hook.index() as u64);
                e.num(left as u64);
            }
        }
        e.num(self.ran as u64);
        e.num(self.agents_run.into());
        match &self.fed {
            None => e.tag(0),
            Some(fed) => {
                e.tag(1);
                for servers in &fed.servers {
                    e.num(servers.len() as u64);
                    for server in servers {
                        e.str(server.as_str());
                    }
                }
                e.num(fed.offered.len() as u64);
                for name in &fed.offered {
                    e.str(name);
                }
            }
        }
    }

    /// Checks the hook rounds a fact opened against the rules, once [`learn`](Self::learn)
    /// took the fact in. `post_tool_owed` is how many
    /// subjects a `_PostToolUse` round this fact opens is owed, as the facts say (the calls of
    /// the batch they allow: `Runnable::post_tool_owed`); `None` leaves it to the calls that
    /// ran.
    pub fn check(
        &mut self,
        step: &Transition<'_>,
        post_tool_owed: Option<usize>,
    ) -> Result<(), Violation> {
        let Transition {
            before,
            fact,
            machine: m,
            effects,
            ..
        } = *step;
        let compaction_started = m.counters().compactions > self.compactions;
        self.compactions = m.counters().compactions;
        let runnable = self.runnable(before, fact, m);
        let expected = self.expected(before, fact, m, effects, compaction_started, runnable);
        let asked: Vec<(Hook, &[ServerName], usize)> = effects
            .iter()
            .filter_map(|e| match e {
                Effect::CallHooks {
                    hook,
                    servers,
                    subjects,
                    ..
                } => Some((*hook, servers.as_slice(), subjects.len())),
                _ => None,
            })
            .collect();
        let actual = asked.first().map(|(hook, ..)| *hook);
        match expected {
            // A genuine end of turn: whether `_Stop` is asked is the stop rule's to say.
            Expect::StopRule => ensure(
                actual.is_none() || actual == Some(stop_hook(m)),
                RULE,
                || format!("{actual:?} at an end of turn"),
            )?,
            Expect::Round(hook) => ensure(actual == hook, RULE, || {
                format!(
                    "after {} in {before}: expected {}, got {}",
                    fact.kind(),
                    name(hook),
                    name(actual)
                )
            })?,
        }
        for (hook, servers, subjects) in asked {
            let owed_servers = self.servers(hook, m);
            ensure(servers == owed_servers, RULE, || {
                format!("{hook} on {servers:?}, the allowed servers that have it: {owed_servers:?}")
            })?;
            let owed = match hook {
                Hook::PreToolUse => runnable,
                Hook::PostToolUse => post_tool_owed.unwrap_or(self.ran),
                Hook::UserPromptSubmit | Hook::SubagentStart | Hook::SubagentStop => 1,
                Hook::SessionStart
                | Hook::Stop
                | Hook::PreCompact
                | Hook::PostCompact
                | Hook::SessionEnd => 0,
            };
            ensure(subjects == owed, RULE, || {
                format!("{hook} about {subjects} subjects, its rule names {owed}")
            })?;
            if hook == Hook::PostCompact {
                self.post_compact_owed = false;
            }
            self.open = Some((hook, servers.len() * subjects.max(1)));
        }
        self.check_summary(before, fact, effects, compaction_started)?;
        if let Input::CatalogChanged { .. } = fact {
            // Every hook, the subagent ones too: a child's `_SubagentStart` and `_SubagentStop`
            // rounds go to the servers the catalog gives them.
            for hook in Hook::EVERY {
                let servers = self.servers(hook, m);
                ensure(servers == m.hook_servers(hook), RULE, || {
                    format!(
                        "the catalog gives {hook} to {servers:?}, the machine asks {:?}",
                        m.hook_servers(hook)
                    )
                })?;
            }
        }
        if effects.iter().any(|e| {
            matches!(
                e,
                Effect::Notify {
                    notice: Notice::Compacted { .. }
                }
            )
        }) {
            // A compaction asks `_PostCompact` itself: nothing stays owed.
            self.post_compact_owed = false;
        }
        if matches!(fact, Input::Cancelled) && before == Phase::of_hook(Hook::PostCompact) {
            self.post_compact_owed = true;
        }
        if matches!(fact, Input::Cancelled | Input::Closed) && actual.is_none() {
            self.open = None;
        }
        for effect in effects {
            if let Effect::CallTools { calls } = effect {
                self.ran = calls.len();
            }
        }
        Ok(())
    }

    /// The round `fact` must open, if any.
    fn expected(
        &mut self,
        before: Phase,
        fact: &Input,
        m: &Machine,
        effects: &[Effect],
        compaction_started: bool,
        runnable: usize,
    ) -> Expect {
        let held = Hook::EVERY.map(|hook| self.has(hook, m));
        let has = |hook: Hook| held[hook.index()];
        // What a model request the rules make next leads to: a compaction's `_PreCompact`.
        let request = || {
            Expect::Round((compaction_started && has(Hook::PreCompact)).then_some(Hook::PreCompact))
        };
        let turn_phase = matches!(before, Phase::Prompting | Phase::Objected);
        match fact {
            Input::Prompted { .. } if before == Phase::Idle => self
                .prompt_start(Stage::SessionStart, m)
                .map_or_else(request, |h| Expect::Round(Some(h))),
            // A subagent's end is not the session's: it asks no `_SessionEnd`.
            Input::Closed if !std::mem::replace(&mut self.closed, true) => Expect::Round(
                (has(Hook::SessionEnd) && m.agent().is_none()).then_some(Hook::SessionEnd),
            ),
            Input::HookAnswered { hook, .. } if self.completes(*hook) => {
                let next = match hook {
                    Hook::SessionStart | Hook::SubagentStart => {
                        self.prompt_start(Stage::UserPromptSubmit, m)
                    }
                    Hook::UserPromptSubmit => self.prompt_start(Stage::OwedPostCompact, m),
                    Hook::PreCompact
                    | Hook::PostCompact
                    | Hook::SessionEnd
                    | Hook::PreToolUse
                    | Hook::PostToolUse
                    | Hook::Stop
                    | Hook::SubagentStop => None,
                };
                next.map_or_else(request, |h| Expect::Round(Some(h)))
            }
            Input::LlmReplied { .. } | Input::LlmFailed { .. } if before == Phase::Summarizing => {
                let compacted = effects.iter().any(|e| {
                    matches!(
                        e,
                        Effect::Notify {
                            notice: Notice::Compacted { .. }
                        }
                    )
                });
                Expect::Round((compacted && has(Hook::PostCompact)).then_some(Hook::PostCompact))
            }
            Input::LlmReplied { reply } if turn_phase => {
                let runs = matches!(
                    reply.stop,
                    StopReason::ToolUse
                        | StopReason::EndTurn
                        | StopReason::StopSequence
                        | StopReason::PauseTurn
                );
                if !reply.tool_calls.is_empty() && runs && runnable > 0 && has(Hook::PreToolUse) {
                    Expect::Round(Some(Hook::PreToolUse))
                } else if reply.tool_calls.is_empty()
                    && matches!(reply.stop, StopReason::EndTurn | StopReason::StopSequence)
                {
                    Expect::StopRule
                } else {
                    request()
                }
            }
            Input::ToolFinished { .. }
                if before == Phase::RunningTools && m.phase() != Phase::RunningTools =>
            {
                if has(Hook::PostToolUse) {
                    Expect::Round(Some(Hook::PostToolUse))
                } else {
                    request()
                }
            }
            Input::Prompted { .. }
            | Input::Closed
            | Input::HookAnswered { .. }
            | Input::LlmReplied { .. }
            | Input::LlmFailed { .. }
            | Input::ToolFinished { .. }
            | Input::PermissionDecided { .. }
            | Input::CatalogChanged { .. }
            | Input::PermissionSettingChanged { .. }
            | Input::Cancelled
            | Input::PromptInterrupted => request(),
        }
    }

    /// Whether an answer of `hook` completes the open round.
    fn completes(&mut self, hook: Hook) -> bool {
        match &mut self.open {
            Some((open, left)) if *open == hook && *left > 0 => {
                *left -= 1;
                if *left == 0 {
                    self.open = None;
                    return true;
                }
                false
            }
            _ => false,
        }
    }

    /// The start of a prompt from `stage` on: the first of `_SessionStart` (first prompt),
    /// `_UserPromptSubmit` and an owed `_PostCompact` that a server has; `None` once the
    /// prompt goes on to its first request.
    fn prompt_start(&mut self, mut stage: Stage, m: &Machine) -> Option<Hook> {
        let held = Hook::EVERY.map(|hook| self.has(hook, m));
        let has = |hook: Hook| held[hook.index()];
        // A subagent asks `_SubagentStart` in place of the session's two prompt hooks.
        let child = m.agent().is_some();
        if stage == Stage::SessionStart {
            let first = !std::mem::replace(&mut self.prompted, true);
            let start = if child {
                Hook::SubagentStart
            } else {
                Hook::SessionStart
            };
            if first && has(start) {
                return Some(start);
            }
            stage = Stage::UserPromptSubmit;
        }
        if stage == Stage::UserPromptSubmit && !child && has(Hook::UserPromptSubmit) {
            return Some(Hook::UserPromptSubmit);
        }
        if std::mem::take(&mut self.post_compact_owed) && has(Hook::PostCompact) {
            return Some(Hook::PostCompact);
        }
        None
    }

    /// The summary is asked for exactly once per compaction: on the fact that started it when
    /// no server has `_PreCompact`, else on the fact that completed that round; and the
    /// context is compacted only on the summary's answer.
    fn check_summary(
        &self,
        before: Phase,
        fact: &Input,
        effects: &[Effect],
        compaction_started: bool,
    ) -> Result<(), Violation> {
        let summary = effects.iter().any(|e| {
            matches!(
                e,
                Effect::CallLlm {
                    purpose: Purpose::Summary { .. },
                    ..
                }
            )
        });
        let pre_compact_done = before == Phase::of_hook(Hook::PreCompact)
            && matches!(fact, Input::HookAnswered { .. })
            && self.open.is_none();
        let pre_compact_asked = effects.iter().any(|e| {
            matches!(
                e,
                Effect::CallHooks {
                    hook: Hook::PreCompact,
                    ..
                }
            )
        });
        let expected = (compaction_started && !pre_compact_asked) || pre_compact_done;
        ensure(summary == expected, RULE, || {
            format!(
                "summary asked: {summary} after {} in {before} (compaction started: \
                 {compaction_started}, _PreCompact round done: {pre_compact_done})",
                fact.kind()
            )
        })?;
        let compacted = effects.iter().any(|e| {
            matches!(
                e,
                Effect::Notify {
                    notice: Notice::Compacted { .. }
                }
            )
        });
        ensure(
            !compacted || before == Phase::Summarizing,
            "the context is compacted only on the summary's answer",
            || format!("compacted after {} in {before}", fact.kind()),
        )
    }
}

/// What a fact must open.
enum Expect {
    /// This round, or none.
    Round(Option<Hook>),
    /// A genuine end of turn: `_Stop` or nothing, as the stop rule says.
    StopRule,
}

/// The hook a genuine end of turn asks: `_Stop`, or `_SubagentStop` in a subagent.
pub(super) fn stop_hook(m: &Machine) -> Hook {
    match m.agent() {
        Some(_) => Hook::SubagentStop,
        None => Hook::Stop,
    }
}

fn name(hook: Option<Hook>) -> String {
    hook.map_or_else(|| "no round".to_owned(), |h| h.to_string())
}

/// Whether an `agent` call's arguments are a task it can run: a description and a prompt, both
/// strings, the prompt not blank.
fn well_formed_task(arguments: &serde_json::Value) -> bool {
    let text = |name: &str| arguments.get(name).and_then(serde_json::Value::as_str);
    text("description").is_some() && text("prompt").is_some_and(|p| !p.trim().is_empty())
}

/// The allowed servers that have each hook, computed from a catalog as the spec says: a
/// server's tool whose bare name is a hook's, on a server the allowlist names.
pub fn servers_of(
    catalog: &crate::machine::Catalog,
    allow: &hooks::HookServers,
    hook: Hook,
) -> Vec<ServerName> {
    let mut servers = Vec::new();
    for entry in &catalog.servers {
        if allow.allows(entry.server.as_str())
            && entry.tools.iter().any(|t| t.name == hook.tool_name())
            && !servers.contains(&entry.server)
        {
            servers.push(entry.server.clone());
        }
    }
    servers
}
