//! Recorded sessions under pressure from outside one process: two `hookloop acp` processes on
//! one `HOOKLOOP_RECORD_DIR` never both hold a session (a killed holder's lock does not
//! outlive it), and loading a big record does not hold up the other sessions of the process.

mod acp_agent;
mod common;
mod loopback;

use std::path::Path;
use std::time::{Duration, Instant};

use acp_agent::Agent;
use hookloop::testing::{InProcessHost, ScriptedLlm, Step};
use hookloop::{Config, Session};
use loopback::{FakeProvider, Reply, last_user_text};
use serde_json::{Value, json};

fn error_message(reply: &Value) -> String {
    reply["error"]["message"].as_str().unwrap_or("").to_owned()
}

fn temporaries(dir: &str) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|name| name.contains("reloading"))
        .collect()
}

#[tokio::test]
async fn a_session_open_in_one_process_is_refused_by_another_until_its_holder_dies() {
    let provider =
        FakeProvider::start(|request| Reply::text(&format!("ok: {}", last_user_text(request))));
    let scratch = common::Scratch::new("locks");
    let records = scratch.file("records");
    let env = [("HOOKLOOP_RECORD_DIR", records.as_str())];
    let cwd = std::env::temp_dir();

    // The first process records a session and keeps it open.
    let mut first = Agent::spawn(&provider, &env);
    first.initialize().await;
    let session = first.new_session(json!([])).await;
    let (reply, _) = first.prompt_to_end(&session, "one").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");

    // The second lists it, marked open, and cannot load or resume it.
    let mut second = Agent::spawn(&provider, &env);
    second.initialize().await;
    let (listed, _) = second.call("session/list", json!({})).await;
    let sessions = listed["result"]["sessions"].as_array().unwrap().clone();
    assert_eq!(sessions.len(), 1, "{listed}");
    assert_eq!(sessions[0]["_meta"]["hookloop/open"], true, "{listed}");
    for method in ["session/load", "session/resume"] {
        let (refused, _) = second
            .call(
                method,
                json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
            )
            .await;
        assert!(
            error_message(&refused).contains("open in another process"),
            "{method}: {refused}"
        );
    }
    // The holder goes on recording, untouched.
    let (reply, _) = first.prompt_to_end(&session, "two").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");

    // Killed, it holds nothing: the second process loads the session at once, with both
    // prompts, and goes on.
    first.kill().await;
    let (listed, _) = second.call("session/list", json!({})).await;
    assert!(
        listed["result"]["sessions"][0]["_meta"].is_null(),
        "{listed}"
    );
    let (loaded, history) = second
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
        )
        .await;
    assert_eq!(loaded["result"], json!({}), "{loaded}");
    let said: Vec<&str> = history
        .iter()
        .filter_map(|u| u["update"]["content"]["text"].as_str())
        .collect();
    assert!(said.contains(&"one") && said.contains(&"two"), "{said:?}");

    // Now the first process, started again, is the one refused.
    let mut third = Agent::spawn(&provider, &env);
    third.initialize().await;
    let (refused, _) = third
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
        )
        .await;
    assert!(
        error_message(&refused).contains("open in another process"),
        "{refused}"
    );
    let (reply, _) = second.prompt_to_end(&session, "three").await;
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");
    second.close().await;

    // Closed, it loads in the third, with every process's prompts: none vanished.
    let (loaded, history) = third
        .call(
            "session/load",
            json!({"sessionId": session, "cwd": cwd, "mcpServers": []}),
        )
        .await;
    assert_eq!(loaded["result"], json!({}), "{loaded}");
    let said: Vec<&str> = history
        .iter()
        .filter_map(|u| u["update"]["content"]["text"].as_str())
        .collect();
    for prompt in ["one", "two", "three"] {
        assert!(said.contains(&prompt), "{prompt} not in {said:?}");
    }
    third.close().await;
    assert!(
        temporaries(&records).is_empty(),
        "{:?}",
        temporaries(&records)
    );
}

/// Records a session of `prompts` prompts, each answered with `bytes` of text, at `path`.
async fn record_big(path: &Path, prompts: usize, bytes: usize) {
    let answer = "y".repeat(bytes);
    let llm = ScriptedLlm::new((0..prompts).map(|_| Step::text(&answer)));
    let config = Config::builder()
        .context_window(1 << 40, 100)
        .build()
        .unwrap();
    let mut session = Session::new(config, llm, InProcessHost::new());
    let recorder = session.record_to(path).unwrap();
    for n in 0..prompts {
        session.prompt(&format!("prompt {n}")).await.unwrap();
    }
    session.close().await.unwrap();
    recorder.check().unwrap();
}

#[tokio::test]
async fn loading_big_records_does_not_hold_up_another_sessions_prompt() {
    let provider = FakeProvider::start(|_| Reply::text("quick"));
    let scratch = common::Scratch::new("big-load");
    let records = scratch.file("records");
    std::fs::create_dir_all(&records).unwrap();
    let first = Path::new(&records).join("100-1-1.jsonl");
    record_big(&first, 60, 256 * 1024).await;
    let size = std::fs::metadata(&first).unwrap().len();
    assert!(size > 15 << 20, "{size}");
    let ids = ["100-1-1", "100-1-2", "100-1-3", "100-1-4"];
    for id in &ids[1..] {
        std::fs::copy(&first, Path::new(&records).join(format!("{id}.jsonl"))).unwrap();
    }
    let env = [("HOOKLOOP_RECORD_DIR", records.as_str())];
    let cwd = std::env::temp_dir();
    let mut agent = Agent::spawn(&provider, &env);
    agent.initialize().await;
    let live = agent.new_session(json!([])).await;

    // Four loads at once, then a prompt of the live session while they run.
    let mut loads = Vec::new();
    for id in ids {
        let params = json!({"sessionId": id, "cwd": cwd, "mcpServers": []});
        loads.push(agent.send("session/resume", params).await);
    }
    let started = Instant::now();
    let prompt = agent.prompt(&live, "are you there").await;
    let mut answered = None;
    let mut loaded = Vec::new();
    while answered.is_none() || loaded.len() < loads.len() {
        let frame = agent.read().await;
        let Some(id) = frame["id"].as_u64() else {
            continue;
        };
        if id == prompt {
            assert_eq!(frame["result"]["stopReason"], "end_turn", "{frame}");
            answered = Some((started.elapsed(), loaded.len()));
        } else if loads.contains(&id) {
            assert_eq!(frame["result"], json!({}), "{frame}");
            loaded.push(id);
        }
    }
    let (took, loads_done_before) = answered.unwrap();
    // Liveness, not speed: the bound is generous, and the loads were still going on.
    assert!(took < Duration::from_secs(2), "the prompt took {took:?}");
    assert!(
        loads_done_before < loads.len(),
        "every load had finished before the prompt was answered ({took:?}): nothing was measured"
    );
    agent.close().await;
}
