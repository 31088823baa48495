//! A parent and its subagent explored together ([`explore_tree`]): the top-level agent is
//! offered `agent`, and a call of it starts a child, driven beside its parent as the driver
//! drives one (`driver::agents`): the child is fed the catalog and its task, then the facts of
//! its own lane, interleaved with its parent's; its end answers the `agent` call; a cancel or a
//! close of the parent cancels and closes the child first; a catalog change reaches both.
//!
//! The letters of a state are the parent's, as [`explore`](super::explore) feeds them (less the
//! result of the running `agent` call, which only the child's end gives), and the child's:
//! answers to what it waits for (its model replies, its tool results, its hook answers, its
//! permission question). The parent's replies add one that calls `agent`. Every machine of the
//! tree is checked by its own [`Invariants`] on every fact it is fed, the child's seeded with
//! the "always" decisions it inherits, and the tree by the rules of this module:
//! [`INHERITANCE`] and [`CANCEL_ENDS_CHILD`].
//!
//! The servers' catalogs are the setup's with `_SubagentStart` beside every `_SessionStart` and
//! `_SubagentStop` beside every `_Stop` (`with_subagent_hooks`; the families' `Subagent`
//! says the same of a child explored alone). A counterexample's transcript holds the child's
//! lane as agent records, which `hookloop replay` replays beside the parent.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::json;

use super::{
    Alphabet, Counterexample, Pending, Report, SLACK_OVER_BUDGET, SPELLED, SYSTEM, Setup,
    next_pending, no_stall, order_kind, with_subagent_hooks,
};
use crate::machine::{
    AGENT_TOOL, AgentId, CallId, Canon, Catalog, Effect, FinishReason, Grain, Input, LlmReply,
    Machine, Message, Notice, Policy, StopReason, Subagents, ToolCall,
};
use crate::testing::Invariants;
use crate::testing::runs::in_batch;
use crate::testing::transition::Violation;
use crate::transcript::{Header, Record, Transcript};

/// The rule of permission inheritance (the machine's `agents` module states it): a child starts
/// with the "always" decisions its parent holds, and is never asked about their tools; a
/// decision made in a child stays in it, and the parent never acts on it.
pub const INHERITANCE: &str =
    "an \"always\" decision flows from a parent to the children it starts, never back";

/// The rule a child left running after its parent's cancel breaks.
pub const CANCEL_ENDS_CHILD: &str = "a parent's cancel or close ends its running child's prompt";

/// The id of the call the parent's `agent` reply makes.
const AGENT_CALL: &str = "c1";

/// One machine of the tree and what its checks remember.
#[derive(Clone)]
struct Lane {
    machine: Machine,
    invariants: Invariants,
    pending: Pending,
}

impl Lane {
    /// Feeds `fact` to the machine of `agent` (`None`: the parent), logging it and the orders
    /// it gave; checks the tree's rules on it (`tree`, first: a break of a rule of the tree is
    /// named by it) and every invariant; returns the orders.
    fn feed(
        &mut self,
        agent: Option<&AgentId>,
        fact: &Input,
        grain: Grain,
        log: &mut Vec<Entry>,
        tree: impl FnOnce(&[Effect], &Machine) -> Result<(), Violation>,
    ) -> Result<Vec<Effect>, Violation> {
        log.push(Entry::Fact(agent.cloned(), fact.clone()));
        let before = self.machine.phase();
        let history: Vec<Message> = self.machine.history().to_vec();
        if let Err(error) = self.machine.handle(fact.clone()) {
            return Err(Violation {
                rule: "no refused fact in a state that claims to accept it",
                detail: format!("{error}"),
            });
        }
        let effects: Vec<Effect> = std::iter::from_fn(|| self.machine.poll_effect()).collect();
        log.extend(
            effects
                .iter()
                .map(|effect| Entry::Effect(agent.cloned(), effect.clone())),
        );
        tree(&effects, &self.machine)?;
        self.invariants
            .check(before, fact, &self.machine, &effects, &history)?;
        let region = self.machine.size_region();
        if grain == Grain::Abstract && !region.holds() {
            return Err(Violation {
                rule: "the abstract grain stays in its size region",
                detail: format!(
                    "{} tokens of small messages, request and usage; the limit is {}",
                    region.used(),
                    region.limit
                ),
            });
        }
        self.pending = next_pending(&self.pending, fact, &effects, self.machine.phase());
        no_stall(self.machine.phase(), &self.pending)?;
        Ok(effects)
    }

