//! Golden transcripts: each scenario runs a real `Session` with scripted fakes under tokio's
//! paused clock (so virtual times are the same on every run) and records it. The recording must
//! equal `tests/transcripts/<name>.jsonl` byte for byte (the engine version aside), and the
//! committed file must replay cleanly through the pure machine.
//!
//! `HOOKLOOP_BLESS=1 cargo test --test transcripts` rewrites the files; review their diff like
//! code. A change to a rule of the machine changes the transcripts that exercise it.

#[path = "support/golden.rs"]
mod goldens;

use std::time::Duration;

use hookloop::machine::ToolOutput;
use hookloop::machine::{FinishReason, Phase, StopReason};
use hookloop::testing::{HookStep, InProcessHost, ScriptedLlm, Step, echo};
use hookloop::{Config, ConfigBuilder, Hook, HookServers, PromptStop};
use serde_json::json;

use goldens::{Run, golden, hooks_on, say};

#[tokio::test(start_paused = true)]
async fn stop_objection_is_injected() {
    let llm = ScriptedLlm::new([
        Step::text("Done."),
        Step::tools(1, &[("todo__list", json!({}))]),
        Step::text("Wrote the tests; done."),
    ]);
    let host = InProcessHost::new()
        .tool("todo", "list", |_| ToolOutput::text("1 open: write tests"))
        .hook("todo", Hook::Stop, [say("1 open: write tests"), say("  ")]);
    let mut run = Run::new(hooks_on(), llm, host);
    assert_eq!(run.prompt("Finish the feature.").await, PromptStop::EndTurn);
    let report = golden("stop_objection_is_injected", &run.finish().await);
    assert_eq!(report.counters.objections, 1);
    assert_eq!(report.finishes, [FinishReason::EndTurn]);
    assert_eq!(report.phase, Phase::Done);
}

#[tokio::test(start_paused = true)]
async fn several_servers_answer_in_config_order() {
    // Answers arrive beta, gamma, alpha; objections are injected alpha then gamma. `delta` is
    // not on the allowlist: its `_Stop` is never called.
    let llm = ScriptedLlm::new([Step::text("Done."), Step::text("Still done.")]);
    let host = InProcessHost::new()
        .hook(
            "alpha",
            Hook::Stop,
            [HookStep::SayAfter(
                Duration::from_millis(30),
                "alpha objects".into(),
            )],
        )
        .hook("beta", Hook::Stop, [say("")])
        .hook(
            "gamma",
            Hook::Stop,
            [HookStep::SayAfter(
                Duration::from_millis(10),
                "gamma objects".into(),
            )],
        )
        .hook("delta", Hook::Stop, [say("delta would object")]);
    let allow = HookServers::parse(Some("alpha,beta,gamma")).unwrap();
    let mut run = Run::new(Config::builder().hook_servers(allow), llm, host);
    assert_eq!(run.prompt("Ship it.").await, PromptStop::EndTurn);
    assert_eq!(run.session.host().hook_calls("delta", Hook::Stop), 0);
    let report = golden(
        "several_servers_answer_in_config_order",
        &run.finish().await,
    );
    assert_eq!(
        report.counters.objections, 1,
        "one round, however many objected"
    );
    assert_eq!(report.last_at_ms, 30);
}

#[tokio::test(start_paused = true)]
async fn stop_budget_spans_prompts() {
    let llm = ScriptedLlm::new([
        Step::text("One."),
        Step::text("One, again."),
        Step::text("Two."),
        Step::text("Two, again."),
        Step::text("Three."),
    ]);
    let host = InProcessHost::new().hook(
        "todo",
        Hook::Stop,
        [say("open: a"), say("open: b"), say("open: c")],
    );
    let mut run = Run::new(hooks_on().stop_max_rejections(2), llm, host);
    for prompt in ["first", "second", "third"] {
        assert_eq!(run.prompt(prompt).await, PromptStop::EndTurn);
    }
    assert_eq!(run.session.host().hook_calls("todo", Hook::Stop), 2);
    let report = golden("stop_budget_spans_prompts", &run.finish().await);
    assert_eq!(report.counters.objections, 2);
    assert_eq!(report.finishes.len(), 3);
}

