//! `hookloop run`: one prompt in a terminal.

use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use hookloop::machine::AgentId;
use hookloop::mcp::command_hooks::SourceSpec;
use hookloop::ports::Delta;
use hookloop::progress::{Event, ProgressObserver};
use hookloop::text::for_terminal;
use hookloop::transcript::{Recorder, TranscriptError};
use hookloop::{Config, LlmClient, PromptStop, Session, ToolHost};
use serde::Serialize;
use tokio::sync::mpsc;

use super::{Failure, ask, exit, wire};

/// Runs the command; every failure is reported here. `command_hooks` are `--command-hooks`,
/// each `[NAME=]PATH`; none: `HOOKLOOP_COMMAND_HOOKS`.
pub async fn main(
    mcp_config: Option<PathBuf>,
    command_hooks: Vec<String>,
    json: bool,
    record: Option<PathBuf>,
    redact_content: bool,
    prompt: Vec<String>,
) -> ExitCode {
    match run(
        mcp_config,
        command_hooks,
        json,
        record,
        redact_content,
        prompt,
    )
    .await
    {
        Ok(code) => code,
        Err(failure) => failure.report(),
    }
}

async fn run(
    mcp_config: Option<PathBuf>,
    command_hooks: Vec<String>,
    json: bool,
    record: Option<PathBuf>,
    redact_content: bool,
    prompt: Vec<String>,
) -> Result<ExitCode, Failure> {
    let prompt = prompt_of(prompt, std::io::stdin().lock())?;
    if prompt.trim().is_empty() {
        return Err(Failure::usage("the prompt is empty"));
    }
    let llm = wire::model_from_env()?;
    let servers = wire::load_mcp_config(mcp_config.as_deref())?;
    let specs = if command_hooks.is_empty() {
        wire::command_hook_specs_from_env()?
    } else {
        command_hooks
            .iter()
            .map(|spec| SourceSpec::parse(spec))
            .collect::<Result<_, _>>()
            .map_err(|e| Failure::usage(format!("--command-hooks: {e}")))?
    };
    let cwd = std::env::current_dir().unwrap_or_else(|_| ".".into());
    let hooks = wire::load_command_hooks(&specs, &cwd)?;
    let config = wire::with_hook_details(Config::from_env()?, &hooks)?;
    wire::warn_unconfigured_hook_servers(config.policy(), &servers, &hooks);
    let host = wire::connect(servers, hooks).await?;
    host.set_person(ask::person());
    let mut session = Session::new(config, llm, host);
    let recorder = match &record {
        Some(path) => {
            let recorder = start_recording(&mut session, path, redact_content)
                .map_err(|e| Failure::usage(format!("--record {}: {e}", path.display())))?;
            // The commands' `transcript_path`.
            session.host().set_transcript_path(Some(&cwd.join(path)));
            Some(recorder)
        }
        None => None,
    };
    let mode = if json {
        Mode::Json
    } else if std::io::stderr().is_terminal() {
        Mode::Spinner
    } else {
        Mode::Lines
    };
    let code = drive(session, mode, prompt).await;
    // A record cut short must not pass for a whole one: whatever the prompt did, the run failed
    // to do what `--record` asked.
    if let (Some(recorder), Some(path)) = (recorder, record) {
        recorder.check().map_err(|e| {
            Failure::failed(format!(
                "--record {}: the transcript is incomplete: {e}",
                path.display()
            ))
        })?;
    }
    Ok(code)
}

/// Starts recording `session` to `path`, with content replaced by lengths if asked.
fn start_recording<L: LlmClient, H: ToolHost>(
    session: &mut Session<L, H>,
    path: &std::path::Path,
    redact_content: bool,
) -> Result<Recorder, TranscriptError> {
    if !redact_content {
        return session.record_to(path);
    }
    let header = session.transcript_header().with_content_redacted();
    let recorder = Recorder::create(path, &header)?;
    session.record_with(recorder.clone())?;
    Ok(recorder)
}

