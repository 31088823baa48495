//! Every hook rule of the spec, each through a full session: the driver, a scripted model, and
//! the rmcp host talking to real child processes (the `hookloop-test-server` binary).

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use hookloop::hooks::{ServerName, encode_hook_body};
use hookloop::machine::{Effect, Input, Message, Notice, ToolCall, ToolOutput};
use hookloop::mcp::McpHost;
use hookloop::ports::ToolHost;
use hookloop::progress::{Event, ProgressObserver};
use hookloop::testing::{ScriptedLlm, Step};
use hookloop::{Config, Hook, HookServers, Observer, PromptStop, Session};
use serde_json::{Value, json};

use common::{Scratch, alive, connect, count, eventually, fast_options, lines, test_server};

/// The hook timeout of tests where one call must time out (a server that hangs) and the others
/// must not. A hung call reaches any timeout, so the value only has to leave a loaded machine
/// ample room for the calls that answer; a few hundred ms did not, and failed by chance. A
/// restart is never timed by it: the tests that need one bring the server back with a tool call
/// before the hook round that needs it.
const HANG_TIMEOUT_MS: u64 = 1000;

fn config(hooks: HookServers, timeout_ms: u64, budget: u32) -> Config {
    Config::builder()
        .hook_servers(hooks)
        .hook_timeout(Duration::from_millis(timeout_ms))
        .stop_max_rejections(budget)
        .build()
        .expect("valid config")
}

/// The hook bodies injected into a request, in order.
fn injected(messages: &[Message]) -> Vec<String> {
    let hook_ids: Vec<_> = messages
        .iter()
        .filter_map(|m| match m {
            Message::Assistant { tool_calls, .. } => Some(tool_calls),
            _ => None,
        })
        .flatten()
        .filter(|c| hookloop::hooks::is_hook(hookloop::hooks::bare_name(&c.name)))
        .map(|c| c.id.clone())
        .collect();
    messages
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { call_id, output } if hook_ids.contains(call_id) => {
                Some(output.joined_text())
            }
            _ => None,
        })
        .collect()
}

/// Waits until `server` runs its `n`-th process (of those listed in `pids`) and is live again,
/// so that the next hook round asks it rather than skipping it.
async fn restarted(host: &McpHost, server: &str, pids: &str, n: usize) -> bool {
    eventually(Duration::from_secs(10), || {
        let listed = lines(pids);
        listed.len() == n
            && host.server_pid(server).map(|p| p.to_string()).as_ref() == listed.last()
    })
    .await
}

fn no_violations(llm: &ScriptedLlm) {
    assert_eq!(llm.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn hooks_are_hidden_from_the_model_and_not_called_without_allowlist() {
    let dir = Scratch::new("hidden");
    let log = dir.file("log");
    let host = connect(
        vec![(
            "todo",
            test_server(&[
                ("TS_HOOKS", "_Stop,_PostCompact"),
                ("TS_STOP", "say:open"),
                ("TS_LOG", &log),
            ]),
        )],
        fast_options(),
    )
    .await;
    let llm = ScriptedLlm::new([Step::text("done")]);
    let mut session = Session::new(config(HookServers::Off, 2000, 3), llm.clone(), host);
    assert_eq!(session.prompt("go").await.unwrap(), PromptStop::EndTurn);

    let tools: Vec<String> = llm.requests()[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert!(tools.contains(&"todo__echo".to_owned()), "{tools:?}");
    assert!(
        !tools
            .iter()
            .any(|t| t.contains("__Stop") || t.contains("_PostCompact"))
    );
    // Hooks are off by default: the server was never asked.
    assert_eq!(count(&log, "call _Stop"), 0);
    no_violations(&llm);
}

#[tokio::test]
async fn a_hook_the_model_calls_is_refused_and_not_run() {
    let dir = Scratch::new("refused");
    let log = dir.file("log");
    let host = connect(
        vec![(
            "todo",
            test_server(&[("TS_HOOKS", "_Stop"), ("TS_LOG", &log)]),
        )],
        fast_options(),
    )
    .await;
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("todo___Stop", json!({}))]),
        Step::text("done"),
    ]);
    let mut session = Session::new(config(HookServers::Off, 2000, 3), llm.clone(), host);
    assert_eq!(session.prompt("go").await.unwrap(), PromptStop::EndTurn);

    let second = &llm.requests()[1].messages;
    let refused = second.iter().any(|m| matches!(m,
        Message::ToolResult { output, .. } if output.is_error && output.joined_text().contains("unknown tool")));
    assert!(refused, "{second:?}");
    assert_eq!(count(&log, "call _Stop"), 0);
    // The host refuses on its own too, whatever its caller.
    let output: ToolOutput = session
        .host()
        .call_tool(&hookloop::machine::ToolCall {
            id: "x".into(),
            name: "todo___Stop".into(),
            arguments: json!({}),
        })
        .await;
    assert!(output.is_error);
    assert_eq!(count(&log, "call _Stop"), 0);
    no_violations(&llm);
}

