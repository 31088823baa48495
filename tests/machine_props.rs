//! Property tests of the pure machine: arbitrary sessions, every invariant checked on every step,
//! and a differential test against a small reference model of the rules.
//!
//! `PROPTEST_CASES` sets the number of cases (CI runs 10,000 per property).

use std::collections::{BTreeMap, VecDeque};

use hookloop::hooks::{self, Hook, HookServers, ServerName};
use hookloop::machine::{
    Catalog, Effect, FinishReason, HookReply, Input, LlmReply, Machine, Media, Message, Notice,
    Phase, Policy, Purpose, ServerTools, StopReason, ToolCall, ToolHints, ToolInfo, ToolOutput,
    Usage,
};
use hookloop::testing::check_pairing;
use proptest::prelude::*;
use serde_json::json;

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct ServerSpec {
    has_stop: bool,
    has_post_compact: bool,
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
    let servers = proptest::collection::vec(
        (any::<bool>(), any::<bool>()).prop_map(|(has_stop, has_post_compact)| ServerSpec {
            has_stop,
            has_post_compact,
        }),
        1..4,
    );
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
                    if spec.has_stop {
                        tools.push(info("_Stop"));
                    }
                    if spec.has_post_compact {
                        tools.push(info("_PostCompact"));
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

    /// Servers whose `_Stop` the rules allow calling, in configuration order.
    fn stop_servers(&self) -> Vec<ServerName> {
        let policy = self.policy();
        (0..self.servers.len())
            .filter(|&i| self.servers[i].has_stop && policy.hook_servers.allows(&format!("s{i}")))
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
    policy: Policy,
    effects: Vec<Effect>,
    trace: Vec<Ev>,
    /// A `_Stop` round happened and no tool call or prompt came since.
    stop_round_since_work: bool,
    consecutive_timeouts: BTreeMap<ServerName, u32>,
    compacted_since_request: bool,
    post_compact_pairs: usize,
    extra_calls_from_stop: u32,
    steps: usize,
}

impl<'a> Checker<'a> {
    fn new(s: &'a Scenario) -> Self {
        Self {
            s,
            policy: s.policy(),
            effects: Vec::new(),
            trace: Vec::new(),
            stop_round_since_work: false,
            consecutive_timeouts: BTreeMap::new(),
            compacted_since_request: false,
            post_compact_pairs: 0,
            extra_calls_from_stop: 0,
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

        let timed_out = match &input {
            Input::HookAnswered { server, reply, .. } => Some((server.clone(), reply.clone())),
            _ => None,
        };
        if matches!(input, Input::Prompted { .. }) {
            self.stop_round_since_work = false;
        }
        if let Input::LlmReplied { reply } = &input
            && !reply.tool_calls.is_empty()
        {
            self.stop_round_since_work = false;
        }
        m.handle(input)
            .map_err(|e| TestCaseError::fail(format!("machine refused a valid fact: {e}")))?;
        let mut drained = Vec::new();
        while let Some(effect) = m.poll_effect() {
            drained.push(effect);
        }

        // Kill exactly on a second consecutive timeout (reference count kept here).
        let kills: Vec<&ServerName> = drained
            .iter()
            .filter_map(|e| match e {
                Effect::KillServer { server } => Some(server),
                _ => None,
            })
            .collect();
        match timed_out {
            Some((server, HookReply::TimedOut)) => {
                let count = self.consecutive_timeouts.entry(server.clone()).or_insert(0);
                *count += 1;
                if *count == 2 {
                    *count = 0;
                    prop_assert_eq!(
                        kills,
                        vec![&server],
                        "kill on the second consecutive timeout"
                    );
                } else {
                    prop_assert!(kills.is_empty(), "kill after a first timeout");
                }
            }
            Some((server, HookReply::Text { .. } | HookReply::ErrorResult { .. })) => {
                self.consecutive_timeouts.remove(&server);
                prop_assert!(kills.is_empty());
            }
            _ => prop_assert!(kills.is_empty(), "kill without a timeout"),
        }

        // At most one awaited order per fact, and it is last.
        let awaited: Vec<usize> = drained
            .iter()
            .enumerate()
            .filter(|(_, e)| !matches!(e, Effect::Notify { .. } | Effect::KillServer { .. }))
            .map(|(i, _)| i)
            .collect();
        prop_assert!(awaited.len() <= 1, "several awaited orders: {:?}", drained);
        if let Some(&i) = awaited.first() {
            prop_assert_eq!(
                i,
                drained.len() - 1,
                "awaited order not last: {:?}",
                drained
            );
        }

        // `_PostCompact` output appears only in a fresh context: pairs are only ever added while
        // a compaction is the last thing that happened to the history.
        let pairs = count_calls(m.history(), "___PostCompact");
        if pairs > self.post_compact_pairs {
            prop_assert!(
                self.compacted_since_request,
                "_PostCompact pair outside a fresh context"
            );
        }
        self.post_compact_pairs = pairs;

        let objected = drained.iter().any(|e| {
            matches!(
                e,
                Effect::Notify {
                    notice: Notice::Objection { .. }
                }
            )
        });
        for effect in &drained {
            self.check_effect(m, effect, objected)?;
        }

        // Objections never exceed the budget.
        prop_assert!(m.counters().objections <= self.policy.stop_max_rejections);
        // `_Stop` causes at most `budget` extra model calls per session.
        prop_assert!(self.extra_calls_from_stop <= self.policy.stop_max_rejections);

        let last = drained
            .last()
            .cloned()
            .filter(|e| !matches!(e, Effect::Notify { .. } | Effect::KillServer { .. }));
        self.effects.extend(drained);
        Ok(last)
    }

    fn check_effect(
        &mut self,
        m: &Machine,
        effect: &Effect,
        objected: bool,
    ) -> Result<(), TestCaseError> {
        match effect {
            Effect::CallLlm {
                purpose, messages, ..
            } => {
                prop_assert_eq!(*messages, m.history().len());
                let request = m.request(*purpose);
                // Every result answers an earlier call of the same request, exactly once.
                check_pairing(request.messages).map_err(TestCaseError::fail)?;
                // Hooks are never offered to the model.
                for tool in request.tools {
                    prop_assert!(
                        !hooks::is_hook(hooks::bare_name(&tool.name)),
                        "hook offered: {}",
                        tool.name
                    );
                }
                match purpose {
                    Purpose::Turn => {
                        self.trace.push(Ev::Llm);
                        self.compacted_since_request = false;
                        if objected {
                            self.extra_calls_from_stop += 1;
                        }
                    }
                    Purpose::Summary { .. } => {
                        prop_assert!(request.tools.is_empty());
                        self.trace.push(Ev::Summary);
                    }
                }
            }
            Effect::CallTools { calls } => {
                for call in calls {
                    prop_assert!(
                        !hooks::is_hook(hooks::bare_name(&call.name)),
                        "hook run by a model call"
                    );
                    prop_assert!(m.model_tools().iter().any(|t| t.name == call.name));
                }
                self.trace.push(Ev::Tools(calls.len()));
            }
            Effect::CallHooks { hook, servers, .. } => {
                for server in servers {
                    prop_assert!(
                        self.policy.hook_servers.allows(server.as_str()),
                        "hook on a server outside the allowlist"
                    );
                }
                if *hook == Hook::Stop {
                    prop_assert!(self.policy.stop_max_rejections > 0, "_Stop with budget 0");
                    prop_assert!(
                        m.counters().objections < self.policy.stop_max_rejections,
                        "_Stop with the budget spent"
                    );
                    prop_assert!(
                        !self.stop_round_since_work,
                        "two _Stop rounds without work or a prompt between"
                    );
                    self.stop_round_since_work = true;
                }
                self.trace.push(Ev::Hooks(*hook, servers.clone()));
            }
            Effect::AskPermission { call } => {
                prop_assert!(false, "asked permission for {} with asking off", call.name);
            }
            Effect::KillServer { server } => self.trace.push(Ev::Kill(server.clone())),
            Effect::Notify { notice } => {
                if let Notice::Compacted { .. } = notice {
                    self.compacted_since_request = true;
                }
            }
            Effect::Finish { reason } => {
                let reason = match reason {
                    FinishReason::Failed { .. } => FinishReason::Failed {
                        error: String::new(),
                    },
                    other => other.clone(),
                };
                self.trace.push(Ev::Finish(reason));
            }
        }
        Ok(())
    }
}

fn count_calls(history: &[Message], suffix: &str) -> usize {
    history
        .iter()
        .map(|m| match m {
            Message::Assistant { tool_calls, .. } => tool_calls
                .iter()
                .filter(|c| c.name.ends_with(suffix))
                .count(),
            _ => 0,
        })
        .sum()
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
                } => {
                    let step = world.model();
                    // A reply that is not a genuine end of turn never consults `_Stop`.
                    let genuine = matches!(
                        &step,
                        ModelStep::Text {
                            stop: StopReason::EndTurn | StopReason::StopSequence,
                            ..
                        }
                    );
                    let out = match step {
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
                    };
                    if !genuine {
                        prop_assert!(
                            !matches!(
                                out,
                                Some(Effect::CallHooks {
                                    hook: Hook::Stop,
                                    ..
                                })
                            ),
                            "_Stop consulted after a non-end stop"
                        );
                    }
                    out
                }
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
                Effect::CallHooks { hook, servers, .. } => {
                    let answers: Vec<(ServerName, HookStep)> = servers
                        .into_iter()
                        .map(|server| (server, world.hook()))
                        .collect();
                    let ordered: Vec<_> = if s.reverse_answers {
                        answers.into_iter().rev().collect()
                    } else {
                        answers
                    };
                    let mut out = None;
                    for (server, step) in ordered {
                        match hook_reply(&step) {
                            Some(reply) => {
                                out = c.feed(
                                    &mut m,
                                    Input::HookAnswered {
                                        server,
                                        hook,
                                        reply,
                                        subject: None,
                                    },
                                )?
                            }
                            None => {
                                out = c.feed(&mut m, Input::Cancelled)?;
                                break;
                            }
                        }
                    }
                    out
                }
                Effect::KillServer { .. } | Effect::Notify { .. } | Effect::Finish { .. } => {
                    return Err(TestCaseError::fail("not an awaited order"));
                }
            };
        }
    }
    // Done is absorbing.
    let last = c.feed(&mut m, Input::Closed)?;
    prop_assert!(last.is_none());
    prop_assert_eq!(m.phase(), Phase::Done);
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
    let policy = s.policy();
    let stop_servers = s.stop_servers();
    let mut world = World::new(s);
    let mut trace = Vec::new();
    let mut objections = 0u32;
    let mut timeouts: BTreeMap<ServerName, u32> = BTreeMap::new();
    let known = |name: &str| {
        hooks::split_qualified(name).is_some_and(|(server, tool)| {
            tool == "run" && (0..s.servers.len()).any(|i| format!("s{i}") == server)
        })
    };
    for _ in 0..s.prompts {
        let mut rounds = 0;
        let mut latch = false;
        let finish = 'prompt: loop {
            if policy.max_rounds != 0 && rounds >= policy.max_rounds {
                break FinishReason::MaxTurnRequests;
            }
            rounds += 1;
            trace.push(Ev::Llm);
            let step = world.model();
            let (calls, stop) = match &step {
                ModelStep::Cancel => break FinishReason::Cancelled,
                ModelStep::Fail => {
                    break FinishReason::Failed {
                        error: String::new(),
                    };
                }
                step => {
                    let reply = world.reply(step);
                    (reply.tool_calls, reply.stop)
                }
            };
            let cut_short = match &stop {
                StopReason::MaxTokens => Some(FinishReason::MaxTokens),
                StopReason::Refusal | StopReason::ContentFilter => Some(FinishReason::Refusal),
                // An unknown reason ends the prompt without `_Stop`, like `max_tokens`.
                StopReason::Other(reason) => Some(FinishReason::OtherStop {
                    stop_reason: reason.clone(),
                }),
                _ => None,
            };
            if let Some(reason) = cut_short {
                break reason;
            }
            if !calls.is_empty() {
                latch = false;
                let run: Vec<&ToolCall> = calls
                    .iter()
                    .filter(|c| known(&c.name) && c.arguments.is_object())
                    .collect();
                if !run.is_empty() {
                    trace.push(Ev::Tools(run.len()));
                    let answers: Vec<ToolStep> = run.iter().map(|_| world.tool()).collect();
                    if answers.iter().any(|a| matches!(a, ToolStep::Cancel)) {
                        break FinishReason::Cancelled;
                    }
                }
                continue;
            }
            match stop {
                StopReason::PauseTurn => continue,
                StopReason::ToolUse => break FinishReason::EndTurn,
                _ => {}
            }
            // A genuine end of turn.
            if stop_servers.is_empty()
                || policy.stop_max_rejections == 0
                || latch
                || objections >= policy.stop_max_rejections
            {
                break FinishReason::EndTurn;
            }
            trace.push(Ev::Hooks(Hook::Stop, stop_servers.clone()));
            let answers: Vec<(ServerName, HookStep)> = stop_servers
                .iter()
                .map(|srv| (srv.clone(), world.hook()))
                .collect();
            let ordered: Vec<_> = if s.reverse_answers {
                answers.into_iter().rev().collect()
            } else {
                answers
            };
            let mut objected = false;
            for (server, step) in ordered {
                match step {
                    HookStep::Cancel => break 'prompt FinishReason::Cancelled,
                    HookStep::Timeout => {
                        let n = timeouts.entry(server.clone()).or_insert(0);
                        *n += 1;
                        if *n == 2 {
                            *n = 0;
                            trace.push(Ev::Kill(server));
                        }
                    }
                    HookStep::Object(text) => {
                        timeouts.remove(&server);
                        objected |= !text.trim().is_empty();
                    }
                    HookStep::Empty | HookStep::Blank | HookStep::ErrorResult => {
                        timeouts.remove(&server);
                    }
                    HookStep::Failed => {}
                }
            }
            if !objected {
                break FinishReason::EndTurn;
            }
            objections += 1;
            latch = true;
        };
        trace.push(Ev::Finish(finish));
    }
    trace
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
                has_stop: true,
                has_post_compact: false,
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
