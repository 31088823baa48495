//! OpenTelemetry export against a real collector: Arize Phoenix, started on 127.0.0.1 in a
//! fresh working directory, receives the spans of a `hookloop run` session over OTLP/HTTP, and
//! the test reads them back from Phoenix's REST API.
//!
//! `HOOKLOOP_PHOENIX` names the `phoenix` executable (`.ci/setup.d/50-phoenix.sh` installs it);
//! without it the Phoenix tests print one line and pass.

mod acp_agent;
mod loopback;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use acp_agent::{Agent, test_server};
use loopback::{FakeProvider, Reply, after_tool, first_user_text};
use serde_json::{Value, json};

const TEST_SERVER: &str = env!("CARGO_BIN_EXE_hookloop-test-server");

/// How long Phoenix may take to start on a loaded 2-core machine (about 30 s when measured).
const PHOENIX_START: Duration = Duration::from_secs(180);
/// How long the spans may take to show in Phoenix's API once the run has exited.
const SPANS_ARRIVE: Duration = Duration::from_secs(60);

#[test]
fn a_run_traces_prompt_model_tools_hooks_and_compaction_into_phoenix() {
    let Some(phoenix) = Phoenix::start("e2e") else {
        return;
    };
    let scratch = Scratch::new("otel-e2e");
    let log = scratch.path.join("mem.log");
    let record = scratch.path.join("session.jsonl");
    let provider = scripted_model();
    let config = scratch.mcp_config(&log);
    let out = run_session(&scratch, &provider, &config, Some(&record), |command| {
        command
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", phoenix.base_url())
            .env(
                "OTEL_RESOURCE_ATTRIBUTES",
                format!("openinference.project.name={}", phoenix.project),
            )
            .env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true");
    });
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let spans = phoenix.spans_until(|spans| {
        spans.iter().any(|s| s["name"] == "invoke_agent hookloop")
            && spans.iter().any(|s| s["name"] == "hookloop.compaction")
            && spans.iter().any(|s| s["name"] == "hookloop.hook _Stop")
    });
    let trace = Trace::new(&spans);

    // One prompt: one root, every other span of the session under it.
    let agent = trace.one("invoke_agent hookloop");
    assert_eq!(agent["parent_id"], Value::Null, "{agent}");
    assert_eq!(attr(agent, "gen_ai.operation.name"), json!("invoke_agent"));
    assert_eq!(attr(agent, "gen_ai.agent.name"), json!("hookloop"));
    assert_eq!(attr(agent, "hookloop.prompt.end_reason"), json!("end_turn"));
    let conversation = attr(agent, "gen_ai.conversation.id");
    assert!(
        conversation.as_str().is_some_and(|c| !c.is_empty()),
        "{agent}"
    );
    let agent_trace = &agent["context"]["trace_id"];
    for span in &spans {
        assert_eq!(
            &span["context"]["trace_id"], agent_trace,
            "one trace: {span}"
        );
    }

    // Model requests: `chat {model}` under the prompt (or under the compaction, for the summary).
    let chats = trace.named("chat loopback");
    assert_eq!(chats.len(), 4, "tool, summary, end, end again: {chats:?}");
    for chat in &chats {
        assert_eq!(attr(chat, "gen_ai.operation.name"), json!("chat"));
        assert_eq!(attr(chat, "gen_ai.provider.name"), json!("openai"));
        assert_eq!(attr(chat, "gen_ai.request.model"), json!("loopback"));
        // The scripted model names itself in whole and streamed replies alike.
        assert_eq!(
            attr(chat, "gen_ai.response.model"),
            json!("loopback"),
            "{chat}"
        );
        assert_eq!(
            int(attr(chat, "gen_ai.request.max_tokens")),
            Some(100),
            "{chat}"
        );
        // The scripted model reports usage in whole replies, and streams without it; a
        // streamed reply carries its time to the first chunk instead.
        if attr(chat, "gen_ai.request.stream") == json!(true) {
            let first = attr(chat, "gen_ai.response.time_to_first_chunk");
            assert!(first.as_f64().is_some_and(|s| s > 0.0), "{chat}");
        } else {
            assert_eq!(
                int(attr(chat, "gen_ai.usage.input_tokens")),
                Some(10),
                "{chat}"
            );
            assert_eq!(
                int(attr(chat, "gen_ai.usage.output_tokens")),
                Some(5),
                "{chat}"
            );
        }
        assert_eq!(chat["span_kind"].as_str().map(str::is_empty), Some(false));
        let reasons = attr(chat, "gen_ai.response.finish_reasons");
        assert!(
            reasons == json!(["tool_use"]) || reasons == json!(["end_turn"]),
            "{chat}"
        );
        let parent = trace.parent(chat);
        assert!(
            parent["name"] == "invoke_agent hookloop" || parent["name"] == "hookloop.compaction",
            "{chat}"
        );
    }
    // The content the operator opted in to, in the conventions' shape: the request that
    // called the tool, and a streamed end of turn.
    let asked = chats
        .iter()
        .find(|c| attr(c, "gen_ai.response.finish_reasons") == json!(["tool_use"]))
        .unwrap_or_else(|| panic!("no tool request: {chats:?}"));
    let input = json_attr(asked, "gen_ai.input.messages");
    assert_eq!(input[0]["role"], "user", "{input}");
    assert_eq!(input[0]["parts"][0]["type"], "text", "{input}");
    assert!(
        input[0]["parts"][0]["content"]
            .as_str()
            .is_some_and(|c| c.contains("remember the text")),
        "{input}"
    );
    let output = json_attr(asked, "gen_ai.output.messages");
    assert_eq!(output[0]["role"], "assistant", "{output}");
    assert_eq!(output[0]["finish_reason"], "tool_use", "{output}");
    let call = &output[0]["parts"][0];
    assert_eq!(call["type"], "tool_call", "{output}");
    assert_eq!(call["name"], "mem__echo", "{output}");
    assert_eq!(
        call["id"],
        attr(trace.one("execute_tool mem__echo"), "gen_ai.tool.call.id")
    );
    let ended = chats
        .iter()
        .find(|c| attr(c, "gen_ai.request.stream") == json!(true))
        .unwrap_or_else(|| panic!("no streamed request: {chats:?}"));
    let output = json_attr(ended, "gen_ai.output.messages");
    assert_eq!(
        output[0]["parts"],
        json!([{"type": "text", "content": "done"}]),
        "{output}"
    );
    let input = json_attr(ended, "gen_ai.input.messages");
    assert!(input.as_array().is_some_and(|m| !m.is_empty()), "{input}");
    let streamed = chats
        .iter()
        .filter(|c| attr(c, "gen_ai.request.stream") == json!(true))
        .count();
    assert_eq!(streamed, 2, "the two ends of turn streamed: {chats:?}");

    // The tool call, and the MCP request under it, whose context reached the server.
    let tool = trace.one("execute_tool mem__echo");
    assert_eq!(trace.parent(tool)["name"], "invoke_agent hookloop");
    assert_eq!(attr(tool, "gen_ai.operation.name"), json!("execute_tool"));
    assert_eq!(attr(tool, "gen_ai.tool.name"), json!("mem__echo"));
    assert!(
        attr(tool, "gen_ai.tool.call.id").as_str().is_some(),
        "{tool}"
    );
    let mcp = trace
        .children(tool)
        .into_iter()
        .find(|s| s["name"] == "tools/call echo")
        .unwrap_or_else(|| panic!("no MCP span under the tool call: {spans:?}"));
    assert_eq!(attr(mcp, "mcp.method.name"), json!("tools/call"));
    assert_eq!(attr(mcp, "gen_ai.tool.name"), json!("echo"));
    assert_eq!(attr(mcp, "hookloop.mcp.server"), json!("mem"));
    assert_eq!(attr(mcp, "network.transport"), json!("pipe"));
    let id = attr(mcp, "jsonrpc.request.id");
    assert!(
        id.as_str().is_some_and(|id| id.parse::<u64>().is_ok()),
        "the request's JSON-RPC id: {mcp}"
    );
    assert!(
        attr(mcp, "mcp.protocol.version").as_str().is_some(),
        "{mcp}"
    );
    let sent = std::fs::read_to_string(&log).unwrap_or_default();
    let traceparent = format!(
        "traceparent echo 00-{}-{}-01",
        mcp["context"]["trace_id"].as_str().unwrap_or_default(),
        mcp["context"]["span_id"].as_str().unwrap_or_default()
    );
    assert!(
        sent.lines().any(|l| l == traceparent),
        "the server got its span's context ({traceparent}): {sent}"
    );

    // The hook round: `_Stop` objected once (the model's second end declined it, so `_Stop`
    // was not asked again), the server's answer under the round and the MCP request under the
    // answer.
    let stop = trace.one("hookloop.hook _Stop");
    assert_eq!(trace.parent(stop)["name"], "invoke_agent hookloop");
    assert_eq!(attr(stop, "hookloop.hook.name"), json!("_Stop"));
    assert_eq!(attr(stop, "hookloop.hook.outcome"), json!("objection"));
    assert_eq!(int(attr(stop, "hookloop.hook.budget_left")), Some(3));
    assert_eq!(int(attr(stop, "hookloop.hook.servers")), Some(1));
    let objection = event(stop, "hookloop.objection");
    assert_eq!(event_attr(objection, "hookloop.mcp.server"), json!("mem"));
    assert_eq!(int(event_attr(objection, "hookloop.budget_left")), Some(2));
    let answers = trace.children(stop);
    assert_eq!(answers.len(), 1, "{answers:?}");
    assert_eq!(answers[0]["name"], "hookloop.hook.answer _Stop mem");
    assert_eq!(attr(answers[0], "hookloop.hook.outcome"), json!("text"));
    let request = trace.children(answers[0]);
    assert_eq!(request.len(), 1, "{request:?}");
    assert_eq!(request[0]["name"], "tools/call _Stop");
    let skipped = event(agent, "hookloop.stop_skipped");
    assert_eq!(
        event_attr(skipped, "hookloop.reason"),
        json!("declined_objection")
    );

    // The compaction: a span with its sizes, the summary request under it.
    let compaction = trace.one("hookloop.compaction");
    assert_eq!(trace.parent(compaction)["name"], "invoke_agent hookloop");
    assert_eq!(
        attr(compaction, "hookloop.compaction.summarized"),
        json!(true)
    );
    let before = int(attr(compaction, "hookloop.compaction.messages_before"));
    let after = int(attr(compaction, "hookloop.compaction.messages_after"));
    assert!(
        before.zip(after).is_some_and(|(b, a)| a < b),
        "{compaction}"
    );
    assert_eq!(trace.children(compaction).len(), 1, "{compaction}");

    // The record tells the same story: the same hook rounds in the same order, each with as
    // many answers, the same objections and the same compactions.
    let shown = transcript_show(&record);
    let entries = shown["entries"].as_array().cloned().unwrap_or_default();
    let of_kind =
        |kind: &str| -> Vec<&Value> { entries.iter().filter(|e| e["entry"] == kind).collect() };
    let shown_rounds: Vec<(String, usize)> = of_kind("hook_round")
        .iter()
        .map(|e| {
            let hook = e["hook"].as_str().unwrap_or_default().to_owned();
            (hook, e["answers"].as_array().map_or(0, Vec::len))
        })
        .collect();
    let mut traced: Vec<&Value> = spans
        .iter()
        .filter(|s| {
            s["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("hookloop.hook _"))
        })
        .collect();
    traced.sort_by_key(|s| s["start_time"].as_str().unwrap_or_default().to_owned());
    let traced_rounds: Vec<(String, usize)> = traced
        .iter()
        .map(|s| {
            let hook = attr(s, "hookloop.hook.name")
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (hook, trace.children(s).len())
        })
        .collect();
    assert_eq!(shown_rounds, traced_rounds, "{shown}");
    let traced_objections: Vec<Value> = spans
        .iter()
        .flat_map(|s| s["events"].as_array().cloned().unwrap_or_default())
        .filter(|e| e["name"] == "hookloop.objection")
        .map(|e| event_attr(&e, "hookloop.mcp.server"))
        .collect();
    let shown_objections: Vec<Value> = of_kind("objection")
        .iter()
        .map(|e| e["server"].clone())
        .collect();
    assert_eq!(traced_objections, shown_objections, "{shown}");
    let compactions = of_kind("compaction");
    assert_eq!(compactions.len(), trace.named("hookloop.compaction").len());
    assert_eq!(compactions[0]["messages_after"].as_u64(), after);
    assert_eq!(compactions[0]["messages_before"].as_u64(), before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_acp_session_traces_its_subagent_and_its_close_into_phoenix() {
    let Some(phoenix) = Phoenix::start("acp") else {
        return;
    };
    let scratch = Scratch::new("otel-acp");
    let log = scratch.path.join("mem.log");
    // The parent hands the work to a child, which calls a tool and answers; then the parent
    // ends its turn.
    let provider = FakeProvider::start(|request| {
        if first_user_text(request).contains("Echo something") {
            if after_tool(request) {
                Reply::text("child done")
            } else {
                Reply::tool("mem__echo", json!({"text": "hi"}))
            }
        } else if after_tool(request) {
            Reply::text("all done")
        } else {
            Reply::tool(
                "agent",
                json!({"description": "echo", "prompt": "Echo something."}),
            )
        }
    });
    let endpoint = phoenix.base_url();
    let resource = format!("openinference.project.name={}", phoenix.project);
    let mut agent = Agent::spawn_with(&provider, &[], |command| {
        command
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
            .env("OTEL_RESOURCE_ATTRIBUTES", &resource)
            .env("HOOKLOOP_SUBAGENTS", "1")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .env_remove("OTEL_SDK_DISABLED")
            .env_remove("OTEL_TRACES_EXPORTER");
    });
    agent.initialize().await;
    let log_path = log.to_string_lossy().into_owned();
    let server = test_server(
        "mem",
        &[
            ("TS_HOOKS", "_Stop,_SubagentStop,_SessionEnd"),
            ("TS_LOG", log_path.as_str()),
        ],
    );
    let session = agent.new_session(json!([server])).await;
    let (reply, _) = agent.prompt_to_end(&session, "Delegate the work.").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    let (closed, _) = agent
        .call("session/close", json!({"sessionId": session}))
        .await;
    assert!(closed.get("error").is_none(), "{closed}");
    agent.close().await;

    let spans = tokio::task::block_in_place(|| {
        phoenix.spans_until(|spans| {
            spans.iter().any(|s| s["name"] == "hookloop.session.close")
                && spans
                    .iter()
                    .any(|s| s["name"] == "hookloop.hook _SubagentStop")
        })
    });
    let trace = Trace::new(&spans);

    // The prompt: named for the ACP session and the model.
    let prompts: Vec<&Value> = trace
        .named("invoke_agent hookloop")
        .into_iter()
        .filter(|s| s["parent_id"].is_null())
        .collect();
    assert_eq!(prompts.len(), 1, "one prompt: {spans:?}");
    let prompt = prompts[0];
    assert_eq!(attr(prompt, "gen_ai.conversation.id"), json!(session));
    assert_eq!(attr(prompt, "gen_ai.provider.name"), json!("openai"));
    assert_eq!(attr(prompt, "gen_ai.request.model"), json!("loopback"));
    assert_eq!(attr(prompt, "gen_ai.agent.id"), Value::Null, "{prompt}");
    let agent_trace = &prompt["context"]["trace_id"];
    for span in &spans {
        assert_eq!(
            &span["context"]["trace_id"], agent_trace,
            "one trace: {span}"
        );
    }

    // The child: its own `invoke_agent` under the `execute_tool agent` that started it, its
    // model requests, tool call and `_SubagentStop` round under it.
    let call = trace.one("execute_tool agent");
    assert_eq!(trace.parent(call)["name"], "invoke_agent hookloop");
    let children = trace.children(call);
    assert_eq!(children.len(), 1, "{children:?}");
    let child = children[0];
    assert_eq!(child["name"], "invoke_agent hookloop");
    assert_eq!(
        attr(child, "gen_ai.agent.id"),
        attr(call, "gen_ai.tool.call.id"),
        "{child}"
    );
    assert_eq!(attr(child, "gen_ai.conversation.id"), json!(session));
    let under_child: Vec<String> = trace
        .children(child)
        .iter()
        .map(|s| s["name"].as_str().unwrap_or_default().to_owned())
        .collect();
    for name in [
        "chat loopback",
        "execute_tool mem__echo",
        "hookloop.hook _SubagentStop",
    ] {
        assert!(
            under_child.iter().any(|n| n == name),
            "{name}: {under_child:?}"
        );
    }
    assert_eq!(
        under_child.iter().filter(|n| *n == "chat loopback").count(),
        2,
        "{under_child:?}"
    );
    let echo = trace.one("execute_tool mem__echo");
    assert!(
        trace
            .children(echo)
            .iter()
            .any(|s| s["name"] == "tools/call echo"),
        "{echo}"
    );
    let child_stop = trace.one("hookloop.hook _SubagentStop");
    assert_eq!(trace.children(child_stop).len(), 1, "{child_stop}");
    for chat in trace.named("chat loopback") {
        assert_eq!(
            attr(chat, "gen_ai.response.model"),
            json!("loopback"),
            "{chat}"
        );
    }

    // The close: in the prompt's trace, under its span, with the `_SessionEnd` round in it.
    let close = trace.one("hookloop.session.close");
    assert_eq!(close["parent_id"], prompt["context"]["span_id"], "{close}");
    assert_eq!(attr(close, "gen_ai.conversation.id"), json!(session));
    let end = trace.one("hookloop.hook _SessionEnd");
    assert_eq!(trace.parent(end)["name"], "hookloop.session.close");
    assert_eq!(trace.children(end).len(), 1, "{end}");
}

#[test]
fn a_closed_collector_port_leaves_the_session_unaffected() {
    // No Phoenix needed: nothing listens on the port.
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let scratch = Scratch::new("otel-closed");
    let log = scratch.path.join("mem.log");
    let config = scratch.mcp_config(&log);
    let timed = |otel: bool| {
        let provider = scripted_model();
        let started = Instant::now();
        let out = run_session(&scratch, &provider, &config, None, |command| {
            if otel {
                command.env(
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    format!("http://127.0.0.1:{closed}"),
                );
            }
        });
        (out, started.elapsed(), provider.requests().len())
    };
    let (plain, plain_time, plain_requests) = timed(false);
    let (traced, traced_time, traced_requests) = timed(true);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
    assert_eq!(traced.status.code(), Some(0), "{}", stderr(&traced));
    // The same session: the same model requests and the same answer.
    assert_eq!(traced_requests, plain_requests);
    assert_eq!(traced.stdout, plain.stdout);
    // The bound: the exit's wait for the exporter (2 s at most) plus a generous margin for a
    // loaded machine; a session held up by the collector would wait out the export timeout
    // (10 s) per batch.
    assert!(
        traced_time < plain_time + Duration::from_secs(5),
        "with a closed collector port {traced_time:?}, without {plain_time:?}"
    );
    // Failed exports are the SDK's debug logs: nothing on a default run's stderr about them.
    let said = stderr(&traced);
    assert!(!said.contains("panicked"), "{said}");
}

#[test]
fn a_refused_collector_is_not_waited_for_at_exit() {
    // The exit's longest wait for the exporter (`Telemetry::SHUTDOWN` in the binary).
    const SHUTDOWN: Duration = Duration::from_secs(2);
    let closed = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let scratch = Scratch::new("otel-refused");
    let log = scratch.path.join("mem.log");
    let config = scratch.mcp_config(&log);
    let timed = |otel: bool| {
        let provider = FakeProvider::start(|request| {
            if request.to_string().contains("\"role\":\"tool\"") {
                Reply::text("done")
            } else {
                Reply::tool("mem__echo", json!({"text": "x"}))
            }
        });
        let started = Instant::now();
        let out = run_session(&scratch, &provider, &config, None, |command| {
            command.env("MCP_HOOK_SERVERS", "");
            if otel {
                command.env(
                    "OTEL_EXPORTER_OTLP_ENDPOINT",
                    format!("http://127.0.0.1:{closed}"),
                );
            }
        });
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        started.elapsed()
    };
    // The quicker of two runs each, so that one slow start on a loaded machine does not count.
    let plain = timed(false).min(timed(false));
    let traced = timed(true).min(timed(true));
    println!("exit with a refused collector {traced:?}, without {plain:?}");
    // Waiting for it cost the SDK's retries (0.7 s and more of backoff) up to the deadline.
    assert!(
        traced < plain + SHUTDOWN / 4,
        "with a refused collector {traced:?}, without {plain:?}: the exit waited for it"
    );
}

/// The model's script: a tool call whose long result forces a compaction, a summary, then the
/// end of the turn (streamed), which `_Stop` objects to once.
fn scripted_model() -> FakeProvider {
    FakeProvider::start(|request| {
        let text = request.to_string();
        if last_user_text(request).contains("Summarize") {
            Reply::text("Summary: echoed a long text.")
        } else if text.contains("\"role\":\"tool\"") || text.contains("Summary:") {
            Reply::Stream(vec!["do".into(), "ne".into()], Duration::from_millis(5))
        } else {
            Reply::tool("mem__echo", json!({"text": "x".repeat(3000)}))
        }
    })
}

fn last_user_text(request: &Value) -> String {
    request["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .map(|m| m["content"].to_string())
        .unwrap_or_default()
}

/// Runs `hookloop run` on the scripted model, with the `mem` server of `config`.
fn run_session(
    scratch: &Scratch,
    provider: &FakeProvider,
    config: &Path,
    record: Option<&Path>,
    setup: impl FnOnce(&mut Command),
) -> Output {
    let mut command = Command::new(loopback::hookloop());
    command.arg("run").arg("--mcp-config").arg(config);
    if let Some(record) = record {
        command.arg("--record").arg(record);
    }
    command
        .arg("remember the text")
        .current_dir(&scratch.path)
        .env_remove("HOOKLOOP_LOG")
        .env_remove("SPROUT_AGENT_HOOK_TIMEOUT_MS")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("OTEL_SDK_DISABLED")
        .env_remove("OTEL_TRACES_EXPORTER")
        .env_remove("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT")
        .env("MCP_HOOK_SERVERS", "mem")
        .env("HOOKLOOP_MAX_CONTEXT_TOKENS", "1200")
        .env("HOOKLOOP_MAX_OUTPUT_TOKENS", "100")
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback");
    setup(&mut command);
    command.output().expect("run hookloop")
}

fn transcript_show(record: &Path) -> Value {
    let out = Command::new(loopback::hookloop())
        .args(["transcript", "show", "--json"])
        .arg(record)
        .env_remove("HOOKLOOP_LOG")
        .output()
        .expect("run hookloop transcript show");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("transcript show --json prints JSON")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// An attribute of a span as Phoenix gives it back: flat (`gen_ai.tool.name`), or nested by
/// the dots of its name.
fn attr(span: &Value, key: &str) -> Value {
    lookup(&span["attributes"], key)
}

/// An integer attribute: OTLP's JSON form (and Phoenix's API) gives 64-bit integers as strings.
/// An attribute that holds JSON in a string (the opt-in message content).
fn json_attr(span: &Value, key: &str) -> Value {
    let text = attr(span, key);
    let text = text
        .as_str()
        .unwrap_or_else(|| panic!("no {key} on {span}"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{key} is not JSON ({e}): {text}"))
}

fn int(value: Value) -> Option<u64> {
    value
        .as_u64()
        .or_else(|| value.as_str().and_then(|s| s.parse().ok()))
}

fn event<'a>(span: &'a Value, name: &str) -> &'a Value {
    span["events"]
        .as_array()
        .and_then(|events| events.iter().find(|e| e["name"] == name))
        .unwrap_or_else(|| panic!("no event {name} on {span}"))
}

fn event_attr(event: &Value, key: &str) -> Value {
    lookup(&event["attributes"], key)
}

fn lookup(attributes: &Value, key: &str) -> Value {
    if let Some(value) = attributes.get(key) {
        return value.clone();
    }
    let mut at = attributes;
    for part in key.split('.') {
        match at.get(part) {
            Some(next) => at = next,
            None => return Value::Null,
        }
    }
    at.clone()
}

/// The spans of one session, by id.
struct Trace<'a> {
    spans: &'a [Value],
    by_id: HashMap<&'a str, &'a Value>,
}

impl<'a> Trace<'a> {
    fn new(spans: &'a [Value]) -> Self {
        let by_id = spans
            .iter()
            .filter_map(|s| Some((s["context"]["span_id"].as_str()?, s)))
            .collect();
        Self { spans, by_id }
    }

    fn named(&self, name: &str) -> Vec<&'a Value> {
        self.spans.iter().filter(|s| s["name"] == name).collect()
    }

    fn one(&self, name: &str) -> &'a Value {
        let named = self.named(name);
        assert_eq!(named.len(), 1, "one span {name}: {:?}", self.spans);
        named[0]
    }

    fn parent(&self, span: &Value) -> &'a Value {
        span["parent_id"]
            .as_str()
            .and_then(|id| self.by_id.get(id).copied())
            .unwrap_or_else(|| panic!("no parent of {span}"))
    }

    fn children(&self, span: &Value) -> Vec<&'a Value> {
        let id = &span["context"]["span_id"];
        self.spans
            .iter()
            .filter(|s| &s["parent_id"] == id)
            .collect()
    }
}

