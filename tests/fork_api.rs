//! `transcript::fork` as a library: a recorded session forked at its `_Stop` round with a new
//! objection, continued with another scripted model, recorded as one transcript that replays.

use hookloop::machine::ToolOutput;
use hookloop::testing::{HookStep, InProcessHost, ScriptedLlm, Step};
use hookloop::transcript::{
    Continuation, ForkError, ForkPoint, Recorder, Transcript, fork, replay_str,
};
use hookloop::{Config, Hook, HookServers, PromptStop, Session};
use serde_json::json;

fn config() -> Config {
    Config::builder()
        .hook_servers(HookServers::All)
        .build()
        .expect("config")
}

fn host() -> InProcessHost {
    InProcessHost::new()
        .tool("todo", "list", |_| ToolOutput::text("1 open: write tests"))
        .hook(
            "todo",
            Hook::Stop,
            [HookStep::Say("1 open: write tests".into())],
        )
}

/// A session whose model ends its turn, is objected to, lists the todos, and ends again.
async fn recorded() -> Transcript {
    let llm = ScriptedLlm::new([
        Step::text("Done."),
        Step::tools(1, &[("todo__list", json!({}))]),
        Step::text("Wrote the tests; done."),
    ]);
    let mut session = Session::new(config(), llm, host());
    let recorder = Recorder::in_memory(&session.transcript_header());
    session.record_with(recorder.clone()).unwrap();
    session.prompt("Finish the feature.").await.unwrap();
    session.close().await.unwrap();
    Transcript::parse(&recorder.text().unwrap()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_fork_with_a_new_objection_continues_with_another_model_and_replays_as_one() {
    let transcript = recorded().await;
    let fork = fork(
        &transcript,
        ForkPoint::Stop(1),
        Some("Also update the changelog."),
    )
    .unwrap();
    assert_eq!(fork.next, Continuation::Resume);
    let llm = ScriptedLlm::new([Step::text("Changelog updated.")]);
    let recorder = Recorder::in_memory(&fork.header);
    let run = fork
        .run(config(), llm, InProcessHost::new(), Some(recorder.clone()))
        .await
        .unwrap();
    assert_eq!(run.stop, PromptStop::EndTurn);
    // The new model saw the new wording, injected as the hook's answer.
    let seen = run.session.llm().requests();
    assert_eq!(seen.len(), 1);
    assert!(format!("{:?}", seen[0].messages).contains("Also update the changelog."));
    assert_eq!(run.session.counters().objections, 1);
    let text = recorder.text().unwrap();
    let report = replay_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(report.counters.objections, 1);
}

#[tokio::test(start_paused = true)]
async fn fork_points_past_the_record_are_refused_with_what_it_holds() {
    let transcript = recorded().await;
    let error = fork(&transcript, ForkPoint::Stop(3), None).unwrap_err();
    assert!(matches!(error, ForkError::NoSuchPoint { .. }));
    assert_eq!(
        error.to_string(),
        "the transcript has no stop:3: it holds 2 _Stop round(s)"
    );
    let error = fork(
        &transcript,
        ForkPoint::Record(transcript.records.len()),
        None,
    )
    .unwrap_err();
    assert!(
        matches!(error, ForkError::NothingToContinue { .. }),
        "{error}"
    );
}