    fn encode(&self, e: &mut Canon) {
        self.machine.fingerprint(e);
        e.tag(0xFE);
        self.invariants.fingerprint(e);
    }
}

/// What the inheritance rule remembers, from the facts: who decided what "always".
#[derive(Clone, Debug, Default)]
struct Inheritance {
    /// The parent's "always" decisions, by tool: true allows.
    parent: BTreeMap<String, bool>,
    /// The call the parent is being asked about, and its tool.
    parent_asked: Option<(CallId, String)>,
    /// The parent's calls allowed once, not yet run.
    parent_once: BTreeSet<CallId>,
    /// What the running child inherited when it started.
    inherited: BTreeMap<String, bool>,
    /// The "always" decisions made in a child of the session.
    child: BTreeMap<String, bool>,
    /// The call the child is being asked about, and its tool.
    child_asked: Option<(CallId, String)>,
}

fn decisions(e: &mut Canon, map: &BTreeMap<String, bool>) {
    e.num(map.len() as u64);
    for (tool, allows) in map {
        e.str(tool);
        e.bool(*allows);
    }
}

fn asked(e: &mut Canon, asked: Option<&(CallId, String)>) {
    match asked {
        None => e.tag(0),
        Some((id, tool)) => {
            e.tag(1);
            e.id(id);
            e.str(tool);
        }
    }
}

impl Inheritance {
    fn encode(&self, e: &mut Canon) {
        decisions(e, &self.parent);
        asked(e, self.parent_asked.as_ref());
        e.id_set(self.parent_once.iter());
        decisions(e, &self.inherited);
        decisions(e, &self.child);
        asked(e, self.child_asked.as_ref());
    }

    /// A fact the parent was fed and the orders it gave.
    fn parent(&mut self, fact: &Input, effects: &[Effect], m: &Machine) -> Result<(), Violation> {
        decided(fact, &mut self.parent_asked, &mut self.parent, |id| {
            self.parent_once.insert(id);
        });
        if matches!(fact, Input::Cancelled | Input::Closed) {
            self.parent_asked = None;
            self.parent_once.clear();
        }
        for effect in effects {
            match effect {
                Effect::AskPermission { call } => {
                    self.parent_asked = Some((call.id.clone(), call.name.clone()));
                }
                Effect::CallTools { calls } => {
                    for call in calls {
                        let once = self.parent_once.remove(&call.id);
                        let own = !m.asks_permission_for(&call.name)
                            || once
                            || self.parent.get(&call.name) == Some(&true);
                        if !own && self.child.get(&call.name) == Some(&true) {
                            return Err(Violation {
                                rule: INHERITANCE,
                                detail: format!(
                                    "the parent ran {} ({}) on its child's \"always allow\"",
                                    call.id, call.name
                                ),
                            });
                        }
                    }
                }
                Effect::Notify {
                    notice:
                        Notice::PermissionRejected {
                            tool,
                            standing: true,
                            ..
                        },
                } if self.parent.get(tool) != Some(&false)
                    && self.child.get(tool) == Some(&false) =>
                {
                    return Err(Violation {
                        rule: INHERITANCE,
                        detail: format!(
                            "the parent rejected {tool} on its child's \"always reject\""
                        ),
                    });
                }
                _ => {}
            }
        }
        if !in_batch(m.phase()) {
            // A consent given once lapses with its batch, run or not.
            self.parent_once.clear();
        }
        Ok(())
    }

    /// A fact the child was fed and the orders it gave.
    fn child(&mut self, fact: &Input, effects: &[Effect]) -> Result<(), Violation> {
        decided(fact, &mut self.child_asked, &mut self.child, drop);
        for effect in effects {
            if let Effect::AskPermission { call } = effect {
                if let Some(allows) = self.inherited.get(&call.name) {
                    return Err(Violation {
                        rule: INHERITANCE,
                        detail: format!(
                            "the child was asked about {}, which its parent had {} for good",
                            call.name,
                            if *allows { "allowed" } else { "rejected" }
                        ),
                    });
                }
                self.child_asked = Some((call.id.clone(), call.name.clone()));
            }
        }
        Ok(())
    }
}