/// How progress is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// A spinner while the model thinks, its text as it streams in, and a line per event, on
    /// stderr.
    Spinner,
    /// A line per event on stderr.
    Lines,
    /// One JSON object per line on stdout, deltas included.
    Json,
}

/// What the renderer is handed, in the order the session produced it, with the subagent it is
/// of (`None` for the top-level agent).
enum Shown {
    Event(Duration, Option<AgentId>, Event),
    Delta(Duration, Option<AgentId>, Delta),
}

/// The most bytes of a prompt read from stdin: more is refused rather than held.
const MAX_STDIN_PROMPT_BYTES: u64 = 16 << 20;

/// The prompt: the words given, joined by spaces; or, when there are none or the one word is
/// `-`, what `stdin` holds, unless it is a terminal (where nobody meant to type it).
fn prompt_of(
    words: Vec<String>,
    stdin: impl std::io::Read + IsTerminal,
) -> Result<String, Failure> {
    if !(words.is_empty() || words == ["-"]) {
        return Ok(words.join(" "));
    }
    if stdin.is_terminal() {
        return Err(Failure::usage(
            "no prompt: give it as arguments, or pipe it on stdin (`hookloop run < task.md`)",
        ));
    }
    let mut bytes = Vec::new();
    stdin
        .take(MAX_STDIN_PROMPT_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| Failure::usage(format!("cannot read the prompt from stdin: {e}")))?;
    if bytes.len() as u64 > MAX_STDIN_PROMPT_BYTES {
        return Err(Failure::usage(format!(
            "the prompt on stdin is over {} MiB",
            MAX_STDIN_PROMPT_BYTES >> 20
        )));
    }
    String::from_utf8(bytes).map_err(|e| {
        Failure::usage(format!(
            "the prompt on stdin is not UTF-8 (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ))
    })
}

/// Runs one prompt with progress shown in `mode`, prints the answer, and says how it ended.
pub async fn drive<L: LlmClient + 'static, H: ToolHost + 'static>(
    mut session: Session<L, H>,
    mode: Mode,
    prompt: String,
) -> ExitCode {
    let (tx, rx) = mpsc::unbounded_channel();
    // Every sender lives in the observer: the renderer ends when the session is dropped.
    // Events and deltas share the channel, so the renderer sees them in order.
    let deltas = (mode != Mode::Lines).then(|| tx.clone());
    // A subagent's pieces are shown only as JSON: on a terminal, children running at once
    // would interleave their text on one line; their replies show as lines when whole.
    let agent_deltas = (mode == Mode::Json).then(|| tx.clone());
    let agent_events = tx.clone();
    let progress = ProgressObserver::new(move |at, event| {
        // The renderer outlives the session; a send fails only if it panicked.
        let _ = tx.send(Shown::Event(at, None, event));
    })
    .with_agents(move |at, agent, event| {
        let _ = agent_events.send(Shown::Event(at, Some(agent.clone()), event));
    });
    let progress = match deltas {
        None => progress,
        Some(deltas) => progress.with_deltas(move |at, delta| {
            let _ = deltas.send(Shown::Delta(at, None, delta.clone()));
        }),
    };
    session.add_observer(match agent_deltas {
        None => progress,
        Some(deltas) => progress.with_agent_deltas(move |at, agent, delta| {
            let _ = deltas.send(Shown::Delta(at, Some(agent.clone()), delta.clone()));
        }),
    });
    let renderer = tokio::spawn(render(rx, mode));
    let cancel = session.cancel_handle();
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            cancel.cancel();
        }
    });
    let result = session.prompt(prompt).await;
    ctrl_c.abort();
    // `_SessionEnd`, bounded by the hook timeout; its answers are ignored.
    if let Err(e) = session.close().await {
        tracing::warn!(error = %e, "closing the session failed");
    }
    // Dropping the session drops the observer and its sender: the renderer drains and ends.
    drop(session);
    let answer = renderer.await.unwrap_or_default();
    let (code, stop) = match &result {
        Ok(stop) => (stop_code(*stop), Some(*stop)),
        Err(_) => (exit::FAILED, None),
    };
    let mut stdout = std::io::stdout().lock();
    let written = match (mode, &result) {
        (Mode::Json, Ok(stop)) => writeln!(
            stdout,
            "{}",
            serde_json::json!({"event": "answer", "stop_reason": stop, "text": answer})
        ),
        (Mode::Json, Err(e)) => writeln!(
            stdout,
            "{}",
            serde_json::json!({"event": "error", "message": e.to_string()})
        ),
        // Text a model wrote could drive a terminal with escape sequences; piped, it stays exact.
        (_, Ok(_)) if !answer.is_empty() && std::io::stdout().is_terminal() => {
            writeln!(stdout, "{}", for_terminal(&answer))
        }
        (_, Ok(_)) if !answer.is_empty() => writeln!(stdout, "{answer}"),
        (_, Ok(_)) => Ok(()),
        (_, Err(e)) => {
            eprintln!("hookloop: {e}");
            Ok(())
        }
    };
    if written.and_then(|()| stdout.flush()).is_err() {
        return ExitCode::from(exit::FAILED);
    }
    if let Some(stop) = stop
        && mode != Mode::Json
        && stop != PromptStop::EndTurn
    {
        eprintln!("hookloop: stopped: {}", stop_words(stop));
    }
    ExitCode::from(code)
}

