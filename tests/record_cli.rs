//! `hookloop run --record` and `hookloop replay` on records that could not be written whole.

mod loopback;

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Command;

use loopback::{FakeProvider, Reply};

fn hookloop(args: &[&str]) -> Command {
    let mut command = Command::new(loopback::hookloop());
    command.args(args);
    for var in [
        "MCP_HOOK_SERVERS",
        "HOOKLOOP_PROVIDER",
        "HOOKLOOP_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "HOOKLOOP_LOG",
        "HOOKLOOP_RECORD_DIR",
    ] {
        command.env_remove(var);
    }
    command.current_dir(std::env::temp_dir());
    command
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "hookloop-record-cli-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn run_exits_1_and_says_why_when_the_record_cannot_be_written_whole() {
    let provider = FakeProvider::start(|_| Reply::text("The answer is 42."));
    let dir = tempdir("fsize");
    let record = dir.join("run.jsonl");
    let mut command = hookloop(&["run", "--record", record.to_str().unwrap(), "hi"]);
    command
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback");
    // Files the child writes may not grow past 600 bytes: the header fits, the session's
    // records do not. Writes past the limit fail with EFBIG instead of raising SIGXFSZ.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: 600,
                rlim_max: 600,
            };
            if libc::setrlimit(libc::RLIMIT_FSIZE, &limit) != 0
                || libc::signal(libc::SIGXFSZ, libc::SIG_IGN) == libc::SIG_ERR
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = command.output().unwrap();
    let header = std::fs::read_to_string(&record).unwrap();
    assert!(header.len() <= 600 && header.starts_with('{'), "{header}");
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("the transcript is incomplete: could not write transcript"),
        "{stderr}"
    );
    // The answer itself still reached the user.
    assert_eq!(text(&out.stdout), "The answer is 42.\n");
}

