//! Golden transcripts of sessions with subagents: each scenario runs a real `Session` whose
//! model calls the built-in `agent` tool, with scripted fakes under tokio's paused clock, and
//! records it. A subagent's orders and facts are recorded on its own lane (`agent` in each of
//! its records) in the same file; the committed file must replay cleanly, parent and children.
//!
//! `HOOKLOOP_BLESS=1 cargo test --test subagent_transcripts` rewrites the files.

#[path = "support/golden.rs"]
mod goldens;

use std::time::Duration;

use hookloop::machine::{AgentId, Effect, FinishReason, Input, Phase, Subagents, ToolOutput};
use hookloop::testing::{InProcessHost, ScriptedLlm, Step, echo};
use hookloop::transcript::{
    DivergenceKind, Event, ReplayReport, SubagentReport, Transcript, bless,
};
use hookloop::{ConfigBuilder, Hook, PromptStop};
use serde_json::json;

use goldens::{Run, golden, hooks_on, say};

/// Hooks on, and subagents: two at once, one level deep.
fn with_subagents() -> ConfigBuilder {
    hooks_on().subagents(Subagents::new(2))
}

/// A reply that starts one subagent per task, each `(description, prompt)`.
fn agents(first_id: u32, tasks: &[(&str, &str)]) -> Step {
    let calls: Vec<(&str, serde_json::Value)> = tasks
        .iter()
        .map(|(description, prompt)| {
            (
                "agent",
                json!({"description": description, "prompt": prompt}),
            )
        })
        .collect();
    Step::tools(first_id, &calls)
}

/// The report of the subagent `id`.
fn subagent<'a>(report: &'a ReplayReport, id: &str) -> &'a SubagentReport {
    report
        .subagents
        .iter()
        .find(|child| child.id == AgentId(id.to_owned()))
        .unwrap_or_else(|| panic!("no subagent {id} in {:?}", report.subagents))
}

#[tokio::test(start_paused = true)]
async fn subagent_stop_objects_once() {
    let llm = ScriptedLlm::new([
        agents(1, &[("tests", "Write the tests.")]),
        Step::text("Done."),
        Step::tools(1, &[("fs__write", json!({"path": "tests/a.rs"}))]),
        Step::text("Wrote the tests; done."),
        Step::text("The subagent wrote the tests."),
    ]);
    let host = InProcessHost::new()
        .tool("fs", "write", |_| ToolOutput::text("written"))
        .hook("todo", Hook::SubagentStart, [say("Work in tests/ only.")])
        .hook("todo", Hook::SubagentStop, [say("1 open: tests"), say("")]);
    let mut run = Run::new(with_subagents(), llm, host);
    assert_eq!(
        run.prompt("Get the tests written.").await,
        PromptStop::EndTurn
    );
    let report = golden("subagent_stop_objects_once", &run.finish().await);
    assert_eq!(report.finishes, [FinishReason::EndTurn]);
    // The objection was the child's: the session's own budget is untouched.
    assert_eq!(report.counters.objections, 0);
    let child = subagent(&report, "agent-1");
    assert_eq!(child.finish, Some(FinishReason::EndTurn));
    assert_eq!(child.phase, Phase::Done);
}

