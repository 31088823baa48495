//! The `hookloop` command line: help, configuration errors, and `run` against a loopback model
//! with real MCP servers.

mod loopback;

use std::process::{Command, Output};

use loopback::{FakeProvider, Reply};
use serde_json::{Value, json};

fn hookloop(args: &[&str]) -> Command {
    let mut command = Command::new(loopback::hookloop());
    command.args(args);
    for var in [
        "MCP_HOOK_SERVERS",
        "SPROUT_AGENT_HOOK_TIMEOUT_MS",
        "SPROUT_AGENT_STOP_MAX_REJECTIONS",
        "HOOKLOOP_MAX_ROUNDS",
        "HOOKLOOP_PROVIDER",
        "HOOKLOOP_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
        "HOOKLOOP_LOG",
    ] {
        command.env_remove(var);
    }
    // No `.mcp.json` from wherever the tests run.
    command.current_dir(std::env::temp_dir());
    command
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn with_provider(command: &mut Command, provider: &FakeProvider) {
    command
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback");
}

#[test]
fn help_names_every_command_and_run_documents_exit_statuses() {
    let out = hookloop(&["--help"]).output().unwrap();
    assert!(out.status.success());
    let help = text(&out.stdout);
    for word in ["demo", "run", "acp", "MCP_HOOK_SERVERS", "HOOKLOOP_MODEL"] {
        assert!(help.contains(word), "--help lacks {word}:\n{help}");
    }
    assert!(
        !help.contains("todo-server"),
        "the internal command is hidden"
    );
    let out = hookloop(&["run", "--help"]).output().unwrap();
    let help = text(&out.stdout);
    for word in [
        "--mcp-config",
        "--json",
        "Exit status",
        "130",
        "HOOKLOOP_MAX_ROUNDS",
    ] {
        assert!(help.contains(word), "run --help lacks {word}:\n{help}");
    }
    let out = hookloop(&["acp", "--help"]).output().unwrap();
    assert!(text(&out.stdout).contains("Agent Client Protocol"));
    let out = hookloop(&["demo", "--help"]).output().unwrap();
    assert!(text(&out.stdout).contains("SCRIPTED") || text(&out.stdout).contains("scripted"));
}

#[test]
fn an_invalid_variable_stops_start_up_with_its_name_and_exit_2() {
    for (var, value, args) in [
        ("SPROUT_AGENT_HOOK_TIMEOUT_MS", "soon", &["run", "hi"][..]),
        ("HOOKLOOP_MAX_ROUNDS", "-1", &["acp"][..]),
        ("HOOKLOOP_PROVIDER", "parrot", &["run", "hi"][..]),
        ("HOOKLOOP_LOG", "hookloop=[", &["run", "hi"][..]),
    ] {
        let out: Output = hookloop(args)
            .env("HOOKLOOP_MODEL", "m")
            .env("OPENAI_API_KEY", "k")
            .env(var, value)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {out:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(var), "{var}: {stderr}");
        assert!(out.stdout.is_empty(), "nothing on stdout: {out:?}");
    }
}

#[test]
fn a_hook_servers_entry_that_cannot_match_stops_start_up_naming_the_entry() {
    for (value, entry) in [("*,todo", "\"*\""), ("todo,a b", "\"a b\"")] {
        let out = hookloop(&["run", "hi"])
            .env("HOOKLOOP_MODEL", "m")
            .env("OPENAI_API_KEY", "k")
            .env("MCP_HOOK_SERVERS", value)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{value}: {out:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains("MCP_HOOK_SERVERS"), "{stderr}");
        assert!(stderr.contains(entry), "{stderr}");
    }
}

#[test]
fn a_hook_server_that_is_not_configured_is_a_warning_naming_it() {
    let provider = FakeProvider::start(|_| Reply::text("Done."));
    let mut command = hookloop(&["run", "go"]);
    with_provider(&mut command, &provider);
    let out = command
        .env("MCP_HOOK_SERVERS", "gatekeeper")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("gatekeeper") && stderr.contains("not configured"),
        "{stderr}"
    );
}

