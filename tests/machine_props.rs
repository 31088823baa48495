//! Property tests of the pure machine: arbitrary sessions, every invariant checked on every step,
//! and a differential test against a small reference model of the rules.
//!
//! `PROPTEST_CASES` sets the number of cases (CI runs 10,000 per property).

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use hookloop::hooks::{self, Hook, HookServers, ServerName};
use hookloop::machine::{
    Catalog, Effect, FinishReason, HookReply, Input, LlmReply, Machine, Media, Phase, Policy,
    Purpose, ServerTools, StopReason, ToolCall, ToolHints, ToolInfo, ToolOutput, Usage,
};
use hookloop::testing::Invariants;
use proptest::prelude::*;
use serde_json::json;

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct ServerSpec {
    /// A bit per hook of [`Hook::ALL`].
    hooks: u8,
}

fn hook_bit(hook: Hook) -> u8 {
    1 << hook.index()
}

#[derive(Clone, Debug)]
enum Allow {
    Off,
    All,
    /// Bit i set: server i is named.
    Named(u8),
}

#[derive(Clone, Debug)]
enum Pick {
    /// The `run` tool of server i (modulo the server count).
    Known(usize),
    /// A hook of server i, as the model would name it.
    Hook(usize),
    Unknown,
    BadArgs(usize),
}

#[derive(Clone, Debug)]
enum ModelStep {
    Text {
        stop: StopReason,
        bytes: usize,
        input_tokens: Option<u64>,
    },
    Tools {
        picks: Vec<Pick>,
        stop: StopReason,
    },
    Fail,
    Cancel,
}

#[derive(Clone, Debug)]
enum HookStep {
    Object(String),
    Empty,
    Blank,
    ErrorResult,
    Failed,
    Timeout,
    Cancel,
}

#[derive(Clone, Debug)]
enum ToolStep {
    Ok(usize),
    Error,
    Cancel,
}

#[derive(Clone, Debug)]
enum SummaryStep {
    Text,
    Empty,
    Fail,
    Cancel,
}

#[derive(Clone, Debug)]
struct Scenario {
    budget: u32,
    max_rounds: u32,
    small_context: bool,
    allow: Allow,
    servers: Vec<ServerSpec>,
    prompts: usize,
    model: Vec<ModelStep>,
    hooks: Vec<HookStep>,
    tools: Vec<ToolStep>,
    summaries: Vec<SummaryStep>,
    reverse_answers: bool,
}

fn stop_reason() -> impl Strategy<Value = StopReason> {
    prop_oneof![
        4 => Just(StopReason::EndTurn),
        1 => Just(StopReason::StopSequence),
        1 => Just(StopReason::ToolUse),
        1 => Just(StopReason::MaxTokens),
        1 => Just(StopReason::Refusal),
        1 => Just(StopReason::ContentFilter),
        1 => Just(StopReason::PauseTurn),
        1 => Just(StopReason::Other("new_reason".into())),
    ]
}

fn model_step() -> impl Strategy<Value = ModelStep> {
    let pick = prop_oneof![
        4 => (0usize..4).prop_map(Pick::Known),
        1 => (0usize..4).prop_map(Pick::Hook),
        1 => Just(Pick::Unknown),
        1 => (0usize..4).prop_map(Pick::BadArgs),
    ];
    prop_oneof![
        5 => (stop_reason(), prop_oneof![Just(0usize), Just(40), Just(3_000)], proptest::option::of(0u64..3_000))
            .prop_map(|(stop, bytes, input_tokens)| ModelStep::Text { stop, bytes, input_tokens }),
        4 => (proptest::collection::vec(pick, 1..4), prop_oneof![4 => Just(StopReason::ToolUse), 1 => stop_reason()])
            .prop_map(|(picks, stop)| ModelStep::Tools { picks, stop }),
        1 => Just(ModelStep::Fail),
        1 => Just(ModelStep::Cancel),
    ]
}