/// The exit status for each way a prompt ends (documented in `hookloop run --help`).
pub fn stop_code(stop: PromptStop) -> u8 {
    match stop {
        PromptStop::EndTurn => exit::OK,
        PromptStop::MaxTokens => exit::MAX_TOKENS,
        PromptStop::MaxTurnRequests => exit::MAX_TURN_REQUESTS,
        PromptStop::Refusal => exit::REFUSAL,
        PromptStop::Cancelled => exit::CANCELLED,
        PromptStop::OtherStop => exit::OTHER_STOP,
        _ => exit::OTHER_STOP,
    }
}

fn stop_words(stop: PromptStop) -> &'static str {
    match stop {
        PromptStop::EndTurn => "the model ended its turn",
        PromptStop::MaxTokens => "the output limit cut the reply (max_tokens)",
        PromptStop::MaxTurnRequests => "the round cap was reached (HOOKLOOP_MAX_ROUNDS)",
        PromptStop::Refusal => "the model refused",
        PromptStop::Cancelled => "cancelled",
        PromptStop::OtherStop => "the provider stopped for a reason hookloop does not know",
        _ => "the prompt ended for a reason this command does not know",
    }
}

#[derive(Serialize)]
struct JsonLine<'a> {
    at_ms: u64,
    /// The subagent the event is of; absent for the top-level agent's.
    #[serde(skip_serializing_if = "Option::is_none")]
    agent: Option<&'a AgentId>,
    #[serde(flatten)]
    event: &'a Event,
}

const SPINNER: [char; 10] = ['⠋', '⠙', '⠹', '⠸', '⠼', '⠴', '⠦', '⠧', '⠇', '⠏'];

