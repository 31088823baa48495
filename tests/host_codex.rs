//! The real Codex CLI (`@openai/codex`, pinned by `.ci/setup.d/45-bridge-hosts.sh`), run
//! headless (`codex exec`) and offline with a custom model provider on 127.0.0.1, and
//! `hookloop mcp proxy --name todo -- hookloop todo-server` as its MCP server. This Codex
//! speaks only the Responses API to a custom provider (`wire_api = "chat"` is refused), so the
//! fake model streams Responses events. What the fake received shows what the host did: its
//! tool list holds the todo server's tools and no hook, and the model's call reached the real
//! server through the proxy.
//!
//! Needs `HOOKLOOP_CODEX_BIN`; without it each test prints one line and passes.

mod binary;
mod hosts;
mod support;

use std::path::Path;

use serde_json::{Value, json};
use support::loopback::{Captured, Loopback, Reply};

use hosts::{OBJECTION, Scratch};

/// A Responses answer with these output items.
fn response(n: u32, output: Value) -> Reply {
    Reply::json(&json!({
        "id": format!("resp_{n}"), "object": "response", "created_at": 1, "status": "completed",
        "model": "test-model", "output": output,
        "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
                  "output_tokens": 12, "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": 112},
    }))
}

/// A call of the todo server's `add`: Codex offers an MCP server's tools as a namespace, and
/// the model names the tool and its namespace apart.
fn add(n: u32, call_id: &str, text: &str) -> Reply {
    response(
        n,
        json!([{"type": "function_call", "id": format!("fc_{n}"), "call_id": call_id,
                "namespace": "mcp__todo", "name": "add",
                "arguments": json!({"text": text}).to_string(), "status": "completed"}]),
    )
}

