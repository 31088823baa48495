//! Exhaustive exploration of the machine up to a bound: every sequence of facts from a small
//! alphabet, breadth first, each distinct state visited once, every [invariant](super::Invariants)
//! checked on every transition.
//!
//! # What is explored
//!
//! A [`Setup`] is one configuration: one or two servers (`s0`, `s1`), each with a `run` tool and
//! any subset of the eight hooks; the allowlist off, `s0` only, or all; a `_Stop` budget. From
//! each state the explorer feeds every fact the state accepts, drawn from this alphabet:
//!
//! - idle: a short prompt, and a long one over the context budget;
//! - awaiting a turn: text ending with `end_turn` (with and without usage below the budget),
//!   `stop_sequence`, `pause_turn`, an unknown reason, `max_tokens`, `refusal`; one tool call
//!   (with and without usage over the budget); two calls; a call to a hook's name; a call to an
//!   unknown tool; a failed request;
//! - awaiting a summary: a summary, an empty one, a failure;
//! - per outstanding tool call: a result, an error result;
//! - per outstanding hook call (server and subject): an answer with text, an empty answer, an
//!   error result, a timeout;
//! - in every state: cancel, close, and the catalogs: the setup's, one where the last server's
//!   hook set is complemented (a hook added or removed mid-session), and, where a call can wait
//!   before it runs (a `_PreToolUse` round, a permission question), one where `s0`'s
//!   model-facing tools are gone (a call made before it must not run after it).
//!
//! and in every state one fact it must refuse (a result for a call nobody made), which must
//! leave the machine as it was. In `Done` it feeds `Closed` (accepted, no order) and a prompt
//! (refused).
//!
//! With [`Setup::permission`], the policy asks before a destructive call runs, `s0` has a
//! destructive tool `rm`, the model may call it once or twice in a reply, and the user answers
//! each question with any of the four decisions (allow or reject, once or always); a fourth
//! catalog flips `s0`'s destructive hints (`rm` unmarked, `run` marked) in every state, and
//! Idle also takes the permission setting turned off and on.
//!
//! # Deduplication
//!
//! A state is the machine's canonical encoding together with what the invariants remember,
//! hashed to 128 bits; two distinct states would have to collide on both 64-bit halves to be
//! merged. [`explore`] encodes at the abstract [`Grain`], [`explore_at`] at any: the exact grain
//! keeps everything but words (the state and data, counters, catalog, the *shape* of the
//! history); the coarse one also names call ids by order of appearance, drops counters no rule
//! reads, and folds the older history to what compaction reads of it (unit sizes); the abstract
//! one reads sizes only as the comparisons the machine makes against the context budget and
//! keeps the older history as five segments, which makes the space finite. The machine's
//! `fingerprint` module says why each is sound; the abstract grain is sound while the small
//! messages stay under half the budget, which the explorer checks on every state (a state out
//! of that region is reported as a violation of "the abstract grain stays in its size
//! region"). At the abstract grain the slack of the bound on model requests is clamped at the
//! `_Stop` budget + 2 ([`Invariants::capping_slack`]: only stricter). `tests/explore.rs` checks
//! that every grain reaches the same phases, kinds of order and [projections](Projection), and
//! finds its two planted wrapper bugs (a kill on the third timeout, a latch kept across a tool
//! call) at the same depth; the machine's planted bugs are hunted at the abstract grain alone.
//!
//! # What is verified, and what is not
//!
//! The configurations are explored in families (`testing::families`, whose table gives each
//! family's depth; a test holds the table to the code), each to the depth its rules'
//! interactions need: in CI in a release build, and on every `cargo test` to smaller depths. Without hooks, with and without permission, the abstract
//! search runs **to exhaustion** (depth 20 and 25, 6,742 and 859,122 states): every state
//! reachable by any sequence of facts that stays in the size region is visited; the region
//! holds for every sequence of at most 36 facts (14 with permission, whose two-call replies are
//! the largest step), as [`Report::sound_length`] computes from the largest step measured. With
//! hooks, the region holds for any 13 facts (a hook's injection is the largest step, 62
//! tokens), so depth 12 is within it; the budgets family's depth 14 is checked state by state
//! (a state out of the region is a violation).
//!
//! On every transition the explorer checks every rule of [`Invariants`], that each fact of the
//! alphabet is accepted where the machine's last order asked for it, that the probe is refused
//! and changes nothing, and that a running prompt always waits for an answer. A class stands
//! for every setup whose machine starts identical and stays so under every catalog of the alphabet
//! ([`Setup::canonical`]: hooks of servers the allowlist leaves out, the budget when no `_Stop`
//! can run, the allowlist when no hook can); a test checks that the machines' encodings are
//! equal under each of them.
//!
//! Not verified: depth 12 for every configuration with hooks; with hooks the distinct states
//! grow about 1.5 times per fact and have not been seen to exhaust (every 32nd one-server class
//! to depth 12 is 3,876,527 states in 302 s of CPU in a release build, so the 1,025 classes
//! alone hold about 120 million states at depth 12). Most two-server hook subsets (65,536
//! pairs) are not explored, nor permission with two servers. A parent and its child are
//! explored together ([`explore_tree`], the `parent_and_child` family) with one child at a time
//! and one `agent` call per reply, to a smaller depth than a machine alone; several children
//! at once and a child's own children are left to `tests/subagent_props.rs`, which drives them
//! under the same invariants. The alphabet has one text per
//! kind, so no rule that reads words (the hook body cap, trimming) is covered here; neither are
//! a hook call that fails or is skipped, `content_filter`, media, nor the supervisor. A
//! [`Setup`] sets no round cap; a family may (`Family::rounds`),
//! and the `round_cap` family explores one of 2.
//!
//! # Counterexamples
//!
//! Breadth first, the first violation found is reached by a shortest sequence of facts. It is
//! returned as a [`Counterexample`] whose [`transcript`](Counterexample::transcript) (format
//! version 2) `hookloop replay` reads: the facts, and the orders the explored machine gave.
//! The search keeps, per visited state, only its parent and the index of the fact that led
//! there among those its parent accepts; the machine is deterministic, so replaying the
//! indices from the start spells the facts again.
//!
//! # Why not a model-checking crate
//!
//! `stateright` (0.31) was weighed against this search. It checks properties of *states* as it
//! visits them and does not look at a transition into a state it has already seen; the rules
//! here are rules of transitions (a fact and the orders it gave), checked on every one, so they
//! would have to run inside its `next_state` and turn a violation into a state of its own —
//! the same code, moved. It merges states on a 64-bit hash (here 128 bits), and its
//! `eventually` properties can be missed where two paths join, so liveness would stay a
//! transition rule anyway. What it would replace is the breadth-first loop and the
//! parent/fact-index bookkeeping, about a sixth of this file; grains, families, invariants,
//! the no-stall check, the report and the replayable counterexample would stay, and its
//! symmetry reduction is not sound for these servers (see the families' module). It would
//! add a dozen dependencies, among them an HTTP server, for no net code removed.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::mem::{Discriminant, discriminant};