#[tokio::test(start_paused = true)]
async fn two_subagents_run_in_parallel() {
    let llm = ScriptedLlm::new([
        agents(1, &[("a", "Read a.txt."), ("b", "Read b.txt.")]),
        Step::tools(1, &[("fs__read", json!({"path": "a.txt"}))]),
        Step::tools(1, &[("fs__read", json!({"path": "b.txt"}))]),
        Step::text("Read the first file."),
        Step::text("Read the second file."),
        Step::text("Both files are read."),
    ]);
    // Each read takes a while, so both children are mid-task at once.
    let host = InProcessHost::new()
        .tool("fs", "read", echo)
        .tool_delay(Duration::from_millis(10));
    let mut run = Run::new(with_subagents(), llm, host);
    assert_eq!(run.prompt("Read both files.").await, PromptStop::EndTurn);
    let transcript = run.finish().await;
    // The lanes interleave: the second child starts before the first has its tool result.
    let lane_of = |line: &str| {
        ["agent-1", "agent-2"]
            .into_iter()
            .find(|id| line.contains(&format!(r#""agent":"{id}""#)))
    };
    let lanes: Vec<&str> = transcript.lines().filter_map(lane_of).collect();
    let first_of_two = lanes.iter().position(|id| *id == "agent-2");
    let last_of_one = lanes.iter().rposition(|id| *id == "agent-1");
    assert!(
        first_of_two < last_of_one,
        "the children ran one after the other: {lanes:?}"
    );
    let report = golden("two_subagents_run_in_parallel", &transcript);
    for id in ["agent-1", "agent-2"] {
        assert_eq!(subagent(&report, id).finish, Some(FinishReason::EndTurn));
    }
}

#[tokio::test(start_paused = true)]
async fn subagent_cancelled_with_its_parent() {
    let llm = ScriptedLlm::new([agents(1, &[("slow", "Think for a long time.")]), Step::Hang]);
    let mut run = Run::new(with_subagents(), llm, InProcessHost::new());
    let cancel = run.session.cancel_handle();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        cancel.cancel();
    });
    assert_eq!(run.prompt("Think it over.").await, PromptStop::Cancelled);
    let report = golden("subagent_cancelled_with_its_parent", &run.finish().await);
    assert_eq!(report.finishes, [FinishReason::Cancelled]);
    let child = subagent(&report, "agent-1");
    assert_eq!(child.finish, Some(FinishReason::Cancelled));
    assert_eq!(child.phase, Phase::Done);
}

#[tokio::test(start_paused = true)]
async fn subagent_denied_by_pre_tool_use() {
    // The first `agent` call is denied outright and starts no subagent; the second runs, and
    // its own call of a destructive tool is denied inside it.
    let llm = ScriptedLlm::new([
        agents(
            1,
            &[("wipe", "Delete /etc."), ("tidy", "Tidy the build dir.")],
        ),
        Step::tools(1, &[("fs__rm", json!({"path": "/etc/build"}))]),
        Step::text("I could not delete it."),
        Step::text("One task was refused; the other could not delete."),
    ]);
    let host = InProcessHost::new().tool("fs", "rm", echo).hook(
        "guard",
        Hook::PreToolUse,
        [
            say("no subagent may delete /etc"),
            say(""),
            say("rm outside the workspace is not allowed"),
        ],
    );
    let mut run = Run::new(with_subagents(), llm, host);
    assert_eq!(run.prompt("Clean up.").await, PromptStop::EndTurn);
    let report = golden("subagent_denied_by_pre_tool_use", &run.finish().await);
    assert_eq!(report.finishes, [FinishReason::EndTurn]);
    let started: Vec<&AgentId> = report.subagents.iter().map(|child| &child.id).collect();
    assert_eq!(started, [&AgentId("agent-2".into())]);
}

#[tokio::test(start_paused = true)]
async fn subagent_compacts() {
    let big = "x".repeat(20_000);
    let llm = ScriptedLlm::new([
        agents(1, &[("read", "Read big.txt.")]),
        Step::tools(1, &[("fs__read", json!({"path": "big.txt"}))]),
        Step::text("Summary: read big.txt; todo #3 open."),
        Step::text("Read it."),
        Step::text("The subagent read it."),
    ]);
    let host = InProcessHost::new()
        .tool("fs", "read", move |_| ToolOutput::text(big.clone()))
        .hook("todo", Hook::PreCompact, [say("keep todo #3")])
        .hook("todo", Hook::PostCompact, [say("todo #3 is still open")]);
    let config = with_subagents().context_window(4_000, 1_000);
    let mut run = Run::new(config, llm, host);
    assert_eq!(run.prompt("Have big.txt read.").await, PromptStop::EndTurn);
    let requests = run.session.llm().requests();
    let summary = requests[2].instruction.clone().unwrap_or_default();
    assert!(summary.contains("keep todo #3"), "{summary}");
    let report = golden("subagent_compacts", &run.finish().await);
    // The compaction was the child's: the top-level agent's history was never compacted.
    assert_eq!(report.counters.compactions, 0);
    assert_eq!(
        subagent(&report, "agent-1").finish,
        Some(FinishReason::EndTurn)
    );
}

/// The committed golden `name`, read.
fn committed(name: &str) -> Transcript {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/transcripts")
        .join(format!("{name}.jsonl"));
    Transcript::read(path).expect("golden transcript")
}

/// The index of the first record `pick` matches.
fn position(transcript: &Transcript, pick: impl Fn(&Event) -> bool) -> usize {
    transcript
        .records
        .iter()
        .position(|record| pick(&record.event))
        .expect("a matching record")
}

#[test]
fn a_divergence_inside_a_subagent_names_it() {
    let mut transcript = committed("subagent_stop_objects_once");
    let index = position(&transcript, |event| {
        matches!(
            event,
            Event::AgentEffect {
                effect: Effect::CallHooks {
                    hook: Hook::SubagentStop,
                    ..
                },
                ..
            }
        )
    });
    let Event::AgentEffect {
        effect: Effect::CallHooks { timeout, .. },
        ..
    } = &mut transcript.records[index].event
    else {
        unreachable!("picked above");
    };
    *timeout += std::time::Duration::from_millis(1);
    let divergence = transcript.replay().expect_err("a changed order diverges");
    assert_eq!(divergence.agent, Some(AgentId("agent-1".into())));
    assert_eq!(divergence.index, index);
    assert!(
        matches!(divergence.kind, DivergenceKind::EffectMismatch { .. }),
        "{divergence}"
    );
    let shown = divergence.to_string();
    assert!(shown.contains("in subagent agent-1"), "{shown}");
}

#[test]
fn a_lane_no_agent_call_started_is_refused_naming_it() {
    let mut transcript = committed("subagent_stop_objects_once");
    let index = position(&transcript, |event| event.agent().is_some());
    let Event::AgentFact { agent, .. } = &mut transcript.records[index].event else {
        panic!("a subagent's lane starts with a fact");
    };
    *agent = AgentId("agent-7".into());
    let divergence = transcript.replay().expect_err("an unknown lane diverges");
    assert_eq!(divergence.index, index);
    assert!(
        matches!(&divergence.kind, DivergenceKind::UnknownAgent { agent } if agent.0 == "agent-7"),
        "{divergence}"
    );
}

#[test]
fn an_agent_call_answered_with_another_result_than_its_subagents_diverges() {
    let mut transcript = committed("subagent_stop_objects_once");
    let index = position(
        &transcript,
        |event| matches!(event, Event::Fact(Input::ToolFinished { id, .. }) if id.0 == "agent-1"),
    );
    let Event::Fact(Input::ToolFinished { output, .. }) = &mut transcript.records[index].event
    else {
        unreachable!("picked above");
    };
    *output = ToolOutput::text("Done.");
    let divergence = transcript.replay().expect_err("another result diverges");
    assert_eq!(divergence.index, index);
    assert_eq!(divergence.agent, None);
    assert!(
        matches!(
            &divergence.kind,
            DivergenceKind::AgentResultMismatch { replayed: Some(replayed), .. }
                if replayed.joined_text() == "Wrote the tests; done."
        ),
        "{divergence}"
    );
}

#[test]
fn a_subagents_lane_is_read_back_with_its_id_and_written_the_same() {
    let transcript = committed("two_subagents_run_in_parallel");
    let lanes: std::collections::BTreeSet<&AgentId> = transcript
        .records
        .iter()
        .filter_map(|record| record.event.agent())
        .collect();
    assert_eq!(
        lanes
            .into_iter()
            .map(|id| id.0.as_str())
            .collect::<Vec<_>>(),
        ["agent-1", "agent-2"]
    );
    let text = std::fs::read_to_string(
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/transcripts/two_subagents_run_in_parallel.jsonl"),
    )
    .unwrap();
    assert_eq!(transcript.to_jsonl(), text);
}

#[test]
fn a_supervision_record_with_an_agent_is_refused() {
    let text = committed("subagent_stop_objects_once").to_jsonl();
    let header = text.lines().next().unwrap();
    let line = r#"{"at_ms":0,"agent":"agent-1","supervision":{"order":"start_server","server":"todo","after_ms":1}}"#;
    let error = Transcript::parse(&format!("{header}\n{line}\n")).expect_err("refused");
    assert!(error.to_string().contains("line 2"), "{error}");
}

#[test]
fn bless_rewrites_a_subagents_lane_with_the_orders_its_machine_gives() {
    let golden = committed("subagent_stop_objects_once");
    let mut stale = golden.clone();
    // The child's first notice is gone from the record, as if an older engine gave none.
    let index = position(
        &stale,
        |event| matches!(event, Event::AgentEffect { effect: Effect::Notify { .. }, agent } if agent.0 == "agent-1"),
    );
    stale.records.remove(index);
    stale.lines.pop();
    let divergence = stale.replay().expect_err("the lane lacks an order");
    assert_eq!(divergence.agent, Some(AgentId("agent-1".into())));
    let blessed = bless(&stale).expect("the facts still fit");
    assert_eq!(blessed.to_jsonl(), golden.to_jsonl());
}

#[test]
fn a_record_written_before_lanes_were_recorded_replays_as_before() {
    // What the engine wrote before subagents had lanes: the parent's records alone.
    let golden = committed("subagent_stop_objects_once");
    let records: Vec<_> = golden
        .records
        .iter()
        .filter(|record| record.event.agent().is_none())
        .cloned()
        .collect();
    let older = Transcript::new(golden.header.clone(), records);
    let report = older.replay().expect("it replays as it did");
    assert!(report.is_whole());
    assert!(!subagent(&report, "agent-1").lane_recorded);
    assert!(
        report
            .to_string()
            .contains("1 subagent(s) without a recorded lane"),
        "{report}"
    );
    // In a record that holds lanes, a subagent without one is a divergence.
    let two = committed("two_subagents_run_in_parallel");
    let kept: Vec<_> = two
        .records
        .iter()
        .filter(|record| record.event.agent().is_none_or(|id| id.0 == "agent-1"))
        .cloned()
        .collect();
    let divergence = Transcript::new(two.header.clone(), kept)
        .replay()
        .expect_err("a lane is missing");
    assert!(
        matches!(
            divergence.kind,
            DivergenceKind::AgentResultMismatch { replayed: None, .. }
        ),
        "{divergence}"
    );
}
