//! A hostile ACP client through `hookloop acp`: one that sends requests and never reads the
//! replies. The agent must stop reading once a bounded number of replies are unwritten, rather
//! than queue them all, and serve every request once the client reads again.

mod acp_agent;
mod loopback;
mod misbehaving_model;

use std::time::Duration;

use acp_agent::Agent;
use loopback::{FakeProvider, Reply};
use misbehaving_model::peak_rss;
use serde_json::json;
use tokio::io::AsyncWriteExt;

/// Requests the client sends before it reads anything.
const REQUESTS: u64 = 100_000;

#[tokio::test]
async fn a_client_that_never_reads_its_replies_is_held_back_and_served_once_it_reads() {
    let provider = FakeProvider::start(|_| Reply::text("unused"));
    // The protocol crate logs a warning per unknown method; those are not what is measured.
    let mut agent = Agent::spawn(&provider, &[("HOOKLOOP_LOG", "error")]);
    agent.initialize().await;
    let pid = agent.pid();
    let before = peak_rss(pid);

    // Cheap requests, each answered at once (method not found), written as fast as the agent
    // takes them, by a task of their own: with backpressure the writes stall.
    let mut stdin = agent.take_stdin();
    let writer = tokio::spawn(async move {
        let mut batch = String::new();
        for id in 0..REQUESTS {
            let frame = json!({"jsonrpc": "2.0", "id": id, "method": "hostile/nothing"});
            batch.push_str(&frame.to_string());
            batch.push('\n');
            if batch.len() > 16 * 1024 {
                stdin.write_all(batch.as_bytes()).await.unwrap();
                batch.clear();
            }
        }
        stdin.write_all(batch.as_bytes()).await.unwrap();
        stdin.flush().await.unwrap();
        stdin
    });
    // Let the agent take what it will while nobody reads.
    let mut writer = writer;
    let stalled = tokio::time::timeout(Duration::from_secs(5), &mut writer)
        .await
        .is_err();
    let grown = peak_rss(pid).saturating_sub(before);
    eprintln!(
        "stalled: {stalled}; the agent's peak RSS grew {} KiB while the client did not read",
        grown / 1024
    );
    assert!(
        stalled,
        "the agent read all {REQUESTS} requests with none of their replies read"
    );
    // What the agent may hold for a client that does not read: a few hundred short replies
    // and the pipes' buffers, far under this.
    assert!(grown < 8 * 1024 * 1024, "peak RSS grew {grown} bytes");

    // The client reads again: every request is answered, in order, and the writes finish.
    for id in 0..REQUESTS {
        let reply = agent.read().await;
        assert_eq!(reply["id"], json!(id), "{reply}");
        assert_eq!(reply["error"]["code"], -32601, "{reply}");
    }
    let stdin = tokio::time::timeout(Duration::from_secs(30), writer)
        .await
        .expect("the writes finish once the client reads")
        .unwrap();
    drop(stdin);
    agent.close().await;
}