fn message(n: u32, text: &str) -> Reply {
    response(
        n,
        json!([{"type": "message", "id": format!("msg_{n}"), "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}]}]),
    )
}

/// Codex's config.toml: the loopback provider, the proxied todo server with its tools approved
/// (exec never asks), and every switch that keeps Codex to 127.0.0.1.
fn config(model: &Loopback, scratch: &Scratch, hooks: &str) -> String {
    config_with(model, scratch, hosts::proxied_todo_server(), hooks)
}

/// [`config`] with the todo server run as `(command, args)`.
fn config_with(
    model: &Loopback,
    scratch: &Scratch,
    (command, args): (String, Vec<String>),
    hooks: &str,
) -> String {
    let args: Vec<Value> = args.into_iter().map(Value::String).collect();
    format!(
        r#"model = "test-model"
model_provider = "loopback"
check_for_update_on_startup = false

[model_providers.loopback]
name = "loopback"
base_url = "{url}/v1"
wire_api = "responses"
env_key = "HOOKLOOP_TEST_KEY"

[analytics]
enabled = false

# The plugin marketplace's sync (a git clone from github.com, then api.github.com and
# chatgpt.com) is the only traffic this version sends on its own; this switch stops all of it.
[features]
plugins = false

[mcp_servers.todo]
command = {command}
args = {args}
default_tools_approval_mode = "approve"

[mcp_servers.todo.env]
XDG_RUNTIME_DIR = {runtime}
{hooks}"#,
        url = model.url(),
        command = Value::String(command),
        args = Value::Array(args),
        runtime = Value::String(scratch.runtime().display().to_string()),
    )
}

/// Runs `codex exec` with `config` in a fresh CODEX_HOME (`--strict-config`, so a switch this
/// version does not know is an error, not silently ignored). The session is kept there, not
/// ephemeral, so hook events name its transcript as they do for a user. Returns the request bodies the
/// model received, each checked.
async fn run_codex(bin: &Path, scratch: &Scratch, model: &Loopback, config: &str) -> Vec<Value> {
    let codex_home = codex_home(scratch);
    std::fs::write(codex_home.join("config.toml"), config).unwrap();
    run_codex_as_configured(bin, scratch, model, &[("MCP_HOOK_SERVERS", "todo")]).await
}

/// The scratch tree's CODEX_HOME, made.
fn codex_home(scratch: &Scratch) -> std::path::PathBuf {
    let codex_home = scratch.root.join("codex-home");
    std::fs::create_dir_all(&codex_home).unwrap();
    codex_home
}

/// Runs `codex exec` with the config.toml already in the scratch tree's CODEX_HOME, with
/// `envs` beside the test's own; returns the request bodies the model received, each checked.
async fn run_codex_as_configured(
    bin: &Path,
    scratch: &Scratch,
    model: &Loopback,
    envs: &[(&str, &str)],
) -> Vec<Value> {
    let codex_home = codex_home(scratch);
    let outside = Loopback::start([]).await;
    let mut codex = hosts::host_command(bin, scratch, &outside);
    codex
        .env("CODEX_HOME", &codex_home)
        .env("HOOKLOOP_TEST_KEY", "sk-test-key")
        .envs(envs.iter().copied())
        .args(["exec", "--strict-config", "--skip-git-repo-check"])
        .args(["--color", "never", "--dangerously-bypass-hook-trust"])
        .arg("Add a todo: write tests.");
    hosts::run(codex, "codex exec").await;
    hosts::assert_offline(&outside);
    model.requests().iter().enumerate().map(checked).collect()
}

/// A request's body, checked: the Responses route, the dummy key, and the pairing invariant.
fn checked((n, request): (usize, &Captured)) -> Value {
    assert_eq!(request.method, "POST");
    assert_eq!(request.path, "/v1/responses");
    assert_eq!(request.header("authorization"), Some("Bearer sk-test-key"));
    let body = request.json();
    assert_eq!(body["stream"], true);
    let (mut calls, mut answers) = (Vec::new(), Vec::new());
    for item in body["input"].as_array().expect("input") {
        match item["type"].as_str() {
            Some("function_call") => calls.push(item["call_id"].as_str().unwrap().to_owned()),
            Some("function_call_output") => {
                answers.push(item["call_id"].as_str().unwrap().to_owned());
            }
            _ => {}
        }
    }
    hosts::assert_paired(&calls, &answers, n);
    body
}

/// The `function_call_output` item answering `call_id` in a request, if any.
fn call_output<'a>(body: &'a Value, call_id: &str) -> Option<&'a Value> {
    body["input"]
        .as_array()?
        .iter()
        .find(|i| i["type"] == "function_call_output" && i["call_id"] == call_id)
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_sees_the_todo_tools_but_no_hook_and_its_call_reaches_the_server() {
    let Some(bin) = hosts::host_bin("HOOKLOOP_CODEX_BIN") else {
        return;
    };
    let scratch = Scratch::new("codex-tools");
    let model = Loopback::start([add(1, "call_add", "write tests"), message(2, "Added.")]).await;
    let bodies = run_codex(&bin, &scratch, &model, &config(&model, &scratch, "")).await;

    assert_eq!(bodies.len(), 2, "one call, one answer after it");
    hosts::assert_todo_tools_without_hooks(&bodies[0]["tools"]);
    hosts::assert_todo_tools_without_hooks(&bodies[1]["tools"]);
    assert!(call_output(&bodies[0], "call_add").is_none());
    let output = call_output(&bodies[1], "call_add").expect("the call's result came back");
    assert!(hosts::mentions(output, "added #1"), "{output}");
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_s_live_connection_answers_stop_with_the_todo_its_model_added() {
    let Some(bin) = hosts::host_bin("HOOKLOOP_CODEX_BIN") else {
        return;
    };
    let scratch = Scratch::new("codex-live");
    let model = Loopback::start([
        add(1, "call_add", "write tests"),
        message(2, "Added.").after(hosts::HELD),
    ])
    .await;
    // While the model holds its answer to the call's result, the todo is on the server the host
    // started: `_Stop` through the socket sees it.
    let config = config(&model, &scratch, "");
    let (bodies, answer) = tokio::join!(
        run_codex(&bin, &scratch, &model, &config),
        hosts::hook_once(&model, &scratch, 2, "_Stop"),
    );
    assert_eq!(answer["text"], OBJECTION, "{answer}");
    assert_eq!(answer["isError"], false, "{answer}");
    assert_eq!(bodies.len(), 2);
}

#[tokio::test(flavor = "multi_thread")]
async fn codex_stop_hook_objects_with_the_open_todo_until_the_budget_is_spent() {
    let Some(bin) = hosts::host_bin("HOOKLOOP_CODEX_BIN") else {
        return;
    };
    let scratch = Scratch::new("codex-stop");
    // The model adds a todo and never completes it, calling a tool after each objection (so no
    // end of turn comes right after one): `_Stop` objects at every end of turn, and after the
    // default budget of 3 objections the host stops whatever the server says. PostToolUse is
    // registered too: it is how the hook command learns the model acted since an objection.
    let model = Loopback::start([
        add(1, "call_add", "write tests"),
        message(2, "Added."),
        add(3, "call_2", "and docs"),
        message(4, "Still open."),
        add(5, "call_3", "and a bench"),
        message(6, "Still open."),
        add(7, "call_4", "and a note"),
        message(8, "Still open."),
    ])
    .await;
    let command = Value::String(hosts::hook_command("codex"));
    let hooks = format!(
        "\n[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ntype = \"command\"\ncommand = {command}\ntimeout = 30\n\
         \n[[hooks.PostToolUse]]\nmatcher = \"*\"\n[[hooks.PostToolUse.hooks]]\ntype = \"command\"\ncommand = {command}\ntimeout = 30\n"
    );
    let bodies = run_codex(&bin, &scratch, &model, &config(&model, &scratch, &hooks)).await;

    assert_eq!(
        bodies.len(),
        8,
        "the turn, its answer, then a tool call and an end per objection"
    );
    assert_eq!(model.remaining(), 0);
    for (n, body) in bodies.iter().enumerate() {
        hosts::assert_todo_tools_without_hooks(&body["tools"]);
        let objected = hosts::mentions(&body["input"], OBJECTION);
        assert_eq!(objected, n >= 2, "request {n}: objection seen {objected}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn after_hooks_install_codex_s_stop_hook_keeps_it_working_within_the_budget() {
    let Some(bin) = hosts::host_bin("HOOKLOOP_CODEX_BIN") else {
        return;
    };
    let scratch = Scratch::new("codex-install");
    let model = Loopback::start([
        add(1, "call_add", "write tests"),
        message(2, "Added."),
        add(3, "call_2", "and docs"),
        message(4, "Still open."),
        add(5, "call_3", "and a bench"),
        message(6, "Still open."),
        add(7, "call_4", "and a note"),
        message(8, "Still open."),
    ])
    .await;
    // The person's config.toml as it was: the todo server run plainly. `hookloop hooks install
    // codex --user` (CODEX_HOME) puts it behind the proxy and writes the hooks.
    let plain = (
        binary::hookloop().to_owned(),
        vec!["todo-server".to_owned()],
    );
    let original = config_with(&model, &scratch, plain, "");
    let codex_home = codex_home(&scratch);
    std::fs::write(codex_home.join("config.toml"), &original).unwrap();
    let envs = [("CODEX_HOME", codex_home.as_path())];
    hosts::hooks_cli(&scratch, &["install", "codex", "--user"], &envs);
    let again = hosts::hooks_cli(&scratch, &["install", "codex", "--user"], &envs);
    assert!(again.contains("nothing to change"), "{again}");

    // No MCP_HOOK_SERVERS in the host's environment: the hook command's line carries it.
    let bodies = run_codex_as_configured(&bin, &scratch, &model, &[]).await;
    assert_eq!(
        bodies.len(),
        8,
        "the turn, its answer, then a tool call and an end per objection"
    );
    assert_eq!(model.remaining(), 0);
    for (n, body) in bodies.iter().enumerate() {
        hosts::assert_todo_tools_without_hooks(&body["tools"]);
        let objected = hosts::mentions(&body["input"], OBJECTION);
        assert_eq!(objected, n >= 2, "request {n}: objection seen {objected}");
    }

    hosts::hooks_cli(&scratch, &["uninstall", "codex", "--user"], &envs);
    let back = std::fs::read_to_string(codex_home.join("config.toml")).unwrap();
    assert_eq!(
        back, original,
        "uninstall gives the person's file back byte for byte"
    );
}