#[tokio::test]
async fn an_objection_is_injected_json_encoded_and_the_model_asked_again() {
    let objection = "2 open: write tests; update \"docs\"";
    let host = connect(
        vec![(
            "todo",
            test_server(&[
                ("TS_HOOKS", "_Stop"),
                ("TS_STOP", &format!("say:{objection}")),
            ]),
        )],
        fast_options(),
    )
    .await;
    let llm = ScriptedLlm::new([Step::text("done"), Step::text("really done")]);
    let mut session = Session::new(config(HookServers::All, 2000, 3), llm.clone(), host);
    assert_eq!(session.prompt("go").await.unwrap(), PromptStop::EndTurn);

    assert_eq!(session.counters().objections, 1);
    let requests = llm.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(
        injected(&requests[1].messages),
        [encode_hook_body(Hook::Stop, "todo", objection)]
    );
    no_violations(&llm);
}

#[tokio::test]
async fn several_servers_answer_in_configuration_order() {
    // `b` answers last but is configured first: its objection comes first. It answers only
    // once the machine has taken `a`'s answer (the observer below says so with a file), so the
    // order of arrival is certain, whatever the load.
    let dir = Scratch::new("order");
    let a_answered = dir.file("a_answered");
    let host = connect(
        vec![
            (
                "b",
                test_server(&[
                    ("TS_HOOKS", "_Stop"),
                    ("TS_STOP", &format!("after:{a_answered}:from b")),
                ]),
            ),
            (
                "a",
                test_server(&[("TS_HOOKS", "_Stop"), ("TS_STOP", "say:from a")]),
            ),
            ("quiet", test_server(&[("TS_HOOKS", "_Stop")])),
        ],
        fast_options(),
    )
    .await;
    let llm = ScriptedLlm::new([Step::text("done"), Step::text("done again")]);
    let mut session = Session::new(config(HookServers::All, 3000, 3), llm.clone(), host);
    let answers = Arc::new(Mutex::new(Vec::new()));
    session.add_observer(Answers {
        answers: Arc::clone(&answers),
        release: (ServerName::new("a").unwrap(), a_answered.into()),
    });
    session.prompt("go").await.unwrap();

    let arrived = answers.lock().unwrap().clone();
    let at = |name: &str| arrived.iter().position(|s| s.as_str() == name);
    assert!(at("a") < at("b") && at("b").is_some(), "{arrived:?}");
    assert_eq!(
        injected(&llm.requests()[1].messages),
        [
            encode_hook_body(Hook::Stop, "b", "from b"),
            encode_hook_body(Hook::Stop, "a", "from a"),
        ]
    );
    // One objection round, however many servers objected in it.
    assert_eq!(session.counters().objections, 1);
    no_violations(&llm);
}

/// Records which server each hook answer the machine takes came from, and creates a file once
/// one server's has come.
struct Answers {
    answers: Arc<Mutex<Vec<ServerName>>>,
    release: (ServerName, std::path::PathBuf),
}

impl Observer for Answers {
    fn on_fact(&mut self, _at: Duration, fact: &Input) {
        if let Input::HookAnswered { server, .. } = fact {
            self.answers.lock().unwrap().push(server.clone());
            if *server == self.release.0 {
                std::fs::write(&self.release.1, b"").expect("release file");
            }
        }
    }
}

