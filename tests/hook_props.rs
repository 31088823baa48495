//! Property tests of the pure machine over every hook point: arbitrary sessions whose servers
//! expose arbitrary sets of the eight hooks, answered arbitrarily, with cancels and a close.
//! Checked on every step, by the invariants every driver of the machine shares
//! (`hookloop::testing::Invariants`): a denied call never runs and is answered exactly once,
//! every call is answered exactly once, `_SessionEnd` is called at most once, injections appear
//! only at their points, and the bound on model requests over every hook.
//!
//! `PROPTEST_CASES` sets the number of cases (CI runs 10,000 per property).

use hookloop::hooks::{self, HookServers, ServerName};
use hookloop::machine::{
    CallId, Catalog, Effect, HookReply, Input, LlmReply, Machine, Phase, Policy, Purpose,
    StopReason, ToolCall, ToolOutput,
};
use hookloop::testing::{Invariants, check_pairing};
use proptest::prelude::*;
use serde_json::json;

#[derive(Clone, Debug)]
enum ModelStep {
    Text(StopReason),
    /// Calls to `run` of these servers (modulo the server count); `None` is an unknown tool.
    Tools(Vec<Option<usize>>),
    Fail,
}

#[derive(Clone, Debug)]
enum HookStep {
    Quiet,
    Say,
    TimedOut,
    Error,
}

#[derive(Clone, Debug)]
struct Scenario {
    /// Per server, a bit per hook of [`Hook::ALL`].
    servers: Vec<u8>,
    budget: u32,
    small_context: bool,
    prompts: usize,
    model: Vec<ModelStep>,
    hooks: Vec<HookStep>,
    big_outputs: Vec<bool>,
    /// Feed `Cancelled` instead of the answer at these step numbers.
    cancels: Vec<usize>,
}

fn scenario() -> impl Strategy<Value = Scenario> {
    let stop = prop_oneof![
        4 => Just(StopReason::EndTurn),
        1 => Just(StopReason::MaxTokens),
        1 => Just(StopReason::Other("new_reason".into())),
    ];
    let model = prop_oneof![
        3 => stop.prop_map(ModelStep::Text),
        4 => proptest::collection::vec(proptest::option::weighted(0.9, 0usize..4), 1..4)
            .prop_map(ModelStep::Tools),
        1 => Just(ModelStep::Fail),
    ];
    let hook = prop_oneof![
        4 => Just(HookStep::Quiet),
        3 => Just(HookStep::Say),
        1 => Just(HookStep::TimedOut),
        1 => Just(HookStep::Error),
    ];
    (
        proptest::collection::vec(any::<u8>(), 1..4),
        0u32..4,
        any::<bool>(),
        1usize..4,
        proptest::collection::vec(model, 0..30),
        proptest::collection::vec(hook, 0..80),
        proptest::collection::vec(any::<bool>(), 0..20),
        proptest::collection::vec(0usize..60, 0..2),
    )
        .prop_map(
            |(servers, budget, small_context, prompts, model, hooks, big_outputs, cancels)| {
                Scenario {
                    servers,
                    budget,
                    small_context,
                    prompts,
                    model,
                    hooks,
                    big_outputs,
                    cancels,
                }
            },
        )
}

fn server(i: usize) -> ServerName {
    ServerName::new(format!("s{i}")).unwrap()
}

fn catalog(s: &Scenario) -> Catalog {
    hookloop::testing::explore::catalog_of(&s.servers, false)
}

struct Run<'a> {
    s: &'a Scenario,
    m: Machine,
    model: std::slice::Iter<'a, ModelStep>,
    hooks: std::iter::Cycle<std::slice::Iter<'a, HookStep>>,
    outputs: std::iter::Cycle<std::slice::Iter<'a, bool>>,
    next_call: u64,
    invariants: Invariants,
    /// Facts fed so far.
    steps: usize,
}

