//! The configuration families the explorer runs, each chosen by which rules can interact and
//! explored to the depth those interactions need ([`explore`](super::explore) explores one
//! setup; a [`Family`] shares its setups out over the cores and sums their reports).
//!
//! | family | setups | depth | what needs the depth |
//! |---|---|---|---|
//! | [`each_hook_alone`](Family::each_hook_alone) | each of the eight hooks alone | 12 | a hook's rule across prompts, compactions and closes |
//! | [`stop_with_each_hook`](Family::stop_with_each_hook) | `_Stop` with each other hook, budget 2 | 10 | a `_Stop` rule that shows after another hook's round (a `_PostToolUse` injection, then `_Stop`, is 7 facts) |
//! | [`budgets`](Family::budgets) | `_Stop` alone, budgets 1, 2, 3 | 14 | the budget spent: each objection costs 4 facts (an end of turn, the objection, work, a result), the skip 2 more |
//! | [`every_hook`](Family::every_hook) | all eight hooks on one server, budgets 1 and 3 | 12 | every round met in one prompt |
//! | [`two_servers`](Family::two_servers) | two servers (each hook on both, every hook on both, every hook on one), every allowlist and budget | 8 | rounds answered by two servers in configuration order |
//! | [`single_server_classes`](Family::single_server_classes) | the 1,025 one-server classes | 6 | every hook subset |
//! | [`permission`](Family::permission) | asking permission: no hook, each hook alone, every hook | 8 | decisions that stand across calls |
//! | [`round_cap`](Family::round_cap) | a round cap of 2 requests per prompt: no hook, `_Stop` alone (budget 2), every hook (budget 1) | 10 | the cap reached by tool calls and by an objection's continuation, and the prompt after it |
//! | [`with_child`](Family::with_child) | a subagent alone ([`Subagent`]): `_SubagentStart`, `_SubagentStop` and `_PreToolUse`, budget 2; every hook, budget 1 | 10 | the child's start round, an objection that continues it, a call gated inside it |
//! | [`parent_and_child`](Family::parent_and_child) | a parent offered `agent` and its child together ([`explore_tree`]), asking permission: no hook; `_SubagentStart`, `_SubagentStop`, `_PreToolUse` beside `_SessionStart`, `_Stop` (budget 1) | 9 | an "always" decision of the parent, its `agent` call and the child's question about the same tool; a cancel or close in the middle of the child's hook round or question |
//!
//! CI explores [`Family::release`] in a release build (`.ci/after.d/15-explore-release.sh`); the
//! debug `cargo test` explores the same families to smaller depths (`tests/explore.rs`, which
//! also holds the depths of this table to the code). The README's "Exhaustive exploration"
//! section lists each family's states, transitions and time, written by
//! `scripts/explore_table.sh`.
//!
//! # Reductions
//!
//! Two reductions make a family smaller without losing a state a rule can tell apart:
//!
//! - **Configuration classes** ([`Setup::canonical`]): setups whose machines start identical and
//!   stay so under every fact of the alphabet are explored once. `tests/explore.rs` checks that a
//!   setup and its class give machines with equal exact encodings under both catalogs.
//! - **State merging at the abstract grain** (the machine's `fingerprint` module says why it is
//!   sound within the size region, which the explorer checks on every state).
//!
//! Two reductions that look sound are not used, because they are not:
//!
//! - **Partial-order reduction of the answers of one hook round.** The answers of different
//!   servers to one round do commute with each other until the round completes: each fills its
//!   own slot of the round and touches only its own server's timeout streak (`take_hook_answer`),
//!   so every order of them reaches the same complete round. But a round can be cut by a cancel,
//!   a close or a catalog change, and those do not commute with the answers (after a cancel, an
//!   answer is refused; before it, the answer's timeout streak outlives the round). A persistent
//!   set of a state with several answers owed must therefore hold the cancel, and with it every
//!   answer: nothing can be left out. Answering the slots in one fixed order misses the states a
//!   cancel reaches after a later server answered and an earlier one did not (a streak of one
//!   server but not the other), and `tests/explore.rs`
//!   (`answering_a_round_in_one_order_misses_states_a_cancel_reaches`) shows such a state.
//! - **Symmetry of servers with equal hook sets.** The alphabet tells `s0` from `s1`: the model
//!   calls `s0__run` alone, the alternate catalog changes the last server's hooks, and the
//!   allowlist `One` names `s0`; and a round's answers are injected in configuration order. A
//!   permutation of the servers maps the machine's transitions onto themselves only if it maps
//!   the alphabet onto itself, which here it does not.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use super::explore::{
    Allow, Counterexample, Report, SYSTEM, Setup, Subject, explore, explore_tree,
    with_subagent_hooks,
};
use crate::hooks::Hook;
use crate::machine::{
    AGENT_TOOL, CallId, Effect, Input, Machine, MachineError, Policy, Subagents, ToolCall,
};

