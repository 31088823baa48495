//! The driver with scripted fakes of both traits: effects performed, facts fed back, timers,
//! cancellation, concurrency. Every test checks the pairing invariant on every model request.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookloop::machine::{Catalog, Effect, HookReply, Input, Message, ToolCall, ToolOutput};
use hookloop::testing::{HookStep, HostEvent, InProcessHost, ScriptedLlm, Step, echo};
use hookloop::{
    Config, Hook, HookCall, HookServers, LlmError, Observer, PromptStop, ServerName, Session,
    SessionError, ToolHost,
};
use serde_json::json;

fn config() -> Config {
    Config::builder()
        .hook_servers(HookServers::All)
        .build()
        .unwrap()
}

fn assert_clean(llm: &ScriptedLlm) {
    assert_eq!(llm.violations(), Vec::<String>::new());
    assert_eq!(llm.remaining(), 0, "the script was not used up");
}

#[tokio::test]
async fn an_objection_keeps_the_agent_working_until_the_hook_is_satisfied() {
    let llm = ScriptedLlm::new([
        Step::text("done"),
        Step::tools(1, &[("todo__complete", json!({"item": "tests"}))]),
        Step::text("really done"),
    ]);
    let host = InProcessHost::new().tool("todo", "complete", echo).hook(
        "todo",
        Hook::Stop,
        [
            HookStep::Say("1 open: tests".into()),
            HookStep::Say(String::new()),
        ],
    );
    let mut session = Session::new(config(), llm.clone(), host.clone());
    assert_eq!(session.prompt("work").await.unwrap(), PromptStop::EndTurn);
    assert_eq!(session.counters().objections, 1);
    assert_eq!(host.hook_calls("todo", Hook::Stop), 2);
    let requests = llm.requests();
    assert_eq!(requests.len(), 3);
    assert!(
        requests
            .iter()
            .all(|r| r.tools.iter().all(|t| t.name == "todo__complete"))
    );
    assert_clean(&llm);
}

#[tokio::test]
async fn counters_survive_across_prompts() {
    let llm = ScriptedLlm::new([Step::text("a"), Step::text("b"), Step::text("c")]);
    let host =
        InProcessHost::new().hook("h", Hook::Stop, (0..10).map(|_| HookStep::Say("no".into())));
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .stop_max_rejections(1)
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), host.clone());
    session.prompt("one").await.unwrap();
    session.prompt("two").await.unwrap();
    assert_eq!(session.counters().objections, 1);
    assert_eq!(
        host.hook_calls("h", Hook::Stop),
        1,
        "the budget is spent for the whole session"
    );
    assert_clean(&llm);
}

#[tokio::test(start_paused = true)]
async fn a_hanging_hook_times_out_and_a_second_timeout_kills_its_server() {
    let llm = ScriptedLlm::new([Step::text("a"), Step::text("b")]);
    let host = InProcessHost::new().hook("slow", Hook::Stop, [HookStep::Hang, HookStep::Hang]);
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .hook_timeout(Duration::from_millis(2_500))
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), host.clone());
    let started = tokio::time::Instant::now();
    assert_eq!(session.prompt("one").await.unwrap(), PromptStop::EndTurn);
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(2_500),
        "the timeout holds to the ms"
    );
    assert!(
        !host
            .log()
            .iter()
            .any(|e| matches!(e, HostEvent::Kill { .. }))
    );
    session.prompt("two").await.unwrap();
    assert_eq!(
        host.log().last(),
        Some(&HostEvent::Kill {
            server: ServerName::new("slow").unwrap()
        })
    );
    assert_clean(&llm);
}

/// A host that leaves the hook timeout to the driver: its hook calls wait as long as the server
/// takes, and the rest is the in-process host's.
struct Unbounded(InProcessHost);

impl ToolHost for Unbounded {
    fn catalog_generation(&self) -> u64 {
        self.0.catalog_generation()
    }