/// A scratch directory, removed at the end.
struct Scratch {
    path: PathBuf,
}

impl Scratch {
    fn new(name: &str) -> Self {
        let path = std::env::temp_dir().join(format!(
            "hookloop-{name}-{}-{}",
            std::process::id(),
            fastrand::u32(..)
        ));
        std::fs::create_dir_all(&path).unwrap();
        Self { path }
    }

    /// `.mcp.json` with the `mem` test server: `_Stop` objects once then is quiet.
    fn mcp_config(&self, log: &Path) -> PathBuf {
        let server = json!({
            "command": TEST_SERVER,
            "env": {
                "TS_HOOKS": "_Stop",
                "TS_STOP": "say:check the text once more|empty",
                "TS_LOG": log,
            },
        });
        let path = self.path.join("mcp.json");
        std::fs::write(&path, json!({"mcpServers": {"mem": server}}).to_string()).unwrap();
        path
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// A Phoenix server of this test alone: its own ports, its own working directory.
struct Phoenix {
    child: Child,
    port: u16,
    project: String,
    _dir: Scratch,
    /// One Phoenix at a time: two starting at once on a loaded 2-core machine each took over
    /// three minutes.
    _turn: MutexGuard<'static, ()>,
}

/// Taken by each [`Phoenix`] for its life.
static PHOENIX_TURN: Mutex<()> = Mutex::new(());

impl Phoenix {
    /// Starts Phoenix and waits until it answers; `None` (said in one line) when
    /// `HOOKLOOP_PHOENIX` is unset.
    fn start(project: &str) -> Option<Self> {
        let Some(phoenix) = std::env::var_os("HOOKLOOP_PHOENIX") else {
            println!(
                "skipped: HOOKLOOP_PHOENIX is unset (.ci/setup.d/50-phoenix.sh installs Phoenix)"
            );
            return None;
        };
        let turn = PHOENIX_TURN.lock().unwrap_or_else(PoisonError::into_inner);
        let dir = Scratch::new("phoenix");
        let port = free_port();
        let grpc = free_port();
        let log = std::fs::File::create(dir.path.join("phoenix.log")).unwrap();
        let child = Command::new(phoenix)
            .arg("serve")
            .current_dir(&dir.path)
            .env("PHOENIX_WORKING_DIR", &dir.path)
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", port.to_string())
            .env("PHOENIX_GRPC_PORT", grpc.to_string())
            .env("PHOENIX_TELEMETRY_ENABLED", "false")
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start phoenix");
        let phoenix = Self {
            child,
            port,
            project: format!("hookloop-{project}"),
            _dir: dir,
            _turn: turn,
        };
        let deadline = Instant::now() + PHOENIX_START;
        while http_get(port, "/healthz").is_none_or(|(status, _)| status != 200) {
            assert!(
                Instant::now() < deadline,
                "phoenix did not start within {PHOENIX_START:?}: {}",
                phoenix.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
        Some(phoenix)
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self._dir.path.join("phoenix.log")).unwrap_or_default()
    }

    /// The project's spans, read again until `done` holds of them (the collector ingests in
    /// the background).
    fn spans_until(&self, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let deadline = Instant::now() + SPANS_ARRIVE;
        loop {
            let path = format!("/v1/projects/{}/spans?limit=1000", self.project);
            let spans = match http_get(self.port, &path) {
                Some((200, body)) => serde_json::from_str::<Value>(&body)
                    .ok()
                    .and_then(|v| v["data"].as_array().cloned())
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            if done(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "the spans did not arrive within {SPANS_ARRIVE:?}: {spans:?}\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port on 127.0.0.1")
}

/// A GET on 127.0.0.1: the status and the body, or `None` when nothing answers.
fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .ok()?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAccept: application/json\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).ok()?;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let body = &raw[split + 4..];
    let status = head.split_whitespace().nth(1)?.parse().ok()?;
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_vec()
    };
    Some((status, String::from_utf8_lossy(&body).into_owned()))
}

fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = body.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&body[..end]);
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        let rest = &body[end + 2..];
        if size == 0 || rest.len() < size {
            break;
        }
        out.extend_from_slice(&rest[..size]);
        body = rest[size..].strip_prefix(b"\r\n").unwrap_or(&rest[size..]);
    }
    out
}

