//! Live-tools replay: the record's model side against tool hosts that answer as recorded, or
//! not.

use hookloop::machine::{AgentId, Effect, HookReply, Notice, Subagents, ToolOutput};
use hookloop::testing::{HookStep, HostEvent, InProcessHost, ScriptedLlm, Step};
use hookloop::transcript::{DivergenceKind, DriftKind, Recorder, Transcript, replay_live};
use hookloop::{Config, Hook, HookServers, Session};
use serde_json::json;

/// A host whose `todo__list` answers `list` and whose `_Stop` answers `stop`, in turn.
fn host(list: &'static str, stop: [&str; 2]) -> InProcessHost {
    InProcessHost::new()
        .tool("todo", "list", move |_| ToolOutput::text(list))
        .hook(
            "todo",
            Hook::Stop,
            stop.map(|s| HookStep::Say(s.to_owned())),
        )
}

/// The model lists the todos, ends, hears an objection, lists again, ends; `_Stop` is quiet.
async fn recorded() -> Transcript {
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("todo__list", json!({}))]),
        Step::text("Done."),
        Step::tools(2, &[("todo__list", json!({}))]),
        Step::text("Done now."),
    ]);
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .build()
        .unwrap();
    let mut session = Session::new(config, llm, host("1 open", ["open: a", ""]));
    let recorder = Recorder::in_memory(&session.transcript_header());
    session.record_with(recorder.clone()).unwrap();
    session.prompt("Finish.").await.unwrap();
    session.close().await.unwrap();
    Transcript::parse(&recorder.text().unwrap()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn servers_that_answer_as_recorded_show_no_drift() {
    let transcript = recorded().await;
    let report = replay_live(&transcript, &host("1 open", ["open: a", ""])).await;
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.records, transcript.records.len());
}

#[tokio::test(start_paused = true)]
async fn changed_answers_are_reported_and_the_replay_goes_on() {
    let transcript = recorded().await;
    let report = replay_live(&transcript, &host("2 open", ["open: a, b", ""])).await;
    assert!(report.divergence.is_none(), "{report}");
    let kinds: Vec<_> = report.drifts.iter().map(|d| &d.kind).collect();
    assert_eq!(kinds.len(), 3, "{report}");
    assert!(matches!(kinds[0], DriftKind::Tool { live, .. } if live.joined_text() == "2 open"));
    assert!(matches!(
        kinds[1],
        DriftKind::Hook { live: HookReply::Text { text }, .. } if text == "open: a, b"
    ));
    assert!(matches!(kinds[2], DriftKind::Tool { .. }));
    let line = transcript.lines[report.drifts[0].index];
    assert_eq!(report.drifts[0].line, line);
    let shown = report.to_string();
    assert!(
        shown.contains("tool todo__list (call c1) answered differently"),
        "{shown}"
    );
    assert!(
        shown.contains("-       \"text\": \"1 open\"\n+       \"text\": \"2 open\""),
        "{shown}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_hook_that_no_longer_objects_changes_the_course() {
    let transcript = recorded().await;
    let report = replay_live(&transcript, &host("1 open", ["", ""])).await;
    assert_eq!(report.drifts.len(), 1, "{report}");
    let divergence = report.divergence.expect("the course changed");
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
}

#[tokio::test(start_paused = true)]
async fn a_server_gone_is_catalog_drift() {
    let transcript = recorded().await;
    let live = host("1 open", ["open: a", ""]);
    live.remove_server("todo");
    let report = replay_live(&transcript, &live).await;
    assert!(
        matches!(report.drifts[0].kind, DriftKind::Catalog { .. }),
        "{report}"
    );
    // Without the server's tool and hook, the model's recorded call is refused and the
    // record's course is left at once.
    assert!(report.divergence.is_some());
}

/// A session whose model starts one subagent; the subagent lists the todos and answers.
async fn recorded_with_a_subagent(host: InProcessHost) -> Transcript {
    let llm = ScriptedLlm::new([
        Step::tools(
            1,
            &[(
                "agent",
                json!({"description": "todos", "prompt": "List the todos."}),
            )],
        ),
        Step::tools(1, &[("todo__list", json!({}))]),
        Step::text("1 open."),
        Step::text("The subagent says 1 open."),
    ]);
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .subagents(Subagents::new(1))
        .build()
        .unwrap();
    let mut session = Session::new(config, llm, host);
    let recorder = Recorder::in_memory(&session.transcript_header());
    session.record_with(recorder.clone()).unwrap();
    session.prompt("How many todos?").await.unwrap();
    session.close().await.unwrap();
    Transcript::parse(&recorder.text().unwrap()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn a_subagent_replays_from_its_recorded_replies_against_the_live_tools() {
    let transcript = recorded_with_a_subagent(host("1 open", ["", ""])).await;
    let live = host("1 open", ["", ""]);
    let report = replay_live(&transcript, &live).await;
    assert!(report.is_clean(), "{report}");
    assert_eq!(report.records, transcript.records.len());
    // The subagent's own call reached the live host; the `agent` call did not.
    let called: Vec<String> = live
        .log()
        .into_iter()
        .filter_map(|event| match event {
            HostEvent::Tool { name, .. } => Some(name),
            _ => None,
        })
        .collect();
    assert_eq!(called, ["todo__list"]);
}

#[tokio::test(start_paused = true)]
async fn a_subagents_tool_that_answers_differently_drifts_on_its_lane() {
    let transcript = recorded_with_a_subagent(host("1 open", ["", ""])).await;
    let report = replay_live(&transcript, &host("2 open", ["", ""])).await;
    assert!(report.divergence.is_none(), "{report}");
    assert_eq!(report.drifts.len(), 1, "{report}");
    let drift = &report.drifts[0];
    assert!(
        matches!(&drift.kind, DriftKind::Tool { live, .. } if live.joined_text() == "2 open"),
        "{report}"
    );
    // The drifted answer is the subagent's, recorded on its lane.
    assert_eq!(
        transcript.records[drift.index].event.agent(),
        Some(&AgentId("agent-1".into()))
    );
}