    fn catalog(&self) -> Catalog {
        self.0.catalog()
    }

    async fn call_tool(&self, call: &ToolCall) -> ToolOutput {
        self.0.call_tool(call).await
    }

    async fn call_hook(&self, call: &HookCall) -> HookReply {
        let unbounded = HookCall {
            timeout: Duration::MAX,
            ..call.clone()
        };
        self.0.call_hook(&unbounded).await
    }

    async fn kill_server(&self, server: &ServerName) {
        self.0.kill_server(server).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_host_that_never_answers_a_hook_holds_the_round_no_longer_than_the_timeout() {
    let llm = ScriptedLlm::new([Step::text("a"), Step::text("b")]);
    let inner = InProcessHost::new().hook("slow", Hook::Stop, [HookStep::Hang, HookStep::Hang]);
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .hook_timeout(Duration::from_millis(2_500))
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), Unbounded(inner.clone()));
    let started = tokio::time::Instant::now();
    assert_eq!(session.prompt("one").await.unwrap(), PromptStop::EndTurn);
    assert_eq!(
        started.elapsed(),
        Duration::from_millis(2_500),
        "the driver keeps the round's deadline, to the ms"
    );
    // The driver's timeout is a timeout like any: the second in a row kills the server.
    session.prompt("two").await.unwrap();
    assert_eq!(
        inner.log().last(),
        Some(&HostEvent::Kill {
            server: ServerName::new("slow").unwrap()
        })
    );
    assert_clean(&llm);
}

#[tokio::test(start_paused = true)]
async fn tool_calls_run_concurrently_within_the_bound() {
    let ran = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&ran);
    let host = InProcessHost::new()
        .tool("s", "t", move |_| {
            count.fetch_add(1, Ordering::SeqCst);
            ToolOutput::text("ok")
        })
        .tool_delay(Duration::from_millis(100));
    let calls: Vec<(&str, serde_json::Value)> = (0..5).map(|i| ("s__t", json!({"i": i}))).collect();
    let llm = ScriptedLlm::new([Step::tools(1, &calls), Step::text("done")]);
    let config = Config::builder().tool_concurrency(2).build().unwrap();
    let mut session = Session::new(config, llm.clone(), host);
    let started = tokio::time::Instant::now();
    session.prompt("go").await.unwrap();
    // Five calls of 100 ms, two at a time: three waves (unbounded would take one).
    assert_eq!(started.elapsed(), Duration::from_millis(300));
    // Results are recorded in call order whatever order they finished in.
    let ids: Vec<String> = session
        .history()
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { call_id, .. } => Some(call_id.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(ids, ["c1", "c2", "c3", "c4", "c5"]);
    assert_eq!(ran.load(Ordering::SeqCst), 5);
    assert_clean(&llm);
}

#[tokio::test(start_paused = true)]
async fn cancelling_during_a_tool_call_ends_promptly_and_leaves_a_valid_history() {
    let host = InProcessHost::new()
        .tool("s", "slow", echo)
        .tool_delay(Duration::from_secs(3_600));
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("s__slow", json!({}))]),
        Step::text("next prompt works"),
    ]);
    let mut session = Session::new(Config::default(), llm.clone(), host);
    let cancel = session.cancel_handle();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        cancel.cancel();
    });
    let started = tokio::time::Instant::now();
    assert_eq!(session.prompt("go").await.unwrap(), PromptStop::Cancelled);
    assert_eq!(started.elapsed(), Duration::from_millis(50));
    assert!(matches!(
        session.history().last(),
        Some(Message::ToolResult { output, .. }) if output.is_error && output.joined_text() == "cancelled"
    ));
    assert_eq!(session.prompt("again").await.unwrap(), PromptStop::EndTurn);
    assert_clean(&llm);
}