#[test]
fn without_opt_in_failed_spans_carry_a_class_and_a_fixed_description_only() {
    // A tool's error output and a hook's error text reach the spans' status only with the
    // operator's opt-in to content.
    let sent = |capture: bool| {
        let collector = Collector::start();
        let scratch = Scratch::new("otel-fail");
        let server = json!({
            "command": TEST_SERVER,
            "env": {"TS_HOOKS": "_Stop", "TS_STOP": "error:hook-words-of-the-session|empty"},
        });
        let config = scratch.path.join("mcp.json");
        std::fs::write(&config, json!({"mcpServers": {"mem": server}}).to_string()).unwrap();
        let provider = FakeProvider::start(|request| {
            if after_tool(request) {
                Reply::text("done")
            } else {
                Reply::tool("mem__fail", json!({}))
            }
        });
        let out = run_session(&scratch, &provider, &config, None, |command| {
            command.env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.base_url());
            if capture {
                command.env("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true");
            }
        });
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        collector.bodies_until(|sent| {
            contains(sent, "execute_tool mem__fail") && contains(sent, "hookloop.hook _Stop")
        })
    };
    let plain = sent(false);
    assert!(contains(&plain, "the tool reported an error"));
    assert!(contains(&plain, "the hook reported an error"));
    assert!(!contains(&plain, "it failed"), "the tool's error output");
    assert!(
        !contains(&plain, "hook-words-of-the-session"),
        "the hook's text: {}",
        String::from_utf8_lossy(&plain)
    );
    // With the opt-in the same run says them: the check above can see them.
    let captured = sent(true);
    assert!(contains(&captured, "it failed"));
    assert!(contains(&captured, "hook-words-of-the-session"));
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

