//! Transcript tools on a session recorded from a real `hookloop run`: the loopback
//! OpenAI-shaped model and the real todo MCP server. The recording is shown, replayed as a
//! suite, checked, and forked onto the live model at a prompt and at a `_Stop` round.

mod loopback;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hookloop::Hook;
use hookloop::transcript::{EntryKind, SessionView, Transcript, check_dir_with};
use loopback::{FakeProvider, Reply};
use serde_json::{Value, json};

/// The model of the story: adds a todo, says it is done, is objected to, completes the todo,
/// and is done. It answers from the last message it is sent, so a fork finds it as it was.
fn todo_model() -> FakeProvider {
    FakeProvider::start(|request| {
        let last = request["messages"]
            .as_array()
            .and_then(|messages| messages.last())
            .map(Value::to_string)
            .unwrap_or_default();
        if last.contains("added #1") {
            Reply::text("Done.")
        } else if last.contains("write docs") {
            Reply::text("Docs written too.")
        } else if last.contains("open: write tests") {
            Reply::tool("todo__complete", json!({"id": 1}))
        } else if last.contains("completed #1") {
            Reply::text("Tests written; done.")
        } else {
            Reply::tool("todo__add", json!({"text": "write tests"}))
        }
    })
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hookloop-run-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// `hookloop ARGS` against `provider`, with the todo server configured and its hooks on.
fn hookloop(dir: &Path, provider: &FakeProvider, args: &[&str]) -> Output {
    let config = dir.join("mcp.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"todo": {"command": loopback::hookloop(), "args": ["todo-server"]}}})
            .to_string(),
    )
    .unwrap();
    let mut command = Command::new(loopback::hookloop());
    command.args(args).current_dir(dir);
    for var in [
        "SPROUT_AGENT_HOOK_TIMEOUT_MS",
        "SPROUT_AGENT_STOP_MAX_REJECTIONS",
        "HOOKLOOP_MAX_ROUNDS",
        "HOOKLOOP_PROVIDER",
        "HOOKLOOP_LOG",
    ] {
        command.env_remove(var);
    }
    command
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("OPENAI_API_KEY", "test-key")
        .env("HOOKLOOP_MODEL", "loopback")
        .env("MCP_HOOK_SERVERS", "todo")
        .output()
        .expect("run hookloop")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Records the story with `hookloop run --record`, into `dir/run.jsonl`.
fn record_run(dir: &Path, provider: &FakeProvider) -> PathBuf {
    let transcript = dir.join("run.jsonl");
    let out = hookloop(
        dir,
        provider,
        &[
            "run",
            "--mcp-config",
            "mcp.json",
            "--record",
            "run.jsonl",
            "Write the tests.",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout).trim(), "Tests written; done.");
    transcript
}

#[test]
fn a_recorded_run_is_shown_replayed_as_a_suite_and_checked() {
    let dir = tempdir("show");
    let provider = todo_model();
    let transcript = record_run(&dir, &provider);

    let view = SessionView::build(&Transcript::read(&transcript).unwrap());
    assert!(view.end.is_complete(), "{:?}", view.end);
    assert_eq!(view.rounds(), 4);
    // Two `_Stop` rounds (one objection, then none); the todo server's `_SessionStart` and
    // `_PreToolUse` run too, one `_PreToolUse` subject per tool call.
    assert_eq!(view.hook_rounds_of(Hook::Stop), 2);
    let hooks: Vec<String> = view
        .entries
        .iter()
        .filter_map(|entry| match &entry.kind {
            EntryKind::HookRound { hook, .. } => Some(hook.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(
        hooks,
        [
            "_SessionStart",
            "_PreToolUse",
            "_Stop",
            "_PreToolUse",
            "_Stop"
        ]
    );
    assert_eq!(view.hook_rounds(), hooks.len());
    assert_eq!(view.objections(), 1);
    let shown = view.to_text();
    assert!(
        shown.contains("⚑ _Stop objection from todo (2 left in the budget)"),
        "{shown}"
    );
    assert!(
        shown.contains("todo__add {\"text\":\"write tests\"}"),
        "{shown}"
    );

    let out = hookloop(
        &dir,
        &provider,
        &["transcript", "show", "--html", "run.html", "run.jsonl"],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let page = std::fs::read_to_string(dir.join("run.html")).unwrap();
    // The page and the report quote the session: the user's alone, as the transcript is.
    assert_eq!(mode(&dir.join("run.html")), 0o600);
    assert_eq!(page.matches("<rect class=\"round\"").count(), 4);
    assert_eq!(page.matches("<circle class=\"objection\"").count(), 1);

    let out = hookloop(&dir, &provider, &["replay", "--junit", "out.xml", "."]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).contains("1 transcript(s): 1 passed"),
        "{out:?}"
    );
    assert_eq!(mode(&dir.join("out.xml")), 0o600);
    check_dir_with(&dir, false).expect("the recording checks");
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// The records of a transcript file, without the header.
fn record_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_fork_at_a_stop_round_with_a_new_objection_goes_on_live_and_replays_as_one() {
    let dir = tempdir("fork-stop");
    let provider = todo_model();
    let transcript = record_run(&dir, &provider);
    let recorded = Transcript::read(&transcript).unwrap();
    let first_stop = recorded
        .records
        .iter()
        .position(|r| {
            serde_json::to_string(r)
                .unwrap()
                .contains(r#""hook":"_Stop""#)
        })
        .expect("a _Stop round");
    let requests_before = provider.requests().len();

    let out = hookloop(
        &dir,
        &provider,
        &[
            "replay",
            "run.jsonl",
            "--until",
            "stop:1",
            "--live",
            "--mcp-config",
            "mcp.json",
            "--objection",
            "Please also write docs.",
            "--record",
            "fork.jsonl",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout).trim(), "Docs written too.", "{out:?}");
    // The live model was asked once, and was sent the new objection.
    let requests = provider.requests();
    assert_eq!(requests.len(), requests_before + 1);
    assert!(
        requests[requests_before]
            .to_string()
            .contains("Please also write docs.")
    );

    // The prefix is copied as recorded, up to the round; then the new answer.
    let fork = dir.join("fork.jsonl");
    let lines = record_lines(&fork);
    assert_eq!(
        lines[..=first_stop],
        record_lines(&transcript)[..=first_stop]
    );
    assert!(
        lines[first_stop + 1].contains("Please also write docs."),
        "{lines:?}"
    );
    let out = hookloop(&dir, &provider, &["replay", "fork.jsonl"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let view = SessionView::build(&Transcript::read(&fork).unwrap());
    assert!(view.end.is_complete());
    assert_eq!(view.objections(), 1);
}

#[test]
fn a_fork_before_a_prompt_asks_it_again_of_the_live_model() {
    let dir = tempdir("fork-prompt");
    let provider = todo_model();
    record_run(&dir, &provider);
    let requests_before = provider.requests().len();
    let out = hookloop(
        &dir,
        &provider,
        &[
            "replay",
            "run.jsonl",
            "--until",
            "prompt:1",
            "--live",
            "--mcp-config",
            "mcp.json",
            "--record",
            "again.jsonl",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The whole story again, live: a fresh todo server, the same model.
    assert_eq!(text(&out.stdout).trim(), "Tests written; done.");
    assert_eq!(provider.requests().len(), requests_before * 2);
    let out = hookloop(&dir, &provider, &["replay", "again.jsonl"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
}

#[test]
fn a_fork_where_answers_are_awaited_names_the_record_to_fork_at() {
    let dir = tempdir("fork-mid");
    let provider = todo_model();
    let transcript = record_run(&dir, &provider);
    let recorded = Transcript::read(&transcript).unwrap();
    let reply = recorded
        .records
        .iter()
        .position(|r| serde_json::to_string(r).unwrap().contains("llm_replied"))
        .expect("a reply");
    let out = hookloop(
        &dir,
        &provider,
        &[
            "replay",
            "run.jsonl",
            "--until",
            &reply.to_string(),
            "--live",
            "--mcp-config",
            "mcp.json",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("fork at record {} instead", reply - 1)),
        "{stderr}"
    );
    // An objection needs a _Stop round at the point.
    let out = hookloop(
        &dir,
        &provider,
        &[
            "replay",
            "run.jsonl",
            "--until",
            "prompt:1",
            "--live",
            "--objection",
            "x",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("is not one"), "{out:?}");
}