use serde_json::json;

use super::invariants::Invariants;
use super::transition::Violation;

use crate::hooks::{self, Hook, HookServers, ServerName};
use crate::machine::{
    AgentId, CallId, Canon, Catalog, Effect, FinishReason, Grain, HookReply, Input, LlmReply,
    Machine, MachineError, Notice, PermissionDecision, Phase, Policy, Purpose, ServerTools,
    SizeRegion, SkipReason, StopReason, ToolCall, ToolHints, ToolInfo, ToolOutput, Usage,
};
use crate::transcript::{Header, Record, Transcript};

pub(crate) mod tree;

pub use self::tree::{
    CANCEL_ENDS_CHILD, INHERITANCE, explore_tree, explore_tree_at, tree_transcript,
};

/// What the explorer drives: the machine, or a wrapper around it (a planted bug, a policy
/// extension). Cloned at every branch.
pub trait Subject: Clone {
    /// The machine the invariants look at.
    fn machine(&self) -> &Machine;
    /// Feeds one fact, as [`Machine::handle`].
    fn handle(&mut self, fact: Input) -> Result<(), MachineError>;
    /// The next order, as [`Machine::poll_effect`].
    fn poll_effect(&mut self) -> Option<Effect>;
    /// The fact the machine is fed in place of `fact`, where a wrapper rewrites it (its
    /// [`handle`](Self::handle) feeds this), so that the invariants judge the machine by the
    /// fact it got; `None` where it gets `fact` itself.
    fn rewritten(&self, fact: &Input) -> Option<Input> {
        let _ = fact;
        None
    }
    /// Appends the subject's canonical encoding; a wrapper adds its own state to
    /// [`fingerprint`]'s.
    fn fingerprint(&self, out: &mut Canon) {
        fingerprint(self.machine(), out);
    }
}

impl Subject for Machine {
    fn machine(&self) -> &Machine {
        self
    }

    fn handle(&mut self, fact: Input) -> Result<(), MachineError> {
        Machine::handle(self, fact)
    }

    fn poll_effect(&mut self) -> Option<Effect> {
        Machine::poll_effect(self)
    }
}

/// Appends the machine's canonical encoding at `out`'s grain: what its future depends on,
/// without the words (the machine's `fingerprint` module says why each grain is sound).
pub fn fingerprint(machine: &Machine, out: &mut Canon) {
    machine.fingerprint(out);
}

/// Which servers' hooks run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Allow {
    /// No server's hooks.
    Off,
    /// `s0` only.
    One,
    /// Every server's hooks.
    All,
}

/// One configuration to explore.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Setup {
    /// Per server (`s0`, `s1`), a bit per hook of [`Hook::ALL`].
    pub servers: Vec<u8>,
    /// Which servers' hooks run.
    pub allow: Allow,
    /// The `_Stop` budget.
    pub budget: u32,
    /// The policy asks the user before a destructive call runs, and `s0` has a destructive
    /// tool, `rm`, that the model calls.
    pub permission: bool,
}

/// The context window of every setup: a budget of 2,000 tokens that the long prompt and the
/// high usage figure exceed.
const MAX_CONTEXT_TOKENS: u64 = 3_000;
const MAX_OUTPUT_TOKENS: u32 = 1_000;
const LONG_PROMPT_BYTES: usize = 9_000;
const USAGE_BELOW: u64 = 100;
const USAGE_ABOVE: u64 = 2_100;

impl Setup {
    /// Every configuration: 1 and 2 servers, each with any subset of the eight hooks, the
    /// allowlist off, one or all, budget 0 to 3, permissions asked or not.
    pub fn all() -> impl Iterator<Item = Self> {
        [false, true].into_iter().flat_map(|permission| {
            Self::all_without_permission().map(move |setup| Self {
                permission,
                ..setup
            })
        })
    }

    fn all_without_permission() -> impl Iterator<Item = Self> {
        let one = (0..=255u8).map(|a| vec![a]);
        let two = (0..=255u8).flat_map(|a| (0..=255u8).map(move |b| vec![a, b]));
        one.chain(two).flat_map(|servers| {
            [Allow::Off, Allow::One, Allow::All]
                .into_iter()
                .flat_map(move |allow| {
                    let servers = servers.clone();
                    (0..4).map(move |budget| Self {
                        servers: servers.clone(),
                        allow,
                        budget,
                        permission: false,
                    })
                })
        })
    }

