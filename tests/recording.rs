//! Recording sessions to files and replaying them: crash safety, secrets, versions, and the
//! divergence report when the machine no longer does what the record says.

use std::io::{self, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use hookloop::machine::{Effect, HookReply, Input, Notice, Phase, ToolOutput};
use hookloop::testing::{HookStep, InProcessHost, ScriptedLlm, Step, echo};
use hookloop::transcript::{
    DivergenceKind, Event, Header, RecordDir, Recorder, Redaction, ReplayError, ServerEntry,
    Transcript, TranscriptError, replay, replay_str,
};
use hookloop::{Config, Hook, HookServers, PromptStop, Session};
use serde_json::json;

/// A directory of its own under the system's temporary directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "hookloop-{name}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn join(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn golden(name: &str) -> Transcript {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/transcripts")
        .join(format!("{name}.jsonl"));
    Transcript::read(path).unwrap()
}

fn objecting_session() -> Session<ScriptedLlm, InProcessHost> {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("todo__list", json!({}))]),
        Step::text("Done."),
        Step::text("Done again."),
    ]);
    let host = InProcessHost::new().tool("todo", "list", echo).hook(
        "todo",
        Hook::Stop,
        [HookStep::Say("open: x".into())],
    );
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .system_prompt("Be brief.")
        .build()
        .unwrap();
    Session::new(config, llm, host)
}

#[tokio::test]
async fn a_session_recorded_to_a_file_replays() {
    // A real clock: times vary from run to run, and replay does not care.
    let dir = TempDir::new("record");
    let path = dir.join("session.jsonl");
    let mut session = objecting_session();
    let recorder = session.record_to(&path).unwrap();
    assert_eq!(session.prompt("Go.").await.unwrap(), PromptStop::EndTurn);
    session.close().await.unwrap();
    recorder.check().unwrap();

    let report = replay(&path).unwrap();
    assert_eq!(report.records as u64, recorder.records());
    assert_eq!(report.counters.objections, 1);
    assert_eq!(report.phase, Phase::Done);
    assert!(report.truncated.is_none());
    let transcript = Transcript::read(&path).unwrap();
    assert_eq!(
        transcript.header.config.system_prompt.as_deref(),
        Some("Be brief.")
    );
    assert_eq!(transcript.header.catalog.servers.len(), 1);
}

#[tokio::test]
async fn recording_must_start_with_the_session() {
    let dir = TempDir::new("late");
    let mut session = objecting_session();
    session.prompt("Go.").await.unwrap();
    let error = session.record_to(dir.join("late.jsonl")).unwrap_err();
    assert!(matches!(error, TranscriptError::SessionStarted), "{error}");
}

#[test]
fn a_cut_short_last_line_is_reported_and_the_rest_replays() {
    let text = golden("stop_objection_is_injected").to_jsonl();
    let last_line_start = text[..text.len() - 1].rfind('\n').unwrap() + 1;
    let second_last = text[..last_line_start - 1].rfind('\n').unwrap() + 1;
    // Every cut inside the last two lines: the machine may be left with an order it gave
    // after the last whole record, which a truncated transcript tolerates.
    for cut in (second_last + 1)..(text.len() - 1) {
        // Cuts at the end of a line leave whole lines: nothing is cut short.
        if cut == last_line_start || cut == last_line_start - 1 {
            continue;
        }
        let report = replay_str(&text[..cut]).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
        let truncated = report
            .truncated
            .unwrap_or_else(|| panic!("cut at {cut} not reported: {:?}", &text[..cut]));
        assert!(truncated.line >= 17, "{truncated:?}");
    }
}

#[test]
fn changing_a_hook_answer_diverges_at_the_next_order() {
    let mut transcript = golden("stop_objection_is_injected");
    // The first `_Stop` answer objects; make it quiet.
    let index = transcript
        .records
        .iter()
        .position(|r| matches!(&r.event, Event::Fact(Input::HookAnswered { .. })))
        .unwrap();
    transcript.records[index].event = Event::Fact(Input::HookAnswered {
        server: server("todo"),
        hook: Hook::Stop,
        reply: HookReply::Text {
            text: String::new(),
        },
        subject: None,
    });
    let divergence = transcript.replay().unwrap_err();
    assert_eq!(divergence.index, index + 1);
    assert_eq!(divergence.line, index + 3, "records start on line 2");
    assert_eq!(divergence.phase, Phase::Idle, "the prompt already finished");
    let DivergenceKind::EffectMismatch { expected, actual } = &divergence.kind else {
        panic!("{divergence}");
    };
    assert!(matches!(
        expected,
        Effect::Notify {
            notice: Notice::Objection { .. }
        }
    ));
    assert!(matches!(actual, Effect::Finish { .. }));
    let shown = divergence.to_string();
    assert!(
        shown.starts_with(&format!(
            "replay diverged at record {} (line {}) while the machine was idle",
            index + 1,
            index + 3
        )),
        "{shown}"
    );
    assert!(shown.contains("-   \"effect\": \"notify\","), "{shown}");
    assert!(shown.contains("+   \"effect\": \"finish\","), "{shown}");
}

