//! A misbehaving model through `hookloop acp`: two sessions on one connection, which the agent
//! runs on one thread; one session's model sends a hostile reply, and the other session's
//! prompt, which its model answers at once, must be answered promptly all the same.

mod acp_agent;
mod loopback;
mod misbehaving_model;

use std::time::{Duration, Instant};

use acp_agent::Agent;
use loopback::{FakeProvider, Reply};
use misbehaving_model::{
    MisbehavingModel, Script, anthropic_blocks, anthropic_whole_text, openai_text,
    openai_tool_indexes, peak_rss, process_cpu,
};
use serde_json::{Value, json};

/// What the other session may wait, from its prompt to its answer. It measured 7.8 s on a
/// release build before decoding was linear and capped, and about 50 ms after, on a debug build
/// (see the report of the change); the bound leaves a wide margin for a loaded machine.
const OTHER_SESSION_BOUND: Duration = Duration::from_secs(3);

/// The first user text of a request: the prompt, which says which session it is.
fn prompt_of(body: &Value) -> String {
    let first = &body["messages"][0]["content"];
    match first {
        Value::String(text) => text.clone(),
        Value::Array(parts) => parts
            .iter()
            .filter_map(|p| p["text"].as_str())
            .collect::<String>(),
        _ => String::new(),
    }
}

/// Runs the two sessions against `server`: the hostile one first, and once its reply has begun,
/// the other; the other's latency, and the hostile prompt's reply.
async fn two_sessions(server: &MisbehavingModel, env: &[(&str, &str)]) -> (Duration, Value) {
    // The agent's defaults point at this provider; `env` points it at the misbehaving one.
    let unused = FakeProvider::start(|_| Reply::text("unused"));
    let mut agent = Agent::spawn(&unused, env);
    agent.initialize().await;
    let hostile = agent.new_session(json!([])).await;
    let other = agent.new_session(json!([])).await;
    let pid = agent.pid();
    let cpu_before = process_cpu(pid);
    let rss_before = peak_rss(pid);

    let hostile_prompt = agent.prompt(&hostile, "hostile").await;
    let begun = Instant::now();
    while server.begun() == 0 {
        assert!(begun.elapsed() < Duration::from_secs(30), "no request came");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let started = Instant::now();
    let (reply, _) = agent.prompt_to_end(&other, "hello").await;
    let latency = started.elapsed();
    assert_eq!(reply["result"]["stopReason"], "end_turn", "{reply}");

    let (hostile_reply, updates) = agent.reply(hostile_prompt).await;
    let cpu = process_cpu(pid) - cpu_before;
    let grown = peak_rss(pid).saturating_sub(rss_before);
    eprintln!(
        "other session answered in {latency:?}; the agent used {cpu:?} of CPU, its peak RSS \
         grew {} KiB",
        grown / 1024
    );
    // The hostile reply is refused at the event past the cap: far under a second of CPU.
    assert!(cpu < Duration::from_secs(5), "{cpu:?} of CPU");
    // What one reply may make the agent hold: the answer's cap (16 MiB) and what decoding
    // it costs, well under this.
    assert!(grown < 64 * 1024 * 1024, "peak RSS grew {grown} bytes");
    agent.close().await;
    (latency, json!({"reply": hostile_reply, "updates": updates}))
}

#[tokio::test]
async fn a_session_fed_144000_tool_call_indexes_does_not_stall_another_on_the_connection() {
    let server = MisbehavingModel::start(|seen| {
        if prompt_of(&seen.body) == "hostile" {
            Script::Sse(openai_tool_indexes(144_000, 16))
        } else {
            Script::Sse(openai_text("fine"))
        }
    });
    let url = server.openai_url();
    let (latency, hostile) = two_sessions(&server, &[("OPENAI_BASE_URL", &url)]).await;
    assert!(latency < OTHER_SESSION_BOUND, "{latency:?}");
    let shown = hostile.to_string();
    assert!(shown.contains("more than 64 tool calls"), "{shown}");
}

#[tokio::test]
async fn a_session_fed_80000_content_blocks_does_not_stall_another_on_the_connection() {
    let server = MisbehavingModel::start(|seen| {
        if prompt_of(&seen.body) == "hostile" {
            Script::Sse(anthropic_blocks(80_000, "text"))
        } else {
            Script::Whole(anthropic_whole_text("fine"))
        }
    });
    let url = server.url.clone();
    let env = [
        ("HOOKLOOP_PROVIDER", "anthropic"),
        ("ANTHROPIC_BASE_URL", url.as_str()),
    ];
    let (latency, hostile) = two_sessions(&server, &env).await;
    assert!(latency < OTHER_SESSION_BOUND, "{latency:?}");
    let shown = hostile.to_string();
    assert!(shown.contains("more than 256 content blocks"), "{shown}");
}

#[tokio::test]
async fn a_session_whose_model_keeps_alive_forever_ends_at_the_deadline_and_stalls_no_other() {
    let server = MisbehavingModel::start(|seen| {
        if prompt_of(&seen.body) == "hostile" {
            Script::Endless {
                head: b": open\n\n".to_vec(),
                piece: b": ping\n\n".to_vec(),
                pause: Duration::from_millis(20),
            }
        } else {
            Script::Sse(openai_text("fine"))
        }
    });
    let url = server.openai_url();
    let env = [
        ("OPENAI_BASE_URL", url.as_str()),
        ("HOOKLOOP_LLM_REPLY_TIMEOUT_SECS", "3"),
    ];
    let (latency, hostile) = two_sessions(&server, &env).await;
    assert!(latency < OTHER_SESSION_BOUND, "{latency:?}");
    let shown = hostile.to_string();
    assert!(shown.contains("did not complete within 3 s"), "{shown}");
}