impl Run<'_> {
    fn hook_step(&mut self) -> HookStep {
        self.hooks.next().cloned().unwrap_or(HookStep::Quiet)
    }

    fn feed(&mut self, fact: Input) -> Result<Vec<Effect>, TestCaseError> {
        self.steps += 1;
        let before = self.m.phase();
        let history_before = self.m.history().to_vec();
        self.m
            .handle(fact.clone())
            .map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;
        let effects: Vec<Effect> = std::iter::from_fn(|| self.m.poll_effect()).collect();
        self.invariants
            .check(before, &fact, &self.m, &effects, &history_before)
            .map_err(|violation| TestCaseError::fail(violation.to_string()))?;
        Ok(effects)
    }

    /// The fact a cancel replaces, if this step is one.
    fn cancelled(&self) -> bool {
        self.s.cancels.contains(&self.steps)
    }

    /// Answers effects until the prompt finishes (or the session is done).
    fn settle(&mut self, mut effects: Vec<Effect>) -> Result<(), TestCaseError> {
        loop {
            let mut awaited = None;
            let mut finished = false;
            for effect in effects {
                match effect {
                    Effect::Finish { .. } => finished = true,
                    Effect::Notify { .. } | Effect::KillServer { .. } => {}
                    other => awaited = Some(other),
                }
            }
            let Some(order) = awaited else {
                prop_assert!(
                    finished || self.m.phase() == Phase::Done,
                    "stalled in {:?}",
                    self.m.phase()
                );
                return Ok(());
            };
            if self.cancelled() {
                effects = self.feed(Input::Cancelled)?;
                continue;
            }
            effects = self.answer(order)?;
        }
    }

    fn answer(&mut self, order: Effect) -> Result<Vec<Effect>, TestCaseError> {
        match order {
            Effect::CallLlm { purpose, .. } => {
                let request = self.m.request(purpose);
                check_pairing(request.messages).map_err(TestCaseError::fail)?;
                if let Purpose::Summary { .. } = purpose {
                    return self.feed(Input::LlmReplied {
                        reply: LlmReply {
                            text: "summary".into(),
                            ..LlmReply::default()
                        },
                    });
                }
                let step = self
                    .model
                    .next()
                    .cloned()
                    .unwrap_or(ModelStep::Text(StopReason::EndTurn));
                let reply = match step {
                    ModelStep::Fail => {
                        return self.feed(Input::LlmFailed {
                            error: "down".into(),
                        });
                    }
                    ModelStep::Text(stop) => LlmReply {
                        text: "t".into(),
                        stop,
                        ..LlmReply::default()
                    },
                    ModelStep::Tools(picks) => {
                        let tool_calls = picks
                            .iter()
                            .map(|pick| {
                                self.next_call += 1;
                                let name = match pick {
                                    Some(i) => hooks::qualify(
                                        server(i % self.s.servers.len()).as_str(),
                                        "run",
                                    ),
                                    None => "nowhere__run".into(),
                                };
                                ToolCall {
                                    id: CallId(format!("c{}", self.next_call)),
                                    name,
                                    arguments: json!({"n": self.next_call}),
                                }
                            })
                            .collect();
                        LlmReply {
                            text: String::new(),
                            tool_calls,
                            stop: StopReason::ToolUse,
                            usage: None,
                        }
                    }
                };
                self.feed(Input::LlmReplied { reply })
            }
            Effect::CallTools { calls } => {
                let mut effects = Vec::new();
                for call in calls {
                    if self.cancelled() {
                        return self.feed(Input::Cancelled);
                    }
                    let big = self.outputs.next().copied().unwrap_or(false);
                    let text = if big { "x".repeat(6_000) } else { "ok".into() };
                    effects = self.feed(Input::ToolFinished {
                        id: call.id,
                        output: ToolOutput::text(text),
                    })?;
                }
                Ok(effects)
            }
            Effect::AskPermission { call } => Err(TestCaseError::fail(format!(
                "asked permission for {} with asking off",
                call.name
            ))),
            Effect::CallHooks {
                hook,
                servers,
                subjects,
                ..
            } => {
                let keyed: Vec<Option<u32>> = if subjects.is_empty() {
                    vec![None]
                } else {
                    (0..).take(subjects.len()).map(Some).collect()
                };
                let mut effects = Vec::new();
                for subject in keyed {
                    for server in &servers {
                        if self.cancelled() {
                            return self.feed(Input::Cancelled);
                        }
                        let reply = match self.hook_step() {
                            HookStep::Quiet => HookReply::Text {
                                text: String::new(),
                            },
                            HookStep::Say => HookReply::Text {
                                text: format!("{hook} from {server}"),
                            },
                            HookStep::TimedOut => HookReply::TimedOut,
                            HookStep::Error => HookReply::ErrorResult { text: "e".into() },
                        };
                        effects = self.feed(Input::HookAnswered {
                            server: server.clone(),
                            hook,
                            reply,
                            subject,
                        })?;
                    }
                }
                Ok(effects)
            }
            Effect::Notify { .. } | Effect::KillServer { .. } | Effect::Finish { .. } => {
                Ok(Vec::new())
            }
        }
    }
}

fn run(s: &Scenario) -> Result<Machine, TestCaseError> {
    let policy = Policy {
        hook_servers: HookServers::All,
        stop_max_rejections: s.budget,
        max_context_tokens: if s.small_context { 3_000 } else { 10_000_000 },
        max_output_tokens: 1_000,
        ..Policy::default()
    };
    let mut r = Run {
        s,
        invariants: Invariants::new(&policy),
        m: Machine::new(policy, None),
        model: s.model.iter(),
        hooks: s.hooks.iter().cycle(),
        outputs: s.big_outputs.iter().cycle(),
        next_call: 0,
        steps: 0,
    };
    r.feed(Input::CatalogChanged {
        catalog: catalog(s),
    })?;
    for p in 0..s.prompts {
        let effects = r.feed(Input::Prompted {
            text: format!("prompt {p}"),
        })?;
        r.settle(effects)?;
        prop_assert_eq!(r.m.phase(), Phase::Idle);
    }
    let effects = r.feed(Input::Closed)?;
    r.settle(effects)?;
    prop_assert_eq!(r.m.phase(), Phase::Done);
    Ok(r.m)
}

proptest! {
    // PROPTEST_CASES (CI: 10,000) overrides this default.
    #![proptest_config(ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    })]

    /// Every invariant holds on every step (the run checks them), and the session's whole
    /// history pairs every call with exactly one result.
    #[test]
    fn every_hook_keeps_the_session_valid_and_bounded(s in scenario()) {
        let m = run(&s)?;
        check_pairing(m.history()).map_err(TestCaseError::fail)?;
    }
}