#[test]
fn changing_a_rule_in_the_header_breaks_the_transcripts_that_use_it() {
    // A shorter hook timeout: the `_Stop` call itself differs, shown as a one-field diff.
    let mut transcript = golden("stop_objection_is_injected");
    transcript.header.config.policy.hook_timeout_ms = 1_000;
    let divergence = transcript.replay().unwrap_err();
    // The machine has already moved on to wait for the answers of the call it gave.
    assert_eq!(divergence.phase, Phase::AwaitingStop);
    let diff = divergence.diff();
    assert!(
        diff.contains("-   \"timeout_ms\": 2500,\n+   \"timeout_ms\": 1000,"),
        "{diff}"
    );

    // No `_Stop` budget: the end of turn finishes instead of asking the hook.
    let mut transcript = golden("stop_objection_is_injected");
    transcript.header.config.policy.stop_max_rejections = 0;
    let divergence = transcript.replay().unwrap_err();
    let expected_at = transcript
        .records
        .iter()
        .position(|r| matches!(&r.event, Event::Effect(Effect::CallHooks { .. })))
        .unwrap();
    assert_eq!(divergence.index, expected_at);
    assert!(matches!(
        divergence.kind,
        DivergenceKind::EffectMismatch {
            actual: Effect::Finish { .. },
            ..
        }
    ));

    // A transcript that never reaches `_Stop` does not depend on the budget.
    let mut transcript = golden("model_failure_ends_the_prompt");
    transcript.header.config.policy.stop_max_rejections = 0;
    transcript.replay().unwrap();
}

#[test]
fn changing_what_the_model_would_see_diverges_at_the_next_request() {
    let mut transcript = golden("model_call_to_a_hook_is_refused");
    let index = transcript
        .records
        .iter()
        .position(|r| matches!(&r.event, Event::Fact(Input::ToolFinished { .. })))
        .unwrap();
    let Event::Fact(Input::ToolFinished { output, .. }) = &mut transcript.records[index].event
    else {
        unreachable!()
    };
    *output = ToolOutput::text("something else");
    let divergence = transcript.replay().unwrap_err();
    assert_eq!(divergence.index, index + 1);
    assert_eq!(divergence.phase, Phase::Prompting);
    assert_eq!(divergence.request_parts(), ["messages"]);
    let diff = divergence.diff();
    assert!(diff.contains("-     \"messages\": \""), "{diff}");
    assert!(
        diff.contains("  \"messages\": 5,\n"),
        "same length, other content: {diff}"
    );
}

#[test]
fn a_fact_the_machine_refuses_is_a_divergence() {
    let mut transcript = golden("stop_budget_zero_never_calls_stop");
    transcript.records.insert(
        1,
        hookloop::transcript::Record::fact(
            0,
            Input::ToolFinished {
                id: "ghost".into(),
                output: ToolOutput::text("boo"),
            },
        ),
    );
    transcript.lines = (2..transcript.records.len() + 2).collect();
    let divergence = transcript.replay().unwrap_err();
    assert_eq!((divergence.index, divergence.line), (1, 3));
    assert!(matches!(
        divergence.kind,
        DivergenceKind::FactRefused { .. }
    ));
    let shown = divergence.to_string();
    assert!(shown.contains("refused the recorded fact"), "{shown}");
    assert!(shown.contains("\"fact\": \"tool_finished\""), "{shown}");
}

