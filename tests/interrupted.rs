//! A record cut anywhere restores: every prefix of every golden transcript (the file as a crash
//! after that record would leave it), and every prefix with a torn line after it, is closed by
//! `transcript::restore` into a record that replays whole, whose history pairs every call, that
//! keeps everything the prefix held, and whose machine takes the next prompt.

use std::path::PathBuf;

use hookloop::machine::{FinishReason, Input, Message, Phase, check_pairing, interrupted_text};
use hookloop::transcript::{Event, Replayer, Transcript, suite_files};

fn goldens() -> Vec<(PathBuf, String)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/transcripts");
    let files = suite_files(&[dir]).unwrap();
    assert!(files.len() > 20, "{files:?}");
    files
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path).unwrap();
            (path, text)
        })
        .collect()
}

/// The file's first `lines` lines, each with its newline.
fn prefix(text: &str, lines: usize) -> String {
    text.split_inclusive('\n').take(lines).collect()
}

/// The history a plain replay of `transcript` up to its close leaves.
fn replayed_history(transcript: &Transcript) -> Vec<Message> {
    let mut replayer = Replayer::new(&transcript.header);
    for record in &transcript.records {
        if matches!(record.event, Event::Fact(Input::Closed)) {
            break;
        }
        replayer.step(record).unwrap();
    }
    replayer.machine().history().to_vec()
}

