//! The agent over an in-memory pipe, spoken to in raw JSON lines. The model and tools are the
//! scripted fakes; the binary's end-to-end tests use the real ones.

use agent_client_protocol::v1::schema::{ContentBlock, SessionUpdate};

use super::spec::{prompt_text, session_spec};
use super::translate::Translator;
use super::*;
use crate::hooks::{Hook, ServerName};
use crate::machine::SkipReason;
use crate::ports::Delta;
use crate::progress::Event;

#[test]
fn prompt_blocks_become_text_and_others_are_refused() {
    let blocks: Vec<ContentBlock> = serde_json::from_value(json!([
        {"type": "text", "text": "Read this:"},
        {"type": "resource_link", "name": "a.rs", "uri": "file:///a.rs"}
    ]))
    .unwrap();
    assert_eq!(
        prompt_text(&blocks).unwrap(),
        "Read this:\n\n[a.rs](file:///a.rs)"
    );
    let image: Vec<ContentBlock> =
        serde_json::from_value(json!([{"type": "image", "data": "AA==", "mimeType": "image/png"}]))
            .unwrap();
    assert!(prompt_text(&image).unwrap_err().contains("image"));
    assert!(prompt_text(&[]).is_err());
}

#[test]
fn session_specs_check_names_and_transports() {
    let request: NewSessionRequest = serde_json::from_value(json!({
        "cwd": "/work",
        "mcpServers": [
            {"name": "todo", "command": "/bin/todo", "args": ["-v"], "env": [{"name": "A", "value": "1"}]},
            {"type": "http", "name": "web", "url": "http://127.0.0.1:1/mcp", "headers": [{"name": "X", "value": "y"}]},
            {"type": "sse", "name": "old", "url": "http://127.0.0.1:1/sse", "headers": [{"name": "X", "value": "z"}]}
        ]
    }))
    .unwrap();
    let spec = session_spec(request.cwd, request.mcp_servers, Permissions::Ask).unwrap();
    assert_eq!(spec.servers.len(), 3);
    assert!(
        matches!(&spec.servers[0], ServerSpec::Stdio { env, .. } if env == &[("A".to_owned(), "1".to_owned())])
    );
    assert!(
        matches!(&spec.servers[1], ServerSpec::Http { url, .. } if url == "http://127.0.0.1:1/mcp")
    );
    assert!(
        matches!(&spec.servers[2], ServerSpec::Sse { url, headers, .. }
            if url == "http://127.0.0.1:1/sse" && headers == &[("X".to_owned(), "z".to_owned())])
    );

    for bad in [
        json!({"cwd": "relative", "mcpServers": []}),
        json!({"cwd": "/w", "mcpServers": [{"name": "a__b", "command": "x", "args": [], "env": []}]}),
        json!({"cwd": "/w", "mcpServers": [
            {"name": "a", "command": "x", "args": [], "env": []},
            {"name": "a", "command": "y", "args": [], "env": []}]}),
        json!({"cwd": "/w", "mcpServers": [{"type": "sse", "name": "a__b", "url": "http://x", "headers": []}]}),
    ] {
        let request: NewSessionRequest = serde_json::from_value(bad.clone()).unwrap();
        assert!(
            session_spec(request.cwd, request.mcp_servers, Permissions::Ask).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn a_streamed_reply_is_sent_in_pieces_and_not_again_whole_and_the_next_reply_is_judged_afresh() {
    let mut translator = Translator::new(Arc::default(), None);
    let json = |updates: Vec<SessionUpdate>| serde_json::to_value(updates).unwrap();
    let piece = |translator: &mut Translator, delta: Delta| {
        serde_json::to_value(translator.delta(&delta)).unwrap()
    };

    assert!(
        translator
            .updates(Event::Thinking { summary: false })
            .is_empty()
    );
    let thinking = piece(&mut translator, Delta::Thinking("hmm".into()));
    assert_eq!(thinking["sessionUpdate"], "agent_thought_chunk");
    assert_eq!(thinking["content"]["text"], "hmm");
    assert!(piece(&mut translator, Delta::Text(String::new())).is_null());
    let text = piece(&mut translator, Delta::Text("Hel".into()));
    assert_eq!(text["sessionUpdate"], "agent_message_chunk");
    assert_eq!(text["content"]["text"], "Hel");
    let whole = translator.updates(Event::ModelText {
        text: "Hello".into(),
    });
    assert!(whole.is_empty(), "{:?}", json(whole));

    // The next reply streamed only reasoning: its text is sent whole.
    assert!(
        translator
            .updates(Event::Thinking { summary: false })
            .is_empty()
    );
    piece(&mut translator, Delta::Thinking("more".into()));
    let whole = json(translator.updates(Event::ModelText {
        text: "Done.".into(),
    }));
    assert_eq!(whole[0]["sessionUpdate"], "agent_message_chunk");
    assert_eq!(whole[0]["content"]["text"], "Done.");
}

#[test]
fn the_stop_budget_is_shown_as_a_notice_only_to_a_client_that_takes_notices() {
    let server = ServerName::new("todo").unwrap();
    let json = |updates: Vec<SessionUpdate>| serde_json::to_value(updates).unwrap();
    let objection = || Event::Objection {
        server: server.clone(),
        text: "1 open".into(),
        budget_left: 2,
    };
    let spent = || Event::StopSkipped {
        reason: SkipReason::BudgetSpent,
    };

    let mut translator = Translator::new(Arc::default(), Some(3));
    let shown = json(translator.updates(objection()));
    assert_eq!(shown[0]["sessionUpdate"], "tool_call", "{shown}");
    assert_eq!(shown[1]["sessionUpdate"], "notice", "{shown}");
    assert_eq!(shown[1]["severity"], "info");
    assert_eq!(shown[1]["title"], "_Stop objections: 1 of 3 used");
    assert_eq!(shown[1]["_meta"]["hookloop/objections"], 1);
    let shown = json(translator.updates(spent()));
    assert_eq!(shown[0]["sessionUpdate"], "agent_thought_chunk", "{shown}");
    assert_eq!(shown[1]["severity"], "warning", "{shown}");
    assert_eq!(shown[1]["title"], "_Stop objections: 3 of 3 used");
    // A declined objection leaves the budget as it was: no notice.
    let declined = translator.updates(Event::StopSkipped {
        reason: SkipReason::DeclinedObjection,
    });
    assert_eq!(declined.len(), 1);

    let mut translator = Translator::new(Arc::default(), None);
    assert_eq!(translator.updates(objection()).len(), 1);
    assert_eq!(translator.updates(spent()).len(), 1);
}

#[test]
fn hook_and_compaction_events_become_titled_calls_and_thoughts() {
    let server = ServerName::new("todo").unwrap();
    let mut translator = Translator::new(Arc::default(), None);
    let json = |updates: Vec<SessionUpdate>| serde_json::to_value(updates).unwrap();

    let injected = json(translator.updates(Event::PostCompactInjected {
        server: server.clone(),
        text: "#3 open".into(),
    }));
    assert_eq!(injected[0]["sessionUpdate"], "tool_call");
    assert_eq!(injected[0]["title"], "_PostCompact from todo");
    assert_eq!(injected[0]["status"], "completed");
    assert_eq!(injected[0]["toolCallId"], "hookloop-1");
    assert_eq!(injected[0]["rawOutput"]["hook"], "_PostCompact");

    let refused = json(translator.updates(Event::ToolRefused {
        name: "todo___Stop".into(),
    }));
    assert_eq!(refused[0]["toolCallId"], "hookloop-2");
    assert_eq!(refused[0]["status"], "failed");
    assert_eq!(
        refused[0]["content"][0]["content"]["text"],
        "unknown tool: todo___Stop"
    );

    for hook in [
        Hook::SessionStart,
        Hook::UserPromptSubmit,
        Hook::PostToolUse,
        Hook::PreCompact,
    ] {
        let injected = json(translator.updates(Event::HookInjected {
            hook,
            server: server.clone(),
            text: "note".into(),
        }));
        assert_eq!(injected[0]["kind"], "think", "{injected}");
        assert_eq!(injected[0]["status"], "completed");
        assert_eq!(injected[0]["title"], format!("{hook} from todo"));
        assert_eq!(
            injected[0]["rawOutput"],
            json!({"hook": hook, "server": "todo", "text": "note"})
        );
    }

    for (event, needle) in [
        (
            Event::StopSkipped {
                reason: SkipReason::BudgetSpent,
            },
            "budget is spent",
        ),
        (
            Event::Compacted {
                summarized: true,
                messages_before: 9,
                messages_after: 2,
            },
            "9 messages became 2",
        ),
        (Event::Thinking { summary: true }, "summary"),
        (
            Event::HookFailedOpen {
                server: server.clone(),
                hook: Hook::Stop,
                reason: "no answer within 10 ms".into(),
            },
            "_Stop on todo gave no usable answer (no answer within 10 ms)",
        ),
        (
            Event::ServerKilled {
                server: server.clone(),
            },
            "timed out twice",
        ),
    ] {
        let update = json(translator.updates(event));
        assert_eq!(update[0]["sessionUpdate"], "agent_thought_chunk");
        let text = update[0]["content"]["text"].as_str().unwrap();
        assert!(text.contains(needle), "{text}");
    }
    for quiet in [
        Event::Thinking { summary: false },
        Event::HookCalled {
            hook: Hook::Stop,
            servers: vec![server.clone()],
        },
        Event::Finished {
            reason: crate::machine::FinishReason::EndTurn,
        },
    ] {
        assert!(translator.updates(quiet).is_empty());
    }
}

#[cfg(feature = "testing")]
mod wire {
    use std::sync::Mutex as StdMutex;
    use std::time::Duration;

    use serde_json::Value;
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt, DuplexStream, Lines};

    use super::*;
    use crate::testing::{HookStep, InProcessHost, ScriptedLlm, Step, echo};
    use crate::{Config, HookServers};

    /// Hands out prepared sessions, one per `session/new`, and records the specs.
    struct Prepared {
        sessions: StdMutex<Vec<Session<ScriptedLlm, InProcessHost>>>,
        specs: StdMutex<Vec<SessionSpec>>,
    }

    impl SessionFactory for Arc<Prepared> {
        type Llm = ScriptedLlm;
        type Host = InProcessHost;
        type Error = String;

        async fn create(
            &self,
            spec: SessionSpec,
        ) -> Result<Created<ScriptedLlm, InProcessHost>, String> {
            self.specs.lock().unwrap().push(spec);
            let mut sessions = self.sessions.lock().unwrap();
            if sessions.is_empty() {
                return Err("no more sessions".into());
            }
            Ok(Created::new(sessions.remove(0)))
        }

        async fn restore(
            &self,
            _spec: SessionSpec,
            _machine: Machine,
        ) -> Result<Created<ScriptedLlm, InProcessHost>, String> {
            Err("these tests record nothing".into())
        }

        fn record_dir(&self) -> Option<&std::path::Path> {
            None
        }
    }

    struct Peer {
        tx: DuplexStream,
        rx: Lines<tokio::io::BufReader<DuplexStream>>,
        next_id: u64,
        /// Notifications and replies read while waiting for something else.
        backlog: Vec<Value>,
        agent: tokio::task::JoinHandle<Result<(), AcpError>>,
    }

    fn start(
        sessions: Vec<Session<ScriptedLlm, InProcessHost>>,
        max_frame_bytes: usize,
    ) -> (Peer, Arc<Prepared>) {
        let options = AgentOptions {
            max_frame_bytes,
            ..AgentOptions::default()
        };
        start_with(sessions, options, 1 << 16)
    }

    /// An agent with these options, writing to a pipe that holds `pipe` bytes.
    fn start_with(
        sessions: Vec<Session<ScriptedLlm, InProcessHost>>,
        options: AgentOptions,
        pipe: usize,
    ) -> (Peer, Arc<Prepared>) {
        let factory = Arc::new(Prepared {
            sessions: StdMutex::new(sessions),
            specs: StdMutex::new(Vec::new()),
        });
        // One pipe each way: the client writes `tx`, the agent reads its other end, and so on.
        let (tx, agent_in) = tokio::io::duplex(1 << 16);
        let (agent_out, rx) = tokio::io::duplex(pipe);
        let agent = tokio::spawn(serve(Arc::clone(&factory), options, agent_in, agent_out));
        let peer = Peer {
            tx,
            rx: tokio::io::BufReader::new(rx).lines(),
            next_id: 0,
            backlog: Vec::new(),
            agent,
        };
        (peer, factory)
    }

    impl Peer {
        async fn send_raw(&mut self, line: &str) {
            self.tx.write_all(line.as_bytes()).await.unwrap();
            self.tx.write_all(b"\n").await.unwrap();
        }

        async fn send_request(&mut self, method: &str, params: Value) -> u64 {
            self.next_id += 1;
            let id = self.next_id;
            let frame = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
            self.send_raw(&frame.to_string()).await;
            id
        }

        async fn notify(&mut self, method: &str, params: Value) {
            let frame = json!({"jsonrpc": "2.0", "method": method, "params": params});
            self.send_raw(&frame.to_string()).await;
        }

        async fn read(&mut self) -> Value {
            let line = tokio::time::timeout(Duration::from_secs(10), self.rx.next_line())
                .await
                .expect("the agent answers within 10 s")
                .unwrap()
                .expect("the agent's output is open");
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
        }

        /// Waits for the reply to `id`; returns it and the session updates seen meanwhile
        /// (other frames stay in the backlog).
        async fn reply(&mut self, id: u64) -> (Value, Vec<Value>) {
            let mut updates = Vec::new();
            let mut keep = Vec::new();
            let mut found = None;
            for frame in std::mem::take(&mut self.backlog) {
                if found.is_none() && frame["id"] == json!(id) {
                    found = Some(frame);
                } else if found.is_none() && frame["method"] == "session/update" {
                    updates.push(frame["params"].clone());
                } else {
                    keep.push(frame);
                }
            }
            self.backlog = keep;
            while found.is_none() {
                let frame = self.read().await;
                if frame["id"] == json!(id) && frame.get("method").is_none() {
                    found = Some(frame);
                } else if frame["method"] == "session/update" {
                    updates.push(frame["params"].clone());
                } else {
                    self.backlog.push(frame);
                }
            }
            (found.unwrap(), updates)
        }

        /// Reads frames into the backlog up to and including the first that `seen` accepts.
        async fn read_until(&mut self, seen: impl Fn(&Value) -> bool) {
            loop {
                let frame = self.read().await;
                let done = seen(&frame);
                self.backlog.push(frame);
                if done {
                    return;
                }
            }
        }

        async fn call(&mut self, method: &str, params: Value) -> (Value, Vec<Value>) {
            let id = self.send_request(method, params).await;
            self.reply(id).await
        }

        async fn initialize(&mut self) -> Value {
            let (reply, _) = self
                .call(
                    "initialize",
                    json!({"protocolVersion": 1, "clientCapabilities": {}}),
                )
                .await;
            reply
        }

        async fn new_session(&mut self) -> String {
            let (reply, _) = self
                .call("session/new", json!({"cwd": "/tmp", "mcpServers": []}))
                .await;
            reply["result"]["sessionId"]
                .as_str()
                .unwrap_or_else(|| panic!("no session id in {reply}"))
                .to_owned()
        }

        async fn prompt(&mut self, session: &str, text: &str) -> u64 {
            self.send_request(
                "session/prompt",
                json!({"sessionId": session, "prompt": [{"type": "text", "text": text}]}),
            )
            .await
        }
    }

    fn session(
        config: Config,
        llm: ScriptedLlm,
        host: InProcessHost,
    ) -> Session<ScriptedLlm, InProcessHost> {
        Session::new(config, llm, host)
    }

    /// A session's configuration as the agent's factory makes it by default: destructive tools
    /// ask first.
    fn config() -> Config {
        Config::builder()
            .hook_servers(HookServers::All)
            .ask_permission(true)
            .build()
            .unwrap()
    }

    /// A session's configuration as the agent's factory makes it with permissions `never`.
    fn config_without_asking() -> Config {
        Config::builder()
            .hook_servers(HookServers::All)
            .build()
            .unwrap()
    }

    fn kinds(updates: &[Value]) -> Vec<String> {
        updates
            .iter()
            .map(|u| {
                let update = &u["update"];
                let kind = update["sessionUpdate"].as_str().unwrap().to_owned();
                // `pending` is the protocol's default status, left out on the wire.
                match (update["status"].as_str(), kind.as_str()) {
                    (Some(status), _) => format!("{kind}:{status}"),
                    (None, "tool_call") => "tool_call:pending".to_owned(),
                    (None, _) => kind,
                }
            })
            .collect()
    }

    #[tokio::test]
    async fn initialize_states_honest_capabilities() {
        let (mut peer, _) = start(Vec::new(), DEFAULT_MAX_FRAME_BYTES);
        let reply = peer.initialize().await;
        let result = &reply["result"];
        assert_eq!(result["protocolVersion"], 1);
        assert_eq!(result["agentCapabilities"]["mcpCapabilities"]["http"], true);
        assert_eq!(result["agentCapabilities"]["mcpCapabilities"]["sse"], true);
        // These tests record nothing: nothing could be loaded, listed or resumed.
        assert_eq!(result["agentCapabilities"]["loadSession"], false);
        let sessions = &result["agentCapabilities"]["sessionCapabilities"];
        assert!(sessions["close"].is_object(), "{result}");
        assert!(sessions.get("list").is_none() && sessions.get("resume").is_none());
        assert_eq!(result["agentInfo"]["name"], "hookloop");
        assert_eq!(result["agentInfo"]["version"], env!("CARGO_PKG_VERSION"));
    }

    #[tokio::test]
    async fn a_prompt_streams_tools_objections_and_text_then_ends_the_turn() {
        let llm = ScriptedLlm::new([
            Step::tools(1, &[("fs__read", json!({"path": "a"}))]),
            Step::text("All done."),
            Step::text("Still done."),
        ]);
        let host = InProcessHost::new().tool("fs", "read", echo).hook(
            "todo",
            Hook::Stop,
            [HookStep::Say("1 open: write tests".into())],
        );
        let (mut peer, factory) =
            start(vec![session(config(), llm, host)], DEFAULT_MAX_FRAME_BYTES);
        peer.initialize().await;
        let session = peer.new_session().await;
        assert_eq!(factory.specs.lock().unwrap()[0].cwd, PathBuf::from("/tmp"));
        let id = peer.prompt(&session, "go").await;
        let (reply, updates) = peer.reply(id).await;
        assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
        assert_eq!(
            kinds(&updates),
            [
                "tool_call:pending",
                "tool_call_update:in_progress",
                "tool_call_update:completed",
                "agent_message_chunk",
                "tool_call:completed",
                "agent_message_chunk",
                "agent_thought_chunk",
            ]
        );
        assert!(updates.iter().all(|u| u["sessionId"] == json!(session)));
        assert_eq!(updates[0]["update"]["title"], "fs__read");
        assert_eq!(updates[0]["update"]["rawInput"], json!({"path": "a"}));
        assert_eq!(updates[3]["update"]["content"]["text"], "All done.");
        let objection = &updates[4]["update"];
        // `other` is the protocol's default kind, left out on the wire.
        assert!(
            objection.get("kind").is_none_or(|k| k == "other"),
            "{objection}"
        );
        assert_eq!(objection["title"], "_Stop objection from todo (2 left)");
        assert_eq!(
            objection["content"][0]["content"]["text"],
            "1 open: write tests"
        );
        assert_eq!(objection["rawOutput"]["server"], "todo");
        assert!(
            updates[6]["update"]["content"]["text"]
                .as_str()
                .unwrap()
                .contains("declined")
        );
    }

    /// The `tool_call` update titled `title`.
    fn titled<'a>(updates: &'a [Value], title: &str) -> &'a Value {
        updates
            .iter()
            .map(|u| &u["update"])
            .find(|u| u["sessionUpdate"] == "tool_call" && u["title"] == title)
            .unwrap_or_else(|| panic!("no tool_call titled {title}: {updates:?}"))
    }

    #[tokio::test]
    async fn hook_injections_are_completed_think_calls_and_a_denial_a_completed_other_call() {
        let llm = ScriptedLlm::new([
            Step::tools(1, &[("fs__rm", json!({"path": "/"}))]),
            Step::text("ok, I will not"),
        ]);
        let host = InProcessHost::new()
            .tool("fs", "rm", echo)
            .hook(
                "guard",
                Hook::UserPromptSubmit,
                [HookStep::Say("tests come first".into())],
            )
            .hook(
                "guard",
                Hook::PreToolUse,
                [HookStep::Say("rm is not allowed".into())],
            );
        let (mut peer, _) = start(vec![session(config(), llm, host)], DEFAULT_MAX_FRAME_BYTES);
        peer.initialize().await;
        let session = peer.new_session().await;
        let id = peer.prompt(&session, "clean up").await;
        let (reply, updates) = peer.reply(id).await;
        assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");

        let injected = titled(&updates, "_UserPromptSubmit from guard");
        assert_eq!(injected["kind"], "think", "{injected}");
        assert_eq!(injected["status"], "completed", "{injected}");
        assert_eq!(
            injected["rawOutput"],
            json!({"hook": "_UserPromptSubmit", "server": "guard", "text": "tests come first"})
        );
        assert_eq!(
            injected["content"][0]["content"]["text"],
            "tests come first"
        );

        let denied = titled(&updates, "fs__rm denied by _PreToolUse of guard");
        // `other` is the protocol's default kind, left out on the wire.
        assert!(denied.get("kind").is_none_or(|k| k == "other"), "{denied}");
        assert_eq!(denied["status"], "completed", "{denied}");
        assert_eq!(denied["rawOutput"]["hook"], "_PreToolUse");
        assert_eq!(denied["rawOutput"]["tool"], "fs__rm");
        assert_eq!(denied["rawOutput"]["text"], "rm is not allowed");
    }

    #[tokio::test]
    async fn calls_queued_behind_the_concurrency_limit_stay_pending_until_they_start() {
        let llm = ScriptedLlm::new([
            Step::tools(
                1,
                &[
                    ("fs__read", json!({"n": 1})),
                    ("fs__read", json!({"n": 2})),
                    ("fs__read", json!({"n": 3})),
                ],
            ),
            Step::text("done"),
        ]);
        let host = InProcessHost::new()
            .tool("fs", "read", echo)
            .tool_delay(Duration::from_millis(20));
        let config = Config::builder()
            .hook_servers(HookServers::All)
            .tool_concurrency(1)
            .build()
            .unwrap();
        let (mut peer, _) = start(vec![session(config, llm, host)], DEFAULT_MAX_FRAME_BYTES);
        peer.initialize().await;
        let session = peer.new_session().await;
        let id = peer.prompt(&session, "go").await;
        let (reply, updates) = peer.reply(id).await;
        assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
        let calls: Vec<String> = updates
            .iter()
            .zip(kinds(&updates))
            .filter(|(u, _)| u["update"]["toolCallId"].is_string())
            .map(|(u, kind)| format!("{} {kind}", u["update"]["toolCallId"].as_str().unwrap()))
            .collect();
        // One at a time: each call starts only once the one before it has ended, as the
        // session says when it starts each.
        let ids: Vec<String> = updates
            .iter()
            .filter(|u| u["update"]["sessionUpdate"] == "tool_call")
            .map(|u| u["update"]["toolCallId"].as_str().unwrap().to_owned())
            .collect();
        let [a, b, c] = &ids[..] else {
            panic!("{calls:?}")
        };
        assert_eq!(
            calls,
            [
                format!("{a} tool_call:pending"),
                format!("{b} tool_call:pending"),
                format!("{c} tool_call:pending"),
                format!("{a} tool_call_update:in_progress"),
                format!("{a} tool_call_update:completed"),
                format!("{b} tool_call_update:in_progress"),
                format!("{b} tool_call_update:completed"),
                format!("{c} tool_call_update:in_progress"),
                format!("{c} tool_call_update:completed"),
            ]
        );
        assert_eq!(
            updates
                .iter()
                .find(|u| u["update"]["status"] == "completed")
                .unwrap()["update"]["rawOutput"]["isError"],
            false
        );
    }

    #[tokio::test]
    async fn queued_calls_of_a_cancelled_prompt_never_show_as_started() {
        let llm = ScriptedLlm::new([Step::tools(
            1,
            &[("fs__read", json!({"n": 1})), ("fs__read", json!({"n": 2}))],
        )]);
        let host = InProcessHost::new()
            .tool("fs", "read", echo)
            .tool_delay(Duration::from_secs(3600));
        let config = Config::builder()
            .hook_servers(HookServers::All)
            .tool_concurrency(1)
            .build()
            .unwrap();
        let (mut peer, _) = start(vec![session(config, llm, host)], DEFAULT_MAX_FRAME_BYTES);
        peer.initialize().await;
        let session = peer.new_session().await;
        let id = peer.prompt(&session, "go").await;
        // Cancel once the first call has started (it never ends): the second is still queued.
        peer.read_until(|frame| {
            frame["method"] == "session/update"
                && frame["params"]["update"]["status"] == "in_progress"
        })
        .await;
        peer.notify("session/cancel", json!({"sessionId": session}))
            .await;
        let (reply, updates) = peer.reply(id).await;
        assert_eq!(reply["result"]["stopReason"], "cancelled", "{reply}");
        let kinds = kinds(&updates);
        assert_eq!(
            kinds
                .iter()
                .filter(|k| *k == "tool_call_update:in_progress")
                .count(),
            1,
            "{kinds:?}"
        );
        assert_eq!(
            kinds
                .iter()
                .filter(|k| *k == "tool_call_update:failed")
                .count(),
            2,
            "{kinds:?}"
        );
    }

    #[tokio::test]
    async fn each_reply_of_a_turn_reports_the_context_used_against_the_window() {
        let llm = ScriptedLlm::new([
            Step::tools(1, &[("fs__read", json!({}))]).with_input_tokens(1200),
            Step::text("done").with_input_tokens(1500),
        ]);
        let host = InProcessHost::new().tool("fs", "read", echo);
        let session = session(config(), llm, host);
        let window = session.machine().policy().max_context_tokens;
        let (mut peer, _) = start(vec![session], DEFAULT_MAX_FRAME_BYTES);
        peer.initialize().await;
        let session = peer.new_session().await;
        let id = peer.prompt(&session, "go").await;
        let (_, updates) = peer.reply(id).await;
        let usage: Vec<(u64, u64)> = updates
            .iter()
            .filter(|u| u["update"]["sessionUpdate"] == "usage_update")
            .map(|u| {
                let u = &u["update"];
                (u["used"].as_u64().unwrap(), u["size"].as_u64().unwrap())
            })
            .collect();
        assert_eq!(usage, [(1210, window), (1510, window)]);
    }

    #[tokio::test]
    async fn tool_calls_carry_the_kind_their_servers_hints_give() {
        use crate::machine::ToolHints;
        let hint = |read_only, destructive, open_world| ToolHints {
            read_only,
            destructive,
            open_world,
        };
        let llm = ScriptedLlm::new([
            Step::tools(
                1,
                &[
                    ("fs__read", json!({})),
                    ("fs__write", json!({})),
                    ("web__get", json!({})),
                    ("misc__run", json!({})),
                ],
            ),
            Step::text("done"),
        ]);
        let host = InProcessHost::new()
            .tool("fs", "read", echo)
            .tool("fs", "write", echo)
            .tool("web", "get", echo)
            .tool("misc", "run", echo)
            .hints("fs", "read", hint(Some(true), None, Some(false)))
            .hints("fs", "write", hint(Some(false), Some(true), None))
            .hints("web", "get", hint(Some(true), None, Some(true)));
        // Not asking: the destructive `fs__write` would wait for an answer.
        let options = AgentOptions {
            permissions: Permissions::Never,
            ..AgentOptions::default()
        };
        let (mut peer, _) = start_with(
            vec![session(config_without_asking(), llm, host)],
            options,
            1 << 16,
        );
        peer.initialize().await;
        let session = peer.new_session().await;
        let id = peer.prompt(&session, "go").await;
        let (_, updates) = peer.reply(id).await;
        let kinds: Vec<(String, String)> = updates
            .iter()
            .filter(|u| u["update"]["sessionUpdate"] == "tool_call")
            .map(|u| {
                let u = &u["update"];
                let kind = u["kind"].as_str().unwrap_or("other").to_owned();
                (u["title"].as_str().unwrap().to_owned(), kind)
            })
            .collect();
        let expected = [
            ("fs__read", "read"),
            ("fs__write", "edit"),
            ("web__get", "fetch"),
            ("misc__run", "other"),
        ]
        .map(|(a, b)| (a.to_owned(), b.to_owned()));
        assert_eq!(kinds, expected);
    }

    /// Runs `prompt` on a fresh session, answering each permission request with `answer`
    /// (an option id); returns the requests, the updates and the prompt's reply.
    async fn prompt_answering(peer: &mut Peer, answer: &str) -> (Vec<Value>, Vec<Value>, Value) {
        peer.initialize().await;
        let session = peer.new_session().await;
        let id = peer.prompt(&session, "go").await;
        let (mut asked, mut updates) = (Vec::new(), Vec::new());
        loop {
            let frame = peer.read().await;
            if frame["method"] == "session/request_permission" {
                let reply = json!({"jsonrpc": "2.0", "id": frame["id"],
                    "result": {"outcome": {"outcome": "selected", "optionId": answer}}});
                peer.send_raw(&reply.to_string()).await;
                asked.push(frame["params"].clone());
            } else if frame["method"] == "session/update" {
                updates.push(frame["params"].clone());
            } else if frame["id"] == json!(id) {
                return (asked, updates, frame);
            }
        }
    }

    /// A session with a destructive `fs__rm`; `config` says whether it asks.
    fn destructive_session(
        config: Config,
        llm: ScriptedLlm,
    ) -> (Session<ScriptedLlm, InProcessHost>, InProcessHost) {
        let host = InProcessHost::new()
            .tool("fs", "rm", echo)
            .tool("fs", "read", echo)
            .hints(
                "fs",
                "rm",
                crate::machine::ToolHints {
                    destructive: Some(true),
                    ..Default::default()
                },
            );
        (session(config, llm, host.clone()), host)
    }

    fn tools_run(host: &InProcessHost) -> Vec<String> {
        host.log()
            .into_iter()
            .filter_map(|e| match e {
                crate::testing::HostEvent::Tool { name, .. } => Some(name),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn a_destructive_tool_asks_first_and_always_reject_is_remembered_for_the_session() {
        let llm = ScriptedLlm::new([
            Step::tools(1, &[("fs__rm", json!({"path": "/"}))]),
            Step::tools(2, &[("fs__rm", json!({"path": "/tmp"}))]),
            Step::tools(3, &[("fs__read", json!({}))]),
            Step::text("done"),
        ]);
        let (session, host) = destructive_session(config(), llm.clone());
        let (mut peer, _) = start(vec![session], DEFAULT_MAX_FRAME_BYTES);
        let (asked, updates, reply) = prompt_answering(&mut peer, "reject_always").await;
        assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
        // Asked once: the second call of the same tool takes the standing answer.
        assert_eq!(asked.len(), 1, "{asked:?}");
        assert_eq!(asked[0]["toolCall"]["title"], "fs__rm");
        assert_eq!(asked[0]["toolCall"]["rawInput"], json!({"path": "/"}));
        let kinds: Vec<&str> = asked[0]["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            ["allow_once", "allow_always", "reject_once", "reject_always"]
        );
        // Neither call ran; each was answered with an error result, which the model saw.
        assert_eq!(tools_run(&host), ["fs__read"]);
        let failed = updates
            .iter()
            .filter(|u| u["update"]["status"] == "failed")
            .count();
        assert_eq!(failed, 2, "{updates:?}");
        let seen = format!("{:?}", llm.requests());
        assert!(
            seen.contains("the user rejected this call of fs__rm"),
            "{seen}"
        );
    }

    #[tokio::test]
    async fn allow_once_runs_the_call_and_asks_again_next_time() {
        let llm = ScriptedLlm::new([
            Step::tools(1, &[("fs__rm", json!({}))]),
            Step::tools(2, &[("fs__rm", json!({}))]),
            Step::text("done"),
        ]);
        let (session, host) = destructive_session(config(), llm);
        let (mut peer, _) = start(vec![session], DEFAULT_MAX_FRAME_BYTES);
        let (asked, _, reply) = prompt_answering(&mut peer, "allow_once").await;
        assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
        assert_eq!(asked.len(), 2);
        assert_eq!(tools_run(&host), ["fs__rm", "fs__rm"]);
    }

    #[tokio::test]
    async fn with_permissions_off_destructive_tools_run_without_asking() {
        let llm = ScriptedLlm::new([Step::tools(1, &[("fs__rm", json!({}))]), Step::text("done")]);
        let (session, host) = destructive_session(config_without_asking(), llm);
        let options = AgentOptions {
            permissions: Permissions::Never,
            ..AgentOptions::default()
        };
        let (mut peer, factory) = start_with(vec![session], options, 1 << 16);
        let (asked, _, reply) = prompt_answering(&mut peer, "reject_once").await;
        assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
        assert!(asked.is_empty());
        assert_eq!(tools_run(&host), ["fs__rm"]);
        assert_eq!(
            factory.specs.lock().unwrap()[0].permissions,
            Permissions::Never
        );
    }

    #[tokio::test]
    async fn a_busy_session_refuses_a_second_prompt_and_cancel_frees_it() {
        let llm = ScriptedLlm::new([Step::Hang, Step::text("fresh")]);
        let (mut peer, _) = start(
            vec![session(config(), llm, InProcessHost::new())],
            DEFAULT_MAX_FRAME_BYTES,
        );
        peer.initialize().await;
        let session = peer.new_session().await;
        let first = peer.prompt(&session, "one").await;
        // The first prompt is in the actor once the second is refused... or refused itself
        // only if it came first; ids tell them apart.
        let second = peer.prompt(&session, "two").await;
        let (reply, _) = peer.reply(second).await;
        assert_eq!(reply["error"]["code"], -32600, "{reply}");
        assert!(
            reply["error"]["message"]
                .as_str()
                .unwrap()
                .contains("already running")
        );

        peer.notify("session/cancel", json!({"sessionId": session}))
            .await;
        let (reply, _) = peer.reply(first).await;
        assert_eq!(reply["result"]["stopReason"], "cancelled");

        let third = peer.prompt(&session, "three").await;
        let (reply, updates) = peer.reply(third).await;
        assert_eq!(reply["result"]["stopReason"], "end_turn");
        assert_eq!(updates[0]["update"]["content"]["text"], "fresh");
    }

    #[tokio::test]
    async fn cancel_during_a_tool_call_fails_the_call_and_ends_cancelled() {
        let llm = ScriptedLlm::new([
            Step::tools(1, &[("fs__read", json!({}))]),
            Step::text("after"),
        ]);
        let host = InProcessHost::new()
            .tool("fs", "read", echo)
            .tool_delay(Duration::from_secs(3600));
        let (mut peer, _) = start(vec![session(config(), llm, host)], DEFAULT_MAX_FRAME_BYTES);
        peer.initialize().await;
        let session = peer.new_session().await;
        let id = peer.prompt(&session, "go").await;
        // Wait until the tool is running, then cancel.
        loop {
            let frame = peer.read().await;
            if frame["params"]["update"]["status"] == "in_progress" {
                break;
            }
        }
        peer.notify("session/cancel", json!({"sessionId": session}))
            .await;
        let (reply, updates) = peer.reply(id).await;
        assert_eq!(reply["result"]["stopReason"], "cancelled");
        assert_eq!(kinds(&updates), ["tool_call_update:failed"]);
    }

    #[tokio::test]
    async fn cancel_during_a_hook_call_ends_cancelled_and_the_next_prompt_works() {
        let llm = ScriptedLlm::new([Step::text("done?"), Step::text("next")]);
        let host = InProcessHost::new().hook("todo", Hook::Stop, [HookStep::Hang]);
        let config = Config::builder()
            .hook_servers(HookServers::All)
            .hook_timeout(Duration::from_secs(3600))
            .build()
            .unwrap();
        let (mut peer, _) = start(vec![session(config, llm, host)], DEFAULT_MAX_FRAME_BYTES);
        peer.initialize().await;
        let session = peer.new_session().await;
        let id = peer.prompt(&session, "go").await;
        loop {
            let frame = peer.read().await;
            if frame["params"]["update"]["sessionUpdate"] == "agent_message_chunk" {
                break;
            }
        }
        peer.notify("session/cancel", json!({"sessionId": session}))
            .await;
        let (reply, _) = peer.reply(id).await;
        assert_eq!(reply["result"]["stopReason"], "cancelled");
        let id = peer.prompt(&session, "again").await;
        let (reply, _) = peer.reply(id).await;
        assert_eq!(reply["result"]["stopReason"], "end_turn");
    }

    #[tokio::test]
    async fn sessions_run_concurrently_and_independently() {
        let slow = session(
            config(),
            ScriptedLlm::new([Step::Hang]),
            InProcessHost::new(),
        );
        let fast = session(
            config(),
            ScriptedLlm::new([Step::text("quick")]),
            InProcessHost::new(),
        );
        let (mut peer, _) = start(vec![slow, fast], DEFAULT_MAX_FRAME_BYTES);
        peer.initialize().await;
        let a = peer.new_session().await;
        let b = peer.new_session().await;
        assert_ne!(a, b);
        let slow_id = peer.prompt(&a, "slow").await;
        let fast_id = peer.prompt(&b, "fast").await;
        let (reply, updates) = peer.reply(fast_id).await;
        assert_eq!(reply["result"]["stopReason"], "end_turn");
        assert!(updates.iter().all(|u| u["sessionId"] == json!(b)));
        peer.notify("session/cancel", json!({"sessionId": a})).await;
        let (reply, _) = peer.reply(slow_id).await;
        assert_eq!(reply["result"]["stopReason"], "cancelled");
    }

    #[tokio::test]
    async fn bad_frames_get_errors_and_the_connection_survives() {
        let (mut peer, _) = start(Vec::new(), 1024);
        peer.send_raw("this is not json").await;
        let frame = peer.read().await;
        assert_eq!(frame["error"]["code"], -32700, "{frame}");

        let big = format!(
            r#"{{"jsonrpc":"2.0","id":77,"method":"session/prompt","params":{{"pad":"{}"}}}}"#,
            "x".repeat(4096)
        );
        peer.send_raw(&big).await;
        let frame = peer.read().await;
        assert_eq!(frame["id"], 77, "{frame}");
        assert_eq!(frame["error"]["code"], -32600);
        assert!(
            frame["error"]["message"]
                .as_str()
                .unwrap()
                .contains("1024 byte limit")
        );

        // The protocol crate refuses every request before `initialize` has been answered.
        let (reply, _) = peer.call("no/such/method", json!({})).await;
        assert_eq!(reply["error"]["code"], -32600, "{reply}");
        let reply = peer.initialize().await;
        assert_eq!(reply["result"]["protocolVersion"], 1);

        let (reply, _) = peer.call("no/such/method", json!({})).await;
        assert_eq!(reply["error"]["code"], -32601, "{reply}");

        let (reply, _) = peer
            .call(
                "session/prompt",
                json!({"sessionId": "nope", "prompt": [{"type": "text", "text": "x"}]}),
            )
            .await;
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
        assert!(
            reply["error"]["message"]
                .as_str()
                .unwrap()
                .contains("unknown session")
        );

        let (reply, _) = peer.call("session/prompt", json!({"sessionId": 5})).await;
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
    }

    #[tokio::test]
    async fn an_oversized_frame_is_refused_while_a_prompt_runs_and_the_prompt_goes_on() {
        // The tool never ends on its own: the prompt is still running when the refusal comes.
        let llm = ScriptedLlm::new([Step::tools(1, &[("fs__read", json!({}))]), Step::text("ok")]);
        let host = InProcessHost::new()
            .tool("fs", "read", echo)
            .tool_delay(Duration::from_secs(3600));
        let (mut peer, _) = start(vec![session(config(), llm, host)], 2048);
        peer.initialize().await;
        let session = peer.new_session().await;
        let id = peer.prompt(&session, "go").await;
        peer.send_raw(&format!(r#"{{"id":"big","x":"{}"}}"#, "y".repeat(10_000)))
            .await;
        loop {
            let frame = peer.read().await;
            assert_ne!(frame["id"], json!(id), "the prompt ended first: {frame}");
            if frame["id"] == "big" {
                assert_eq!(frame["error"]["code"], -32600, "{frame}");
                break;
            }
        }
        // The prompt is unharmed: it is still running, and a cancel ends it as it should.
        peer.notify("session/cancel", json!({"sessionId": session}))
            .await;
        let (reply, updates) = peer.reply(id).await;
        assert_eq!(reply["result"]["stopReason"], "cancelled", "{reply}");
        assert!(kinds(&updates).contains(&"tool_call_update:failed".to_owned()));
    }

    #[tokio::test]
    async fn a_frame_that_is_not_utf8_is_a_parse_error_and_reaches_no_session() {
        let llm = ScriptedLlm::new([Step::text("ok")]);
        let (mut peer, _) = start(
            vec![session(config(), llm.clone(), InProcessHost::new())],
            DEFAULT_MAX_FRAME_BYTES,
        );
        peer.initialize().await;
        let session = peer.new_session().await;
        let frame = format!(
            r#"{{"jsonrpc":"2.0","id":9,"method":"session/prompt","params":{{"sessionId":"{session}","prompt":[{{"type":"text","text":"caf"#
        );
        let mut bytes = frame.into_bytes();
        bytes.extend_from_slice(b"\xe9\"}]}}\n");
        peer.tx.write_all(&bytes).await.unwrap();
        let reply = peer.read().await;
        assert_eq!(reply["id"], 9, "{reply}");
        assert_eq!(reply["error"]["code"], -32700, "{reply}");
        assert!(
            llm.requests().is_empty(),
            "an altered prompt reached the model"
        );

        // The connection and the session go on.
        let id = peer.prompt(&session, "café").await;
        let (reply, _) = peer.reply(id).await;
        assert_eq!(reply["result"]["stopReason"], "end_turn");
        assert_eq!(llm.requests().len(), 1);
    }

    #[tokio::test]
    async fn a_cancel_sent_right_after_a_prompt_always_cancels_it() {
        const ROUNDS: usize = 50;
        let sessions = (0..ROUNDS)
            .map(|_| {
                let llm = ScriptedLlm::new([Step::tools(1, &[("fs__read", json!({}))])]);
                let host = InProcessHost::new()
                    .tool("fs", "read", echo)
                    .tool_delay(Duration::from_secs(3600));
                session(config(), llm, host)
            })
            .collect();
        let (mut peer, _) = start(sessions, DEFAULT_MAX_FRAME_BYTES);
        peer.initialize().await;
        for round in 0..ROUNDS {
            let session = peer.new_session().await;
            // Both frames in one write: the cancel lands while the prompt is still queued.
            peer.next_id += 1;
            let id = peer.next_id;
            let prompt = json!({"jsonrpc": "2.0", "id": id, "method": "session/prompt",
                "params": {"sessionId": session, "prompt": [{"type": "text", "text": "go"}]}});
            let cancel = json!({"jsonrpc": "2.0", "method": "session/cancel",
                "params": {"sessionId": session}});
            peer.send_raw(&format!("{prompt}\n{cancel}")).await;
            let (reply, _) = peer.reply(id).await;
            assert_eq!(
                reply["result"]["stopReason"], "cancelled",
                "round {round}: {reply}"
            );
            let (reply, _) = peer
                .call("session/close", json!({"sessionId": session}))
                .await;
            assert!(reply.get("result").is_some(), "{reply}");
        }
    }

    #[tokio::test]
    async fn a_cancel_with_no_prompt_running_does_not_cancel_the_next_prompt() {
        let llm = ScriptedLlm::new([Step::text("fine")]);
        let (mut peer, _) = start(
            vec![session(config(), llm, InProcessHost::new())],
            DEFAULT_MAX_FRAME_BYTES,
        );
        peer.initialize().await;
        let session = peer.new_session().await;
        peer.notify("session/cancel", json!({"sessionId": session}))
            .await;
        let id = peer.prompt(&session, "go").await;
        let (reply, _) = peer.reply(id).await;
        assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    }

    #[tokio::test]
    async fn closing_a_session_cancels_its_prompt_frees_its_slot_and_forgets_it() {
        let busy = || {
            let llm = ScriptedLlm::new([Step::tools(1, &[("fs__read", json!({}))])]);
            let host = InProcessHost::new()
                .tool("fs", "read", echo)
                .tool_delay(Duration::from_secs(3600));
            session(config(), llm, host)
        };
        let options = AgentOptions {
            max_sessions: 1,
            ..AgentOptions::default()
        };
        let (mut peer, _) = start_with(vec![busy(), busy()], options, 1 << 16);
        peer.initialize().await;
        let first = peer.new_session().await;
        let prompt = peer.prompt(&first, "go").await;
        let (refused, _) = peer
            .call("session/new", json!({"cwd": "/tmp", "mcpServers": []}))
            .await;
        assert_eq!(refused["error"]["code"], -32600, "{refused}");

        let close = peer
            .send_request("session/close", json!({"sessionId": first}))
            .await;
        let (reply, _) = peer.reply(prompt).await;
        assert_eq!(reply["result"]["stopReason"], "cancelled", "{reply}");
        let (reply, _) = peer.reply(close).await;
        assert_eq!(reply["result"], json!({}), "{reply}");

        // The slot is free again, and the closed session is gone.
        let second = peer.new_session().await;
        assert_ne!(second, first);
        let (reply, _) = peer
            .call(
                "session/prompt",
                json!({"sessionId": first, "prompt": [{"type": "text", "text": "x"}]}),
            )
            .await;
        assert!(
            reply["error"]["message"]
                .as_str()
                .unwrap()
                .contains("unknown session"),
            "{reply}"
        );
        let (reply, _) = peer
            .call("session/close", json!({"sessionId": first}))
            .await;
        assert_eq!(reply["error"]["code"], -32602, "{reply}");
    }

    #[tokio::test]
    async fn over_the_session_limit_session_new_is_an_error_that_names_the_limit() {
        let sessions = (0..3)
            .map(|_| session(config(), ScriptedLlm::new([]), InProcessHost::new()))
            .collect();
        let options = AgentOptions {
            max_sessions: 2,
            ..AgentOptions::default()
        };
        let (mut peer, factory) = start_with(sessions, options, 1 << 16);
        peer.initialize().await;
        peer.new_session().await;
        peer.new_session().await;
        let (reply, _) = peer
            .call("session/new", json!({"cwd": "/tmp", "mcpServers": []}))
            .await;
        assert_eq!(reply["error"]["code"], -32600, "{reply}");
        let message = reply["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("session limit") && message.contains("HOOKLOOP_MAX_SESSIONS"),
            "{message}"
        );
        // Refused before any server was started for it.
        assert_eq!(factory.specs.lock().unwrap().len(), 2);
    }

    #[test]
    fn the_session_limit_is_read_from_its_variable_and_checked() {
        let lookup = |value: &'static str| {
            move |var: &str| Ok((var == AgentOptions::MAX_SESSIONS_VAR).then(|| value.to_owned()))
        };
        assert_eq!(
            AgentOptions::from_lookup(&lookup("5"))
                .unwrap()
                .max_sessions,
            5
        );
        assert_eq!(
            AgentOptions::from_lookup(&|_: &str| Ok(None))
                .unwrap()
                .max_sessions,
            32
        );
        for bad in ["0", "-1", "many"] {
            let err = AgentOptions::from_lookup(&lookup(bad)).unwrap_err();
            assert!(err.to_string().contains("HOOKLOOP_MAX_SESSIONS"), "{err}");
        }
    }

    #[test]
    fn the_permission_setting_is_ask_or_never_and_anything_else_is_an_error() {
        let lookup = |value: &'static str| {
            move |var: &str| Ok((var == Permissions::VAR).then(|| value.to_owned()))
        };
        let read = |value| AgentOptions::from_lookup(&lookup(value)).map(|o| o.permissions);
        assert_eq!(AgentOptions::default().permissions, Permissions::Ask);
        assert_eq!(read("never").unwrap(), Permissions::Never);
        assert_eq!(read(" ask ").unwrap(), Permissions::Ask);
        let err = read("always").unwrap_err();
        assert!(
            err.to_string().contains("HOOKLOOP_ACP_PERMISSIONS"),
            "{err}"
        );
    }

    // The clock is paused: it moves only when every task waits, so once the hour below has
    // passed the session has done all it could; one merely slow would have gone on.
    #[tokio::test(start_paused = true)]
    async fn a_client_that_stops_reading_holds_the_session_back_and_loses_no_frame() {
        const CALLS: usize = 20;
        let calls: Vec<(&str, Value)> = (0..CALLS).map(|i| ("fs__read", json!({"n": i}))).collect();
        let llm = ScriptedLlm::new([Step::tools(1, &calls), Step::text("done")]);
        let host = InProcessHost::new()
            .tool("fs", "read", echo)
            .tool_delay(Duration::from_millis(20));
        let options = AgentOptions {
            max_queued_frames: 4,
            ..AgentOptions::default()
        };
        // A pipe of 512 bytes: a few frames fill it.
        let (mut peer, _) = start_with(vec![session(config(), llm.clone(), host)], options, 512);
        peer.initialize().await;
        let session = peer.new_session().await;
        let id = peer.prompt(&session, "go").await;

        // Not reading: an hour later the tools are long done, but the session may not go on to
        // its next model request while its frames wait.
        tokio::time::sleep(Duration::from_secs(3600)).await;
        assert_eq!(
            llm.remaining(),
            1,
            "the session ran on while nothing was read"
        );

        let (reply, updates) = peer.reply(id).await;
        assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
        assert_eq!(llm.remaining(), 0);
        // Every call's three updates arrived, none dropped.
        let kinds = kinds(&updates);
        for kind in [
            "tool_call:pending",
            "tool_call_update:in_progress",
            "tool_call_update:completed",
        ] {
            assert_eq!(
                kinds.iter().filter(|k| *k == kind).count(),
                CALLS,
                "{kinds:?}"
            );
        }
        assert_eq!(updates.last().unwrap()["update"]["content"]["text"], "done");
    }

    #[tokio::test]
    async fn a_prompt_with_an_image_is_invalid_params() {
        let (mut peer, _) = start(
            vec![session(
                config(),
                ScriptedLlm::new([]),
                InProcessHost::new(),
            )],
            DEFAULT_MAX_FRAME_BYTES,
        );
        peer.initialize().await;
        let session = peer.new_session().await;
        let (reply, _) = peer
            .call(
                "session/prompt",
                json!({"sessionId": session, "prompt": [{"type": "image", "data": "AA==", "mimeType": "image/png"}]}),
            )
            .await;
        assert_eq!(reply["error"]["code"], -32602);
        assert!(
            reply["error"]["message"]
                .as_str()
                .unwrap()
                .contains("image")
        );
    }

    #[tokio::test]
    async fn a_failed_session_setup_is_an_error_reply() {
        let (mut peer, _) = start(Vec::new(), DEFAULT_MAX_FRAME_BYTES);
        peer.initialize().await;
        let (reply, _) = peer
            .call("session/new", json!({"cwd": "/tmp", "mcpServers": []}))
            .await;
        assert_eq!(reply["error"]["code"], -32603);
        assert!(
            reply["error"]["message"]
                .as_str()
                .unwrap()
                .contains("no more sessions")
        );
    }

    #[tokio::test]
    async fn the_end_of_input_cancels_running_prompts_and_ends_the_agent() {
        let (mut peer, _) = start(
            vec![session(
                config(),
                ScriptedLlm::new([Step::Hang]),
                InProcessHost::new(),
            )],
            DEFAULT_MAX_FRAME_BYTES,
        );
        peer.initialize().await;
        let session = peer.new_session().await;
        peer.prompt(&session, "hang").await;
        peer.tx.shutdown().await.unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(10), &mut peer.agent)
            .await
            .expect("the agent ends once its input does");
        ended.unwrap().unwrap();
    }
}