fn hook_step() -> impl Strategy<Value = HookStep> {
    prop_oneof![
        3 => "[a-z ]{1,12}".prop_map(HookStep::Object),
        3 => Just(HookStep::Empty),
        1 => Just(HookStep::Blank),
        1 => Just(HookStep::ErrorResult),
        1 => Just(HookStep::Failed),
        2 => Just(HookStep::Timeout),
        1 => Just(HookStep::Cancel),
    ]
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let servers =
        proptest::collection::vec(any::<u8>().prop_map(|hooks| ServerSpec { hooks }), 1..4);
    let allow = prop_oneof![1 => Just(Allow::Off), 3 => Just(Allow::All), 2 => any::<u8>().prop_map(Allow::Named)];
    let tool = prop_oneof![4 => prop_oneof![Just(10usize), Just(6_000)].prop_map(ToolStep::Ok), 1 => Just(ToolStep::Error), 1 => Just(ToolStep::Cancel)];
    let summary = prop_oneof![3 => Just(SummaryStep::Text), 1 => Just(SummaryStep::Empty), 1 => Just(SummaryStep::Fail), 1 => Just(SummaryStep::Cancel)];
    (
        (
            0u32..5,
            prop_oneof![2 => Just(0u32), 1 => 1u32..6],
            any::<bool>(),
            allow,
            servers,
            1usize..4,
        ),
        (
            proptest::collection::vec(model_step(), 0..24),
            proptest::collection::vec(hook_step(), 0..24),
            proptest::collection::vec(tool, 0..12),
            proptest::collection::vec(summary, 0..4),
            any::<bool>(),
        ),
    )
        .prop_map(
            |(
                (budget, max_rounds, small_context, allow, servers, prompts),
                (model, hooks, tools, summaries, reverse_answers),
            )| Scenario {
                budget,
                max_rounds,
                small_context,
                allow,
                servers,
                prompts,
                model,
                hooks,
                tools,
                summaries,
                reverse_answers,
            },
        )
}

fn server_name(i: usize) -> ServerName {
    ServerName::new(format!("s{i}")).unwrap()
}

impl Scenario {
    fn policy(&self) -> Policy {
        let hook_servers = match self.allow {
            Allow::Off => HookServers::Off,
            Allow::All => HookServers::All,
            Allow::Named(bits) => HookServers::Named(
                (0..self.servers.len())
                    .filter(|i| bits & (1 << i) != 0)
                    .map(|i| ServerName::new(format!("s{i}")).unwrap())
                    .collect(),
            ),
        };
        let (max_context_tokens, max_output_tokens) = if self.small_context {
            (3_000, 1_000)
        } else {
            (10_000_000, 1_000)
        };
        Policy {
            hook_servers,
            hook_timeout_ms: 2_500,
            stop_max_rejections: self.budget,
            max_rounds: self.max_rounds,
            max_context_tokens,
            max_output_tokens,
            media: Media::default(),
            ask_permission: false,
            subagents: None,
        }
    }

    fn catalog(&self) -> Catalog {
        let info = |name: &str| ToolInfo {
            name: name.into(),
            description: "d".into(),
            input_schema: json!({"type": "object"}),
            hints: ToolHints::default(),
        };
        Catalog {
            servers: self
                .servers
                .iter()
                .enumerate()
                .map(|(i, spec)| {
                    let mut tools = vec![info("run")];
                    for hook in Hook::ALL {
                        if spec.hooks & hook_bit(hook) != 0 {
                            tools.push(info(hook.tool_name()));
                        }
                    }
                    tools.push(info("_Private"));
                    ServerTools {
                        server: server_name(i),
                        tools,
                    }
                })
                .collect(),
        }
    }

    /// Servers whose `hook` the rules allow calling, in configuration order.
    fn hook_servers(&self, hook: Hook) -> Vec<ServerName> {
        let policy = self.policy();
        (0..self.servers.len())
            .filter(|&i| {
                self.servers[i].hooks & hook_bit(hook) != 0
                    && policy.hook_servers.allows(&format!("s{i}"))
            })
            .map(server_name)
            .collect()
    }
}

/// The world's answers, consumed in the order the machine asks; defaults end things calmly.
struct World {
    model: VecDeque<ModelStep>,
    hooks: VecDeque<HookStep>,
    tools: VecDeque<ToolStep>,
    summaries: VecDeque<SummaryStep>,
    servers: usize,
    next_id: u32,
}