    /// The representative of this setup's class: setups whose machines start identical and
    /// stay so under every fact of the alphabet explore the same states. Hooks of servers the
    /// allowlist leaves out are never called and never reach the model, so they are dropped.
    /// The budget matters only when an allowed server can expose `_Stop` under one of the two
    /// catalogs (the alternate one complements the last server's hooks), else it is 0; the
    /// allowlist matters only when an allowed server can expose a hook, else it is off.
    pub fn canonical(&self) -> Self {
        let allowed = |i: usize| match (self.allow, i) {
            (Allow::All, _) | (Allow::One, 0) => true,
            (Allow::Off | Allow::One, _) => false,
        };
        let servers: Vec<u8> = self
            .servers
            .iter()
            .enumerate()
            .map(|(i, bits)| if allowed(i) { *bits } else { 0 })
            .collect();
        let last = servers.len().saturating_sub(1);
        // The hooks an allowed server has under either catalog.
        let reachable: Vec<u8> = servers
            .iter()
            .enumerate()
            .map(|(i, bits)| match (allowed(i), i == last) {
                (false, _) => 0,
                (true, true) => u8::MAX,
                (true, false) => *bits,
            })
            .collect();
        let stop_bit = 1 << Hook::Stop.index();
        let has_stop = reachable.iter().any(|bits| bits & stop_bit != 0);
        let any_hook = reachable.iter().any(|bits| *bits != 0);
        let allow = match self.allow {
            _ if !any_hook => Allow::Off,
            // With one server, `s0` is all of them.
            Allow::One if servers.len() == 1 => Allow::All,
            allow => allow,
        };
        Self {
            servers: if any_hook {
                servers
            } else {
                vec![0; self.servers.len()]
            },
            allow,
            budget: if has_stop { self.budget } else { 0 },
            permission: self.permission,
        }
    }

    /// A short name for reports: `s0=[…],s1=[…] allow=… budget=…`, each server's hooks listed.
    pub fn name(&self) -> String {
        let servers: Vec<String> = self
            .servers
            .iter()
            .enumerate()
            .map(|(i, bits)| {
                let hooks: Vec<&str> = Hook::ALL
                    .iter()
                    .filter(|hook| bits & (1 << hook.index()) != 0)
                    .map(|hook| hook.tool_name())
                    .collect();
                format!("s{i}=[{}]", hooks.join(" "))
            })
            .collect();
        format!(
            "{} allow={:?} budget={}{}",
            servers.join(","),
            self.allow,
            self.budget,
            if self.permission { " permission" } else { "" }
        )
    }

    /// The machine's policy under this setup.
    pub fn policy(&self) -> Policy {
        let hook_servers = match self.allow {
            Allow::Off => HookServers::Off,
            Allow::One => HookServers::Named(vec![server(0)]),
            Allow::All => HookServers::All,
        };
        Policy {
            hook_servers,
            stop_max_rejections: self.budget,
            max_context_tokens: MAX_CONTEXT_TOKENS,
            max_output_tokens: MAX_OUTPUT_TOKENS,
            ask_permission: self.permission,
            ..Policy::default()
        }
    }

    /// The catalog the session starts with.
    pub fn catalog(&self) -> Catalog {
        catalog_of(&self.servers, self.permission)
    }

    /// The other catalog of the alphabet: the last server's hook set complemented.
    pub fn alternate_catalog(&self) -> Catalog {
        let mut servers = self.servers.clone();
        if let Some(last) = servers.last_mut() {
            *last = !*last;
        }
        catalog_of(&servers, self.permission)
    }

    /// Whether a call of this setup can wait between the reply that makes it and its run: on
    /// a `_PreToolUse` round (an allowed server has the hook in the setup's catalog) or on a
    /// permission question. Only then is [`withdrawn_catalog`](Self::withdrawn_catalog) a
    /// letter of the alphabet: it is there for a call whose tool is taken away while it waits.
    /// Elsewhere a call is ordered in the step its reply is accepted, so a catalog change can
    /// only come after it has been sent, and a later call of a tool that is gone is what the
    /// alphabet's call of an unknown tool (`nobody__run`) already explores.
    pub fn calls_can_wait(&self) -> bool {
        let pre_tool_use = 1 << Hook::PreToolUse.index();
        self.permission
            || self.servers.iter().enumerate().any(|(i, bits)| {
                let allowed = match self.allow {
                    Allow::All => true,
                    Allow::One => i == 0,
                    Allow::Off => false,
                };
                allowed && bits & pre_tool_use != 0
            })
    }

    /// The catalog of the alphabet where `s0`'s model-facing tools are gone (its server
    /// lost them, its hooks stay): a call made before it came must not run after it. A letter
    /// only where [`calls_can_wait`](Self::calls_can_wait).
    pub fn withdrawn_catalog(&self) -> Catalog {
        let mut catalog = self.catalog();
        if let Some(first) = catalog.servers.first_mut() {
            first.tools.retain(|tool| hooks::is_hook(&tool.name));
        }
        catalog
    }

    /// The catalog of the alphabet where `s0`'s destructive hints are flipped: `rm` no longer
    /// marked, `run` marked. Offered only by setups that ask permission.
    pub fn flipped_catalog(&self) -> Catalog {
        let mut catalog = self.catalog();
        if let Some(first) = catalog.servers.first_mut() {
            for tool in &mut first.tools {
                if !hooks::is_hook(&tool.name) {
                    let marked = tool.hints.destructive == Some(true);
                    tool.hints.destructive = (!marked).then_some(true);
                }
            }
        }
        catalog
    }

    /// A new machine under this setup, its catalog fed.
    pub fn machine(&self) -> Machine {
        self.machine_capped(0)
    }

    /// A new machine under this setup whose prompts make at most `rounds` model requests
    /// ([`Policy::max_rounds`]; 0 is no cap), its catalog fed.
    pub fn machine_capped(&self, rounds: u32) -> Machine {
        let policy = Policy {
            max_rounds: rounds,
            ..self.policy()
        };
        let mut machine = Machine::new(policy, Some(SYSTEM.to_owned()));
        // The first fact of every session; a catalog is accepted in every state but Done.
        let _ = machine.handle(Input::CatalogChanged {
            catalog: self.catalog(),
        });
        while machine.poll_effect().is_some() {}
        machine
    }