#[test]
fn orders_missing_from_the_record_are_divergences() {
    // An order dropped from the middle: the next fact finds it still waiting.
    let mut transcript = golden("hook_errors_fail_open");
    let index = transcript
        .records
        .iter()
        .position(|r| matches!(&r.event, Event::Effect(Effect::CallLlm { .. })))
        .unwrap();
    transcript.records.remove(index);
    transcript.lines.pop();
    let divergence = transcript.replay().unwrap_err();
    assert_eq!(divergence.index, index);
    assert!(matches!(
        divergence.kind,
        DivergenceKind::UnrecordedEffect {
            before: Some(_),
            ..
        }
    ));

    // The last order dropped: the transcript ends with the machine still giving one.
    let mut transcript = golden("stop_budget_zero_never_calls_stop");
    let closed = transcript.records.pop().unwrap();
    transcript.records.pop();
    transcript.records.push(closed);
    transcript.lines.pop();
    let end = transcript.records.len() - 1;
    let divergence = transcript.replay().unwrap_err();
    assert_eq!(divergence.index, end);
    assert!(divergence.to_string().contains("before the closed fact"));

    // An order recorded that the machine never gave.
    let mut transcript = golden("stop_budget_zero_never_calls_stop");
    let extra = hookloop::transcript::Record::effect(
        0,
        Effect::KillServer {
            server: server("todo"),
        },
    );
    transcript.records.push(extra);
    transcript.lines.push(transcript.lines.last().unwrap() + 1);
    let divergence = transcript.replay().unwrap_err();
    assert!(matches!(
        divergence.kind,
        DivergenceKind::MissingEffect { .. }
    ));
}

#[test]
fn another_format_version_is_refused_by_number() {
    let dir = TempDir::new("version");
    let path = dir.join("v0.jsonl");
    let text = golden("stop_budget_zero_never_calls_stop")
        .to_jsonl()
        .replacen("\"version\":3", "\"version\":0", 1);
    std::fs::write(&path, text).unwrap();
    let error = replay(&path).unwrap_err();
    assert!(matches!(
        error,
        ReplayError::Load(TranscriptError::UnsupportedVersion { found: 0 })
    ));
    assert!(error.to_string().contains("version 0"), "{error}");
}

#[test]
fn secrets_never_reach_the_file() {
    let dir = TempDir::new("secrets");
    let path = dir.join("secrets.jsonl");
    let server = ServerEntry {
        name: "remote".into(),
        url: Some("https://bob:hunter2@mcp.example/mcp?token=tok-3".into()),
        headers: [("Authorization".to_owned(), "Bearer sk-live-1".to_owned())].into(),
        env: [
            ("OPENAI_API_KEY".to_owned(), "sk-live-2".to_owned()),
            ("SHARD".to_owned(), "shard-secret-4".to_owned()),
            ("LANG".to_owned(), "C".to_owned()),
        ]
        .into(),
        ..ServerEntry::default()
    };
    let header = Header::new(&Config::default())
        .with_servers([server.clone()], &Redaction::new().mark_secret("SHARD"));
    Recorder::create(&path, &header).unwrap();
    // A header whose servers were put in by hand still goes through the default redaction.
    let mut by_hand = Header::new(&Config::default());
    by_hand.servers.push(server);
    let other = dir.join("by-hand.jsonl");
    Recorder::create(&other, &by_hand).unwrap();

    for (file, marked) in [(&path, true), (&other, false)] {
        let text = std::fs::read_to_string(file).unwrap();
        for secret in ["hunter2", "tok-3", "sk-live-1", "sk-live-2"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        assert_eq!(!text.contains("shard-secret-4"), marked, "{text}");
        assert!(text.contains("\"LANG\":\"C\""), "{text}");
        Transcript::read(file).unwrap();
    }
}

/// A writer that fails once it has taken `budget` bytes.
struct FailingWriter {
    budget: Arc<AtomicUsize>,
}

impl Write for FailingWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let left = self.budget.load(Ordering::SeqCst);
        if left < buf.len() {
            return Err(io::Error::other("disk full"));
        }
        self.budget.fetch_sub(buf.len(), Ordering::SeqCst);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn a_write_error_stops_recording_but_not_the_session() {
    let mut session = objecting_session();
    let header = session.transcript_header();
    let writer = FailingWriter {
        budget: Arc::new(AtomicUsize::new(2_000)),
    };
    let recorder = Recorder::to_writer(writer, "the test writer", &header).unwrap();
    session.record_with(recorder.clone()).unwrap();
    assert_eq!(session.prompt("Go.").await.unwrap(), PromptStop::EndTurn);
    let error = recorder.check().unwrap_err();
    assert_eq!(
        error.to_string(),
        "could not write transcript the test writer: disk full"
    );
    assert!(recorder.records() > 0);
}

#[tokio::test]
async fn a_record_dir_gets_one_file_per_session() {
    let dir = TempDir::new("dir");
    let records = RecordDir::new(dir.join("sessions")).unwrap();
    let mut paths = Vec::new();
    for _ in 0..2 {
        let mut session = objecting_session();
        let (_, path) = session.record_in(&records).unwrap();
        session.prompt("Go.").await.unwrap();
        paths.push(path);
    }
    assert_ne!(paths[0], paths[1]);
    for path in &paths {
        assert_eq!(path.parent(), Some(records.path()));
        assert_eq!(replay(path).unwrap().counters.objections, 1);
    }
}

#[tokio::test(start_paused = true)]
async fn timeouts_replay_from_the_record_without_a_clock() {
    // Recorded under a paused clock with a hook that never answers: the timeout is a fact in
    // the record, and replay needs no clock to reproduce it.
    let llm = ScriptedLlm::new([Step::text("Done.")]);
    let host = InProcessHost::new().hook("slow", Hook::Stop, [HookStep::Hang]);
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .hook_timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let mut session = Session::new(config, llm, host);
    let recorder = Recorder::in_memory(&session.transcript_header());
    session.record_with(recorder.clone()).unwrap();
    session.prompt("Go.").await.unwrap();
    let report = replay_str(&recorder.text().unwrap()).unwrap();
    assert_eq!(report.last_at_ms, 30_000);
    assert_eq!(report.finishes.len(), 1);
}

fn server(name: &str) -> hookloop::ServerName {
    hookloop::ServerName::new(name).unwrap()
}

/// Rejects every call, always, counting the questions.
struct Refuser(Arc<AtomicUsize>);

impl hookloop::PermissionAsker for Refuser {
    fn decide<'a>(
        &'a self,
        _call: &'a hookloop::machine::ToolCall,
    ) -> std::pin::Pin<Box<dyn Future<Output = hookloop::PermissionDecision> + Send + 'a>> {
        self.0.fetch_add(1, Ordering::Relaxed);
        Box::pin(std::future::ready(
            hookloop::PermissionDecision::RejectAlways,
        ))
    }
}

