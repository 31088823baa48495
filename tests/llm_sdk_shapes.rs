//! Every request body the snapshot tests pin (as sent whole and as sent streamed), the answers
//! the loopback tests send, and the stream events the loopback server makes of them, checked
//! against the official OpenAI and Anthropic SDKs' type definitions (Python, pydantic).
//!
//! Runs when `HOOKLOOP_SDK_PYTHON` names a Python with the `openai` and `anthropic` packages;
//! CI's `.ci/setup.d/40-llm-sdk-shapes.sh` installs them and sets it. Elsewhere it says it was
//! skipped.

mod support;

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::{Value, json};

/// The bodies in one snapshot file: one, or several after `// request N` lines.
fn snapshot_bodies(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    // The insta header is the first `---`-delimited block.
    let content = text.splitn(3, "---\n").nth(2).expect("an insta snapshot");
    content
        .split("// request ")
        .map(|part| match part.split_once('\n') {
            Some((number, rest)) if number.trim().parse::<u32>().is_ok() => rest,
            _ => part,
        })
        .filter(|part| !part.trim().is_empty())
        .map(|part| serde_json::from_str(part).unwrap_or_else(|e| panic!("{path:?}: {e}")))
        .collect()
}

fn answers() -> Vec<(&'static str, &'static str, Value)> {
    let openai = |name, message, finish| {
        (
            "openai",
            name,
            support::openai_completion(message, finish, 100),
        )
    };
    let anthropic = |name, content, stop| {
        (
            "anthropic",
            name,
            support::anthropic_message(content, stop, 100),
        )
    };
    vec![
        openai(
            "text",
            json!({"role": "assistant", "content": "Hello.", "refusal": null}),
            "stop",
        ),
        openai(
            "tool calls",
            json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "fs__read", "arguments": "{\"path\":\"a\"}"}},
                {"id": "call_2", "type": "function", "function": {"name": "fs__read", "arguments": "{bad"}}
            ]}),
            "tool_calls",
        ),
        openai(
            "refusal",
            json!({"role": "assistant", "content": null, "refusal": "I won't."}),
            "stop",
        ),
        openai(
            "length",
            json!({"role": "assistant", "content": "cut"}),
            "length",
        ),
        openai(
            "filtered",
            json!({"role": "assistant", "content": ""}),
            "content_filter",
        ),
        anthropic(
            "text",
            json!([{"type": "text", "text": "Hello."}]),
            "end_turn",
        ),
        anthropic(
            "tool use",
            json!([
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "toolu_1", "name": "fs__read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "fs__read", "input": {"path": "b"}}
            ]),
            "tool_use",
        ),
        anthropic("refusal", json!([]), "refusal"),
        anthropic(
            "pause",
            json!([{"type": "text", "text": "Working"}]),
            "pause_turn",
        ),
        anthropic(
            "stop sequence",
            json!([{"type": "text", "text": "x"}]),
            "stop_sequence",
        ),
        anthropic(
            "max tokens",
            json!([{"type": "text", "text": "x"}]),
            "max_tokens",
        ),
    ]
}

#[test]
fn request_and_answer_shapes_match_the_official_sdks() {
    let Ok(python) = std::env::var("HOOKLOOP_SDK_PYTHON") else {
        // CI must run it: a skip there would hide a broken setup script.
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but HOOKLOOP_SDK_PYTHON is not: .ci/setup.d/40-llm-sdk-shapes.sh did not run"
        );
        eprintln!("skipped: HOOKLOOP_SDK_PYTHON is not set (CI sets it)");
        return;
    };
    let mut cases = Vec::new();
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    let mut snapshots: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    snapshots.sort();
    for path in snapshots {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let dialect = if name.starts_with("llm_openai__") {
            "openai"
        } else if name.starts_with("llm_anthropic__") {
            "anthropic"
        } else {
            continue;
        };
        for (i, body) in snapshot_bodies(&path).into_iter().enumerate() {
            let mut streamed = body.clone();
            streamed["stream"] = json!(true);
            if dialect == "openai" {
                streamed["stream_options"] = json!({"include_usage": true});
            }
            cases.push(json!({"dialect": dialect, "kind": "request",
                              "name": format!("{name} #{}", i + 1), "body": body}));
            cases.push(json!({"dialect": dialect, "kind": "stream_request",
                              "name": format!("{name} #{} streamed", i + 1), "body": streamed}));
        }
    }
    let requests = cases.len();
    assert!(requests >= 15, "only {requests} request bodies found");
    for (dialect, name, body) in answers() {
        let events = match dialect {
            "openai" => support::loopback::openai_events(&body),
            _ => support::loopback::anthropic_events(&body),
        };
        for (i, (event, data)) in events.into_iter().enumerate() {
            // The SDKs stop at `[DONE]` and skip `ping` before parsing; so does the client.
            if data == "[DONE]" || event == "ping" {
                continue;
            }
            let data: Value = serde_json::from_str(&data).unwrap();
            if !event.is_empty() {
                assert_eq!(data["type"], event, "the event name is the data's type");
            }
            cases.push(json!({"dialect": dialect, "kind": "event",
                              "name": format!("{name} event {i}"), "body": data}));
        }
        cases.push(json!({"dialect": dialect, "kind": "answer", "name": name, "body": body}));
    }

    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sdk/check_shapes.py");
    let mut child = Command::new(&python)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    let mut stdin = child.stdin.take().unwrap();
    for case in &cases {
        writeln!(stdin, "{case}").unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "SDK check failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stdout.contains(&format!("{} passed, 0 failed", cases.len())),
        "{stdout}"
    );
    eprintln!("{stdout}");
}