#[tokio::test]
async fn the_budget_holds_across_prompts_and_zero_disables_stop() {
    let dir = Scratch::new("budget");
    let log = dir.file("log");
    let server = || {
        test_server(&[
            ("TS_HOOKS", "_Stop"),
            ("TS_THEN", "say:still open"),
            ("TS_LOG", &log),
        ])
    };
    let host = connect(vec![("todo", server())], fast_options()).await;
    let llm = ScriptedLlm::new([
        Step::text("one"),
        Step::text("one again"),
        Step::text("two"),
    ]);
    let mut session = Session::new(config(HookServers::All, 2000, 1), llm.clone(), host);
    session.prompt("first").await.unwrap();
    session.prompt("second").await.unwrap();
    // The one objection of the session was spent in the first prompt.
    assert_eq!(count(&log, "call _Stop"), 1);
    assert_eq!(llm.requests().len(), 3);
    no_violations(&llm);

    let host = connect(vec![("todo", server())], fast_options()).await;
    let llm = ScriptedLlm::new([Step::text("done")]);
    let mut session = Session::new(config(HookServers::All, 2000, 0), llm.clone(), host);
    session.prompt("go").await.unwrap();
    assert_eq!(count(&log, "call _Stop"), 1, "budget 0 never calls _Stop");
    no_violations(&llm);
}

#[tokio::test]
async fn ending_again_right_after_an_objection_ends_the_turn() {
    let dir = Scratch::new("consecutive");
    let log = dir.file("log");
    let host = connect(
        vec![(
            "todo",
            test_server(&[
                ("TS_HOOKS", "_Stop"),
                ("TS_THEN", "say:open"),
                ("TS_LOG", &log),
            ]),
        )],
        fast_options(),
    )
    .await;
    let llm = ScriptedLlm::new([Step::text("done"), Step::text("I decline")]);
    let mut session = Session::new(config(HookServers::All, 2000, 3), llm.clone(), host);
    assert_eq!(session.prompt("go").await.unwrap(), PromptStop::EndTurn);
    assert_eq!(count(&log, "call _Stop"), 1);
    assert_eq!(session.counters().objections, 1);
    no_violations(&llm);
}

#[tokio::test]
async fn a_timed_out_hook_fails_open_and_is_cancelled_on_the_server() {
    let dir = Scratch::new("timeout");
    let log = dir.file("log");
    let host = connect(
        vec![(
            "todo",
            test_server(&[
                ("TS_HOOKS", "_Stop"),
                ("TS_STOP", "hang|say:second answer"),
                ("TS_SERIAL", "1"),
                ("TS_LOG", &log),
            ]),
        )],
        fast_options(),
    )
    .await;
    let llm = ScriptedLlm::new([Step::text("done"), Step::text("done too"), Step::text("ok")]);
    let mut session = Session::new(
        config(HookServers::All, HANG_TIMEOUT_MS, 3),
        llm.clone(),
        host,
    );
    assert_eq!(session.prompt("one").await.unwrap(), PromptStop::EndTurn);
    assert_eq!(
        session.counters().objections,
        0,
        "a timeout is no objection"
    );
    assert!(
        eventually(Duration::from_secs(5), || count(&log, "cancelled") == 1).await,
        "the server was told the call was cancelled: {:?}",
        lines(&log)
    );
    // The server handles one call at a time: it answers now only because the hung call was
    // cancelled.
    session.prompt("two").await.unwrap();
    assert_eq!(session.counters().objections, 1);
    assert_eq!(
        injected(&llm.requests()[2].messages),
        [encode_hook_body(Hook::Stop, "todo", "second answer")]
    );
    no_violations(&llm);
}