#[tokio::test(start_paused = true)]
async fn stop_budget_zero_never_calls_stop() {
    let llm = ScriptedLlm::new([Step::text("Done.")]);
    let host = InProcessHost::new().hook("todo", Hook::Stop, [say("would object")]);
    let mut run = Run::new(hooks_on().stop_max_rejections(0), llm, host);
    assert_eq!(run.prompt("Go.").await, PromptStop::EndTurn);
    assert_eq!(run.session.host().hook_calls("todo", Hook::Stop), 0);
    let report = golden("stop_budget_zero_never_calls_stop", &run.finish().await);
    assert_eq!(report.counters.objections, 0);
}

#[tokio::test(start_paused = true)]
async fn consecutive_end_turn_declines_the_objection() {
    let llm = ScriptedLlm::new([Step::text("Done."), Step::text("I disagree; done.")]);
    let host = InProcessHost::new().hook("todo", Hook::Stop, [say("open: a"), say("open: a")]);
    let mut run = Run::new(hooks_on(), llm, host);
    assert_eq!(run.prompt("Go.").await, PromptStop::EndTurn);
    assert_eq!(run.session.host().hook_calls("todo", Hook::Stop), 1);
    let report = golden(
        "consecutive_end_turn_declines_the_objection",
        &run.finish().await,
    );
    assert_eq!(report.counters.objections, 1);
}

#[tokio::test(start_paused = true)]
async fn hook_timeout_fails_open_and_kills_on_the_second() {
    // `slow` times out in two prompts in a row and is killed; `fast` answers every time and is
    // never counted against. After the kill, `slow` answers again.
    let llm = ScriptedLlm::new([Step::text("1."), Step::text("2."), Step::text("3.")]);
    let host = InProcessHost::new()
        .hook(
            "slow",
            Hook::Stop,
            [HookStep::Hang, HookStep::Hang, say("")],
        )
        .hook("fast", Hook::Stop, [say(""), say(""), say("")]);
    let config = hooks_on().hook_timeout(Duration::from_millis(1_000));
    let mut run = Run::new(config, llm, host);
    for prompt in ["one", "two", "three"] {
        assert_eq!(run.prompt(prompt).await, PromptStop::EndTurn);
    }
    let kills = run
        .session
        .host()
        .log()
        .into_iter()
        .filter(|e| matches!(e, hookloop::testing::HostEvent::Kill { .. }))
        .count();
    assert_eq!(kills, 1);
    let report = golden(
        "hook_timeout_fails_open_and_kills_on_the_second",
        &run.finish().await,
    );
    assert_eq!(report.counters.objections, 0);
    assert_eq!(report.last_at_ms, 2_000, "two timeouts of 1 s each");
}

#[tokio::test(start_paused = true)]
async fn hook_errors_fail_open() {
    let llm = ScriptedLlm::new([Step::text("Done.")]);
    let host = InProcessHost::new()
        .hook(
            "broken",
            Hook::Stop,
            [HookStep::ErrorResult("database locked".into())],
        )
        .hook(
            "flaky",
            Hook::Stop,
            [HookStep::Fail("connection reset".into())],
        );
    let mut run = Run::new(hooks_on(), llm, host);
    assert_eq!(run.prompt("Go.").await, PromptStop::EndTurn);
    let report = golden("hook_errors_fail_open", &run.finish().await);
    assert_eq!(report.counters.objections, 0);
}