impl World {
    fn new(s: &Scenario) -> Self {
        Self {
            model: s.model.iter().cloned().collect(),
            hooks: s.hooks.iter().cloned().collect(),
            tools: s.tools.iter().cloned().collect(),
            summaries: s.summaries.iter().cloned().collect(),
            servers: s.servers.len(),
            next_id: 0,
        }
    }

    fn model(&mut self) -> ModelStep {
        self.model.pop_front().unwrap_or(ModelStep::Text {
            stop: StopReason::EndTurn,
            bytes: 4,
            input_tokens: None,
        })
    }

    fn hook(&mut self) -> HookStep {
        self.hooks.pop_front().unwrap_or(HookStep::Empty)
    }

    fn tool(&mut self) -> ToolStep {
        self.tools.pop_front().unwrap_or(ToolStep::Ok(10))
    }

    fn summary(&mut self) -> SummaryStep {
        self.summaries.pop_front().unwrap_or(SummaryStep::Text)
    }

    /// The model reply for a step (not Fail or Cancel).
    fn reply(&mut self, step: &ModelStep) -> LlmReply {
        match step {
            ModelStep::Text {
                stop,
                bytes,
                input_tokens,
            } => LlmReply {
                text: "t".repeat(*bytes),
                tool_calls: Vec::new(),
                stop: stop.clone(),
                usage: input_tokens.map(|input_tokens| Usage {
                    input_tokens,
                    ..Usage::default()
                }),
            },
            ModelStep::Tools { picks, stop } => {
                let tool_calls = picks
                    .iter()
                    .map(|pick| {
                        self.next_id += 1;
                        let (name, arguments) = match pick {
                            Pick::Known(i) => (
                                format!("s{}__run", i % self.servers),
                                json!({"n": self.next_id}),
                            ),
                            Pick::Hook(i) => (format!("s{}___Stop", i % self.servers), json!({})),
                            Pick::Unknown => ("nobody__run".to_owned(), json!({})),
                            Pick::BadArgs(i) => {
                                (format!("s{}__run", i % self.servers), json!("{not json"))
                            }
                        };
                        // Ids repeat across replies on purpose: the machine must keep pairs exact.
                        ToolCall {
                            id: format!("id{}", self.next_id % 3).as_str().into(),
                            name,
                            arguments,
                        }
                    })
                    .collect();
                LlmReply {
                    text: String::new(),
                    tool_calls,
                    stop: stop.clone(),
                    usage: None,
                }
            }
            ModelStep::Fail | ModelStep::Cancel => unreachable!("not a reply"),
        }
    }
}

fn hook_reply(step: &HookStep) -> Option<HookReply> {
    Some(match step {
        HookStep::Object(text) => HookReply::Text { text: text.clone() },
        HookStep::Empty => HookReply::Text {
            text: String::new(),
        },
        HookStep::Blank => HookReply::Text {
            text: " \n ".into(),
        },
        HookStep::ErrorResult => HookReply::ErrorResult { text: "bad".into() },
        HookStep::Failed => HookReply::Failed {
            error: "gone".into(),
        },
        HookStep::Timeout => HookReply::TimedOut,
        HookStep::Cancel => return None,
    })
}

// ---------------------------------------------------------------------------------------------
// Running the machine against a scenario, checking invariants on every step
// ---------------------------------------------------------------------------------------------

/// What the machine did, projected for comparison with the reference model.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Ev {
    Llm,
    Summary,
    Tools(usize),
    Hooks(Hook, Vec<ServerName>),
    Kill(ServerName),
    Finish(FinishReason),
}

struct Checker<'a> {
    s: &'a Scenario,
    /// The invariants every driver of the machine checks (`hookloop::testing::Invariants`).
    invariants: Invariants,
    effects: Vec<Effect>,
    trace: Vec<Ev>,
    steps: usize,
}

impl<'a> Checker<'a> {
    fn new(s: &'a Scenario) -> Self {
        Self {
            s,
            invariants: Invariants::new(&s.policy()),
            effects: Vec::new(),
            trace: Vec::new(),
            steps: 0,
        }
    }