    /// Explores this setup's machine to `max_depth` facts ([`explore`] from [`Self::machine`]).
    /// Not generic, so it is compiled once, in this crate and at its optimization level,
    /// whatever crate calls it.
    pub fn explore(&self, max_depth: usize) -> Result<Report, Box<Counterexample>> {
        explore(self, self.machine(), max_depth)
    }

    /// The header of a transcript of this setup's machine under a round cap of `rounds`.
    fn header(&self, rounds: u32) -> Header {
        let policy = Policy {
            max_rounds: rounds,
            ..self.policy()
        };
        Header::from_parts(policy, Some(SYSTEM.to_owned())).with_catalog(self.catalog())
    }
}

/// The system prompt of every setup.
pub(crate) const SYSTEM: &str = "system";

/// The destructive tool of a setup that asks permission.
const DESTRUCTIVE: &str = "rm";

/// The call ids the alphabet's replies spell; the refused probe's.
const SPELLED: [&str; 3] = ["c1", "c2", "never_made"];

fn server(i: usize) -> ServerName {
    // "s0", "s1": valid names by construction.
    ServerName::new(format!("s{i}")).unwrap_or_else(|e| panic!("explorer server name: {e}"))
}

/// The catalog of servers `s0`, `s1`, … with these hook sets (bit `i` = `Hook::ALL[i]`), each
/// with a tool `run`; with `destructive`, `s0` also has `rm`, marked destructive.
pub fn catalog_of(servers: &[u8], destructive: bool) -> Catalog {
    let info = |name: &str| ToolInfo {
        name: name.to_owned(),
        description: String::new(),
        input_schema: json!({"type": "object"}),
        hints: ToolHints {
            destructive: (name == DESTRUCTIVE).then_some(true),
            ..ToolHints::default()
        },
    };
    Catalog {
        servers: servers
            .iter()
            .enumerate()
            .map(|(i, bits)| ServerTools {
                server: server(i),
                tools: std::iter::once(info("run"))
                    .chain((destructive && i == 0).then(|| info(DESTRUCTIVE)))
                    .chain(
                        Hook::ALL
                            .iter()
                            .filter(|hook| bits & (1 << hook.index()) != 0)
                            .map(|hook| info(hook.tool_name())),
                    )
                    .collect(),
            })
            .collect(),
    }
}

/// `catalog`, where a server with `_SessionStart` also has `_SubagentStart` and one with
/// `_Stop` also has `_SubagentStop`.
pub(crate) fn with_subagent_hooks(mut catalog: Catalog) -> Catalog {
    for server in &mut catalog.servers {
        let mut added = Vec::new();
        for tool in &server.tools {
            let twin = match Hook::from_tool_name(&tool.name) {
                Some(Hook::SessionStart) => Hook::SubagentStart,
                Some(Hook::Stop) => Hook::SubagentStop,
                _ => continue,
            };
            added.push(ToolInfo {
                name: twin.tool_name().to_owned(),
                ..tool.clone()
            });
        }
        server.tools.extend(added);
    }
    catalog
}

/// What one exploration found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The configuration explored.
    pub setup: Setup,
    /// Distinct states visited (the start included).
    pub states: usize,
    /// Facts fed and accepted, from every visited state.
    pub transitions: usize,
    /// The deepest level visited, in facts after the first catalog.
    pub depth: usize,
    /// The search ran out of new states before the bound.
    pub exhausted: bool,
    /// Every phase a visited state was in.
    pub phases: BTreeSet<String>,
    /// Every kind of order given (effect, hook, notice, finish reason), for comparing grains.
    pub orders: BTreeSet<String>,
    /// The most tokens of the abstract grain's size region any visited state used, and its
    /// limit (see [`Machine::size_region`]).
    pub region: SizeRegion,
    /// The most tokens of the region a single fact added.
    pub region_step: u64,
    /// The most `_Stop` objections a visited state had spent.
    pub objections: u32,
    /// What every grain keeps of each visited state ([`Projection`]), for comparing grains.
    pub projections: BTreeSet<Projection>,
}

/// What of a state every grain keeps: two grains that merge only states with the same future
/// reach the same projections within a bound (a state merged into one reached earlier has its
/// future explored from there).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Projection {
    /// The machine's phase.
    pub phase: String,
    /// What the driver owes it: the kind of answer, and how many (not where a summary starts:
    /// a history index, which the abstract grain folds).
    pub owed: String,
    /// `_Stop` objections spent.
    pub objections: u32,
    /// Each server's streak of hook timeouts.
    pub streaks: Vec<(String, u32)>,
}

impl Projection {
    fn of(machine: &Machine, pending: &Pending) -> Self {
        let owed = match pending {
            Pending::Nothing => "nothing".to_owned(),
            // A summary's start is a history index, which the abstract grain folds.
            Pending::Model(Purpose::Turn) => "the model's turn".to_owned(),
            Pending::Model(Purpose::Summary { .. }) => "a summary".to_owned(),
            Pending::Tools(ids) => format!("{} tool results", ids.len()),
            Pending::Hooks(hook, slots) => format!("{} answers of {hook}", slots.len()),
            Pending::Permission(_) => "a decision".to_owned(),
        };
        Self {
            phase: machine.phase().to_string(),
            owed,
            objections: machine.counters().objections,
            streaks: machine
                .counters()
                .consecutive_timeouts
                .iter()
                .map(|(server, n)| (server.as_str().to_owned(), *n))
                .collect(),
        }
    }
}

impl Report {
    /// How many facts every sequence from the start may have and stay in the size region: the
    /// room the small messages have (the limit less the fixed part, the largest usage figure
    /// within the budget and what the start holds) over the most one fact adds. An exhausted
    /// exploration at the abstract grain verifies every sequence of facts of at most this
    /// length; otherwise, and at the other grains, every sequence of at most `depth` facts.
    pub fn sound_length(&self, start: SizeRegion) -> usize {
        let room = start
            .limit
            .saturating_sub(start.small + start.fixed + USAGE_BELOW + 1);
        usize::try_from(room / self.region_step.max(1)).unwrap_or(usize::MAX)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} states, {} transitions, depth {}{}, {} objections spent; size region {}/{} \
             tokens, {} per fact",
            self.setup.name(),
            self.states,
            self.transitions,
            self.depth,
            if self.exhausted { " (exhausted)" } else { "" },
            self.objections,
            self.region.used(),
            self.region.limit,
            self.region_step,
        )
    }
}