#[tokio::test]
async fn the_second_consecutive_timeout_kills_the_group_and_it_restarts_after_a_backoff() {
    let dir = Scratch::new("kill");
    let pids = dir.file("pids");
    let grandchildren = dir.file("grandchildren");
    let state = dir.path().to_string_lossy().into_owned();
    let host = connect(
        vec![(
            "todo",
            test_server(&[
                ("TS_HOOKS", "_Stop"),
                ("TS_STOP", "hang|hang|say:back again"),
                ("TS_STATE_DIR", &state),
                ("TS_PID_FILE", &pids),
                ("TS_GRANDCHILD_FILE", &grandchildren),
            ]),
        )],
        fast_options(),
    )
    .await;
    let llm = ScriptedLlm::new([
        Step::text("1"),
        Step::text("2"),
        Step::text("3"),
        Step::text("3 again"),
    ]);
    let mut session = Session::new(
        config(HookServers::All, HANG_TIMEOUT_MS, 3),
        llm.clone(),
        host,
    );
    session.prompt("one").await.unwrap();
    let first: u32 = lines(&pids)[0].parse().unwrap();
    let grandchild: u32 = lines(&grandchildren)[0].parse().unwrap();
    assert!(
        alive(first) && alive(grandchild),
        "one timeout kills nothing"
    );

    session.prompt("two").await.unwrap();
    assert!(
        eventually(Duration::from_secs(5), || !alive(first)
            && !alive(grandchild))
        .await,
        "the server and its grandchild die on the second timeout in a row"
    );
    // Still in the catalog, and restarted by the supervisor's order.
    assert!(
        llm.requests()[1]
            .tools
            .iter()
            .any(|t| t.name == "todo__echo")
    );
    assert!(restarted(session.host(), "todo", &pids, 2).await);

    // The next use restarts it; a tool call does, so the restart is not timed by the hook.
    let echo = ToolCall {
        id: "warm".into(),
        name: "todo__echo".into(),
        arguments: json!({}),
    };
    assert!(!session.host().call_tool(&echo).await.is_error);
    session.prompt("three").await.unwrap();
    assert_eq!(lines(&pids).len(), 2, "restarted once");
    assert_eq!(
        injected(&llm.requests()[3].messages),
        [encode_hook_body(Hook::Stop, "todo", "back again")]
    );
    no_violations(&llm);
}

#[tokio::test]
async fn a_server_still_restarting_when_a_hook_round_starts_is_skipped_not_timed_out() {
    let dir = Scratch::new("skip");
    let pids = dir.file("pids");
    let up = dir.file("up");
    let state = dir.path().to_string_lossy().into_owned();
    // Every start waits for the file `up`: the first finds it, the restart waits for the test.
    std::fs::write(&up, b"").unwrap();
    let host = connect(
        vec![(
            "slow",
            test_server(&[
                ("TS_HOOKS", "_Stop"),
                ("TS_STOP", "hang|hang|say:objection"),
                ("TS_STATE_DIR", &state),
                ("TS_PID_FILE", &pids),
                ("TS_STARTUP", &format!("wait:{up}")),
            ]),
        )],
        fast_options(),
    )
    .await;
    std::fs::remove_file(&up).unwrap();
    let notices = Arc::new(Mutex::new(Vec::new()));
    let llm = ScriptedLlm::new((0..5).map(|i| Step::text(format!("end {i}"))));
    let mut session = Session::new(config(HookServers::All, 300, 3), llm.clone(), host);
    session.add_observer(Notices(Arc::clone(&notices)));
    let events = Arc::new(Mutex::new(Vec::new()));
    let sink = Arc::clone(&events);
    session.add_observer(ProgressObserver::new(move |_, event| {
        sink.lock().unwrap().push(event);
    }));
    session.prompt("one").await.unwrap();
    session.prompt("two").await.unwrap();
    // The second timeout in a row killed it; its restart cannot finish before the test allows,
    // so a round that waited for it would never end (the bound only turns that into a failure).
    // This round ends without it, and its absence is neither an objection nor a timeout.
    let three = tokio::time::timeout(Duration::from_secs(60), session.prompt("three"))
        .await
        .expect("the round does not wait for the restart");
    assert_eq!(three.unwrap(), PromptStop::EndTurn);
    assert!(
        notices.lock().unwrap().iter().any(|n| matches!(n,
            Notice::HookSkipped { server, reason, .. }
                if server.as_str() == "slow" && reason.contains("restarting"))),
        "{:?}",
        notices.lock().unwrap()
    );
    assert_eq!(session.counters().objections, 0);
    assert!(session.counters().consecutive_timeouts.is_empty());
    // What `hookloop run` and an ACP client are shown: a round sat out, not a hook that failed.
    let skipped: Vec<String> = events
        .lock()
        .unwrap()
        .iter()
        .filter(|e| matches!(e, Event::HookSkipped { server, hook: Hook::Stop, .. } if server.as_str() == "slow"))
        .filter_map(Event::describe)
        .collect();
    assert_eq!(skipped.len(), 1, "{:?}", events.lock().unwrap());
    assert!(
        skipped[0].contains("_Stop on slow skipped") && !skipped[0].contains("failed open"),
        "{}",
        skipped[0]
    );

    // Once back, it is asked again, and its script goes on where it was.
    std::fs::write(&up, b"").unwrap();
    assert!(restarted(session.host(), "slow", &pids, 2).await);
    session.prompt("four").await.unwrap();
    assert_eq!(session.counters().objections, 1);
    no_violations(&llm);
}

