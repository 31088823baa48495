//! `hookloop acp` driven by the official TypeScript ACP SDK (npm `@agentclientprotocol/sdk`),
//! through tests/interop/acp_client.mjs, with a loopback model and the real todo server.
//!
//! Needs `HOOKLOOP_ACP_SDK_DIR`, a folder whose node_modules holds the SDK:
//! `CI_ENV=/dev/stdout bash .ci/setup.d/40-acp-interop.sh` installs it and prints the variable.

mod loopback;

use std::path::PathBuf;
use std::process::Command;

use loopback::{FakeProvider, Reply};
use serde_json::Value;

#[test]
fn the_typescript_sdk_runs_a_session() {
    let Some(dir) = std::env::var_os("HOOKLOOP_ACP_SDK_DIR").map(PathBuf::from) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI is set but HOOKLOOP_ACP_SDK_DIR is not: .ci/setup.d/40-acp-interop.sh did not run"
        );
        // Straight to the process's stderr: the test harness captures `println!`, and this
        // line is for whoever runs `cargo test`.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"acp interop skipped: HOOKLOOP_ACP_SDK_DIR is unset; run `CI_ENV=/dev/stdout bash \
              .ci/setup.d/40-acp-interop.sh` and export the variable it prints\n",
        );
        return;
    };
    assert!(
        dir.join("node_modules/@agentclientprotocol/sdk").is_dir(),
        "HOOKLOOP_ACP_SDK_DIR={} has no node_modules/@agentclientprotocol/sdk",
        dir.display()
    );
    // Node resolves the SDK from the script's own folder, so the script runs from there.
    let script = dir.join("acp_client.mjs");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/acp_client.mjs"),
        &script,
    )
    .unwrap();
    let provider = FakeProvider::start(|_| Reply::text("Hello from the loopback model."));
    let output = Command::new("node")
        .arg(&script)
        .arg(loopback::hookloop())
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .env("MCP_HOOK_SERVERS", "todo")
        .output()
        .expect("node runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "node failed: {}\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let seen: Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    assert_eq!(seen["protocolVersion"], 1, "{seen}");
    assert_eq!(seen["agentName"], "hookloop");
    assert_eq!(seen["mcpHttp"], true);
    assert_eq!(seen["stopReason"], "end_turn");
    assert_eq!(seen["text"], "Hello from the loopback model.");
    assert_eq!(seen["refused"]["code"], -32602, "{seen}");
    assert!(!provider.requests().is_empty());
}