#[tokio::test(start_paused = true)]
async fn model_call_to_a_hook_is_refused() {
    let llm = ScriptedLlm::new([
        Step::tools(
            1,
            &[
                ("todo___Stop", json!({})),
                ("todo__list", json!({"all": true})),
                ("nope__missing", json!({})),
            ],
        ),
        Step::text("Done."),
    ]);
    let host = InProcessHost::new()
        .tool("todo", "list", echo)
        .hook("todo", Hook::Stop, [say("")]);
    let mut run = Run::new(hooks_on(), llm, host);
    assert_eq!(run.prompt("Go.").await, PromptStop::EndTurn);
    // Only `_Stop` at the end of the turn, never the model's call.
    assert_eq!(run.session.host().hook_calls("todo", Hook::Stop), 1);
    golden("model_call_to_a_hook_is_refused", &run.finish().await);
}

/// A context so small that one large tool result puts the history over budget.
fn tight_context() -> ConfigBuilder {
    hooks_on().context_window(1_000, 200)
}

fn big(_: &serde_json::Value) -> ToolOutput {
    ToolOutput::text("x".repeat(4_000))
}

#[tokio::test(start_paused = true)]
async fn compaction_with_post_compact() {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("fs__read", json!({"path": "big.txt"}))]),
        Step::text("The file is big; we read it."),
        Step::text("Done."),
    ]);
    let host = InProcessHost::new().tool("fs", "read", big).hook(
        "todo",
        Hook::PostCompact,
        [say("todo: 2 open")],
    );
    let mut run = Run::new(tight_context(), llm, host);
    assert_eq!(run.prompt("Read big.txt.").await, PromptStop::EndTurn);
    let report = golden("compaction_with_post_compact", &run.finish().await);
    assert_eq!(report.counters.compactions, 1);
}

#[tokio::test(start_paused = true)]
async fn compaction_without_post_compact() {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("fs__read", json!({"path": "big.txt"}))]),
        Step::text("The file is big; we read it."),
        Step::text("Done."),
    ]);
    let host = InProcessHost::new().tool("fs", "read", big);
    let mut run = Run::new(tight_context(), llm, host);
    assert_eq!(run.prompt("Read big.txt.").await, PromptStop::EndTurn);
    let report = golden("compaction_without_post_compact", &run.finish().await);
    assert_eq!(report.counters.compactions, 1);
}

#[tokio::test(start_paused = true)]
async fn summary_failure_falls_back_to_dropping_turns() {
    // Two prompts, each reading a medium file: the second puts the history over budget, the
    // summary fails, and the first prompt's turns are dropped instead.
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("fs__read", json!({"path": "a.txt"}))]),
        Step::text("Read a."),
        Step::tools(2, &[("fs__read", json!({"path": "b.txt"}))]),
        Step::Fail("summary model overloaded".into()),
        Step::text("Read b."),
    ]);
    let host = InProcessHost::new().tool("fs", "read", |_| ToolOutput::text("y".repeat(2_000)));
    let mut run = Run::new(tight_context(), llm, host);
    assert_eq!(run.prompt("Read a.txt.").await, PromptStop::EndTurn);
    assert_eq!(run.prompt("Read b.txt.").await, PromptStop::EndTurn);
    let history = run.session.history().to_vec();
    assert_eq!(history[0], hookloop::Message::user("Read b.txt."));
    let report = golden(
        "summary_failure_falls_back_to_dropping_turns",
        &run.finish().await,
    );
    assert_eq!(report.counters.compactions, 1);
}

#[tokio::test(start_paused = true)]
async fn cancellation_during_tools() {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("fs__slow", json!({})), ("fs__slow", json!({"n": 2}))]),
        Step::text("Fresh start."),
    ]);
    let host = InProcessHost::new()
        .tool("fs", "slow", echo)
        .tool_delay(Duration::from_secs(5));
    let mut run = Run::new(hooks_on(), llm, host);
    let cancel = run.session.cancel_handle();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    assert_eq!(
        run.prompt("Run the slow tools.").await,
        PromptStop::Cancelled
    );
    // The session lives on; the cancelled calls are answered in the history.
    assert_eq!(run.prompt("Never mind.").await, PromptStop::EndTurn);
    let report = golden("cancellation_during_tools", &run.finish().await);
    assert_eq!(
        report.finishes,
        [FinishReason::Cancelled, FinishReason::EndTurn]
    );
    assert_eq!(report.last_at_ms, 100);
}