/// Takes a decision `fact` gives to the question `asked`: an "always" one into `standing`, an
/// "allow once" to `once`.
fn decided(
    fact: &Input,
    asked: &mut Option<(CallId, String)>,
    standing: &mut BTreeMap<String, bool>,
    once: impl FnOnce(CallId),
) {
    if let Input::PermissionDecided { id, decision } = fact
        && let Some((call, tool)) = asked.take()
    {
        if call != *id {
            *asked = Some((call, tool));
            return;
        }
        if decision.is_standing() {
            standing.insert(tool, decision.allows());
        } else if decision.allows() {
            once(call);
        }
    }
}

/// One letter: a fact for the parent, or for its running child.
#[derive(Clone, Debug)]
pub(super) enum Letter {
    Parent(Input),
    Child(Input),
}

impl Letter {
    fn fact(&self) -> &Input {
        match self {
            Self::Parent(fact) | Self::Child(fact) => fact,
        }
    }
}

/// What a step fed and ordered, in order: the lane (`None` for the parent) and a fact or an
/// order, for a transcript and the report's kinds of order.
enum Entry {
    Fact(Option<AgentId>, Input),
    Effect(Option<AgentId>, Effect),
}

/// A parent and its running child.
#[derive(Clone)]
struct Tree {
    parent: Lane,
    /// The running child and the `agent` call it answers.
    child: Option<(CallId, Lane)>,
    /// The last catalog fed, as an index into [`Context::catalogs`].
    catalog: usize,
    inheritance: Inheritance,
}

/// What the explorer of one setup holds fixed.
struct Context {
    grain: Grain,
    policy: Policy,
    parent_letters: Alphabet,
    child_letters: Alphabet,
    /// The catalogs of the alphabet, each with its subagent hooks: the first is the setup's.
    catalogs: Vec<Catalog>,
}