#[test]
fn replay_of_a_cut_short_record_exits_1_unless_truncation_is_allowed() {
    let golden = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/transcripts/stop_objection_is_injected.jsonl"
    ))
    .unwrap();
    let dir = tempdir("cut");
    let cut = dir.join("cut.jsonl");
    std::fs::write(&cut, &golden[..golden.len() - 7]).unwrap();

    let out = hookloop(&["replay", cut.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(stderr.contains("the record is cut short"), "{stderr}");
    assert!(stderr.contains("--allow-truncated"), "{stderr}");

    let out = hookloop(&["replay", "--allow-truncated", cut.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).contains("the record is cut short"),
        "{out:?}"
    );
}

#[test]
fn redact_content_records_lengths_instead_of_words_and_is_refused_by_replay() {
    let provider = FakeProvider::start(|_| Reply::text("The launch code is 0000."));
    let dir = tempdir("redact");
    let record = dir.join("run.jsonl");
    let mut command = hookloop(&[
        "run",
        "--record",
        record.to_str().unwrap(),
        "--redact-content",
        "my secret plan",
    ]);
    command
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback");
    let out = command.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "The launch code is 0000.\n");
    let recorded = std::fs::read_to_string(&record).unwrap();
    assert!(!recorded.contains("secret plan"), "{recorded}");
    assert!(!recorded.contains("launch code"), "{recorded}");
    assert!(recorded.contains(r#""text":"[14 bytes]""#), "{recorded}");
    assert!(recorded.contains(r#""text":"[24 bytes]""#), "{recorded}");
    assert!(
        recorded.contains(r#""content_redacted":true"#),
        "{recorded}"
    );

    let out = hookloop(&["replay", record.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("redacted"), "{out:?}");
}

/// The README's row of the `hookloop run` exit-status table for `code`.
fn readme_exit_row(code: u8) -> String {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    readme
        .lines()
        .find(|line| line.starts_with(&format!("| {code} |")))
        .unwrap_or_else(|| panic!("no exit status {code} in the README"))
        .to_owned()
}

#[test]
fn the_readme_gives_exit_2_for_an_unreadable_config_as_the_binary_does() {
    let provider = FakeProvider::start(|_| Reply::text("x"));
    let dir = tempdir("config");
    let unreadable = dir.join("mcp.json");
    std::fs::write(&unreadable, "{ not json").unwrap();
    let out = hookloop(&["run", "--mcp-config", unreadable.to_str().unwrap(), "hi"])
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(readme_exit_row(2).contains("unreadable or invalid `--mcp-config`"));
    assert!(
        !readme_exit_row(1).contains("config"),
        "{}",
        readme_exit_row(1)
    );
}

#[test]
fn the_readme_says_what_a_transcript_redacts_and_what_it_records_verbatim() {
    let readme =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    assert!(!readme.contains("secret headers never written"));
    assert!(readme.contains("Everything else is recorded **verbatim**"));
    assert!(readme.contains("`--redact-content`"));
    let help = hookloop(&["run", "--help"]).output().unwrap();
    let help = text(&help.stdout);
    assert!(!help.contains("Secrets are never written"), "{help}");
    assert!(help.contains("--redact-content"), "{help}");
}

#[test]
fn a_recorded_subagent_replays_and_runs_against_live_tools_without_asking_for_agent() {
    let dir = tempdir("subagent");
    let config = dir.join("mcp.json");
    std::fs::write(
        &config,
        serde_json::json!({"mcpServers": {"todo": {"command": loopback::hookloop(), "args": ["todo-server"]}}})
            .to_string(),
    )
    .unwrap();
    // Requests are told apart by their first message: the prompt, or the subagent's task.
    let provider = FakeProvider::start(|request| {
        let child = loopback::first_user_text(request) == "List the todos.";
        match (child, loopback::after_tool(request)) {
            (true, false) => Reply::tool("todo__list", serde_json::json!({})),
            (true, true) => Reply::text("The list is empty."),
            (false, false) => Reply::tool(
                "agent",
                serde_json::json!({"description": "todos", "prompt": "List the todos."}),
            ),
            (false, true) => Reply::text("The subagent says the list is empty."),
        }
    });
    let record = dir.join("run.jsonl");
    let mut command = hookloop(&[
        "run",
        "--record",
        record.to_str().unwrap(),
        "--mcp-config",
        config.to_str().unwrap(),
        "How many todos?",
    ]);
    command
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .env("HOOKLOOP_SUBAGENTS", "1")
        .env("MCP_HOOK_SERVERS", "todo");
    let out = command.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let recorded = std::fs::read_to_string(&record).unwrap();
    // The subagent's call of `todo__list` is on its lane.
    assert!(
        recorded
            .lines()
            .any(|line| line.contains(r#""agent":"agent-1""#)
                && line.contains(r#""name":"todo__list""#)),
        "{recorded}"
    );

    let out = hookloop(&["replay", record.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        text(&out.stdout).contains("1 subagent(s) replayed"),
        "{out:?}"
    );

    // Live tools: the subagent lists the todos of a fresh server, as recorded; the `agent`
    // call is run as a subagent again, never sent to a server (which has no such tool).
    let out = hookloop(&[
        "replay",
        "--live-tools",
        "--mcp-config",
        config.to_str().unwrap(),
        record.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text(&out.stdout).contains("0 answer(s) drifted"), "{out:?}");
}

#[test]
fn an_old_file_named_by_record_or_html_is_made_mode_0600_before_it_is_written() {
    use std::os::unix::fs::PermissionsExt;
    let mode =
        |path: &std::path::Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
    let provider = FakeProvider::start(|_| Reply::text("The answer is 42."));
    let dir = tempdir("old-mode");
    let record = dir.join("run.jsonl");
    let page = dir.join("run.html");
    for old in [&record, &page] {
        std::fs::write(old, "left from before\n").unwrap();
        std::fs::set_permissions(old, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let mut command = hookloop(&["run", "--record", record.to_str().unwrap(), "my plan"]);
    command
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback");
    let out = command.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(
        std::fs::read_to_string(&record)
            .unwrap()
            .contains("my plan")
    );
    assert_eq!(mode(&record), 0o600);

    let out = hookloop(&[
        "transcript",
        "show",
        "--html",
        page.to_str().unwrap(),
        record.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(std::fs::read_to_string(&page).unwrap().contains("my plan"));
    assert_eq!(mode(&page), 0o600);
    std::fs::remove_dir_all(&dir).unwrap();
}