/// Every hook of [`Hook::ALL`], as a server's bits.
pub const ALL_HOOKS: u8 = 0xFF;

/// The bits of a server that has `hooks`.
pub fn bits(hooks: &[Hook]) -> u8 {
    hooks.iter().map(|hook| 1 << hook.index()).sum()
}

/// A set of configurations explored to one depth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Family {
    /// A short name, for reports and test filters.
    pub name: &'static str,
    /// The configurations, each a class representative.
    pub setups: Vec<Setup>,
    /// How many facts after the first catalog each is explored to.
    pub depth: usize,
    /// Which machine of a setup is explored.
    pub agent: Agent,
    /// The round cap of the machines explored ([`Policy::max_rounds`]): model requests per
    /// prompt; 0 is none. A [`Setup`] has no cap of its own.
    pub rounds: u32,
}

/// Which machine of a setup a family explores.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Agent {
    /// The session's top-level agent ([`Setup::machine`]).
    TopLevel,
    /// A subagent its `agent` call started ([`Subagent::spawn`]).
    Subagent,
    /// The top-level agent, offered `agent`, and the subagents its calls start, explored
    /// together ([`explore_tree`]).
    Tree,
}

/// A subagent as the explorer drives it: the child the top-level agent's `agent` call starts
/// (subagents on, one at a time), fed the setup's catalog in which every server that has
/// `_SessionStart` also has `_SubagentStart`, and every one that has `_Stop` also has
/// `_SubagentStop` (a [`Setup`] names only the eight session hooks). The invariants know a
/// subagent by [`Machine::agent`]: `_SubagentStart` where a session asks `_SessionStart` (and no
/// `_UserPromptSubmit`), `_SubagentStop` under `_Stop`'s rules and budget, no `_SessionEnd`.
///
/// A counterexample's transcript records the setup's catalog and the facts the child was fed:
/// the child's lane, which `hookloop replay` reads as a top-level session (it diverges at the
/// child's first hook round, which a session asks differently).
#[derive(Clone)]
pub struct Subagent {
    machine: Machine,
}

impl Subagent {
    /// The child the `agent` call `agent-1` starts under `setup`, its catalog fed.
    pub fn spawn(setup: &Setup) -> Self {
        let policy = Policy {
            subagents: Some(Subagents::new(1)),
            ..setup.policy()
        };
        let parent = Machine::new(policy, Some(SYSTEM.to_owned()));
        let call = ToolCall {
            id: CallId("agent-1".into()),
            name: AGENT_TOOL.into(),
            arguments: json!({"description": "check", "prompt": "check the work"}),
        };
        let Some(machine) = parent.spawn_child(&call) else {
            unreachable!("a parent with subagents on starts a child for a well-formed call");
        };
        let mut child = Self { machine };
        // A catalog is accepted in every state but Done.
        let _ = child.handle(Input::CatalogChanged {
            catalog: setup.catalog(),
        });
        while child.poll_effect().is_some() {}
        child
    }
}

impl Subject for Subagent {
    fn machine(&self) -> &Machine {
        &self.machine
    }

    fn handle(&mut self, fact: Input) -> Result<(), MachineError> {
        let fact = self.rewritten(&fact).unwrap_or(fact);
        self.machine.handle(fact)
    }