/// A violated invariant and the shortest sequence of facts that reaches it.
#[derive(Clone, Debug)]
pub struct Counterexample {
    /// The configuration it was found in.
    pub setup: Setup,
    /// The invariant broken.
    pub violation: Violation,
    /// The facts after the first catalog, in order; the last one broke the rule.
    pub facts: Vec<Input>,
    /// For each fact, the subagent it was fed to; `None` for the explored machine (the
    /// top-level agent of [`explore_tree`]).
    pub agents: Vec<Option<AgentId>>,
    /// The whole sequence as a transcript: the first catalog, each fact and the orders it got.
    pub transcript: Transcript,
}

impl fmt::Display for Counterexample {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.setup.name())?;
        writeln!(f, "violated: {}", self.violation)?;
        writeln!(f, "after {} facts:", self.facts.len())?;
        for (i, fact) in self.facts.iter().enumerate() {
            match self.agents.get(i).and_then(Option::as_ref) {
                Some(agent) => writeln!(f, "  {:>2}. [{agent}] {}", i + 1, fact_line(fact))?,
                None => writeln!(f, "  {:>2}. {}", i + 1, fact_line(fact))?,
            }
        }
        writeln!(f, "transcript (hookloop replay reads it):")?;
        f.write_str(&self.transcript.to_jsonl())
    }
}

fn fact_line(fact: &Input) -> String {
    serde_json::to_string(fact).unwrap_or_else(|_| fact.kind().to_owned())
}

impl std::error::Error for Counterexample {}

/// What the driver owes the machine: the answers to its last awaited order still missing.
#[derive(Clone, Debug)]
enum Pending {
    Nothing,
    Model(Purpose),
    Tools(Vec<CallId>),
    Hooks(Hook, Vec<(ServerName, Option<u32>)>),
    Permission(CallId),
}

/// One visited state: the state it was first reached from, and the fact that led there, as its
/// index among the facts the parent accepts ([`Alphabet::facts`]); the path is replayed to
/// spell the facts out only when a counterexample needs them.
#[derive(Clone, Copy)]
struct Node {
    parent: u32,
    fact: u16,
}

const ROOT: Node = Node {
    parent: u32::MAX,
    fact: u16::MAX,
};

struct Frontier<S> {
    node: u32,
    subject: S,
    invariants: Invariants,
    pending: Pending,
}

/// Explores `setup` from `start` breadth first to `max_depth` facts, or until no new state is
/// left, merging states at the abstract [`Grain`]. Returns the first violation as a shortest
/// counterexample.
pub fn explore<S: Subject>(
    setup: &Setup,
    start: S,
    max_depth: usize,
) -> Result<Report, Box<Counterexample>> {
    explore_at(setup, start, max_depth, Grain::Abstract)
}

/// The clamp on the request bound's slack at the abstract grain, over the `_Stop` budget: a
/// prompt and a compaction are credited before the requests they pay for (with 1, a prompt
/// that compacts before an objection showed a violation the true count does not have). Too low
/// a cap shows as a violation, never hides one ([`Invariants::capping_slack`]).
const SLACK_OVER_BUDGET: i64 = 2;

