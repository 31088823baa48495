//! A runnable call runs, judged from the facts alone: a call of a reply that may run tools,
//! naming a tool the last catalog fed offers, with arguments that are a JSON object, runs
//! unless the facts excuse it: a `_PreToolUse` server said words about it, the user rejected
//! it (that call, or its tool "always"), a catalog change took its tool away, or a cancel, close
//! or interruption cut the batch short. A machine that over-denies, or answers a runnable call
//! with an error result it never ran, breaks it; no rule that reads the machine's own sets
//! (`only offered tools run`, the denial and consent rules) sees either.
//!
//! The offered tools are read from `CatalogChanged` facts; until one comes (or
//! [`Runnable::knowing`] names the first catalog) nothing is judged. `agent` calls are left to
//! the subagent rules (their own limits refuse them).

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::hooks::{self, Hook};
use crate::machine::{
    AGENT_TOOL, CallId, Canon, Catalog, Effect, HookReply, Input, Message, Phase,
};
use crate::machine::{PermissionDecision, StopReason};

use super::transition::{Transition, Violation, ensure};

/// The rule a runnable call left unrun breaks.
pub const RUNS: &str = "a runnable call nobody denied or rejected runs";

/// What the rule remembers between facts.
#[derive(Clone, Debug, Default)]
pub struct Runnable {
    /// The model-facing names the last catalog fed offers; `None` until one is known.
    offered: Option<BTreeSet<String>>,
    /// The reply's runnable calls that have neither run nor been excused, in call order.
    owed: Vec<Owed>,
    /// The open `_PreToolUse` round's subjects, as the owed calls they are (`None`: a subject
    /// the facts do not make runnable, which the rule does not judge).
    subjects: Vec<Option<CallId>>,
    /// The call the user is being asked about, and its tool (owed or not: a call whose tool
    /// left while the question was open is still decided, and an "always" stands).
    asked: Option<(CallId, String)>,
    /// Tools the user rejected "always".
    rejected: BTreeSet<String>,
    /// Owed calls whose tool the last catalog fed does not offer, while the batch has not
    /// launched: the tool may come back before it does, and then the call runs.
    withdrawn: Vec<Owed>,
    /// The batch's calls were sent to run: a tool taken away now excuses nothing more.
    launched: bool,
    /// The batch's owed calls that ran: with those still owed, the calls the facts allow,
    /// each owed a subject of `_PostToolUse`.
    ran_owed: usize,
    /// The batch's `agent` calls that ran, which the subagent rules judge: each is a subject
    /// of `_PostToolUse` too.
    agents_ran: usize,
}

#[derive(Clone, Debug)]
struct Owed {
    id: CallId,
    tool: String,
    arguments: Value,
}

/// The model-facing names a catalog offers: each server's tools but its hooks, qualified.
pub fn offered_by(catalog: &Catalog) -> BTreeSet<String> {
    catalog
        .servers
        .iter()
        .flat_map(|entry| {
            entry
                .tools
                .iter()
                .filter(|tool| !hooks::is_hook(&tool.name))
                .map(|tool| hooks::qualify(entry.server.as_str(), &tool.name))
        })
        .collect()
}

impl Runnable {
    /// The rule for a session whose first catalog, fed before the first fact it sees, is
    /// `catalog`.
    pub fn knowing(catalog: &Catalog) -> Self {
        Self {
            offered: Some(offered_by(catalog)),
            ..Self::default()
        }
    }

    /// The rule for a subagent that starts holding its parent's "always" decisions
    /// (`standing`, by tool: true allows): the tools rejected for good stay unrun in it too.
    pub fn inheriting(mut self, standing: &BTreeMap<String, bool>) -> Self {
        let rejected = standing.iter().filter(|(_, allows)| !**allows);
        self.rejected.extend(rejected.map(|(tool, _)| tool.clone()));
        self
    }

    /// Appends what the rule remembers to `e`, for an explorer's fingerprint.
    pub fn fingerprint(&self, e: &mut Canon) {
        match &self.offered {
            None => e.tag(0),
            Some(names) => {
                e.tag(1);
                e.num(names.len() as u64);
                for name in names {
                    e.str(name);
                }
            }
        }
        e.num(self.owed.len() as u64);
        for owed in &self.owed {
            e.id(&owed.id);
            e.str(&owed.tool);
        }
        e.num(self.subjects.len() as u64);
        for id in &self.subjects {
            match id {
                None => e.tag(0),
                Some(id) => {
                    e.tag(1);
                    e.id(id);
                }
            }
        }
        match &self.asked {
            None => e.tag(0),
            Some((id, tool)) => {
                e.tag(1);
                e.id(id);
                e.str(tool);
            }
        }
        e.num(self.rejected.len() as u64);
        for tool in &self.rejected {
            e.str(tool);
        }
        e.num(self.withdrawn.len() as u64);
        for owed in &self.withdrawn {
            e.id(&owed.id);
            e.str(&owed.tool);
        }
        e.bool(self.launched);
        e.num(self.ran_owed as u64);
        e.num(self.agents_ran as u64);
    }

    /// The subjects the batch's `_PostToolUse` round is owed, from the facts: one for each
    /// call they allow (an offered tool, object arguments, neither denied nor rejected nor
    /// withdrawn), and one for each `agent` call that ran. `None` while no catalog is known.
    pub fn post_tool_owed(&self) -> Option<usize> {
        self.offered.as_ref()?;
        let unrun = self
            .owed
            .iter()
            .filter(|owed| !self.rejected.contains(&owed.tool))
            .count();
        Some(self.ran_owed + unrun + self.agents_ran)
    }