/// Shows events until the session is gone; returns the model's last text, the answer.
async fn render(mut events: mpsc::UnboundedReceiver<Shown>, mode: Mode) -> String {
    let mut answer = String::new();
    // Whether the model's text is being shown as it streams: its line is open.
    let mut streaming = false;
    // When the model started thinking, by this task's clock: the spinner shows the wait.
    let mut thinking_since: Option<tokio::time::Instant> = None;
    let mut frame = 0usize;
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut stderr = std::io::stderr();
    loop {
        let spinning = mode == Mode::Spinner && thinking_since.is_some();
        let shown = tokio::select! {
            next = events.recv() => match next {
                Some(next) => next,
                None => break,
            },
            _ = tick.tick(), if spinning => {
                frame = (frame + 1) % SPINNER.len();
                let elapsed = thinking_since.map(|t| t.elapsed()).unwrap_or_default();
                let _ = write!(stderr, "\r\x1b[2K{} thinking… {:.1}s", SPINNER[frame], elapsed.as_secs_f64());
                let _ = stderr.flush();
                continue;
            }
        };
        let (at, agent, event) = match shown {
            Shown::Event(at, agent, event) => (at, agent, event),
            Shown::Delta(at, agent, delta) => {
                show_delta(
                    mode,
                    at,
                    agent.as_ref(),
                    &delta,
                    &mut streaming,
                    &mut thinking_since,
                );
                continue;
            }
        };
        if mode == Mode::Spinner && thinking_since.take().is_some() {
            let _ = write!(stderr, "\r\x1b[2K");
        }
        if streaming && agent.is_none() {
            // The streamed text was the reply's; its event would repeat it.
            streaming = false;
            let _ = writeln!(stderr);
            if let Event::ModelText { text } = &event {
                answer.clone_from(text);
                continue;
            }
        }
        // The answer is the top-level agent's; a subagent's text is its parent's to use.
        if let (Event::ModelText { text }, None) = (&event, &agent) {
            answer.clone_from(text);
        }
        if let Event::Thinking { .. } = event {
            thinking_since = Some(tokio::time::Instant::now());
        }
        match mode {
            Mode::Json => {
                let line = JsonLine {
                    at_ms: u64::try_from(at.as_millis()).unwrap_or(u64::MAX),
                    agent: agent.as_ref(),
                    event: &event,
                };
                if let Ok(text) = serde_json::to_string(&line) {
                    let mut stdout = std::io::stdout().lock();
                    let _ = writeln!(stdout, "{text}");
                    let _ = stdout.flush();
                }
            }
            Mode::Lines | Mode::Spinner => {
                if let Some(line) = event.describe_in(agent.as_ref()) {
                    // Descriptions quote model and tool text: people read them, so no escapes.
                    let line = for_terminal(&line);
                    let _ = writeln!(stderr, "[{:>6.1}s] {line}", at.as_secs_f64());
                }
            }
        }
    }
    if mode == Mode::Spinner && thinking_since.is_some() {
        let _ = write!(stderr, "\r\x1b[2K");
    }
    if streaming {
        let _ = writeln!(stderr);
    }
    answer
}

/// Shows one piece of a streaming reply: as a JSON line, or, on a terminal, at once after the
/// reply's text so far (the spinner gives way to it).
fn show_delta(
    mode: Mode,
    at: Duration,
    agent: Option<&AgentId>,
    delta: &Delta,
    streaming: &mut bool,
    thinking_since: &mut Option<tokio::time::Instant>,
) {
    match (mode, delta) {
        (Mode::Json, Delta::Text(text) | Delta::Thinking(text)) => {
            let kind = if matches!(delta, Delta::Text(_)) {
                "text"
            } else {
                "thinking"
            };
            let mut line = serde_json::json!({
                "at_ms": u64::try_from(at.as_millis()).unwrap_or(u64::MAX),
                "event": "delta",
                "kind": kind,
                "text": text,
            });
            if let Some(agent) = agent {
                line["agent"] = serde_json::json!(agent);
            }
            let mut stdout = std::io::stdout().lock();
            let _ = writeln!(stdout, "{line}");
            let _ = stdout.flush();
        }
        (Mode::Spinner, Delta::Text(text)) if agent.is_none() => {
            let mut stderr = std::io::stderr().lock();
            if thinking_since.take().is_some() {
                let _ = write!(stderr, "\r\x1b[2K");
            }
            if !*streaming {
                *streaming = true;
                let _ = write!(stderr, "[{:>6.1}s] model: ", at.as_secs_f64());
            }
            let _ = write!(stderr, "{}", for_terminal(text));
            let _ = stderr.flush();
        }
        // Reasoning stays behind the spinner on a terminal; lines show events only. A kind of
        // piece this front end does not know is progress it can leave out.
        (Mode::Spinner | Mode::Json, _) | (Mode::Lines, _) => {}
    }
}
