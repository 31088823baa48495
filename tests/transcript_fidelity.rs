//! A replay that matches must mean the engine did the same thing: every part of a model request
//! is pinned, a cut-short record is never a clean match, and the header agrees with the facts.

use std::path::PathBuf;

use hookloop::hooks;
use hookloop::machine::{Digest, Effect, Input, RequestDigest, SUMMARY_INSTRUCTION, ToolSpec};
use hookloop::transcript::{Event, Transcript, TranscriptError};

fn golden(name: &str) -> Transcript {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/transcripts")
        .join(format!("{name}.jsonl"));
    Transcript::read(path).unwrap()
}

/// The recorded digest of the `nth` model request.
fn nth_request(transcript: &mut Transcript, nth: usize) -> &mut RequestDigest {
    transcript
        .records
        .iter_mut()
        .filter_map(|r| match &mut r.event {
            Event::Effect(Effect::CallLlm { digest, .. }) => Some(digest),
            _ => None,
        })
        .nth(nth)
        .expect("a model request")
}

/// The divergence message of a transcript that must not replay.
fn divergence(transcript: &Transcript) -> String {
    let text = transcript.to_jsonl();
    let error = hookloop::transcript::replay_str(&text).expect_err("the replay must diverge");
    error.to_string()
}

#[test]
fn a_golden_transcript_with_a_tampered_tool_list_diverges_in_tools() {
    let mut transcript = golden("stop_objection_is_injected");
    // The record says the model was offered `todo__list` and `todo___Stop`: an engine that
    // leaked a hook to the model. Today's engine offers `todo__list` only.
    let offered: Vec<ToolSpec> = transcript.header.catalog.servers[0]
        .tools
        .iter()
        .map(|tool| ToolSpec {
            name: hooks::qualify(
                transcript.header.catalog.servers[0].server.as_str(),
                &tool.name,
            ),
            description: tool.description.clone(),
            input_schema: tool.input_schema.clone(),
        })
        .collect();
    assert_eq!(offered.len(), 2, "the catalog holds list and _Stop");
    nth_request(&mut transcript, 0).tools = Digest::of_tools(&offered);
    let message = divergence(&transcript);
    assert!(
        message.contains("the model request differs in: tools\n"),
        "{message}"
    );
}

#[test]
fn a_golden_transcript_with_a_renamed_tool_diverges_in_tools() {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/transcripts/compaction_with_post_compact.jsonl"),
    )
    .unwrap();
    // The catalog (header and fact) renames `fs__read`; the recorded requests still pin the
    // old name, as a regression that renamed a tool would leave them.
    let tampered = text.replace(r#""name":"read""#, r#""name":"read_file""#);
    assert_ne!(tampered, text);
    let error = hookloop::transcript::replay_str(&tampered).unwrap_err();
    let divergence = error.divergence().expect("a divergence");
    assert_eq!(divergence.request_parts(), ["tools"]);
}

#[test]
fn a_golden_transcript_with_a_tampered_summary_instruction_diverges_in_instruction() {
    let mut transcript = golden("compaction_with_post_compact");
    let summary = transcript
        .records
        .iter()
        .position(|r| {
            matches!(
                &r.event,
                Event::Effect(Effect::CallLlm {
                    purpose: hookloop::machine::Purpose::Summary { .. },
                    ..
                })
            )
        })
        .expect("a summary request");
    let Event::Effect(Effect::CallLlm { digest, .. }) = &mut transcript.records[summary].event
    else {
        unreachable!()
    };
    let changed = SUMMARY_INSTRUCTION.replace("the next step", "nothing else");
    let recorded = RequestDigest::of(None, digest.messages, digest.tools, Some(&changed), 0);
    digest.instruction = recorded.instruction;
    let message = divergence(&transcript);
    assert!(
        message.contains("the model request differs in: instruction\n"),
        "{message}"
    );
}

#[test]
fn a_changed_output_limit_diverges_in_limits() {
    let mut transcript = golden("several_prompts_share_one_session");
    transcript.header.config.policy.max_output_tokens += 1;
    let message = divergence(&transcript);
    assert!(
        message.contains("the model request differs in: limits\n"),
        "{message}"
    );
}

#[test]
fn a_changed_system_prompt_diverges_in_system() {
    let mut transcript = golden("several_prompts_share_one_session");
    transcript.header.config.system_prompt = Some("Be terse.".into());
    let message = divergence(&transcript);
    assert!(
        message.contains("the model request differs in: system\n"),
        "{message}"
    );
}

#[test]
fn a_changed_prompt_diverges_in_messages() {
    let mut transcript = golden("several_prompts_share_one_session");
    let prompt = transcript
        .records
        .iter_mut()
        .find_map(|r| match &mut r.event {
            Event::Fact(Input::Prompted { text }) => Some(text),
            _ => None,
        })
        .unwrap();
    prompt.push('!');
    let message = divergence(&transcript);
    assert!(
        message.contains("the model request differs in: messages\n"),
        "{message}"
    );
}

#[test]
fn a_version_1_golden_is_refused_naming_both_versions() {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/transcripts/stop_objection_is_injected.jsonl"),
    )
    .unwrap()
    .replacen(r#""version":3"#, r#""version":1"#, 1);
    let error = Transcript::parse(&text).unwrap_err();
    assert!(
        matches!(error, TranscriptError::UnsupportedVersion { found: 1 }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("version 1") && message.contains("versions 2 to 3"),
        "{message}"
    );
}

/// The text of a golden transcript.
fn golden_text(name: &str) -> String {
    std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/transcripts")
            .join(format!("{name}.jsonl")),
    )
    .unwrap()
}