impl Context {
    fn new(setup: &Setup, grain: Grain) -> Self {
        let mut parent_letters = Alphabet::new(setup);
        parent_letters.replies.push(Input::LlmReplied {
            reply: LlmReply {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: CallId(AGENT_CALL.into()),
                    name: AGENT_TOOL.into(),
                    arguments: json!({"description": "check", "prompt": "check the work"}),
                }],
                stop: StopReason::ToolUse,
                usage: None,
            },
        });
        let mut child_letters = Alphabet::new(setup);
        // A child is cancelled, closed and told of catalogs by its parent's letters.
        child_letters.common.clear();
        child_letters.prompts.clear();
        child_letters.settings.clear();
        let mut catalogs = vec![with_subagent_hooks(setup.catalog())];
        for fact in &parent_letters.common {
            if let Input::CatalogChanged { catalog } = fact {
                let catalog = with_subagent_hooks(catalog.clone());
                if !catalogs.contains(&catalog) {
                    catalogs.push(catalog);
                }
            }
        }
        Self {
            grain,
            policy: tree_policy(setup),
            parent_letters,
            child_letters,
            catalogs,
        }
    }

    fn invariants(&self, policy: &Policy) -> Invariants {
        let invariants = Invariants::new(policy).knowing(&self.catalogs[0]);
        if self.grain == Grain::Abstract {
            let budget = i64::from(policy.stop_max_rejections);
            invariants.capping_slack(budget + SLACK_OVER_BUDGET)
        } else {
            invariants
        }
    }

    fn start(&self) -> Tree {
        let mut machine = Machine::new(self.policy.clone(), Some(SYSTEM.to_owned()));
        let _ = machine.handle(Input::CatalogChanged {
            catalog: self.catalogs[0].clone(),
        });
        while machine.poll_effect().is_some() {}
        Tree {
            parent: Lane {
                invariants: self.invariants(&self.policy),
                machine,
                pending: Pending::Nothing,
            },
            child: None,
            catalog: 0,
            inheritance: Inheritance::default(),
        }
    }

    /// Every letter `tree` accepts: its parent's, then its child's.
    fn letters(&self, tree: &Tree) -> Vec<Letter> {
        let running = tree.child.as_ref().map(|(id, _)| id);
        let mut letters: Vec<Letter> = self
            .parent_letters
            .facts(tree.parent.machine.phase(), &tree.parent.pending)
            .into_iter()
            .filter(|fact| {
                !matches!((fact, running), (Input::ToolFinished { id, .. }, Some(r)) if id == r)
            })
            .map(Letter::Parent)
            .collect();
        if let Some((_, child)) = &tree.child {
            letters.extend(
                self.child_letters
                    .facts(child.machine.phase(), &child.pending)
                    .into_iter()
                    .map(Letter::Child),
            );
        }
        letters
    }

    fn key(&self, tree: &Tree, buffer: &mut Canon) -> u128 {
        buffer.clear();
        tree.parent.encode(buffer);
        buffer.tag(0xFD);
        match &tree.child {
            None => buffer.tag(0),
            Some((id, child)) => {
                buffer.tag(1);
                buffer.id(id);
                child.encode(buffer);
            }
        }
        buffer.num(tree.catalog as u64);
        tree.inheritance.encode(buffer);
        let half = |salt: u8| {
            let mut hasher = DefaultHasher::new();
            salt.hash(&mut hasher);
            buffer.bytes().hash(&mut hasher);
            hasher.finish()
        };
        (u128::from(half(1)) << 64) | u128::from(half(2))
    }

    /// Feeds `letter` to the tree, and what follows from it as the driver does it: a child
    /// started for an `agent` call, its end given to its parent, a cancel passed down.
    fn step(
        &self,
        tree: &mut Tree,
        letter: &Letter,
        log: &mut Vec<Entry>,
    ) -> Result<(), Violation> {
        match letter {
            Letter::Parent(fact) => {
                if matches!(fact, Input::Cancelled | Input::Closed) {
                    self.end_child(tree, log)?;
                }
                if let Input::CatalogChanged { catalog } = fact {
                    let catalog = with_subagent_hooks(catalog.clone());
                    tree.catalog = self
                        .catalogs
                        .iter()
                        .position(|c| *c == catalog)
                        .unwrap_or(0);
                    let fact = Input::CatalogChanged { catalog };
                    self.feed_parent(tree, &fact, log)?;
                    if let Some((id, child)) = &mut tree.child {
                        let agent = AgentId(id.0.clone());
                        feed_child(child, &mut tree.inheritance, &agent, &fact, self.grain, log)?;
                    }
                    return Ok(());
                }
                self.feed_parent(tree, fact, log)
            }
            Letter::Child(fact) => {
                let Some((id, child)) = &mut tree.child else {
                    return Ok(());
                };
                let agent = AgentId(id.0.clone());
                let effects =
                    feed_child(child, &mut tree.inheritance, &agent, fact, self.grain, log)?;
                if !effects.iter().any(|e| matches!(e, Effect::Finish { .. })) {
                    return Ok(());
                }
                let output = child
                    .machine
                    .agent_result()
                    .cloned()
                    .ok_or_else(|| Violation {
                        rule: "a subagent's finish gives its call a result",
                        detail: "no result after the child's finish".into(),
                    })?;
                // A subagent's end is its session's end.
                feed_child(
                    child,
                    &mut tree.inheritance,
                    &agent,
                    &Input::Closed,
                    self.grain,
                    log,
                )?;
                let id = id.clone();
                tree.child = None;
                self.feed_parent(tree, &Input::ToolFinished { id, output }, log)
            }
        }
    }

    /// A parent's cancel or close reaches its running child first, as the driver's dropped lane
    /// feeds it: a cancel, then a close.
    fn end_child(&self, tree: &mut Tree, log: &mut Vec<Entry>) -> Result<(), Violation> {
        let Some((id, mut child)) = tree.child.take() else {
            return Ok(());
        };
        let agent = AgentId(id.0.clone());
        for fact in [Input::Cancelled, Input::Closed] {
            feed_child(
                &mut child,
                &mut tree.inheritance,
                &agent,
                &fact,
                self.grain,
                log,
            )?;
        }
        Ok(())
    }

    fn feed_parent(
        &self,
        tree: &mut Tree,
        fact: &Input,
        log: &mut Vec<Entry>,
    ) -> Result<(), Violation> {
        let inheritance = &mut tree.inheritance;
        let effects = tree
            .parent
            .feed(None, fact, self.grain, log, |effects, m| {
                inheritance.parent(fact, effects, m)
            })?;
        let calls: Vec<ToolCall> = effects
            .iter()
            .filter_map(|effect| match effect {
                Effect::CallTools { calls } => Some(calls.clone()),
                _ => None,
            })
            .flatten()
            .collect();
        for call in calls {
            let Some(machine) = tree.parent.machine.spawn_child(&call) else {
                continue;
            };
            if tree.child.is_some() {
                return Err(Violation {
                    rule: "at most the policy's concurrency of subagents run at once",
                    detail: format!("{} started beside a running child", call.id),
                });
            }
            let policy = machine.policy().clone();
            let task = machine.agent_task().unwrap_or_default().to_owned();
            let agent = AgentId(call.id.0.clone());
            tree.inheritance.inherited = tree.inheritance.parent.clone();
            tree.inheritance.child_asked = None;
            let mut child = Lane {
                invariants: self
                    .invariants(&policy)
                    .inheriting(&tree.inheritance.inherited),
                machine,
                pending: Pending::Nothing,
            };
            let catalog = Input::CatalogChanged {
                catalog: self.catalogs[tree.catalog].clone(),
            };
            for fact in [catalog, Input::Prompted { text: task }] {
                feed_child(
                    &mut child,
                    &mut tree.inheritance,
                    &agent,
                    &fact,
                    self.grain,
                    log,
                )?;
            }
            tree.child = Some((call.id, child));
        }
        Ok(())
    }
}