/// Collects the machine's notices.
struct Notices(Arc<Mutex<Vec<Notice>>>);

impl Observer for Notices {
    fn on_effect(&mut self, _at: Duration, effect: &Effect) {
        if let Effect::Notify { notice } = effect {
            self.0.lock().unwrap().push(notice.clone());
        }
    }
}

#[tokio::test]
async fn an_answer_between_timeouts_resets_the_count() {
    let dir = Scratch::new("reset");
    let pids = dir.file("pids");
    let host = connect(
        vec![(
            "todo",
            test_server(&[
                ("TS_HOOKS", "_Stop"),
                ("TS_STOP", "hang|empty|hang"),
                ("TS_PID_FILE", &pids),
            ]),
        )],
        fast_options(),
    )
    .await;
    let llm = ScriptedLlm::new([Step::text("1"), Step::text("2"), Step::text("3")]);
    let mut session = Session::new(
        config(HookServers::All, HANG_TIMEOUT_MS, 3),
        llm.clone(),
        host,
    );
    for prompt in ["one", "two", "three"] {
        session.prompt(prompt).await.unwrap();
    }
    let pid: u32 = lines(&pids)[0].parse().unwrap();
    assert!(alive(pid), "timeouts that are not consecutive kill nothing");
    assert_eq!(lines(&pids).len(), 1);
    no_violations(&llm);
}

#[tokio::test]
async fn a_server_out_of_restarts_leaves_the_catalog() {
    let dir = Scratch::new("exhausted");
    let pids = dir.file("pids");
    let host = connect(
        vec![
            (
                "flaky",
                test_server(&[
                    ("TS_HOOKS", "_Stop"),
                    ("TS_THEN", "hang"),
                    ("TS_PID_FILE", &pids),
                ]),
            ),
            ("steady", test_server(&[])),
        ],
        fast_options().with_restart_budget(1),
    )
    .await;
    let llm = ScriptedLlm::new((0..5).map(|i| Step::text(format!("end {i}"))));
    let mut session = Session::new(
        config(HookServers::All, HANG_TIMEOUT_MS, 3),
        llm.clone(),
        host,
    );
    // Two timeouts kill the first life; two more kill the restarted one, which restarted
    // cleanly but hung again: that spends the budget of one restart.
    for i in 0..2 {
        session.prompt(format!("p{i}")).await.unwrap();
    }
    assert!(restarted(session.host(), "flaky", &pids, 2).await);
    for i in 2..4 {
        session.prompt(format!("p{i}")).await.unwrap();
    }
    assert_eq!(lines(&pids).len(), 2);
    session.prompt("last").await.unwrap();
    let last = llm.requests().pop().unwrap();
    let names: Vec<_> = last.tools.iter().map(|t| t.name.as_str()).collect();
    assert!(!names.iter().any(|n| n.starts_with("flaky__")), "{names:?}");
    assert!(names.contains(&"steady__echo"));
    assert_eq!(lines(&pids).len(), 2, "never started again");
    no_violations(&llm);
}

#[tokio::test]
async fn crashes_errors_and_protocol_errors_fail_open() {
    let dir = Scratch::new("failopen");
    let pids = dir.file("pids");
    let host = connect(
        vec![
            (
                "crashy",
                test_server(&[
                    ("TS_HOOKS", "_Stop"),
                    ("TS_STOP", "crash|say:after crash"),
                    ("TS_PID_FILE", &pids),
                ]),
            ),
            (
                "erring",
                test_server(&[("TS_HOOKS", "_Stop"), ("TS_STOP", "error:broken|rpcerror")]),
            ),
        ],
        fast_options(),
    )
    .await;
    let llm = ScriptedLlm::new([Step::text("1"), Step::text("2"), Step::text("2 again")]);
    let mut session = Session::new(config(HookServers::All, 2000, 3), llm.clone(), host);
    assert_eq!(session.prompt("one").await.unwrap(), PromptStop::EndTurn);
    assert_eq!(session.counters().objections, 0);
    // The crashed server comes back (its script restarts with the new process).
    assert!(restarted(session.host(), "crashy", &pids, 2).await);
    session.prompt("two").await.unwrap();
    // The second life was asked and crashed as well: the supervisor starts a third. Counting
    // the pids right after the prompt would race that restart, so wait for it instead.
    assert!(restarted(session.host(), "crashy", &pids, 3).await);
    assert_eq!(
        session.counters().objections,
        0,
        "crash again, error: no objection"
    );
    no_violations(&llm);
}