#[tokio::test(start_paused = true)]
async fn cancelling_during_a_hook_call_does_not_wait_for_the_hook() {
    let host = InProcessHost::new().hook("h", Hook::Stop, [HookStep::Hang]);
    let llm = ScriptedLlm::new([Step::text("done")]);
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), host);
    let cancel = session.cancel_handle();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(10)).await;
        cancel.cancel();
    });
    let started = tokio::time::Instant::now();
    assert_eq!(session.prompt("go").await.unwrap(), PromptStop::Cancelled);
    assert_eq!(started.elapsed(), Duration::from_millis(10));
    assert_clean(&llm);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_prompt_during_a_tool_call_is_a_cancel_and_the_next_prompt_works() {
    let host = InProcessHost::new()
        .tool("s", "slow", echo)
        .tool_delay(Duration::from_secs(3_600));
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("s__slow", json!({}))]),
        Step::text("next prompt works"),
    ]);
    let mut session = Session::new(Config::default(), llm.clone(), host);
    let tap = Tap::default();
    session.add_observer(tap.clone());
    let dropped = tokio::time::timeout(Duration::from_secs(1), session.prompt("go")).await;
    assert!(dropped.is_err(), "the tool hangs, so the prompt is dropped");
    assert_eq!(session.prompt("again").await.unwrap(), PromptStop::EndTurn);
    // The dropped call was answered `cancelled` before the new prompt, and observers saw the
    // cancel as a fact, so a transcript of this session replays.
    let history = session.history();
    assert!(matches!(
        &history[2],
        Message::ToolResult { output, .. } if output.is_error && output.joined_text() == "cancelled"
    ));
    assert_eq!(history[3], Message::user("again"));
    let seen = tap.0.lock().unwrap();
    assert!(seen.iter().any(|s| s == "fact cancelled"));
    // The scripted model checked that the second request answers every call.
    assert_clean(&llm);
}

#[tokio::test(start_paused = true)]
async fn dropping_a_prompt_during_a_hook_round_is_a_cancel_and_the_next_prompt_works() {
    let host = InProcessHost::new().hook("h", Hook::Stop, [HookStep::Hang]);
    let llm = ScriptedLlm::new([Step::text("done"), Step::text("second")]);
    let mut session = Session::new(config(), llm.clone(), host);
    let dropped = tokio::time::timeout(Duration::from_millis(100), session.prompt("go")).await;
    assert!(dropped.is_err(), "the hook hangs past the drop");
    assert_eq!(session.prompt("again").await.unwrap(), PromptStop::EndTurn);
    assert_clean(&llm);
}

#[tokio::test]
async fn a_cancel_before_the_prompt_is_not_for_it() {
    let llm = ScriptedLlm::new([Step::text("done")]);
    let mut session = Session::new(Config::default(), llm.clone(), InProcessHost::new());
    session.cancel_handle().cancel();
    assert_eq!(session.prompt("go").await.unwrap(), PromptStop::EndTurn);
}

#[tokio::test]
async fn a_model_failure_is_returned_typed_and_the_session_lives_on() {
    let llm = ScriptedLlm::new([Step::Fail("overloaded".into()), Step::text("fine")]);
    let mut session = Session::new(Config::default(), llm.clone(), InProcessHost::new());
    let err = session.prompt("go").await.unwrap_err();
    assert!(
        matches!(&err, SessionError::Llm(LlmError::Other(m)) if m == "overloaded"),
        "{err}"
    );
    assert_eq!(session.prompt("again").await.unwrap(), PromptStop::EndTurn);
    assert_clean(&llm);
}

#[tokio::test]
async fn a_model_call_to_a_hook_is_refused_and_the_hook_not_run() {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("todo___Stop", json!({}))]),
        Step::text("ok"),
    ]);
    let host = InProcessHost::new()
        .tool("todo", "list", echo)
        .hook("todo", Hook::Stop, []);
    let config = Config::builder()
        .hook_servers(HookServers::Off)
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), host.clone());
    session.prompt("go").await.unwrap();
    assert_eq!(host.hook_calls("todo", Hook::Stop), 0);
    let second = &llm.requests()[1];
    assert!(matches!(
        second.messages.last(),
        Some(Message::ToolResult { output, .. }) if output.joined_text() == "unknown tool: todo___Stop"
    ));
    assert_clean(&llm);
}