/// An OTLP/HTTP collector on 127.0.0.1 that answers every export with 200 and keeps the raw
/// request bodies (protobuf, whose strings are their UTF-8 bytes).
struct Collector {
    port: u16,
    bodies: std::sync::Arc<Mutex<Vec<u8>>>,
}

impl Collector {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let bodies = std::sync::Arc::new(Mutex::new(Vec::new()));
        let kept = bodies.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let kept = kept.clone();
                std::thread::spawn(move || serve_exports(stream, &kept));
            }
        });
        Self { port, bodies }
    }

    fn base_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn bodies_until(&self, done: impl Fn(&[u8]) -> bool) -> Vec<u8> {
        let deadline = Instant::now() + SPANS_ARRIVE;
        loop {
            let bodies = self.bodies.lock().unwrap().clone();
            if done(&bodies) {
                return bodies;
            }
            assert!(
                Instant::now() < deadline,
                "the spans did not arrive within {SPANS_ARRIVE:?}: {}",
                String::from_utf8_lossy(&bodies)
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Reads HTTP/1.1 requests off one connection, keeping each body, answering each with 200.
fn serve_exports(mut stream: TcpStream, kept: &Mutex<Vec<u8>>) {
    let mut buf = Vec::new();
    loop {
        let head_end = loop {
            if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
        let length: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < head_end + length {
            let mut chunk = [0u8; 8192];
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        kept.lock()
            .unwrap()
            .extend_from_slice(&buf[head_end..head_end + length]);
        buf.drain(..head_end + length);
        let answer =
            "HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n";
        if stream.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}