#[tokio::test]
async fn a_permission_decision_is_recorded_and_replays_without_asking_again() {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("fs__rm", json!({"path": "/"}))]),
        Step::tools(2, &[("fs__rm", json!({"path": "/tmp"}))]),
        Step::text("Done."),
    ]);
    let host = InProcessHost::new().tool("fs", "rm", echo).hints(
        "fs",
        "rm",
        hookloop::machine::ToolHints {
            destructive: Some(true),
            ..Default::default()
        },
    );
    let config = Config::builder().ask_permission(true).build().unwrap();
    let mut session = Session::new(config, llm, host.clone());
    let questions = Arc::new(AtomicUsize::new(0));
    session.set_permission_asker(Refuser(Arc::clone(&questions)));
    let recorder = Recorder::in_memory(&session.transcript_header());
    session.record_with(recorder.clone()).unwrap();
    assert_eq!(session.prompt("Go.").await.unwrap(), PromptStop::EndTurn);
    // Asked once; the standing rejection answered the second call; nothing ran.
    assert_eq!(questions.load(Ordering::Relaxed), 1);
    assert!(host.log().is_empty(), "{:?}", host.log());

    let text = recorder.text().unwrap();
    let transcript = Transcript::parse(&text).unwrap();
    assert!(transcript.header.config.policy.ask_permission);
    let events: Vec<&Event> = transcript.records.iter().map(|r| &r.event).collect();
    assert!(events.iter().any(
        |e| matches!(e, Event::Effect(Effect::AskPermission { call }) if call.name == "fs__rm")
    ));
    assert!(events.iter().any(|e| matches!(
        e,
        Event::Fact(Input::PermissionDecided {
            decision: hookloop::PermissionDecision::RejectAlways,
            ..
        })
    )));
    let standing = events
        .iter()
        .filter(|e| {
            matches!(
                e,
                Event::Effect(Effect::Notify {
                    notice: Notice::PermissionRejected { standing: true, .. }
                })
            )
        })
        .count();
    // Both rejections stand: the one decided, and the one the decision answered.
    assert_eq!(standing, 2);
    // Replay feeds the recorded decision: nobody is asked, and it ends where the session did.
    let report = replay_str(&text).unwrap();
    assert_eq!(report.finishes.len(), 1);
    assert_eq!(report.phase, Phase::Idle);
}