    /// Takes `id` out of the calls owed a run: the facts excuse it.
    fn excuse(&mut self, id: &CallId) {
        self.owed.retain(|owed| owed.id != *id);
        self.withdrawn.retain(|owed| owed.id != *id);
    }

    /// Forgets what the rule knew of the last batch but the calls still owed.
    fn new_batch(&mut self) {
        self.withdrawn.clear();
        self.launched = false;
        self.ran_owed = 0;
        self.agents_ran = 0;
    }

    /// Checks one accepted fact and its orders.
    pub fn check(&mut self, step: &Transition<'_>) -> Result<(), Violation> {
        match step.fact {
            Input::CatalogChanged { catalog } => {
                let offered = offered_by(catalog);
                // A tool taken away excuses its calls unless it is back by the time the batch
                // launches: only offered tools run, as offered then.
                if !self.launched {
                    let (kept, gone): (Vec<Owed>, Vec<Owed>) = std::mem::take(&mut self.owed)
                        .into_iter()
                        .chain(std::mem::take(&mut self.withdrawn))
                        .partition(|owed| offered.contains(&owed.tool));
                    self.owed = kept;
                    self.withdrawn = gone;
                }
                self.offered = Some(offered);
            }
            Input::Cancelled | Input::Closed | Input::PromptInterrupted => {
                self.owed.clear();
                self.new_batch();
                self.subjects.clear();
                self.asked = None;
            }
            Input::LlmReplied { reply }
                if matches!(step.before, Phase::Prompting | Phase::Objected)
                    && matches!(
                        reply.stop,
                        StopReason::ToolUse
                            | StopReason::EndTurn
                            | StopReason::StopSequence
                            | StopReason::PauseTurn
                    )
                    && !reply.tool_calls.is_empty() =>
            {
                self.owe(step, &reply.tool_calls);
            }
            Input::PermissionDecided { id, decision } => {
                let asked = self.asked.take().filter(|(asked, _)| asked == id);
                if let Some((_, tool)) = asked
                    && *decision == PermissionDecision::RejectAlways
                {
                    self.rejected.insert(tool);
                }
                if !decision.allows() {
                    self.excuse(id);
                }
            }
            Input::HookAnswered {
                hook: Hook::PreToolUse,
                reply: HookReply::Text { text },
                subject,
                ..
            } if step.before == Phase::AwaitingHook(Hook::PreToolUse)
                && !text.trim().is_empty() =>
            {
                let denied = self.subjects.get(subject.map_or(0, |s| s as usize));
                if let Some(Some(denied)) = denied.cloned() {
                    self.excuse(&denied);
                }
            }
            _ => {}
        }
        for effect in step.effects {
            match effect {
                Effect::CallHooks {
                    hook: Hook::PreToolUse,
                    subjects,
                    ..
                } => {
                    // The subjects are calls of the reply, in order.
                    let mut rest = self.owed.iter();
                    self.subjects = subjects
                        .iter()
                        .map(|subject| {
                            rest.by_ref()
                                .find(|owed| {
                                    subject["tool"] == owed.tool.as_str()
                                        && subject["arguments"] == owed.arguments
                                })
                                .map(|owed| owed.id.clone())
                        })
                        .collect();
                }
                Effect::CallTools { calls } => {
                    let before = self.owed.len();
                    self.owed
                        .retain(|owed| !calls.iter().any(|call| call.id == owed.id));
                    self.ran_owed += before - self.owed.len();
                    self.launched = true;
                    self.withdrawn.clear();
                    self.agents_ran += calls.iter().filter(|c| c.name == AGENT_TOOL).count();
                }
                Effect::AskPermission { call } => {
                    self.asked = Some((call.id.clone(), call.name.clone()));
                }
                _ => {}
            }
        }
        if in_batch(step.machine.phase()) {
            return Ok(());
        }
        self.subjects.clear();
        self.new_batch();
        let unrun: Vec<String> = std::mem::take(&mut self.owed)
            .into_iter()
            .filter(|owed| !self.rejected.contains(&owed.tool))
            .map(|owed| format!("{} ({})", owed.id, owed.tool))
            .collect();
        ensure(unrun.is_empty(), RUNS, || {
            format!(
                "{} never ran; the batch ended after {}",
                unrun.join(", "),
                step.fact.kind()
            )
        })
    }

    /// Owes a run to each call of the reply the facts make runnable, under the id the machine
    /// gave it (it renames repeated ids): the calls of the newest assistant message, in order.
    fn owe(&mut self, step: &Transition<'_>, calls: &[crate::machine::ToolCall]) {
        let Some(offered) = &self.offered else {
            return;
        };
        let recorded = step.machine.history().iter().rev().find_map(|m| match m {
            Message::Assistant { tool_calls, .. } if !tool_calls.is_empty() => Some(tool_calls),
            _ => None,
        });
        let Some(recorded) = recorded else {
            return;
        };
        self.owed = calls
            .iter()
            .zip(recorded)
            .filter(|(call, _)| {
                offered.contains(&call.name)
                    && call.arguments.is_object()
                    && call.name != AGENT_TOOL
                    && !hooks::is_hook(hooks::bare_name(&call.name))
            })
            .map(|(call, named)| Owed {
                id: named.id.clone(),
                tool: call.name.clone(),
                arguments: call.arguments.clone(),
            })
            .collect();
        self.new_batch();
    }
}

/// The phases a batch of calls is in, before its results enter the history.
pub(super) fn in_batch(phase: Phase) -> bool {
    matches!(
        phase,
        Phase::RunningTools | Phase::AwaitingPermission | Phase::AwaitingHook(Hook::PreToolUse)
    )
}