    /// Feeds one fact, drains the effects, checks every invariant, and returns the awaited
    /// effect if the machine gave one.
    fn feed(&mut self, m: &mut Machine, input: Input) -> Result<Option<Effect>, TestCaseError> {
        self.steps += 1;
        // Termination: a bound derived from the script. Every model call, tool batch and hook
        // round consumes a script step or a default that ends the prompt; 40 facts per step is
        // far above what any rule allows.
        let s = self.s;
        let bound = 40
            * (s.model.len()
                + s.hooks.len()
                + s.tools.len()
                + s.summaries.len()
                + s.prompts * 4
                + 4);
        prop_assert!(self.steps <= bound, "no termination within {bound} facts");

        let before = m.phase();
        let history_before = m.history().to_vec();
        m.handle(input.clone())
            .map_err(|e| TestCaseError::fail(format!("machine refused a valid fact: {e}")))?;
        let drained: Vec<Effect> = std::iter::from_fn(|| m.poll_effect()).collect();
        self.invariants
            .check(before, &input, m, &drained, &history_before)
            .map_err(|violation| TestCaseError::fail(violation.to_string()))?;
        for effect in &drained {
            self.trace.push(match effect {
                Effect::CallLlm {
                    purpose: Purpose::Turn,
                    ..
                } => Ev::Llm,
                Effect::CallLlm {
                    purpose: Purpose::Summary { .. },
                    ..
                } => Ev::Summary,
                Effect::CallTools { calls } => Ev::Tools(calls.len()),
                Effect::CallHooks { hook, servers, .. } => Ev::Hooks(*hook, servers.clone()),
                Effect::KillServer { server } => Ev::Kill(server.clone()),
                Effect::Finish { reason } => Ev::Finish(match reason {
                    FinishReason::Failed { .. } => FinishReason::Failed {
                        error: String::new(),
                    },
                    other => other.clone(),
                }),
                Effect::Notify { .. } => continue,
                Effect::AskPermission { call } => {
                    return Err(TestCaseError::fail(format!(
                        "asked permission for {} with asking off",
                        call.name
                    )));
                }
            });
        }
        let last = drained
            .last()
            .cloned()
            .filter(|e| !matches!(e, Effect::Notify { .. } | Effect::KillServer { .. }));
        self.effects.extend(drained);
        Ok(last)
    }
}

/// Answers one hook round: every (subject, server) call gets the world's next step, fed in
/// configuration order (or reversed), up to a cancel.
fn answer_hooks(
    c: &mut Checker<'_>,
    m: &mut Machine,
    world: &mut World,
    hook: Hook,
    servers: &[ServerName],
    subjects: usize,
) -> Result<Option<Effect>, TestCaseError> {
    let keys: Vec<Option<u32>> = if subjects == 0 {
        vec![None]
    } else {
        (0..subjects).map(|i| u32::try_from(i).ok()).collect()
    };
    let mut answers = Vec::new();
    for key in keys {
        for server in servers {
            answers.push((server.clone(), key, world.hook()));
        }
    }
    if c.s.reverse_answers {
        answers.reverse();
    }
    let mut out = None;
    for (server, subject, step) in answers {
        match hook_reply(&step) {
            Some(reply) => {
                out = c.feed(
                    m,
                    Input::HookAnswered {
                        server,
                        hook,
                        reply,
                        subject,
                    },
                )?;
            }
            None => return c.feed(m, Input::Cancelled),
        }
    }
    Ok(out)
}