    /// A catalog reaches the child with its hooks' subagent twins.
    fn rewritten(&self, fact: &Input) -> Option<Input> {
        match fact {
            Input::CatalogChanged { catalog } => Some(Input::CatalogChanged {
                catalog: with_subagent_hooks(catalog.clone()),
            }),
            _ => None,
        }
    }

    fn poll_effect(&mut self) -> Option<Effect> {
        self.machine.poll_effect()
    }
}

/// What exploring a family found: each setup's report, in the family's order, and the totals.
#[derive(Clone, Debug)]
pub struct FamilyReport {
    /// The family's name.
    pub name: &'static str,
    /// The depth explored to.
    pub depth: usize,
    /// One report per setup.
    pub reports: Vec<Report>,
    /// Distinct states, summed over the setups.
    pub states: usize,
    /// Transitions, summed over the setups.
    pub transitions: usize,
    /// Wall time of the whole family.
    pub elapsed: Duration,
}

impl std::fmt::Display for FamilyReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "family {}: {} setups to depth {}: {} states, {} transitions, {:.1} s",
            self.name,
            self.reports.len(),
            self.depth,
            self.states,
            self.transitions,
            self.elapsed.as_secs_f64()
        )
    }
}

fn setup(servers: Vec<u8>, allow: Allow, budget: u32, permission: bool) -> Setup {
    Setup {
        servers,
        allow,
        budget,
        permission,
    }
}

/// The class representatives of `setups`, each once, in a stable order.
fn classes(setups: impl IntoIterator<Item = Setup>) -> Vec<Setup> {
    let mut out: Vec<Setup> = Vec::new();
    for canonical in setups.into_iter().map(|s| s.canonical()) {
        if !out.contains(&canonical) {
            out.push(canonical);
        }
    }
    out
}

impl Family {
    /// Each hook alone on one server (`_Stop` with a budget of 3), to depth 12.
    pub fn each_hook_alone() -> Self {
        let setups = Hook::ALL.iter().map(|hook| {
            let budget = if *hook == Hook::Stop { 3 } else { 0 };
            setup(vec![bits(&[*hook])], Allow::All, budget, false)
        });
        Self {
            name: "each_hook_alone",
            setups: classes(setups),
            depth: 12,
            agent: Agent::TopLevel,
            rounds: 0,
        }
    }

    /// `_Stop` beside each other hook on one server, a budget of 2, to depth 10.
    pub fn stop_with_each_hook() -> Self {
        let setups = Hook::ALL
            .iter()
            .filter(|hook| **hook != Hook::Stop)
            .map(|hook| setup(vec![bits(&[Hook::Stop, *hook])], Allow::All, 2, false));
        Self {
            name: "stop_with_each_hook",
            setups: classes(setups),
            depth: 10,
            agent: Agent::TopLevel,
            rounds: 0,
        }
    }

    /// `_Stop` alone with budgets 1, 2 and 3, to depth 14: far enough to spend 3 objections and
    /// reach the end of turn the spent budget skips.
    pub fn budgets() -> Self {
        let setups =
            (1..=3).map(|budget| setup(vec![bits(&[Hook::Stop])], Allow::All, budget, false));
        Self {
            name: "budgets",
            setups: classes(setups),
            depth: 14,
            agent: Agent::TopLevel,
            rounds: 0,
        }
    }

    /// All eight hooks on one server, budgets 1 and 3, to depth 12.
    pub fn every_hook() -> Self {
        let setups = [1, 3].map(|budget| setup(vec![ALL_HOOKS], Allow::All, budget, false));
        Self {
            name: "every_hook",
            setups: classes(setups),
            depth: 12,
            agent: Agent::TopLevel,
            rounds: 0,
        }
    }