fn feed_child(
    child: &mut Lane,
    inheritance: &mut Inheritance,
    agent: &AgentId,
    fact: &Input,
    grain: Grain,
    log: &mut Vec<Entry>,
) -> Result<Vec<Effect>, Violation> {
    child.feed(Some(agent), fact, grain, log, |effects, m| {
        if matches!(fact, Input::Cancelled) {
            ended(agent, effects, m)?;
        }
        inheritance.child(fact, effects)
    })
}

/// A child's cancel, passed down from its parent, ends its prompt.
fn ended(agent: &AgentId, effects: &[Effect], m: &Machine) -> Result<(), Violation> {
    let finished = effects.iter().any(|e| {
        matches!(
            e,
            Effect::Finish {
                reason: FinishReason::Cancelled
            }
        )
    });
    if finished {
        return Ok(());
    }
    Err(Violation {
        rule: CANCEL_ENDS_CHILD,
        detail: format!("the child {agent} is still {} after the cancel", m.phase()),
    })
}

/// The policy of a tree's top-level agent: the setup's, subagents on, one at a time.
fn tree_policy(setup: &Setup) -> Policy {
    Policy {
        subagents: Some(Subagents::new(1)),
        ..setup.policy()
    }
}

/// One visited state: its parent node and the index of the letter that led there.
#[derive(Clone, Copy)]
struct Node {
    parent: u32,
    letter: u16,
}

/// Explores `setup`'s top-level agent and the subagents its `agent` calls start, together,
/// breadth first to `max_depth` letters at the abstract grain (the module docs say what is
/// fed); the first violation comes back as a shortest counterexample.
pub fn explore_tree(setup: &Setup, max_depth: usize) -> Result<Report, Box<Counterexample>> {
    explore_tree_at(setup, max_depth, Grain::Abstract)
}

/// [`explore_tree`], merging states equal at `grain`.
pub fn explore_tree_at(
    setup: &Setup,
    max_depth: usize,
    grain: Grain,
) -> Result<Report, Box<Counterexample>> {
    let context = Context::new(setup, grain);
    let start = context.start();
    let mut report = Report {
        setup: setup.clone(),
        states: 1,
        transitions: 0,
        depth: 0,
        exhausted: false,
        phases: BTreeSet::new(),
        orders: BTreeSet::new(),
        region: start.parent.machine.size_region(),
        region_step: 0,
        objections: 0,
        projections: BTreeSet::new(),
    };
    let spelled: Vec<CallId> = SPELLED.iter().map(|id| CallId((*id).into())).collect();
    let mut buffer = Canon::new(grain).spelling(&spelled);
    let mut seen = HashSet::new();
    seen.insert(context.key(&start, &mut buffer));
    let mut nodes = vec![Node {
        parent: u32::MAX,
        letter: u16::MAX,
    }];
    let mut phases = BTreeSet::from([start.parent.machine.phase().to_string()]);
    let mut layer = vec![(0u32, start.clone())];
    let mut log = Vec::new();
    let mut depth = 0;
    while !layer.is_empty() && depth < max_depth {
        depth += 1;
        let mut next = Vec::new();
        for (node, tree) in layer {
            for (index, letter) in context.letters(&tree).into_iter().enumerate() {
                let mut after = tree.clone();
                log.clear();
                if let Err(violation) = context.step(&mut after, &letter, &mut log) {
                    return Err(counterexample(
                        &context, setup, &start, &nodes, node, &letter, violation,
                    ));
                }
                report.transitions += 1;
                let small = |tree: &Tree| {
                    let child = tree.child.as_ref();
                    tree.parent.machine.size_region().small
                        + child.map_or(0, |(_, c)| c.machine.size_region().small)
                };
                report.region_step = report
                    .region_step
                    .max(small(&after).saturating_sub(small(&tree)));
                for entry in &log {
                    if let Entry::Effect(_, effect) = entry {
                        let kind = order_kind(effect);
                        if !report.orders.contains(&kind) {
                            report.orders.insert(kind);
                        }
                    }
                }
                if !seen.insert(context.key(&after, &mut buffer)) {
                    continue;
                }
                let id = u32::try_from(nodes.len()).unwrap_or(u32::MAX);
                nodes.push(Node {
                    parent: node,
                    letter: u16::try_from(index).unwrap_or(u16::MAX),
                });
                report.states += 1;
                report.depth = depth;
                for machine in std::iter::once(&after.parent.machine)
                    .chain(after.child.as_ref().map(|(_, child)| &child.machine))
                {
                    phases.insert(machine.phase().to_string());
                    let region = machine.size_region();
                    if region.used() > report.region.used() {
                        report.region = region;
                    }
                    report.objections = report.objections.max(machine.counters().objections);
                }
                next.push((id, after));
            }
        }
        layer = next;
    }
    report.exhausted = layer.is_empty();
    report.phases = phases;
    Ok(report)
}