/// [`explore`], merging states that are equal at `grain`.
pub fn explore_at<S: Subject>(
    setup: &Setup,
    start: S,
    max_depth: usize,
    grain: Grain,
) -> Result<Report, Box<Counterexample>> {
    let alphabet = Alphabet::new(setup);
    let mut report = Report {
        setup: setup.clone(),
        states: 1,
        transitions: 0,
        depth: 0,
        exhausted: false,
        phases: BTreeSet::new(),
        orders: BTreeSet::new(),
        region: start.machine().size_region(),
        region_step: 0,
        objections: 0,
        projections: BTreeSet::new(),
    };
    let mut phases = HashSet::from([start.machine().phase()]);
    let mut projections = HashSet::from([Projection::of(start.machine(), &Pending::Nothing)]);
    let mut orders = HashMap::new();
    // The rules that read the catalog judge from the first one, fed before the search: the
    // setup's, as the start's `rewritten` says it reached the machine. Never from what the
    // machine made of it, which is what they judge.
    let first = Input::CatalogChanged {
        catalog: setup.catalog(),
    };
    let first = match start.rewritten(&first).unwrap_or(first) {
        Input::CatalogChanged { catalog } => catalog,
        _ => setup.catalog(),
    };
    let mut invariants = Invariants::new(start.machine().policy()).knowing(&first);
    if grain == Grain::Abstract {
        let budget = i64::from(start.machine().policy().stop_max_rejections);
        invariants = invariants.capping_slack(budget + SLACK_OVER_BUDGET);
    }
    let mut seen = HashSet::new();
    let spelled: Vec<CallId> = SPELLED.iter().map(|id| CallId((*id).into())).collect();
    let mut buffer = Canon::new(grain).spelling(&spelled);
    // A refused fact must change nothing at all: compared at the exact grain.
    let mut exact = Canon::new(Grain::Exact);
    let mut unrefused = Vec::new();
    seen.insert(key(&start, &invariants, &mut buffer));
    let mut nodes = vec![ROOT];
    let fail = |nodes: &[Node], node: u32, fact: Input, violation: Violation| {
        counterexample(setup, &start, &alphabet, nodes, node, fact, violation)
    };
    let mut layer = vec![Frontier {
        node: 0,
        subject: start.clone(),
        invariants,
        pending: Pending::Nothing,
    }];
    let mut depth = 0;
    while !layer.is_empty() && depth < max_depth {
        depth += 1;
        let mut next = Vec::new();
        for mut item in layer {
            let before = item.subject.machine().phase();
            // The probe goes to the state itself: refused, it must leave it as it was, which
            // the exact encodings before and after show (a change the exact grain cannot see
            // changes no future, as the `fingerprint` module argues).
            let probe = refused_probe(before);
            encode(&item.subject, &item.invariants, &mut exact);
            unrefused.clear();
            unrefused.extend_from_slice(exact.bytes());
            if item.subject.handle(probe.clone()).is_ok() {
                let violation = Violation {
                    rule: "a fact nobody asked for is refused",
                    detail: format!("{} accepted while {before}", probe.kind()),
                };
                return Err(fail(&nodes, item.node, probe, violation));
            }
            let mut changed = item.subject.poll_effect().is_some();
            encode(&item.subject, &item.invariants, &mut exact);
            changed |= exact.bytes() != unrefused.as_slice();
            if changed {
                let violation = Violation {
                    rule: "a refused fact changes nothing",
                    detail: format!("{} while {before}", probe.kind()),
                };
                return Err(fail(&nodes, item.node, probe, violation));
            }
            let small_before = item.subject.machine().size_region().small;
            let history_before = item.subject.machine().history();
            for (index, fact) in alphabet
                .facts(before, &item.pending)
                .into_iter()
                .enumerate()
            {
                let mut subject = item.subject.clone();
                if let Err(error) = subject.handle(fact.clone()) {
                    if before == Phase::Done && !matches!(fact, Input::Closed) {
                        continue;
                    }
                    let violation = Violation {
                        rule: "no refused fact in a state that claims to accept it",
                        detail: format!("{error}"),
                    };
                    return Err(fail(&nodes, item.node, fact, violation));
                }
                report.transitions += 1;
                let effects: Vec<Effect> = std::iter::from_fn(|| subject.poll_effect()).collect();
                for effect in &effects {
                    orders
                        .entry(OrderKey::of(effect))
                        .or_insert_with(|| order_kind(effect));
                }
                let mut invariants = item.invariants.clone();
                let fed = subject.rewritten(&fact);
                if let Err(violation) = invariants.check(
                    before,
                    fed.as_ref().unwrap_or(&fact),
                    subject.machine(),
                    &effects,
                    history_before,
                ) {
                    return Err(fail(&nodes, item.node, fact, violation));
                }
                let region = subject.machine().size_region();
                let step = region.small.saturating_sub(small_before);
                report.region_step = report.region_step.max(step);
                if region.used() > report.region.used() {
                    report.region = region;
                }
                if grain == Grain::Abstract && !region.holds() {
                    let violation = Violation {
                        rule: "the abstract grain stays in its size region",
                        detail: format!(
                            "{} tokens of small messages, request and usage; the limit is {}",
                            region.used(),
                            region.limit
                        ),
                    };
                    return Err(fail(&nodes, item.node, fact, violation));
                }
                let pending =
                    next_pending(&item.pending, &fact, &effects, subject.machine().phase());
                if let Err(violation) = no_stall(subject.machine().phase(), &pending) {
                    return Err(fail(&nodes, item.node, fact, violation));
                }
                if !seen.insert(key(&subject, &invariants, &mut buffer)) {
                    continue;
                }
                phases.insert(subject.machine().phase());
                // Memory runs out long before four billion states; the alphabet offers a state
                // a few dozen facts.
                let node = u32::try_from(nodes.len()).unwrap_or(u32::MAX);
                nodes.push(Node {
                    parent: item.node,
                    fact: u16::try_from(index).unwrap_or(u16::MAX),
                });
                report.states += 1;
                report.depth = depth;
                report.objections = report
                    .objections
                    .max(subject.machine().counters().objections);
                projections.insert(Projection::of(subject.machine(), &pending));
                next.push(Frontier {
                    node,
                    subject,
                    invariants,
                    pending,
                });
            }
        }
        layer = next;
    }
    report.exhausted = layer.is_empty();
    report.phases = phases.iter().map(ToString::to_string).collect();
    report.orders = orders.into_values().collect();
    report.projections = projections.into_iter().collect();
    Ok(report)
}

/// Appends the state's encoding to `buffer`, emptied first: the subject's, then what the
/// invariants remember.
fn encode<S: Subject>(subject: &S, invariants: &Invariants, buffer: &mut Canon) {
    buffer.clear();
    subject.fingerprint(buffer);
    buffer.tag(0xFE);
    invariants.fingerprint(buffer);
}

/// The state's key: its encoding hashed to 128 bits.
fn key<S: Subject>(subject: &S, invariants: &Invariants, buffer: &mut Canon) -> u128 {
    encode(subject, invariants, buffer);
    let half = |salt: u8| {
        let mut hasher = DefaultHasher::new();
        salt.hash(&mut hasher);
        buffer.bytes().hash(&mut hasher);
        hasher.finish()
    };
    (u128::from(half(1)) << 64) | u128::from(half(2))
}

/// What decides an order's kind ([`order_kind`]): the effect's variant and the variant of its
/// purpose, notice or reason, or its hook; cheap to take on every transition.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum OrderKey {
    Plain(Discriminant<Effect>),
    Purpose(Discriminant<Purpose>),
    Hook(Hook),
    Notice(Discriminant<Notice>),
    Skip(Discriminant<SkipReason>),
    Finish(Discriminant<FinishReason>),
}

impl OrderKey {
    fn of(effect: &Effect) -> Self {
        match effect {
            Effect::CallLlm { purpose, .. } => Self::Purpose(discriminant(purpose)),
            Effect::CallHooks { hook, .. } => Self::Hook(*hook),
            Effect::Notify {
                notice: Notice::StopSkipped { reason },
            } => Self::Skip(discriminant(reason)),
            Effect::Notify { notice } => Self::Notice(discriminant(notice)),
            Effect::Finish { reason } => Self::Finish(discriminant(reason)),
            Effect::CallTools { .. } | Effect::AskPermission { .. } | Effect::KillServer { .. } => {
                Self::Plain(discriminant(effect))
            }
        }
    }
}