    /// Two servers: both with the same one hook (each hook point answered by two servers, in
    /// configuration order), both with every hook, and one with every hook beside one with none;
    /// the allowlist off, naming one, or all; every budget where `_Stop` is allowed. To depth 8.
    pub fn two_servers() -> Self {
        let mut pairs: Vec<[u8; 2]> = Hook::ALL.iter().map(|h| [bits(&[*h]); 2]).collect();
        pairs.extend([
            [ALL_HOOKS, ALL_HOOKS],
            [ALL_HOOKS, 0],
            [0, ALL_HOOKS],
            [0, 0],
        ]);
        let setups = pairs.into_iter().flat_map(|pair| {
            [Allow::Off, Allow::One, Allow::All]
                .into_iter()
                .flat_map(move |allow| {
                    (0..4).map(move |budget| setup(pair.to_vec(), allow, budget, false))
                })
        });
        Self {
            name: "two_servers",
            setups: classes(setups),
            depth: 8,
            agent: Agent::TopLevel,
            rounds: 0,
        }
    }

    /// Every configuration class of one server: each of the 256 subsets of the eight hooks, the
    /// allowlist off or on, budgets 0 to 3 (1,025 classes: see [`Setup::canonical`]). To depth 6.
    pub fn single_server_classes() -> Self {
        let setups = (0..=255u8).flat_map(|hooks| {
            [Allow::Off, Allow::All]
                .into_iter()
                .flat_map(move |allow| (0..4).map(move |b| setup(vec![hooks], allow, b, false)))
        });
        Self {
            name: "single_server_classes",
            setups: classes(setups),
            depth: 6,
            agent: Agent::TopLevel,
            rounds: 0,
        }
    }

    /// Configurations that ask permission before `s0__rm` runs: no hooks, each hook alone,
    /// every hook; the allowlist on; a `_Stop` budget of 1. To depth 8.
    pub fn permission() -> Self {
        let mut subsets: Vec<u8> = vec![0, ALL_HOOKS];
        subsets.extend(Hook::ALL.iter().map(|h| bits(&[*h])));
        let setups = subsets
            .into_iter()
            .map(|hooks| setup(vec![hooks], Allow::All, 1, true));
        Self {
            name: "permission",
            setups: classes(setups),
            depth: 8,
            agent: Agent::TopLevel,
            rounds: 0,
        }
    }

    /// A round cap of 2 model requests per prompt, on one server with no hook, `_Stop` alone
    /// (budget 2: an objection's continuation is a round too), or every hook (budget 1), to
    /// depth 10: the cap reached, and the prompt after it starting its count afresh.
    pub fn round_cap() -> Self {
        let setups = [
            setup(vec![0], Allow::Off, 0, false),
            setup(vec![bits(&[Hook::Stop])], Allow::All, 2, false),
            setup(vec![ALL_HOOKS], Allow::All, 1, false),
        ];
        Self {
            name: "round_cap",
            setups: setups.to_vec(),
            depth: 10,
            agent: Agent::TopLevel,
            rounds: 2,
        }
    }

    /// A subagent ([`Subagent`]) whose servers have `_SubagentStart`, `_SubagentStop` and
    /// `_PreToolUse` (budget 2), or every hook (budget 1), to depth 10: its start round, an
    /// objection that continues it, a call gated inside it.
    pub fn with_child() -> Self {
        let start_stop_gate = bits(&[Hook::SessionStart, Hook::Stop, Hook::PreToolUse]);
        let setups = [
            setup(vec![start_stop_gate], Allow::All, 2, false),
            setup(vec![ALL_HOOKS], Allow::All, 1, false),
        ];
        Self {
            name: "with_child",
            setups: setups.to_vec(),
            depth: 10,
            agent: Agent::Subagent,
            rounds: 0,
        }
    }

    /// A parent offered `agent` and the child its call starts, explored together
    /// ([`explore_tree`]), both asking permission before `s0__rm` runs: with no hook, and with
    /// `_SubagentStart`, `_SubagentStop` and `_PreToolUse` beside `_SessionStart` and `_Stop`
    /// (budget 1). To depth 9: an "always" decision of the parent before its `agent` call (the
    /// question, its answer, the call's result, the `agent` reply) and the child's question
    /// about the same tool after its start; a cancel or close in the middle of the child's
    /// hook round or question.
    pub fn parent_and_child() -> Self {
        let start_stop_gate = bits(&[Hook::SessionStart, Hook::Stop, Hook::PreToolUse]);
        let setups = [
            setup(vec![0], Allow::Off, 0, true),
            setup(vec![start_stop_gate], Allow::All, 1, true),
        ];
        Self {
            name: "parent_and_child",
            setups: setups.to_vec(),
            depth: 9,
            agent: Agent::Tree,
            rounds: 0,
        }
    }