#[test]
fn a_cut_short_record_replays_but_is_not_whole_and_counts_the_missing_orders() {
    let text = golden_text("stop_objection_is_injected");
    // Cut in the middle of the line of the first `call_hooks` order.
    let at = text.find(r#""effect":"call_hooks""#).unwrap() + 10;
    let report = hookloop::transcript::replay_str(&text[..at]).unwrap();
    assert!(!report.is_whole());
    assert_eq!(report.unrecorded_effects, 1);
    let said = report.to_string();
    assert!(said.contains("the record is cut short"), "{said}");
    assert!(
        said.contains("1 order(s) the machine gave after the last whole record"),
        "{said}"
    );
}

#[test]
fn a_record_that_ends_mid_prompt_is_not_whole() {
    let text = golden_text("stop_objection_is_injected");
    // Whole lines up to the first `call_hooks` order: the record ends while `_Stop` runs.
    let end = text
        .find(r#"{"at_ms":0,"fact":{"fact":"hook_answered""#)
        .unwrap();
    let report = hookloop::transcript::replay_str(&text[..end]).unwrap();
    assert!(!report.is_whole());
    assert!(
        report
            .to_string()
            .contains("the record ends mid-prompt, while the machine is awaiting _Stop"),
        "{report}"
    );
    let whole = hookloop::transcript::replay_str(&text).unwrap();
    assert!(whole.is_whole(), "{whole}");
}

#[tokio::test]
async fn live_replay_checks_the_end_of_the_record() {
    let text = golden_text("model_failure_ends_the_prompt");
    let host = hookloop::testing::InProcessHost::new();
    let transcript = Transcript::parse(&text).unwrap();
    let report = hookloop::transcript::replay_live(&transcript, &host).await;
    assert!(report.is_clean(), "{report}");
    // Without its last order and the close, the record ends before the machine's `finish`.
    let lines: Vec<&str> = text.lines().collect();
    let cut = lines[..lines.len() - 2].join("\n") + "\n";
    let transcript = Transcript::parse(&cut).unwrap();
    let report = hookloop::transcript::replay_live(&transcript, &host).await;
    let divergence = report.divergence.as_ref().expect("a divergence at the end");
    assert_eq!(divergence.index, transcript.records.len());
    assert!(
        report
            .to_string()
            .contains("the transcript ends, but the machine gave another order"),
        "{report}"
    );
}

/// Each write or flush: the thread that made it, and which it was.
type WriteLog = std::sync::Arc<std::sync::Mutex<Vec<(std::thread::ThreadId, &'static str)>>>;

/// A writer that notes which thread made each write and each flush.
#[derive(Clone, Default)]
struct ThreadNotingWriter {
    log: WriteLog,
}

impl std::io::Write for ThreadNotingWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let id = std::thread::current().id();
        self.log.lock().unwrap().push((id, "write"));
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let id = std::thread::current().id();
        self.log.lock().unwrap().push((id, "flush"));
        Ok(())
    }
}

#[tokio::test(flavor = "current_thread")]
async fn records_are_written_and_flushed_line_by_line_off_the_session_thread() {
    use hookloop::testing::{HookStep, InProcessHost, ScriptedLlm, Step};
    use hookloop::transcript::Recorder;
    use hookloop::{Config, Hook, HookServers, Session};

    let llm = ScriptedLlm::new([Step::text("Done."), Step::text("Done, really.")]);
    let host = InProcessHost::new().hook("todo", Hook::Stop, [HookStep::Say("1 open".into())]);
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .build()
        .unwrap();
    let mut session = Session::new(config, llm, host);
    let writer = ThreadNotingWriter::default();
    let log = std::sync::Arc::clone(&writer.log);
    let recorder =
        Recorder::to_writer(writer, "the test writer", &session.transcript_header()).unwrap();
    let header_ops = log.lock().unwrap().len();
    session.record_with(recorder.clone()).unwrap();
    session.prompt("Finish the feature.").await.unwrap();
    let records = recorder.records();
    assert!(records > 5, "{records}");
    // Dropping the last clone waits for the writer: nothing queued is lost.
    drop(session);
    drop(recorder);

    let session_thread = std::thread::current().id();
    let log = log.lock().unwrap();
    let after_header = &log[header_ops..];
    assert!(
        after_header.iter().all(|(id, _)| *id != session_thread),
        "a record was written on the session's thread"
    );
    // One write and one flush per line, in that order.
    assert_eq!(after_header.len() as u64, 2 * records);
    for pair in after_header.chunks(2) {
        assert_eq!((pair[0].1, pair[1].1), ("write", "flush"));
    }
}

#[test]
fn a_header_catalog_that_differs_from_the_first_catalog_fact_diverges() {
    let mut transcript = golden("stop_objection_is_injected");
    transcript.header.catalog.servers[0].tools.pop();
    let error = transcript.replay().unwrap_err();
    assert!(
        matches!(
            error.kind,
            hookloop::transcript::DivergenceKind::HeaderCatalog { first: Some(_), .. }
        ),
        "{error}"
    );
    assert_eq!(error.index, 0);
    assert!(
        error
            .to_string()
            .contains("the header's catalog is not the one the first catalog_changed fact gave"),
        "{error}"
    );

    // A header that lists tools no fact ever gave the machine.
    let mut transcript = golden("model_failure_ends_the_prompt");
    transcript.header.catalog = golden("stop_objection_is_injected").header.catalog;
    transcript.records.remove(0);
    transcript.lines.remove(0);
    let error = transcript.replay().unwrap_err();
    assert!(
        matches!(
            error.kind,
            hookloop::transcript::DivergenceKind::HeaderCatalog { first: None, .. }
        ),
        "{error}"
    );
}