/// Runs the scenario; returns every effect and the projected trace.
fn run_machine(s: &Scenario) -> Result<(Vec<Effect>, Vec<Ev>), TestCaseError> {
    let mut m = Machine::new(s.policy(), Some("system".into()));
    let mut world = World::new(s);
    let mut c = Checker::new(s);
    let first = c.feed(
        &mut m,
        Input::CatalogChanged {
            catalog: s.catalog(),
        },
    )?;
    prop_assert!(first.is_none());
    for p in 0..s.prompts {
        let mut next = c.feed(
            &mut m,
            Input::Prompted {
                text: format!("prompt {p}"),
            },
        )?;
        loop {
            let Some(effect) = next else {
                return Err(TestCaseError::fail("the machine stalled"));
            };
            if matches!(effect, Effect::Finish { .. }) {
                prop_assert_eq!(m.phase(), Phase::Idle);
                break;
            }
            next = match effect {
                Effect::CallLlm {
                    purpose: Purpose::Turn,
                    ..
                } => match world.model() {
                    ModelStep::Cancel => c.feed(&mut m, Input::Cancelled)?,
                    ModelStep::Fail => c.feed(
                        &mut m,
                        Input::LlmFailed {
                            error: "boom".into(),
                        },
                    )?,
                    step => {
                        let reply = world.reply(&step);
                        c.feed(&mut m, Input::LlmReplied { reply })?
                    }
                },
                Effect::CallLlm {
                    purpose: Purpose::Summary { .. },
                    ..
                } => match world.summary() {
                    SummaryStep::Text => c.feed(
                        &mut m,
                        Input::LlmReplied {
                            reply: LlmReply {
                                text: "summary".into(),
                                ..LlmReply::default()
                            },
                        },
                    )?,
                    SummaryStep::Empty => c.feed(
                        &mut m,
                        Input::LlmReplied {
                            reply: LlmReply::default(),
                        },
                    )?,
                    SummaryStep::Fail => c.feed(&mut m, Input::LlmFailed { error: "no".into() })?,
                    SummaryStep::Cancel => c.feed(&mut m, Input::Cancelled)?,
                },
                Effect::CallTools { calls } => {
                    let answers: Vec<(ToolCall, ToolStep)> =
                        calls.into_iter().map(|call| (call, world.tool())).collect();
                    let ordered: Vec<_> = if s.reverse_answers {
                        answers.into_iter().rev().collect()
                    } else {
                        answers
                    };
                    let mut out = None;
                    for (call, step) in ordered {
                        let input = match step {
                            ToolStep::Ok(bytes) => Input::ToolFinished {
                                id: call.id,
                                output: ToolOutput::text("r".repeat(bytes)),
                            },
                            ToolStep::Error => Input::ToolFinished {
                                id: call.id,
                                output: ToolOutput::error("failed"),
                            },
                            ToolStep::Cancel => Input::Cancelled,
                        };
                        let cancel = matches!(input, Input::Cancelled);
                        out = c.feed(&mut m, input)?;
                        if cancel {
                            break;
                        }
                    }
                    out
                }
                Effect::AskPermission { .. } => {
                    return Err(TestCaseError::fail("asked permission with asking off"));
                }
                Effect::CallHooks {
                    hook,
                    servers,
                    subjects,
                    ..
                } => answer_hooks(&mut c, &mut m, &mut world, hook, &servers, subjects.len())?,
                Effect::KillServer { .. } | Effect::Notify { .. } | Effect::Finish { .. } => {
                    return Err(TestCaseError::fail("not an awaited order"));
                }
            };
        }
    }
    // Closing asks `_SessionEnd` once; then Done is absorbing.
    let mut last = c.feed(&mut m, Input::Closed)?;
    while let Some(Effect::CallHooks {
        hook,
        servers,
        subjects,
        ..
    }) = last
    {
        last = answer_hooks(&mut c, &mut m, &mut world, hook, &servers, subjects.len())?;
    }
    prop_assert!(last.is_none());
    prop_assert_eq!(m.phase(), Phase::Done);
    prop_assert!(c.feed(&mut m, Input::Closed)?.is_none());
    for input in [
        Input::Prompted { text: "x".into() },
        Input::Cancelled,
        Input::LlmFailed { error: "x".into() },
    ] {
        prop_assert!(m.handle(input).is_err());
        prop_assert!(m.poll_effect().is_none());
    }
    Ok((c.effects, c.trace))
}

// ---------------------------------------------------------------------------------------------
// The reference model: the rules as plain imperative code
// ---------------------------------------------------------------------------------------------

