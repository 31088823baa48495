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
    .replacen(r#""version":2"#, r#""version":1"#, 1);
    let error = Transcript::parse(&text).unwrap_err();
    assert!(
        matches!(error, TranscriptError::UnsupportedVersion { found: 1 }),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("version 1") && message.contains("version 2"),
        "{message}"
    );
}