#[tokio::test(start_paused = true)]
async fn cancellation_while_stop_runs() {
    // The user cancels while `_Stop` is still thinking: the prompt ends cancelled, the late
    // answer is never fed, and the session takes the next prompt.
    let llm = ScriptedLlm::new([Step::text("Done."), Step::text("Hello.")]);
    let host = InProcessHost::new().hook(
        "todo",
        Hook::Stop,
        [
            HookStep::SayAfter(Duration::from_secs(2), "open: a".into()),
            say(""),
        ],
    );
    let mut run = Run::new(hooks_on(), llm, host);
    let cancel = run.session.cancel_handle();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        cancel.cancel();
    });
    assert_eq!(run.prompt("Go.").await, PromptStop::Cancelled);
    assert_eq!(run.prompt("Hi.").await, PromptStop::EndTurn);
    let report = golden("cancellation_while_stop_runs", &run.finish().await);
    assert_eq!(report.counters.objections, 0);
    assert_eq!(
        report.finishes,
        [FinishReason::Cancelled, FinishReason::EndTurn]
    );
}

#[tokio::test(start_paused = true)]
async fn round_cap_ends_the_prompt() {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("t__echo", json!({"i": 1}))]),
        Step::tools(2, &[("t__echo", json!({"i": 2}))]),
        Step::tools(3, &[("t__echo", json!({"i": 3}))]),
    ]);
    let host = InProcessHost::new().tool("t", "echo", echo);
    let mut run = Run::new(Config::builder().max_rounds(3), llm, host);
    assert_eq!(run.prompt("Loop.").await, PromptStop::MaxTurnRequests);
    let report = golden("round_cap_ends_the_prompt", &run.finish().await);
    assert_eq!(report.finishes, [FinishReason::MaxTurnRequests]);
}

#[tokio::test(start_paused = true)]
async fn model_failure_ends_the_prompt() {
    let llm = ScriptedLlm::new([Step::Fail("503 overloaded".into()), Step::text("Back.")]);
    let mut run = Run::new(Config::builder(), llm, InProcessHost::new());
    let error = run.session.prompt("Hello?").await.unwrap_err();
    assert!(error.to_string().contains("503 overloaded"), "{error}");
    assert_eq!(run.prompt("Hello again.").await, PromptStop::EndTurn);
    golden("model_failure_ends_the_prompt", &run.finish().await);
}

#[tokio::test(start_paused = true)]
async fn several_prompts_share_one_session() {
    // Tools, then an objection, then a catalog change (a server leaves), then a reply cut by
    // the output limit.
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("fs__read", json!({"path": "a"}))]),
        Step::text("Read a."),
        Step::text("Done."),
        Step::text("Done, with the todo."),
        Step::text("Nothing to do."),
        Step::stop(StopReason::MaxTokens),
    ]);
    let host = InProcessHost::new().tool("fs", "read", echo).hook(
        "todo",
        Hook::Stop,
        [say(""), say("open: b")],
    );
    let mut run = Run::new(hooks_on(), llm, host);
    assert_eq!(run.prompt("Read a.").await, PromptStop::EndTurn);
    assert_eq!(run.prompt("Now b.").await, PromptStop::EndTurn);
    run.session.host().remove_server("todo");
    assert_eq!(run.prompt("And c.").await, PromptStop::EndTurn);
    assert_eq!(run.prompt("Write a novel.").await, PromptStop::MaxTokens);
    let report = golden("several_prompts_share_one_session", &run.finish().await);
    assert_eq!(report.finishes.len(), 4);
    assert_eq!(report.counters.objections, 1);
}