/// Spells the letters from the start to `node`, adds `letter`, and writes the transcript.
fn counterexample(
    context: &Context,
    setup: &Setup,
    start: &Tree,
    nodes: &[Node],
    node: u32,
    letter: &Letter,
    violation: Violation,
) -> Box<Counterexample> {
    let mut path = Vec::new();
    let mut at = node;
    while let Some(n) = nodes.get(at as usize) {
        if n.parent != u32::MAX {
            path.push(n.letter);
        }
        at = n.parent;
    }
    path.reverse();
    let mut tree = start.clone();
    let mut letters = Vec::new();
    for index in path {
        let Some(step) = context.letters(&tree).into_iter().nth(usize::from(index)) else {
            unreachable!("a node's letter index is one its parent's state offered");
        };
        let _ = context.step(&mut tree, &step, &mut Vec::new());
        letters.push(step);
    }
    letters.push(letter.clone());
    let agents = letters
        .iter()
        .map(|letter| match letter {
            Letter::Parent(_) => None,
            Letter::Child(_) => Some(AgentId(AGENT_CALL.into())),
        })
        .collect();
    Box::new(Counterexample {
        setup: setup.clone(),
        violation,
        facts: letters.iter().map(|l| l.fact().clone()).collect(),
        agents,
        transcript: transcript_at(context, &letters),
    })
}

fn transcript_at(context: &Context, letters: &[Letter]) -> Transcript {
    let header = Header::from_parts(context.policy.clone(), Some(SYSTEM.to_owned()))
        .with_catalog(context.catalogs[0].clone());
    let mut records = vec![Record::fact(
        0,
        Input::CatalogChanged {
            catalog: context.catalogs[0].clone(),
        },
    )];
    let mut tree = context.start();
    for letter in letters {
        let mut log = Vec::new();
        let _ = context.step(&mut tree, letter, &mut log);
        records.extend(log.into_iter().map(|entry| match entry {
            Entry::Fact(None, fact) => Record::fact(0, fact),
            Entry::Fact(Some(agent), fact) => Record::agent_fact(0, agent, fact),
            Entry::Effect(None, effect) => Record::effect(0, effect),
            Entry::Effect(Some(agent), effect) => Record::agent_effect(0, agent, effect),
        }));
    }
    Transcript::new(header, records)
}

/// The transcript of a tree under `setup` fed `facts`, each to the parent (`None`) or to the
/// running child: what [`explore_tree`]'s counterexample records, for the machine as it is now.
pub fn tree_transcript(setup: &Setup, facts: &[Input], agents: &[Option<AgentId>]) -> Transcript {
    let context = Context::new(setup, Grain::Abstract);
    let letters: Vec<Letter> = facts
        .iter()
        .zip(agents.iter().chain(std::iter::repeat(&None)))
        .map(|(fact, agent)| match agent {
            None => Letter::Parent(fact.clone()),
            Some(_) => Letter::Child(fact.clone()),
        })
        .collect();
    transcript_at(&context, &letters)
}