#[tokio::test]
async fn catalog_changes_reach_the_machine_before_the_next_request() {
    let llm = ScriptedLlm::new([Step::text("a"), Step::text("b")]);
    let host = InProcessHost::new()
        .tool("x", "t", echo)
        .tool("y", "t", echo);
    let mut session = Session::new(Config::default(), llm.clone(), host.clone());
    session.prompt("one").await.unwrap();
    host.remove_server("x");
    session.prompt("two").await.unwrap();
    let requests = llm.requests();
    assert_eq!(requests[0].tools.len(), 2);
    assert_eq!(
        requests[1]
            .tools
            .iter()
            .map(|t| t.name.as_str())
            .collect::<Vec<_>>(),
        ["y__t"]
    );
}

#[derive(Clone, Default)]
struct Tap(Arc<Mutex<Vec<String>>>);

impl Observer for Tap {
    fn on_effect(&mut self, _at: Duration, effect: &Effect) {
        self.0
            .lock()
            .unwrap()
            .push(format!("effect {}", serde_json::to_string(effect).unwrap()));
    }
    fn on_fact(&mut self, _at: Duration, fact: &Input) {
        self.0.lock().unwrap().push(format!("fact {}", fact.kind()));
    }
}

#[tokio::test]
async fn observers_see_every_effect_and_fact_in_order() {
    let llm = ScriptedLlm::new([Step::text("done"), Step::text("still")]);
    let host = InProcessHost::new().hook("h", Hook::Stop, [HookStep::Say("wait".into())]);
    let mut session = Session::new(config(), llm, host);
    let tap = Tap::default();
    session.add_observer(tap.clone());
    session.prompt("go").await.unwrap();
    let seen = tap.0.lock().unwrap().clone();
    let kinds: Vec<&str> = seen
        .iter()
        .map(|s| &s[..s.find(' ').map_or(s.len(), |i| i + 7).min(s.len())])
        .collect();
    assert_eq!(seen[0], "fact catalog_changed");
    assert_eq!(seen[1], "fact prompted");
    assert!(
        seen[2].starts_with(r#"effect {"effect":"call_llm""#),
        "{}",
        seen[2]
    );
    assert!(
        seen.iter().any(|s| s.contains(r#""notice":"objection""#)),
        "{kinds:?}"
    );
    assert!(seen.last().unwrap().contains(r#""effect":"finish""#));
    let notices = seen
        .iter()
        .filter(|s| s.contains(r#""notice":"stop_skipped""#))
        .count();
    assert_eq!(
        notices, 1,
        "the second end_turn after an objection is declined, visibly"
    );
}

#[tokio::test]
async fn closing_the_session_refuses_later_prompts() {
    let llm = ScriptedLlm::new([Step::text("done")]);
    let mut session = Session::new(Config::default(), llm, InProcessHost::new());
    session.prompt("go").await.unwrap();
    session.close().await.unwrap();
    let err = session.prompt("again").await.unwrap_err();
    assert!(matches!(err, SessionError::Machine(_)), "{err}");
    assert!(err.to_string().contains("closed"));
}

#[tokio::test]
async fn post_compact_answers_reach_the_fresh_context() {
    let big = "x".repeat(20_000);
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("todo__read", json!({}))]),
        Step::text("summary of the work"),
        Step::text("continuing"),
    ]);
    let host = InProcessHost::new()
        .tool("todo", "read", move |_| ToolOutput::text(big.clone()))
        .hook(
            "todo",
            Hook::PostCompact,
            [HookStep::Say("open: docs".into())],
        );
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .context_window(4_000, 1_000)
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), host);
    let tap = Tap::default();
    session.add_observer(tap.clone());
    session.prompt("task").await.unwrap();
    let requests = llm.requests();
    assert!(
        requests[1].tools.is_empty() && requests[1].instruction.is_some(),
        "the summary request"
    );
    let fresh = &requests[2].messages;
    assert_eq!(fresh.len(), 4);
    assert!(matches!(&fresh[3], Message::ToolResult { output, .. }
        if output.joined_text() == r#"{"hook":"_PostCompact","server":"todo","text":"open: docs"}"#));
    let seen = tap.0.lock().unwrap();
    assert!(seen.iter().any(|s| s.contains(r#""notice":"compacted""#)));
    assert_clean(&llm);
}

#[tokio::test]
async fn a_pre_tool_use_denial_stops_the_call_and_close_calls_session_end_once() {
    let llm = ScriptedLlm::new([
        Step::tools(
            1,
            &[
                ("fs__rm", json!({"path": "/"})),
                ("fs__ls", json!({"path": "/"})),
            ],
        ),
        Step::text("ok, I will not"),
    ]);
    let host = InProcessHost::new()
        .tool("fs", "rm", echo)
        .tool("fs", "ls", echo)
        .hook(
            "guard",
            Hook::PreToolUse,
            // One answer per gated call, in call order.
            [
                HookStep::Say("rm is not allowed".into()),
                HookStep::Say(String::new()),
            ],
        )
        .hook("guard", Hook::SessionEnd, [HookStep::Say("ignored".into())]);
    let mut session = Session::new(config(), llm.clone(), host.clone());
    assert_eq!(
        session.prompt("clean up").await.unwrap(),
        PromptStop::EndTurn
    );
    let ran: Vec<String> = host
        .log()
        .into_iter()
        .filter_map(|e| match e {
            HostEvent::Tool { name, .. } => Some(name),
            HostEvent::Hook { .. } | HostEvent::Kill { .. } => None,
        })
        .collect();
    assert_eq!(ran, vec!["fs__ls".to_owned()], "the denied call never ran");
    let denial = session
        .history()
        .iter()
        .find_map(|m| match m {
            Message::ToolResult { call_id, output } if call_id.0 == "c1" => Some(output),
            _ => None,
        })
        .unwrap();
    assert!(denial.is_error);
    assert!(denial.joined_text().contains("rm is not allowed"));
    assert_eq!(host.hook_calls("guard", Hook::PreToolUse), 2);
    session.close().await.unwrap();
    session.close().await.unwrap();
    assert_eq!(host.hook_calls("guard", Hook::SessionEnd), 1);
    assert_clean(&llm);
}

#[tokio::test]
async fn a_cancel_made_before_close_does_not_keep_session_end_from_being_called() {
    let llm = ScriptedLlm::new([Step::text("done")]);
    let host = InProcessHost::new().hook("audit", Hook::SessionEnd, [HookStep::Say("bye".into())]);
    let mut session = Session::new(config(), llm.clone(), host.clone());
    session.prompt("go").await.unwrap();
    // What a front end does to end a session: cancel whatever runs, then close.
    session.cancel_handle().cancel();
    session.close().await.unwrap();
    assert_eq!(host.hook_calls("audit", Hook::SessionEnd), 1);
    assert_clean(&llm);
}

#[tokio::test]
async fn a_session_closed_before_any_prompt_calls_session_end_once() {
    let llm = ScriptedLlm::new([]);
    let host = InProcessHost::new().hook("audit", Hook::SessionEnd, [HookStep::Say("bye".into())]);
    let mut session = Session::new(config(), llm.clone(), host.clone());
    session.close().await.unwrap();
    session.close().await.unwrap();
    assert_eq!(host.hook_calls("audit", Hook::SessionEnd), 1);
    assert_eq!(host.hook_calls("audit", Hook::SessionStart), 0);
    assert_clean(&llm);
}