#[tokio::test(start_paused = true)]
async fn session_start_and_user_prompt_submit_inject_context() {
    let llm = ScriptedLlm::new([Step::text("On it."), Step::text("Again.")]);
    let host = InProcessHost::new()
        .hook("todo", Hook::SessionStart, [say("2 open: tests; docs")])
        .hook(
            "todo",
            Hook::UserPromptSubmit,
            [say("branch: main"), say("")],
        );
    let mut run = Run::new(hooks_on(), llm, host);
    assert_eq!(run.prompt("Start.").await, PromptStop::EndTurn);
    // The second prompt: `_SessionStart` is not asked again.
    assert_eq!(run.prompt("Continue.").await, PromptStop::EndTurn);
    let report = golden(
        "session_start_and_user_prompt_submit_inject_context",
        &run.finish().await,
    );
    assert_eq!(report.finishes.len(), 2);
    assert_eq!(report.phase, Phase::Done);
}

#[tokio::test(start_paused = true)]
async fn pre_tool_use_denies_a_call() {
    let llm = ScriptedLlm::new([
        Step::tools(
            1,
            &[
                ("fs__rm", json!({"path": "/etc"})),
                ("fs__read", json!({"path": "a.txt"})),
            ],
        ),
        Step::text("I will not delete it."),
    ]);
    let host = InProcessHost::new()
        .tool("fs", "rm", echo)
        .tool("fs", "read", echo)
        .hook(
            "guard",
            Hook::PreToolUse,
            [say("rm outside the workspace is not allowed"), say("")],
        );
    let mut run = Run::new(hooks_on(), llm, host);
    assert_eq!(run.prompt("Tidy up.").await, PromptStop::EndTurn);
    let report = golden("pre_tool_use_denies_a_call", &run.finish().await);
    assert_eq!(report.finishes, [FinishReason::EndTurn]);
}

#[tokio::test(start_paused = true)]
async fn post_tool_use_adds_context_after_the_results() {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("fs__read", json!({"path": "a.txt"}))]),
        Step::text("Read it."),
    ]);
    let host = InProcessHost::new()
        .tool("fs", "read", |_| ToolOutput::text("hello"))
        .hook(
            "lint",
            Hook::PostToolUse,
            [say("a.txt is generated: do not edit it")],
        );
    let mut run = Run::new(hooks_on(), llm, host);
    assert_eq!(run.prompt("Read a.txt.").await, PromptStop::EndTurn);
    let report = golden(
        "post_tool_use_adds_context_after_the_results",
        &run.finish().await,
    );
    assert_eq!(report.finishes, [FinishReason::EndTurn]);
}

#[tokio::test(start_paused = true)]
async fn pre_compact_guides_the_summary() {
    let big = "x".repeat(20_000);
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("fs__read", json!({"path": "big.txt"}))]),
        Step::text("Summary: read big.txt; todo #3 open."),
        Step::text("Continuing."),
    ]);
    let host = InProcessHost::new()
        .tool("fs", "read", move |_| ToolOutput::text(big.clone()))
        .hook("todo", Hook::PreCompact, [say("keep todo #3")]);
    let mut run = Run::new(hooks_on().context_window(4_000, 1_000), llm, host);
    assert_eq!(run.prompt("Read big.txt.").await, PromptStop::EndTurn);
    let requests = run.session.llm().requests();
    let summary = requests[1].instruction.clone().unwrap_or_default();
    assert!(summary.contains("keep todo #3"), "{summary}");
    assert!(requests[2].instruction.is_none());
    let report = golden("pre_compact_guides_the_summary", &run.finish().await);
    assert_eq!(report.counters.compactions, 1);
}

#[tokio::test(start_paused = true)]
async fn session_end_is_called_at_close() {
    let llm = ScriptedLlm::new([Step::text("Done.")]);
    let host = InProcessHost::new().hook("audit", Hook::SessionEnd, [say("ignored")]);
    let mut run = Run::new(hooks_on(), llm, host);
    assert_eq!(run.prompt("Go.").await, PromptStop::EndTurn);
    let report = golden("session_end_is_called_at_close", &run.finish().await);
    assert_eq!(report.phase, Phase::Done);
}