#[tokio::test]
async fn the_allowlist_picks_the_servers_whose_hooks_run() {
    let cases: [(HookServers, &[&str]); 4] = [
        (HookServers::parse(None).unwrap(), &[]),
        (HookServers::parse(Some("b")).unwrap(), &["b"]),
        (HookServers::parse(Some("*")).unwrap(), &["a", "b"]),
        (HookServers::parse(Some(" a , ,b, ")).unwrap(), &["a", "b"]),
    ];
    for (allow, expected) in cases {
        let dir = Scratch::new("allow");
        let logs = [dir.file("a"), dir.file("b")];
        let host = connect(
            vec![
                (
                    "a",
                    test_server(&[
                        ("TS_HOOKS", "_Stop"),
                        ("TS_LOG", &logs[0]),
                        ("TS_STOP", "say:from a"),
                    ]),
                ),
                (
                    "b",
                    test_server(&[
                        ("TS_HOOKS", "_Stop"),
                        ("TS_LOG", &logs[1]),
                        ("TS_STOP", "say:from b"),
                    ]),
                ),
            ],
            fast_options(),
        )
        .await;
        let llm = ScriptedLlm::new([Step::text("done"), Step::text("done")]);
        let mut session = Session::new(config(allow.clone(), 2000, 3), llm.clone(), host);
        session.prompt("go").await.unwrap();
        let called: Vec<&str> = ["a", "b"]
            .into_iter()
            .zip(&logs)
            .filter(|(_, log)| count(log, "call _Stop") == 1)
            .map(|(name, _)| name)
            .collect();
        assert_eq!(called, expected, "{allow:?}");
        no_violations(&llm);
    }
}

#[tokio::test]
async fn hook_calls_carry_the_session_and_hook_context_in_meta() {
    let dir = Scratch::new("meta");
    let log = dir.file("log");
    let host = connect(
        vec![(
            "todo",
            test_server(&[
                ("TS_HOOKS", "_Stop,_PostCompact"),
                ("TS_STOP", "say:open|empty"),
                ("TS_POST_COMPACT", "say:todo: a"),
                ("TS_LOG", &log),
            ]),
        )],
        fast_options().with_session_id("s-42"),
    )
    .await;
    let llm = ScriptedLlm::new([
        Step::text("done"),
        Step::tools(1, &[("todo__big", json!({}))]),
        Step::text("summary of it all"),
        Step::text("now done"),
    ]);
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .context_window(4_000, 1_000)
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), host);
    session.prompt("go").await.unwrap();

    let metas: Vec<Value> = lines(&log)
        .iter()
        .filter_map(|l| l.strip_prefix("meta "))
        .map(|m| serde_json::from_str(m).unwrap())
        .collect();
    assert_eq!(
        metas[0],
        json!({"hookloop/session": "s-42",
               "hookloop/hook": {"name": "_Stop", "objectionsSoFar": 0, "budgetLeft": 3}})
    );
    assert_eq!(
        metas[1],
        json!({"hookloop/session": "s-42",
               "hookloop/hook": {"name": "_PostCompact", "compactions": 1}})
    );
    assert_eq!(
        metas[2],
        json!({"hookloop/session": "s-42",
               "hookloop/hook": {"name": "_Stop", "objectionsSoFar": 1, "budgetLeft": 2}})
    );
    // The `_PostCompact` answer reached the fresh context.
    let after = &llm.requests()[3].messages;
    assert_eq!(
        injected(after),
        [encode_hook_body(Hook::PostCompact, "todo", "todo: a")]
    );
    no_violations(&llm);
}

#[tokio::test]
async fn a_hook_answering_only_a_resource_link_or_an_image_does_not_object() {
    let dir = Scratch::new("nontext");
    let log = dir.file("log");
    let host = connect(
        vec![(
            "gate",
            test_server(&[
                ("TS_HOOKS", "_Stop"),
                ("TS_STOP", "link|image"),
                ("TS_LOG", &log),
            ]),
        )],
        fast_options(),
    )
    .await;
    let llm = ScriptedLlm::new([Step::text("done"), Step::text("done again")]);
    let mut session = Session::new(config(HookServers::All, 5000, 3), llm.clone(), host);
    assert_eq!(session.prompt("one").await.unwrap(), PromptStop::EndTurn);
    assert_eq!(session.prompt("two").await.unwrap(), PromptStop::EndTurn);

    // Both answers were asked for and neither counted as an objection.
    assert_eq!(count(&log, "call _Stop"), 2);
    assert_eq!(session.counters().objections, 0);
    assert_eq!(llm.requests().len(), 2);
    for request in llm.requests() {
        assert!(injected(&request.messages).is_empty());
    }
    no_violations(&llm);
}