fn check_cut(name: &str, text: &str) {
    let transcript = Transcript::parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    let before = replayed_history(&transcript);
    // A load goes on from the session's close, if the record has one: what follows it is the
    // closing session's `_SessionEnd`, not a prompt to close.
    let mut upto_close = transcript.clone();
    if let Some(close) = upto_close
        .records
        .iter()
        .position(|r| matches!(r.event, Event::Fact(Input::Closed)))
    {
        upto_close.records.truncate(close);
        upto_close.truncated = None;
    }
    // A file that stops after a fact, before the orders it led to, does not replay (an engine
    // that ordered more would look the same); it is cut all the same.
    let cut_mid_prompt = upto_close
        .replay()
        .map_or(true, |report| report.incompleteness().is_some());
    let restored = transcript
        .clone()
        .restore()
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    let history = restored.machine.history();
    assert_eq!(restored.machine.phase(), Phase::Idle, "{name}");
    check_pairing(history).unwrap_or_else(|e| panic!("{name}: {e}"));
    // Nothing the prefix held is lost: closing only adds.
    assert_eq!(&history[..before.len()], &before[..], "{name}");
    // Closing adds tool results alone: a cut batch's results, those it had (a refused or
    // finished call's) and the interrupted ones for the rest.
    for added in &history[before.len()..] {
        assert!(
            matches!(added, Message::ToolResult { .. }),
            "{name}: closing added {added:?}"
        );
    }
    // Closed exactly when the record was not whole, and the closed record replays whole.
    assert_eq!(restored.interruption().is_some(), cut_mid_prompt, "{name}");
    let closed = Transcript::new(transcript.header.clone(), restored.records().to_vec());
    let report = closed.replay().unwrap_or_else(|d| panic!("{name}: {d}"));
    assert!(report.is_whole(), "{name}: {report}");
    if restored
        .interruption()
        .is_some_and(|cut| cut.phase != Phase::Idle)
    {
        assert_eq!(
            report.finishes.last(),
            Some(&FinishReason::Interrupted),
            "{name}"
        );
    }
    // The session goes on: the next prompt is taken and gives an order.
    let mut machine = restored.machine;
    machine
        .handle(Input::Prompted {
            text: "go on".into(),
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    assert!(machine.poll_effect().is_some(), "{name}");
}

#[test]
fn every_prefix_of_every_golden_restores_closed_paired_and_whole() {
    let mut cuts = 0;
    for (path, text) in goldens() {
        let lines = text.lines().count();
        for kept in 1..=lines {
            let name = format!("{} cut after line {kept}", path.display());
            check_cut(&name, &prefix(&text, kept));
            cuts += 1;
        }
    }
    assert!(cuts > 400, "{cuts}");
}

#[test]
fn every_prefix_with_a_torn_line_after_it_drops_the_line_and_says_so() {
    for (path, text) in goldens() {
        let lines: Vec<&str> = text.split_inclusive('\n').collect();
        for (kept, next) in lines.iter().enumerate().skip(1) {
            let torn = format!("{}{}", prefix(&text, kept), &next[..next.len() / 2]);
            let name = format!("{} torn after line {kept}", path.display());
            check_cut(&name, &torn);
            let parsed = Transcript::parse(&torn).unwrap();
            let closed_before = parsed
                .records
                .iter()
                .any(|r| matches!(r.event, Event::Fact(Input::Closed)));
            let restored = parsed.restore().unwrap();
            if closed_before {
                // The session's close comes first; the torn line is after what a load keeps.
                continue;
            }
            let cut = restored
                .interruption()
                .expect("a torn line is an interruption");
            assert_eq!(cut.torn.as_ref().map(|t| t.line), Some(kept + 1), "{name}");
            assert!(cut.to_string().contains("cut last line"), "{name}: {cut}");
        }
    }
}

#[test]
fn a_prompt_cut_while_its_tools_ran_answers_them_as_interrupted_and_names_them() {
    let (_, text) = goldens()
        .into_iter()
        .find(|(path, _)| path.ends_with("cancellation_during_tools.jsonl"))
        .unwrap();
    // Up to the `call_tools` order, before any result or the cancel.
    let at = text
        .lines()
        .position(|line| line.contains(r#""effect":"call_tools""#))
        .unwrap();
    let restored = Transcript::parse(&prefix(&text, at + 1))
        .unwrap()
        .restore()
        .unwrap();
    let cut = restored.interruption().unwrap().clone();
    assert_eq!(cut.phase, Phase::RunningTools);
    assert!(!cut.calls.is_empty(), "{cut:?}");
    assert!(!cut.reply_lost);
    let message = cut.to_string();
    assert!(message.contains("answered as interrupted"), "{message}");
    let last = restored.machine.history().last().unwrap();
    assert!(
        matches!(last, Message::ToolResult { output, .. }
            if output.is_error && output.joined_text() == interrupted_text(true)),
        "{last:?}"
    );
    // The closing records are facts and orders like any other: the fact, then the finish.
    let tail: Vec<&str> = restored
        .records()
        .iter()
        .rev()
        .take(2)
        .map(|r| match &r.event {
            Event::Fact(fact) => fact.kind(),
            Event::Effect(_) => "effect",
            _ => "other",
        })
        .collect();
    assert_eq!(tail, ["effect", "prompt_interrupted"]);
}

#[test]
fn a_compaction_cut_before_post_compact_answered_owes_the_round_to_the_next_prompt() {
    let (_, text) = goldens()
        .into_iter()
        .find(|(path, _)| path.ends_with("compaction_with_post_compact.jsonl"))
        .unwrap();
    let at = text
        .lines()
        .position(|line| line.contains(r#""hook":"_PostCompact""#) && line.contains("call_hooks"))
        .unwrap();
    let restored = Transcript::parse(&prefix(&text, at + 1))
        .unwrap()
        .restore()
        .unwrap();
    assert_eq!(
        restored.interruption().unwrap().phase,
        Phase::PostCompacting
    );
    let mut machine = restored.machine;
    machine
        .handle(Input::Prompted {
            text: "go on".into(),
        })
        .unwrap();
    let mut asked = Vec::new();
    while let Some(effect) = machine.poll_effect() {
        asked.push(format!("{effect:?}"));
    }
    assert!(asked.iter().any(|e| e.contains("PostCompact")), "{asked:?}");
}

#[test]
fn the_fact_is_refused_when_no_prompt_runs() {
    let mut machine = hookloop::Machine::new(hookloop::Policy::default(), None);
    let error = machine.handle(Input::PromptInterrupted).unwrap_err();
    assert!(error.to_string().contains("prompt_interrupted"), "{error}");
}

#[test]
fn a_closed_record_shows_the_interruption_and_the_interrupted_finish() {
    let (_, text) = goldens()
        .into_iter()
        .find(|(path, _)| path.ends_with("cancellation_during_tools.jsonl"))
        .unwrap();
    let at = text
        .lines()
        .position(|line| line.contains(r#""effect":"call_tools""#))
        .unwrap();
    let transcript = Transcript::parse(&prefix(&text, at + 1)).unwrap();
    let restored = transcript.clone().restore().unwrap();
    let closed = Transcript::new(transcript.header.clone(), restored.records().to_vec());
    let view = hookloop::transcript::SessionView::build(&closed);
    assert!(view.end.is_complete(), "{:?}", view.end);
    let shown = view.to_text();
    assert!(
        shown.contains("interrupted: the agent stopped during this prompt"),
        "{shown}"
    );
    assert!(shown.contains("prompt ended: interrupted"), "{shown}");
}
