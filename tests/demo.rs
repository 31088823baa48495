//! `hookloop demo`, as the README's first command runs it: offline, and telling its whole story.

mod loopback;

use std::process::Command;

#[test]
fn the_demo_tells_the_whole_story_offline() {
    let output = Command::new(loopback::hookloop())
        .arg("demo")
        // No provider, no hooks from the caller's environment: the demo sets up its own.
        .env_remove("OPENAI_API_KEY")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("MCP_HOOK_SERVERS")
        .output()
        .expect("the binary runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "demo failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    let milestones = [
        "The model in this demo is SCRIPTED",
        "_Stop objection from todo",
        "todo__complete",
        "history compacted",
        "_PostCompact from todo re-injected",
        "the model stopped for good",
        "_Stop budget spent",
        "the engine ended the turn anyway",
        "denied by _PreToolUse of todo",
        "the wrong call was denied before it ran",
        "→ agent {",
        "[agent-1] ⚑ _SubagentStop objection from todo",
        "[agent-1] → todo__complete",
        "✓ agent (",
        "the subagent was kept at it until its todo was done",
        "Run the same story against a real model",
    ];
    let mut at = 0;
    for milestone in milestones {
        let found = stdout[at..]
            .find(milestone)
            .unwrap_or_else(|| panic!("missing, or out of order: {milestone:?}\n{stdout}"));
        at += found;
    }
}