#[tokio::test]
async fn a_server_with_a_long_name_keeps_its_post_compact_hook() {
    // 55 bytes: `<name>___PostCompact` is 69 bytes, over the providers' 64, which applies to
    // model-facing tools only.
    let long = "a-server-whose-name-is-fifty-five-bytes-long-0123456789";
    assert_eq!(long.len(), 55);
    let host = connect(
        vec![
            ("tools", test_server(&[])),
            (
                long,
                test_server(&[
                    ("TS_HOOKS", "_PostCompact"),
                    ("TS_POST_COMPACT", "say:remember the plan"),
                ]),
            ),
        ],
        fast_options(),
    )
    .await;
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("tools__big", json!({}))]),
        Step::text("summary of it all"),
        Step::text("done"),
    ]);
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .context_window(4_000, 1_000)
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), host);
    assert_eq!(session.prompt("go").await.unwrap(), PromptStop::EndTurn);

    assert_eq!(session.counters().compactions, 1);
    let after = &llm.requests()[2].messages;
    assert_eq!(
        injected(after),
        [encode_hook_body(
            Hook::PostCompact,
            long,
            "remember the plan"
        )]
    );
    no_violations(&llm);
}

#[tokio::test]
async fn a_huge_objection_is_capped_before_the_model_sees_it() {
    let host = connect(
        vec![(
            "todo",
            test_server(&[("TS_HOOKS", "_Stop"), ("TS_STOP", "big")]),
        )],
        fast_options(),
    )
    .await;
    let llm = ScriptedLlm::new([Step::text("done"), Step::text("done")]);
    let mut session = Session::new(config(HookServers::All, 5000, 3), llm.clone(), host);
    session.prompt("go").await.unwrap();
    let bodies = injected(&llm.requests()[1].messages);
    assert_eq!(bodies.len(), 1);
    assert!(bodies[0].len() < 20 * 1024, "{}", bodies[0].len());
    assert!(bodies[0].contains("bytes elided"));
    no_violations(&llm);
}

#[tokio::test]
async fn cancelling_the_session_interrupts_a_hook_call_at_once() {
    let dir = Scratch::new("cancel");
    let log = dir.file("log");
    let host = connect(
        vec![(
            "todo",
            test_server(&[("TS_HOOKS", "_Stop"), ("TS_STOP", "hang"), ("TS_LOG", &log)]),
        )],
        fast_options(),
    )
    .await;
    let llm = ScriptedLlm::new([Step::text("done")]);
    let mut session = Session::new(config(HookServers::All, 30_000, 3), llm.clone(), host);
    let cancel = session.cancel_handle();
    let log_for_cancel = log.clone();
    tokio::spawn(async move {
        eventually(Duration::from_secs(10), || {
            count(&log_for_cancel, "call _Stop") == 1
        })
        .await;
        cancel.cancel();
    });
    let started = Instant::now();
    assert_eq!(session.prompt("go").await.unwrap(), PromptStop::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        eventually(Duration::from_secs(5), || count(&log, "cancelled") == 1).await,
        "{:?}",
        lines(&log)
    );
    no_violations(&llm);
}

#[tokio::test]
async fn a_dropped_host_kills_its_children() {
    let dir = Scratch::new("drop");
    let pids = dir.file("pids");
    let grandchildren = dir.file("grandchildren");
    let host: McpHost = connect(
        vec![(
            "todo",
            test_server(&[
                ("TS_PID_FILE", &pids),
                ("TS_GRANDCHILD_FILE", &grandchildren),
            ]),
        )],
        fast_options(),
    )
    .await;
    let pid: u32 = lines(&pids)[0].parse().unwrap();
    let grandchild: u32 = lines(&grandchildren)[0].parse().unwrap();
    assert_eq!(host.server_pid("todo"), Some(pid));
    drop(host);
    assert!(eventually(Duration::from_secs(5), || !alive(pid) && !alive(grandchild)).await);
}