#[test]
fn replay_live_tools_warns_of_a_recorded_hook_server_that_is_not_configured() {
    let dir = tempdir();
    let transcript = dir.join("run.jsonl");
    let provider = FakeProvider::start(|_| Reply::text("Done."));
    let mut command = hookloop(&["run", "--record", transcript.to_str().unwrap(), "go"]);
    with_provider(&mut command, &provider);
    let out = command
        .env("MCP_HOOK_SERVERS", "gatekeeper")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    // The record's allowlist names `gatekeeper`; the servers given to the replay do not.
    let config = dir.join("mcp.json");
    std::fs::write(&config, json!({"mcpServers": {}}).to_string()).unwrap();
    let out = hookloop(&[
        "replay",
        "--live-tools",
        "--mcp-config",
        config.to_str().unwrap(),
        transcript.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains("gatekeeper") && stderr.contains("not configured"),
        "{stderr}"
    );
}

#[test]
fn run_prints_the_answer_on_stdout_and_progress_on_stderr() {
    let provider = FakeProvider::start(|_| Reply::text("The answer is 42."));
    let mut command = hookloop(&["run", "What", "is", "the", "answer?"]);
    with_provider(&mut command, &provider);
    let out = command.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "The answer is 42.\n");
    assert!(text(&out.stderr).contains("model: The answer is 42."));
    let request = &provider.requests()[0];
    assert_eq!(loopback::last_user_text(request), "What is the answer?");
}

#[test]
fn run_with_the_todo_server_shows_objections_and_json_events() {
    let dir = tempdir();
    let config = dir.join("mcp.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"todo": {"command": loopback::hookloop(), "args": ["todo-server"]}}})
            .to_string(),
    )
    .unwrap();
    // The model adds a todo, then ends its turn with it open: `_Stop` objects with the list,
    // and the model ends again (a declined objection).
    let turn = std::sync::atomic::AtomicUsize::new(0);
    let provider = FakeProvider::start(move |_| {
        match turn.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => Reply::tool("todo__add", json!({"text": "write the tests"})),
            1 => Reply::text("Done."),
            _ => Reply::text("Still done."),
        }
    });
    let mut command = hookloop(&[
        "run",
        "--json",
        "--mcp-config",
        config.to_str().unwrap(),
        "go",
    ]);
    with_provider(&mut command, &provider);
    let out = command.env("MCP_HOOK_SERVERS", "todo").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"hook_called"), "{kinds:?}");
    let objection = events
        .iter()
        .find(|e| e["event"] == "objection")
        .unwrap_or_else(|| panic!("no objection event: {kinds:?}"));
    assert_eq!(objection["server"], "todo", "{objection}");
    assert!(
        objection["text"]
            .as_str()
            .unwrap()
            .contains("write the tests"),
        "{objection}"
    );
    assert_eq!(kinds.last(), Some(&"answer"));
    assert_eq!(events.last().unwrap()["stop_reason"], "end_turn");
    assert_eq!(events.last().unwrap()["text"], "Still done.");
}