/// The kind of an order, without its data: the effect, and the hook, purpose, notice or reason.
fn order_kind(effect: &Effect) -> String {
    let debug = |value: &dyn fmt::Debug| {
        let text = format!("{value:?}");
        let end = text.find([' ', '{', '(']).unwrap_or(text.len());
        text[..end].to_owned()
    };
    match effect {
        Effect::CallLlm { purpose, .. } => format!("CallLlm {}", debug(purpose)),
        Effect::CallTools { .. } => "CallTools".into(),
        Effect::CallHooks { hook, .. } => format!("CallHooks {hook}"),
        Effect::AskPermission { .. } => "AskPermission".into(),
        Effect::KillServer { .. } => "KillServer".into(),
        Effect::Notify {
            notice: Notice::StopSkipped { reason },
        } => format!("Notify StopSkipped {}", debug(reason)),
        Effect::Notify { notice } => format!("Notify {}", debug(notice)),
        Effect::Finish { reason } => format!("Finish {}", debug(reason)),
    }
}

/// A fact the machine must refuse whatever it waits for: a result for a call nobody made (in
/// `Done`, a prompt).
fn refused_probe(phase: Phase) -> Input {
    match phase {
        Phase::Done => Input::Prompted {
            text: "after the end".into(),
        },
        _ => Input::ToolFinished {
            id: CallId("never_made".into()),
            output: ToolOutput::text("x"),
        },
    }
}

/// A running prompt always waits for an answer the driver owes.
fn no_stall(phase: Phase, pending: &Pending) -> Result<(), Violation> {
    let waits = !matches!(phase, Phase::Idle | Phase::Done);
    if waits == !matches!(pending, Pending::Nothing) {
        Ok(())
    } else {
        Err(Violation {
            rule: "a running prompt always waits for an order's answer",
            detail: format!("{phase} with {pending:?} owed"),
        })
    }
}

/// What is owed after `fact` answered part of `owed`, the machine gave `effects` and is now in
/// `phase`.
fn next_pending(owed: &Pending, fact: &Input, effects: &[Effect], phase: Phase) -> Pending {
    let order = effects.iter().rev().find_map(|effect| match effect {
        Effect::CallLlm { purpose, .. } => Some(Pending::Model(*purpose)),
        Effect::CallTools { calls } => Some(Pending::Tools(
            calls.iter().map(|call| call.id.clone()).collect(),
        )),
        Effect::CallHooks {
            hook,
            servers,
            subjects,
            ..
        } => {
            let keys: Vec<Option<u32>> = if subjects.is_empty() {
                vec![None]
            } else {
                (0..subjects.len()).map(|i| u32::try_from(i).ok()).collect()
            };
            Some(Pending::Hooks(
                *hook,
                keys.iter()
                    .flat_map(|key| servers.iter().map(move |s| (s.clone(), *key)))
                    .collect(),
            ))
        }
        Effect::AskPermission { call } => Some(Pending::Permission(call.id.clone())),
        Effect::KillServer { .. } | Effect::Notify { .. } | Effect::Finish { .. } => None,
    });
    if let Some(order) = order {
        return order;
    }
    if matches!(phase, Phase::Idle | Phase::Done) {
        return Pending::Nothing;
    }
    let left = match (owed, fact) {
        (Pending::Tools(ids), Input::ToolFinished { id, .. }) => {
            Pending::Tools(ids.iter().filter(|i| *i != id).cloned().collect())
        }
        (
            Pending::Hooks(hook, slots),
            Input::HookAnswered {
                server, subject, ..
            },
        ) => Pending::Hooks(
            *hook,
            slots
                .iter()
                .filter(|(s, k)| !(s == server && k == subject))
                .cloned()
                .collect(),
        ),
        (Pending::Model(_), Input::LlmReplied { .. } | Input::LlmFailed { .. })
        | (Pending::Permission(_), Input::PermissionDecided { .. }) => Pending::Nothing,
        (owed, _) => owed.clone(),
    };
    match left {
        Pending::Tools(ids) if ids.is_empty() => Pending::Nothing,
        Pending::Hooks(_, slots) if slots.is_empty() => Pending::Nothing,
        left => left,
    }
}

/// Rebuilds the path to `node` by replaying the fact indices from `start` (the machine is
/// deterministic, so each index names the fact it named when the node was first reached), adds
/// `fact`, and writes the transcript.
fn counterexample<S: Subject>(
    setup: &Setup,
    start: &S,
    alphabet: &Alphabet,
    nodes: &[Node],
    node: u32,
    fact: Input,
    violation: Violation,
) -> Box<Counterexample> {
    let mut path = Vec::new();
    let mut at = node;
    while let Some(n) = nodes.get(at as usize) {
        if n.parent != u32::MAX {
            path.push(n.fact);
        }
        at = n.parent;
    }
    path.reverse();
    let mut facts = Vec::with_capacity(path.len() + 1);
    let mut subject = start.clone();
    let mut pending = Pending::Nothing;
    for index in path {
        let phase = subject.machine().phase();
        let Some(step) = alphabet
            .facts(phase, &pending)
            .into_iter()
            .nth(usize::from(index))
        else {
            unreachable!("a node's fact index is one its parent's state offered");
        };
        // Accepted when the node was reached, so accepted again.
        let _ = subject.handle(step.clone());
        let effects: Vec<Effect> = std::iter::from_fn(|| subject.poll_effect()).collect();
        pending = next_pending(&pending, &step, &effects, subject.machine().phase());
        facts.push(step);
    }
    facts.push(fact);
    Box::new(Counterexample {
        setup: setup.clone(),
        violation,
        transcript: transcript_of(setup, start.clone(), &facts),
        agents: vec![None; facts.len()],
        facts,
    })
}

