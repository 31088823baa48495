//! The permission rules, from the facts and orders alone: when the policy asks, a call of a
//! destructive tool runs only once the user allowed it (that call, or the tool "always"); a
//! call the user rejected never runs; and an "always" decision answers every later call of
//! the tool in the session, so the user is never asked about it again.
//!
//! Which tools are destructive is read from the catalogs fed (a tool its server marks
//! `destructiveHint`), and whether the policy asks from the policy the session started under
//! and the `PermissionSettingChanged` facts since: never from the machine's own sets.

use std::collections::{BTreeMap, BTreeSet};

use crate::hooks;
use crate::machine::{CallId, Canon, Catalog, Effect, Input, PermissionDecision, Policy};

use super::runs::in_batch;
use super::transition::{Transition, Violation, ensure};

/// The rule a call run without consent breaks.
pub const RUNS: &str = "a destructive call runs only once the user allowed it";
/// The rule a question the user already answered for good breaks.
pub const STANDING: &str = "an \"always\" decision answers every later call of its tool";

/// What the rules remember between facts.
#[derive(Clone, Debug, Default)]
pub struct Consent {
    /// The policy asks before a destructive call runs, as the facts last set it.
    ask: bool,
    /// The model-facing names the last catalog fed marks destructive.
    destructive: BTreeSet<String>,
    /// The call the user is being asked about, and its tool.
    asked: Option<(CallId, String)>,
    /// Calls the user allowed once, not yet run.
    allowed: BTreeSet<CallId>,
    /// The "always" decisions, by tool: true allows.
    standing: BTreeMap<String, bool>,
}

/// The model-facing names of the tools a catalog marks destructive.
pub fn destructive_in(catalog: &Catalog) -> BTreeSet<String> {
    catalog
        .servers
        .iter()
        .flat_map(|entry| {
            entry
                .tools
                .iter()
                .filter(|tool| !hooks::is_hook(&tool.name) && tool.hints.destructive == Some(true))
                .map(|tool| hooks::qualify(entry.server.as_str(), &tool.name))
        })
        .collect()
}

impl Consent {
    /// The rules of a session under `policy`, before any catalog.
    pub fn new(policy: &Policy) -> Self {
        Self {
            ask: policy.ask_permission,
            ..Self::default()
        }
    }

    /// The same rules, knowing the catalog fed before the first fact they see.
    pub fn knowing(mut self, catalog: &Catalog) -> Self {
        self.destructive = destructive_in(catalog);
        self
    }

    /// The rules of a subagent that starts holding its parent's "always" decisions.
    pub fn inheriting(mut self, standing: &BTreeMap<String, bool>) -> Self {
        self.standing.extend(
            standing
                .iter()
                .map(|(tool, allows)| (tool.clone(), *allows)),
        );
        self
    }

    /// Appends what the rules remember to `e`, for an explorer's fingerprint.
    pub fn fingerprint(&self, e: &mut Canon) {
        e.bool(self.ask);
        e.num(self.destructive.len() as u64);
        for name in &self.destructive {
            e.str(name);
        }
        match &self.asked {
            None => e.tag(0),
            Some((id, tool)) => {
                e.tag(1);
                e.id(id);
                e.str(tool);
            }
        }
        e.id_set(self.allowed.iter());
        e.num(self.standing.len() as u64);
        for (tool, allows) in &self.standing {
            e.str(tool);
            e.bool(*allows);
        }
    }

    /// Checks the orders a fact led to.
    pub fn check(&mut self, step: &Transition<'_>) -> Result<(), Violation> {
        match step.fact {
            Input::CatalogChanged { catalog } => self.destructive = destructive_in(catalog),
            Input::PermissionSettingChanged { ask } => self.ask = *ask,
            _ => {}
        }
        if let Input::PermissionDecided { id, decision } = step.fact
            && let Some((asked, tool)) = self.asked.take()
            && asked == *id
        {
            if decision.is_standing() {
                self.standing.insert(tool, decision.allows());
            } else if matches!(decision, PermissionDecision::AllowOnce) {
                self.allowed.insert(asked);
            }
        }
        if matches!(step.fact, Input::Cancelled | Input::Closed) {
            // A batch cut short runs nothing more: its questions and consents lapse.
            self.asked = None;
            self.allowed.clear();
        }
        for effect in step.effects {
            match effect {
                Effect::AskPermission { call } => {
                    ensure(!self.standing.contains_key(&call.name), STANDING, || {
                        format!("asked again about {}", call.name)
                    })?;
                    self.asked = Some((call.id.clone(), call.name.clone()));
                }
                Effect::CallTools { calls } => {
                    for call in calls {
                        let asks = self.ask && self.destructive.contains(&call.name);
                        // Spent whether or not the call still needed it (a catalog that
                        // unmarked the tool came between the consent and the run).
                        let once = self.allowed.remove(&call.id);
                        let consented =
                            !asks || once || self.standing.get(&call.name) == Some(&true);
                        ensure(consented, RUNS, || {
                            format!("{} ({}) ran", call.id, call.name)
                        })?;
                    }
                }
                _ => {}
            }
        }
        if !in_batch(step.machine.phase()) {
            // A consent given once is for a call of this batch: once the batch is over, one
            // its call never used (its tool taken away) lapses, as a cancel makes it lapse.
            self.allowed.clear();
        }
        Ok(())
    }
}