    /// Every family CI explores in a release build, at its depth.
    pub fn release() -> Vec<Self> {
        vec![
            Self::each_hook_alone(),
            Self::stop_with_each_hook(),
            Self::budgets(),
            Self::every_hook(),
            Self::two_servers(),
            Self::single_server_classes(),
            Self::permission(),
            Self::round_cap(),
            Self::with_child(),
            Self::parent_and_child(),
        ]
    }

    /// The same setups to another depth.
    pub fn at_depth(mut self, depth: usize) -> Self {
        self.depth = depth;
        self
    }

    /// Explores every setup's machine (under the family's round cap), or the subagent it
    /// starts, to the family's depth ([`Self::explore_with`]).
    pub fn explore(&self) -> Result<FamilyReport, Box<Counterexample>> {
        match self.agent {
            Agent::TopLevel => self.explore_with(|setup| setup.machine_capped(self.rounds)),
            Agent::Subagent => self.explore_with(Subagent::spawn),
            Agent::Tree => self.explore_each(|setup| explore_tree(setup, self.depth)),
        }
    }

    /// Explores one setup as the family explores each of its own, to `depth`.
    pub fn explore_setup(
        &self,
        setup: &Setup,
        depth: usize,
    ) -> Result<Report, Box<Counterexample>> {
        match self.agent {
            Agent::TopLevel => explore(setup, setup.machine_capped(self.rounds), depth),
            Agent::Subagent => explore(setup, Subagent::spawn(setup), depth),
            Agent::Tree => explore_tree(setup, depth),
        }
    }

    /// Explores every setup from the subject `start` makes of it, to the family's depth, the
    /// setups shared out over the cores (each takes the next setup left when it finishes one).
    /// Each setup must reach the depth or exhaust its space. The first counterexample found
    /// stops the family (the others finish the setup they are on).
    pub fn explore_with<S, F>(&self, start: F) -> Result<FamilyReport, Box<Counterexample>>
    where
        S: Subject,
        F: Fn(&Setup) -> S + Sync,
    {
        self.explore_each(|setup| explore(setup, start(setup), self.depth))
    }

    /// Explores every setup with `one`, the setups shared out over the cores.
    fn explore_each<F>(&self, one: F) -> Result<FamilyReport, Box<Counterexample>>
    where
        F: Fn(&Setup) -> Result<Report, Box<Counterexample>> + Sync,
    {
        let started = Instant::now();
        let threads = std::thread::available_parallelism()
            .map_or(1, |n| n.get())
            .min(self.setups.len().max(1));
        let next = AtomicUsize::new(0);
        let failed: Mutex<Option<Box<Counterexample>>> = Mutex::new(None);
        let done: Mutex<Vec<(usize, Report)>> = Mutex::new(Vec::new());
        let stopped = || failed.lock().map_or(true, |f| f.is_some());
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    while !stopped() {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(setup) = self.setups.get(i) else {
                            return;
                        };
                        match one(setup) {
                            Ok(report) => {
                                if let Ok(mut done) = done.lock() {
                                    done.push((i, report));
                                }
                            }
                            Err(found) => {
                                if let Ok(mut failed) = failed.lock() {
                                    failed.get_or_insert(found);
                                }
                            }
                        }
                    }
                });
            }
        });
        // A poisoned lock means a worker panicked, which the scope has already propagated.
        if let Some(found) = failed.into_inner().ok().flatten() {
            return Err(found);
        }
        let mut reports = done.into_inner().unwrap_or_default();
        reports.sort_by_key(|(i, _)| *i);
        let reports: Vec<Report> = reports.into_iter().map(|(_, report)| report).collect();
        Ok(FamilyReport {
            name: self.name,
            depth: self.depth,
            states: reports.iter().map(|r| r.states).sum(),
            transitions: reports.iter().map(|r| r.transitions).sum(),
            reports,
            elapsed: started.elapsed(),
        })
    }
}