#[test]
fn run_expands_environment_variables_in_the_mcp_config_and_names_an_unset_one() {
    let dir = tempdir();
    let config = dir.join("mcp.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"todo": {
            "command": "${HOOKLOOP_TEST_BIN}",
            "args": ["${HOOKLOOP_TEST_COMMAND:-todo-server}"]
        }}})
        .to_string(),
    )
    .unwrap();
    let turn = std::sync::atomic::AtomicUsize::new(0);
    let provider = FakeProvider::start(move |_| {
        match turn.fetch_add(1, std::sync::atomic::Ordering::SeqCst) {
            0 => Reply::tool("todo__add", json!({"text": "expand the variables"})),
            _ => Reply::text("Done."),
        }
    });
    let args = ["run", "--mcp-config", config.to_str().unwrap(), "go"];
    let mut command = hookloop(&args);
    with_provider(&mut command, &provider);
    let out = command
        .env("HOOKLOOP_TEST_BIN", loopback::hookloop())
        .env_remove("HOOKLOOP_TEST_COMMAND")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    // The server the expanded command started answered the call.
    let requests = provider.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    let second = requests[1].to_string();
    assert!(second.contains("expand the variables"), "{second}");
    assert!(!second.contains("unknown tool"), "{second}");

    let mut command = hookloop(&args);
    with_provider(&mut command, &provider);
    let out = command.env_remove("HOOKLOOP_TEST_BIN").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = text(&out.stderr);
    for needle in ["\"todo\"", "command", "${HOOKLOOP_TEST_BIN}", "not set"] {
        assert!(stderr.contains(needle), "{stderr} lacks {needle}");
    }
    assert_eq!(
        provider.requests().len(),
        2,
        "no model request without the config"
    );
}

#[test]
fn run_reads_the_prompt_from_stdin_without_words_or_with_a_dash() {
    use std::io::Write as _;
    let provider = FakeProvider::start(|_| Reply::text("Read it."));
    for args in [&["run"][..], &["run", "-"][..]] {
        let mut command = hookloop(args);
        with_provider(&mut command, &provider);
        let mut child = command
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        stdin
            .write_all(b"Explain this diff:\n+ one line\n")
            .unwrap();
        drop(stdin);
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {out:?}");
        assert_eq!(text(&out.stdout).trim(), "Read it.");
    }
    let requests = provider.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert!(
            request
                .to_string()
                .contains(r#"Explain this diff:\n+ one line\n"#),
            "{request}"
        );
    }
    // Nothing on stdin is an empty prompt, refused before any request.
    let mut command = hookloop(&["run"]);
    with_provider(&mut command, &provider);
    let out = command.stdin(std::process::Stdio::null()).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("the prompt is empty"), "{out:?}");
    assert_eq!(provider.requests().len(), 2);
}

#[test]
fn the_round_cap_exits_4() {
    let provider = FakeProvider::start(|_| Reply::tool("nowhere__tool", json!({})));
    let mut command = hookloop(&["run", "loop"]);
    with_provider(&mut command, &provider);
    let out = command.env("HOOKLOOP_MAX_ROUNDS", "2").output().unwrap();
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(text(&out.stderr).contains("round cap"));
}

#[test]
fn an_unknown_stop_reason_exits_6() {
    let provider = FakeProvider::start(|_| Reply::Stopped("partial".into(), "eos"));
    let mut command = hookloop(&["run", "go"]);
    with_provider(&mut command, &provider);
    let out = command.output().unwrap();
    assert_eq!(out.status.code(), Some(6), "{out:?}");
    assert!(text(&out.stderr).contains("does not know"), "{out:?}");
    assert_eq!(provider.requests().len(), 1);
}

#[test]
fn an_unreachable_model_exits_1() {
    let mut command = hookloop(&["run", "hi"]);
    let out = command
        .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        .env("HOOKLOOP_MODEL", "m")
        .env("HOOKLOOP_LLM_MAX_RETRIES", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        text(&out.stderr).contains("model request failed"),
        "{out:?}"
    );
}

/// A system whose root store cannot be read: the certificates `rustls-native-certs` reads are
/// the ones `SSL_CERT_FILE` names (when it is set, nothing else), here a file that is not there.
/// A client reads that store only when it checks a certificate, so a model spoken to in plain
/// http still answers; the old build read it at the model client's build and could not start.
#[test]
fn run_against_a_plain_http_model_reads_no_root_store() {
    let provider = FakeProvider::start(|_| Reply::text("No TLS here."));
    let mut command = hookloop(&["run", "hi"]);
    with_provider(&mut command, &provider);
    let missing = tempdir().join("no-such-roots.pem");
    let out = command
        .env("SSL_CERT_FILE", &missing)
        .env_remove("SSL_CERT_DIR")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(text(&out.stdout), "No TLS here.\n");
}