/// Writes the transcript of `facts` as `start` answers them: the first catalog, then each fact
/// and the orders it got.
pub fn transcript_of<S: Subject>(setup: &Setup, mut start: S, facts: &[Input]) -> Transcript {
    // The setup's policy, with the round cap of the machine explored (a setup has none).
    let header = setup.header(start.machine().policy().max_rounds);
    let mut records = vec![Record::fact(
        0,
        Input::CatalogChanged {
            catalog: setup.catalog(),
        },
    )];
    for fact in facts {
        records.push(Record::fact(0, fact.clone()));
        if start.handle(fact.clone()).is_ok() {
            while let Some(effect) = start.poll_effect() {
                records.push(Record::effect(0, effect));
            }
        }
    }
    Transcript::new(header, records)
}

/// The facts the explorer feeds, built once per setup.
struct Alphabet {
    prompts: Vec<Input>,
    /// Facts only Idle accepts beside a prompt: the permission setting, turned on and off.
    settings: Vec<Input>,
    replies: Vec<Input>,
    summaries: Vec<Input>,
    common: Vec<Input>,
}

impl Alphabet {
    fn new(setup: &Setup) -> Self {
        let text = |stop: StopReason, usage: Option<u64>| Input::LlmReplied {
            reply: LlmReply {
                text: "done".into(),
                tool_calls: Vec::new(),
                stop,
                usage: usage.map(usage_of),
            },
        };
        let calls = |names: &[&str], usage: Option<u64>| Input::LlmReplied {
            reply: LlmReply {
                text: String::new(),
                tool_calls: names
                    .iter()
                    .zip(1..)
                    .map(|(name, n)| ToolCall {
                        // Fixed ids: a second reply reuses them, and the machine must rename.
                        id: CallId(format!("c{n}")),
                        name: (*name).to_owned(),
                        arguments: json!({}),
                    })
                    .collect(),
                stop: StopReason::ToolUse,
                usage: usage.map(usage_of),
            },
        };
        let second = if setup.servers.len() > 1 {
            "s1__run"
        } else {
            "s0__run"
        };
        let mut replies = vec![
            text(StopReason::EndTurn, None),
            text(StopReason::EndTurn, Some(USAGE_BELOW)),
            text(StopReason::StopSequence, None),
            text(StopReason::PauseTurn, None),
            text(StopReason::Other("new_reason".into()), None),
            text(StopReason::MaxTokens, None),
            text(StopReason::Refusal, None),
            calls(&["s0__run"], None),
            calls(&["s0__run"], Some(USAGE_ABOVE)),
            calls(&["s0__run", second], None),
            calls(&["s0___Stop"], None),
            calls(&["nobody__run"], None),
            Input::LlmFailed {
                error: "down".into(),
            },
        ];
        if setup.permission {
            // One destructive call, and two: a standing decision on the first answers the
            // second.
            replies.push(calls(&["s0__rm"], None));
            replies.push(calls(&["s0__rm", "s0__rm"], None));
        }
        let mut common = vec![
            Input::Cancelled,
            Input::Closed,
            Input::CatalogChanged {
                catalog: setup.catalog(),
            },
            Input::CatalogChanged {
                catalog: setup.alternate_catalog(),
            },
        ];
        if setup.calls_can_wait() {
            common.push(Input::CatalogChanged {
                catalog: setup.withdrawn_catalog(),
            });
        }
        let mut settings = Vec::new();
        if setup.permission {
            common.push(Input::CatalogChanged {
                catalog: setup.flipped_catalog(),
            });
            settings = [false, true]
                .map(|ask| Input::PermissionSettingChanged { ask })
                .into();
        }
        Self {
            replies,
            settings,
            common,
            prompts: vec![
                Input::Prompted {
                    text: "do it".into(),
                },
                Input::Prompted {
                    text: "x".repeat(LONG_PROMPT_BYTES),
                },
            ],
            summaries: vec![
                Input::LlmReplied {
                    reply: LlmReply {
                        text: "summary".into(),
                        ..LlmReply::default()
                    },
                },
                Input::LlmReplied {
                    reply: LlmReply::default(),
                },
                Input::LlmFailed {
                    error: "down".into(),
                },
            ],
        }
    }

    /// Every fact a state in `phase` owing `pending` accepts.
    fn facts(&self, phase: Phase, pending: &Pending) -> Vec<Input> {
        if phase == Phase::Done {
            return vec![Input::Closed];
        }
        let mut facts = match pending {
            Pending::Nothing => {
                let mut facts = self.prompts.clone();
                facts.extend(self.settings.iter().cloned());
                facts
            }
            Pending::Model(Purpose::Turn) => self.replies.clone(),
            Pending::Model(Purpose::Summary { .. }) => self.summaries.clone(),
            Pending::Tools(ids) => ids
                .iter()
                .flat_map(|id| {
                    [ToolOutput::text("ok!"), ToolOutput::error("err")].map(|output| {
                        Input::ToolFinished {
                            id: id.clone(),
                            output,
                        }
                    })
                })
                .collect(),
            Pending::Hooks(hook, slots) => slots
                .iter()
                .flat_map(|(server, subject)| {
                    [
                        HookReply::Text {
                            text: "objection".into(),
                        },
                        HookReply::Text {
                            text: String::new(),
                        },
                        HookReply::ErrorResult { text: "e".into() },
                        HookReply::TimedOut,
                    ]
                    .map(|reply| Input::HookAnswered {
                        server: server.clone(),
                        hook: *hook,
                        reply,
                        subject: *subject,
                    })
                })
                .collect(),
            Pending::Permission(id) => [
                PermissionDecision::AllowOnce,
                PermissionDecision::AllowAlways,
                PermissionDecision::RejectOnce,
                PermissionDecision::RejectAlways,
            ]
            .map(|decision| Input::PermissionDecided {
                id: id.clone(),
                decision,
            })
            .into(),
        };
        facts.extend(self.common.iter().cloned());
        facts
    }
}

fn usage_of(input_tokens: u64) -> Usage {
    Usage {
        input_tokens,
        output_tokens: 1,
        ..Usage::default()
    }
}
