//! Golden transcripts: a scenario runs a real `Session` with scripted fakes under tokio's paused
//! clock (so virtual times are the same on every run) and records it; the recording must equal
//! `tests/transcripts/<name>.jsonl` byte for byte (the engine version aside), and the committed
//! file must replay cleanly through the pure machine. `HOOKLOOP_BLESS=1` rewrites the files.

#![allow(dead_code)]

use std::path::PathBuf;

use hookloop::testing::{HookStep, InProcessHost, ScriptedLlm};
use hookloop::transcript::{Recorder, ReplayReport, line_diff, replay};
use hookloop::{Config, ConfigBuilder, HookServers, PromptStop, Session};

/// A session being recorded in memory.
pub struct Run {
    pub session: Session<ScriptedLlm, InProcessHost>,
    recorder: Recorder,
}

impl Run {
    pub fn new(config: ConfigBuilder, llm: ScriptedLlm, host: InProcessHost) -> Self {
        let config: Config = config.build().expect("scenario config");
        let mut session = Session::new(config, llm, host);
        let recorder = Recorder::in_memory(&session.transcript_header());
        session
            .record_with(recorder.clone())
            .expect("fresh session");
        Self { session, recorder }
    }

    pub async fn prompt(&mut self, text: &str) -> PromptStop {
        self.session.prompt(text).await.expect("prompt")
    }

    /// Closes the session and returns its transcript, after checking the model saw only valid
    /// requests and the script was used up.
    pub async fn finish(mut self) -> String {
        self.session.close().await.expect("close");
        let llm = self.session.llm();
        assert_eq!(llm.violations(), Vec::<String>::new());
        assert_eq!(llm.remaining(), 0, "unused model steps");
        self.recorder.check().expect("recording");
        self.recorder.text().expect("in-memory recorder")
    }
}

pub fn hooks_on() -> ConfigBuilder {
    Config::builder().hook_servers(HookServers::All)
}

pub fn say(text: &str) -> HookStep {
    HookStep::Say(text.to_owned())
}

/// Compares the recording with the committed file (or rewrites it under `HOOKLOOP_BLESS`), then
/// replays the committed file.
pub fn golden(name: &str, recorded: &str) -> ReplayReport {
    let path = golden_path(name);
    if bless() {
        std::fs::create_dir_all(path.parent().expect("a parent")).expect("create dir");
        std::fs::write(&path, recorded).expect("write golden transcript");
    } else {
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run `HOOKLOOP_BLESS=1 cargo test --test transcripts` to create it",
                path.display()
            )
        });
        let (committed, recorded) = (normalise(&committed), normalise(recorded));
        assert!(
            committed == recorded,
            "{} differs from the recording (- committed, + recorded):\n{}\nIf the change is \
             intended, run `HOOKLOOP_BLESS=1 cargo test --test transcripts` and review the diff.",
            path.display(),
            line_diff(&committed, &recorded)
        );
    }
    replay(&path).unwrap_or_else(|e| panic!("{} does not replay: {e}", path.display()))
}

fn golden_path(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/transcripts")
        .join(format!("{name}.jsonl"))
}

fn bless() -> bool {
    std::env::var("HOOKLOOP_BLESS").is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The engine version in the header changes with every release; nothing else may differ.
fn normalise(text: &str) -> String {
    const FIELD: &str = "\"engine\":\"";
    let header_end = text.find('\n').unwrap_or(text.len());
    let Some(start) = text[..header_end].find(FIELD).map(|i| i + FIELD.len()) else {
        return text.to_owned();
    };
    let Some(len) = text[start..header_end].find('"') else {
        return text.to_owned();
    };
    format!("{}*{}", &text[..start], &text[start + len..])
}