fn run_reference(s: &Scenario) -> Vec<Ev> {
    let mut world = World::new(s);
    let mut r = Reference {
        s,
        policy: s.policy(),
        trace: Vec::new(),
        objections: 0,
        timeouts: BTreeMap::new(),
        session_started: false,
    };
    for _ in 0..s.prompts {
        let finish = r.prompt(&mut world);
        r.trace.push(Ev::Finish(finish));
    }
    // Closing: `_SessionEnd` once, its answers ignored.
    let end = s.hook_servers(Hook::SessionEnd);
    if !end.is_empty() {
        r.round(&mut world, Hook::SessionEnd, end, 0);
    }
    r.trace
}

/// The session-wide part of the reference model.
struct Reference<'a> {
    s: &'a Scenario,
    policy: Policy,
    trace: Vec<Ev>,
    objections: u32,
    timeouts: BTreeMap<ServerName, u32>,
    session_started: bool,
}

impl Reference<'_> {
    /// One round of `hook`, one call per server and subject (one when `subjects` is 0): the
    /// subjects some server said something about, or `None` when the round was cancelled.
    fn round(
        &mut self,
        world: &mut World,
        hook: Hook,
        servers: Vec<ServerName>,
        subjects: usize,
    ) -> Option<BTreeSet<usize>> {
        self.trace.push(Ev::Hooks(hook, servers.clone()));
        let mut answers = Vec::new();
        for subject in 0..subjects.max(1) {
            for server in &servers {
                answers.push((server.clone(), subject, world.hook()));
            }
        }
        if self.s.reverse_answers {
            answers.reverse();
        }
        let mut said = BTreeSet::new();
        for (server, subject, step) in answers {
            match step {
                HookStep::Cancel => return None,
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
                    if !text.trim().is_empty() {
                        said.insert(subject);
                    }
                }
                HookStep::Empty | HookStep::Blank | HookStep::ErrorResult => {
                    self.timeouts.remove(&server);
                }
                HookStep::Failed => {}
            }
        }
        Some(said)
    }

    /// A round of `hook` on the servers that have it, if any; false when it was cancelled.
    fn maybe_round(
        &mut self,
        world: &mut World,
        hook: Hook,
        subjects: usize,
    ) -> Option<BTreeSet<usize>> {
        let servers = self.s.hook_servers(hook);
        if servers.is_empty() {
            return Some(BTreeSet::new());
        }
        self.round(world, hook, servers, subjects)
    }

    /// One prompt, from its hooks to its finish.
    fn prompt(&mut self, world: &mut World) -> FinishReason {
        let s = self.s;
        let known = |name: &str| {
            hooks::split_qualified(name).is_some_and(|(server, tool)| {
                tool == "run" && (0..s.servers.len()).any(|i| format!("s{i}") == server)
            })
        };
        // `_SessionStart` at the first prompt only, then `_UserPromptSubmit`: context only.
        if !self.session_started {
            self.session_started = true;
            if self.maybe_round(world, Hook::SessionStart, 0).is_none() {
                return FinishReason::Cancelled;
            }
        }
        if self.maybe_round(world, Hook::UserPromptSubmit, 0).is_none() {
            return FinishReason::Cancelled;
        }
        let mut rounds = 0;
        let mut latch = false;
        loop {
            if self.policy.max_rounds != 0 && rounds >= self.policy.max_rounds {
                return FinishReason::MaxTurnRequests;
            }
            rounds += 1;
            self.trace.push(Ev::Llm);
            let (calls, stop) = match world.model() {
                ModelStep::Cancel => return FinishReason::Cancelled,
                ModelStep::Fail => {
                    return FinishReason::Failed {
                        error: String::new(),
                    };
                }
                step => {
                    let reply = world.reply(&step);
                    (reply.tool_calls, reply.stop)
                }
            };
            match &stop {
                StopReason::MaxTokens => return FinishReason::MaxTokens,
                StopReason::Refusal | StopReason::ContentFilter => return FinishReason::Refusal,
                // An unknown reason ends the prompt without `_Stop`, like `max_tokens`.
                StopReason::Other(reason) => {
                    return FinishReason::OtherStop {
                        stop_reason: reason.clone(),
                    };
                }
                _ => {}
            }
            if !calls.is_empty() {
                latch = false;
                let run = calls
                    .iter()
                    .filter(|c| known(&c.name) && c.arguments.is_object())
                    .count();
                if run == 0 {
                    continue;
                }
                // `_PreToolUse` gates every runnable call; a call any server denies never runs.
                let Some(denied) = self.maybe_round(world, Hook::PreToolUse, run) else {
                    return FinishReason::Cancelled;
                };
                let ran = run - denied.len();
                if ran == 0 {
                    continue;
                }
                self.trace.push(Ev::Tools(ran));
                let answers: Vec<ToolStep> = (0..ran).map(|_| world.tool()).collect();
                if answers.iter().any(|a| matches!(a, ToolStep::Cancel)) {
                    return FinishReason::Cancelled;
                }
                // `_PostToolUse` on the calls that ran: context only.
                if self.maybe_round(world, Hook::PostToolUse, ran).is_none() {
                    return FinishReason::Cancelled;
                }
                continue;
            }
            match stop {
                StopReason::PauseTurn => continue,
                StopReason::ToolUse => return FinishReason::EndTurn,
                _ => {}
            }
            // A genuine end of turn.
            let stop_servers = s.hook_servers(Hook::Stop);
            if stop_servers.is_empty()
                || self.policy.stop_max_rejections == 0
                || latch
                || self.objections >= self.policy.stop_max_rejections
            {
                return FinishReason::EndTurn;
            }
            let Some(said) = self.round(world, Hook::Stop, stop_servers, 0) else {
                return FinishReason::Cancelled;
            };
            if said.is_empty() {
                return FinishReason::EndTurn;
            }
            self.objections += 1;
            latch = true;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Properties
// ---------------------------------------------------------------------------------------------

fn config() -> ProptestConfig {
    // PROPTEST_CASES (CI: 10,000) overrides this default.
    ProptestConfig {
        cases: 512,
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Every invariant holds on every step of arbitrary sessions, compaction included.
    #[test]
    fn invariants_hold_on_every_step(s in scenario()) {
        run_machine(&s)?;
    }

    /// The same inputs always produce the same effects.
    #[test]
    fn the_machine_is_deterministic(s in scenario()) {
        let (a, _) = run_machine(&s)?;
        let (b, _) = run_machine(&s)?;
        prop_assert_eq!(serde_json::to_string(&a).unwrap(), serde_json::to_string(&b).unwrap());
    }

    /// The machine agrees with the reference model of the rules (no compaction: the reference
    /// does not model context size).
    #[test]
    fn the_machine_agrees_with_the_reference_model(mut s in scenario()) {
        s.small_context = false;
        let (_, trace) = run_machine(&s)?;
        prop_assert_eq!(trace, run_reference(&s));
    }
}

/// The bound the crate doc states, on a worst case: a hook that always objects.
#[test]
fn stop_causes_at_most_budget_extra_model_calls() {
    for budget in 0..5 {
        let s = Scenario {
            budget,
            max_rounds: 0,
            small_context: false,
            allow: Allow::All,
            servers: vec![ServerSpec {
                hooks: hook_bit(Hook::Stop),
            }],
            prompts: 3,
            model: (0..40)
                .map(|i| {
                    if i % 2 == 0 {
                        ModelStep::Text {
                            stop: StopReason::EndTurn,
                            bytes: 1,
                            input_tokens: None,
                        }
                    } else {
                        ModelStep::Tools {
                            picks: vec![Pick::Known(0)],
                            stop: StopReason::ToolUse,
                        }
                    }
                })
                .collect(),
            hooks: (0..40)
                .map(|_| HookStep::Object("never done".into()))
                .collect(),
            tools: Vec::new(),
            summaries: Vec::new(),
            reverse_answers: false,
        };
        let (_, trace) = run_machine(&s).unwrap();
        let stop_rounds = trace
            .iter()
            .filter(|e| matches!(e, Ev::Hooks(Hook::Stop, _)))
            .count();
        assert_eq!(stop_rounds, budget as usize, "budget {budget}");
        assert_eq!(trace, run_reference(&s));
    }
}