#[test]
fn a_missing_mcp_config_file_exits_2() {
    let provider = FakeProvider::start(|_| Reply::text("x"));
    let mut command = hookloop(&["run", "--mcp-config", "/nonexistent/mcp.json", "hi"]);
    with_provider(&mut command, &provider);
    let out = command.output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("/nonexistent/mcp.json"));
}

fn tempdir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "hookloop-cli-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn replay_matches_a_golden_transcript_and_reports_a_divergence() {
    let golden = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/transcripts/stop_objection_is_injected.jsonl"
    );
    let out = hookloop(&["replay", golden]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(!out.stdout.is_empty());

    // The same record with the objection's text changed: the machine's effects differ.
    let text = std::fs::read_to_string(golden).unwrap();
    assert!(
        text.contains("1 open"),
        "the fixture has the objection text"
    );
    let dir = tempdir();
    let tampered = dir.join("tampered.jsonl");
    std::fs::write(&tampered, text.replacen("1 open", "9 open", 1)).unwrap();
    let out = hookloop(&["replay", tampered.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(text_of(&out.stderr).contains("diverged"), "{out:?}");

    let out = hookloop(&["replay", "/nonexistent.jsonl"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

fn text_of(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn a_recorded_run_replays_cleanly_and_acp_refuses_a_record_dir_it_cannot_create() {
    let dir = tempdir();
    let config = dir.join("mcp.json");
    std::fs::write(
        &config,
        json!({"mcpServers": {"todo": {"command": loopback::hookloop(), "args": ["todo-server"]}}})
            .to_string(),
    )
    .unwrap();
    let provider = FakeProvider::start(|request| {
        if request["messages"].as_array().unwrap().len() > 2 {
            Reply::text("Still done.")
        } else {
            Reply::text("Done.")
        }
    });
    let transcript = dir.join("run.jsonl");
    let mut command = hookloop(&[
        "run",
        "--record",
        transcript.to_str().unwrap(),
        "--mcp-config",
        config.to_str().unwrap(),
        "go",
    ]);
    with_provider(&mut command, &provider);
    let out = command
        .env("MCP_HOOK_SERVERS", "todo")
        .env("OPENAI_API_KEY", "test-key-4242")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let recorded = std::fs::read_to_string(&transcript).unwrap();
    // The todo list starts empty, so `_Stop` is asked and has nothing to object to.
    assert!(
        recorded.contains(r#""effect":"call_hooks","hook":"_Stop""#),
        "{recorded}"
    );
    assert!(recorded.contains(r#""fact":"hook_answered""#), "{recorded}");
    assert!(
        !recorded.contains("test-key-4242"),
        "the API key never reaches a transcript"
    );

    let out = hookloop(&["replay", transcript.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");

    // Live tools: the same server answers as recorded, so nothing drifted.
    let out = hookloop(&[
        "replay",
        "--live-tools",
        "--mcp-config",
        config.to_str().unwrap(),
        transcript.to_str().unwrap(),
    ])
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(text(&out.stdout).contains("0 answer(s) drifted"), "{out:?}");

    // A record folder that cannot be created stops `acp` at start-up, naming the variable.
    let blocker = dir.join("file");
    std::fs::write(&blocker, "").unwrap();
    let mut command = hookloop(&["acp"]);
    with_provider(&mut command, &provider);
    let out = command
        .env("HOOKLOOP_RECORD_DIR", blocker.join("sub"))
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("HOOKLOOP_RECORD_DIR"), "{out:?}");
}

#[test]
fn run_strips_terminal_escapes_from_what_it_shows_and_keeps_them_when_piped_or_json() {
    let reply = "Done \x1b[31mred\x1b[0m\x07 \x1b]0;title\x07\r.";
    let provider = FakeProvider::start(move |_| Reply::text(reply));

    // Progress lines are for people, even in a log: no control characters.
    let mut command = hookloop(&["run", "go"]);
    with_provider(&mut command, &provider);
    let out = command.output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stderr = text(&out.stderr);
    // The one-line display turns the `\r` into a space; the escapes lose their ESC and BEL.
    assert!(
        stderr.contains("model: Done [31mred[0m ]0;title ."),
        "{stderr:?}"
    );
    assert!(!stderr.contains(['\x1b', '\x07', '\r']), "{stderr:?}");
    // A piped answer is exactly what the model wrote.
    assert_eq!(text(&out.stdout), format!("{reply}\n"));

    // An answer printed on a terminal loses its control characters.
    let pty = loopback::Pty::open();
    let mut command = hookloop(&["run", "go"]);
    with_provider(&mut command, &provider);
    let mut child = command
        .stdout(pty.stdio())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let shown = pty.reader();
    assert_eq!(child.wait().unwrap().code(), Some(0));
    // The reader ends soon after the child closes the terminal.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let seen = loop {
        let seen = text(&shown.lock().unwrap());
        if seen.ends_with('\n') || std::time::Instant::now() > deadline {
            break seen;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // The terminal turns each `\n` into `\r\n`; nothing else may carry a control character.
    let shown_text = seen.replace("\r\n", "\n");
    assert_eq!(shown_text, "Done [31mred[0m ]0;title.\n", "{seen:?}");

    // --json keeps the exact text.
    let mut command = hookloop(&["run", "--json", "go"]);
    with_provider(&mut command, &provider);
    let out = command.output().unwrap();
    let last: Value = serde_json::from_str(text(&out.stdout).lines().last().unwrap()).unwrap();
    assert_eq!(last["text"], reply);
}

#[test]
fn run_shows_the_first_words_on_a_terminal_before_the_reply_ends() {
    let pieces: Vec<String> = ["The ", "answer ", "is ", "42."]
        .iter()
        .map(|p| (*p).to_owned())
        .collect();
    // The rest of the reply waits until the test has seen its first words.
    let gate = loopback::Gate::default();
    let (stream, held) = (pieces.clone(), gate.clone());
    let provider = FakeProvider::start(move |_| Reply::Held(stream.clone(), held.clone()));
    let pty = loopback::Pty::open();
    let mut command = hookloop(&["run", "go"]);
    with_provider(&mut command, &provider);
    let child = command
        .stdout(std::process::Stdio::piped())
        .stderr(pty.stdio())
        .spawn()
        .unwrap();
    let shown = pty.reader();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        let seen = text(&shown.lock().unwrap());
        if seen.contains("model: The") {
            // The first words are on the terminal; the reply has not ended (it cannot have:
            // the rest is held until now).
            assert!(!seen.contains("42."), "{seen:?}");
            gate.open();
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{seen:?}");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    // The answer on stdout is exactly the reply's text, streamed or not.
    assert_eq!(text(&out.stdout), "The answer is 42.\n");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let seen = loop {
        let seen = text(&shown.lock().unwrap());
        if seen.contains("42.") || std::time::Instant::now() > deadline {
            break seen;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    // Shown once, as it streamed: no second line repeating it.
    assert_eq!(seen.matches("The answer is 42.").count(), 1, "{seen:?}");

    // --json: delta events, then the answer.
    let mut command = hookloop(&["run", "--json", "go"]);
    with_provider(&mut command, &provider);
    let out = command.output().unwrap();
    let events: Vec<Value> = text(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let deltas: Vec<&str> = events
        .iter()
        .filter(|e| e["event"] == "delta" && e["kind"] == "text")
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, pieces);
    let last = events.last().unwrap();
    assert_eq!(last["event"], "answer");
    assert_eq!(last["text"], "The answer is 42.");
}
