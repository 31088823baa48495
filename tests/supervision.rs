//! Supervision through a real server process: a transcript records the supervisor's facts and
//! orders, and a replay checks them against the pure supervisor.

mod common;

use std::time::Duration;

use hookloop::supervisor::{self, Fact, Order};
use hookloop::testing::{ScriptedLlm, Step};
use hookloop::transcript::{DivergenceKind, Event, Recorder, Transcript};
use hookloop::{Config, HookServers, Session};

use common::{Scratch, connect, eventually, fast_options, lines, test_server};

#[tokio::test]
async fn a_kill_and_restart_are_recorded_and_replay_against_the_supervisor() {
    let dir = Scratch::new("supervision");
    let pids = dir.file("pids");
    let host = connect(
        vec![(
            "todo",
            test_server(&[
                ("TS_HOOKS", "_Stop"),
                ("TS_STOP", "hang|hang|empty"),
                ("TS_STATE_DIR", &dir.path().to_string_lossy()),
                ("TS_PID_FILE", &pids),
            ]),
        )],
        fast_options(),
    )
    .await;
    let config = Config::builder()
        .hook_servers(HookServers::All)
        .hook_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let llm = ScriptedLlm::new((0..3).map(|i| Step::text(format!("end {i}"))));
    let mut session = Session::new(config, llm, host);
    let recorder = Recorder::in_memory(&session.transcript_header());
    session.record_with(recorder.clone()).unwrap();
    session.prompt("one").await.unwrap();
    session.prompt("two").await.unwrap();
    let back = || {
        lines(&pids).len() == 2
            && session.host().server_pid("todo").map(|p| p.to_string()) == lines(&pids).pop()
    };
    assert!(eventually(Duration::from_secs(10), back).await);
    session.prompt("three").await.unwrap();

    let text = recorder.text().unwrap();
    let transcript = Transcript::parse(&text).unwrap();
    assert!(transcript.header.supervision.is_some());
    let supervision: Vec<&supervisor::Event> = transcript
        .records
        .iter()
        .filter_map(|r| match &r.event {
            Event::Supervision(event) => Some(event),
            _ => None,
        })
        .collect();
    assert!(
        matches!(
            supervision.as_slice(),
            [
                supervisor::Event::Fact(Fact::ServerStarted { .. }),
                supervisor::Event::Fact(Fact::ServerExited {
                    answered: false,
                    ..
                }),
                supervisor::Event::Order(Order::StartServer { .. }),
                supervisor::Event::Fact(Fact::ServerStarted { .. }),
            ]
        ),
        "{supervision:#?}"
    );
    assert!(
        text.contains(r#""supervision":{"fact":"server_exited""#),
        "{text}"
    );
    transcript.replay().unwrap();

    // A record whose wait differs from the supervisor's rule is a divergence.
    let Some(after) = supervision.iter().find_map(|e| match e {
        supervisor::Event::Order(Order::StartServer { after_ms, .. }) => Some(*after_ms),
        _ => None,
    }) else {
        unreachable!("matched above")
    };
    let tampered = text.replace(
        &format!(r#""after_ms":{after}"#),
        &format!(r#""after_ms":{}"#, after + 1_000_000),
    );
    let divergence = Transcript::parse(&tampered).unwrap().replay().unwrap_err();
    assert!(
        matches!(divergence.kind, DivergenceKind::SupervisionMismatch { .. }),
        "{divergence}"
    );
}
