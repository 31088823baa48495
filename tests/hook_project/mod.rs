//! A project with the hooks people keep in `.claude/settings.json`, written as the hosts'
//! documentation shows them (bash and Python reading the event on stdin), for the end-to-end
//! tests of command hooks through `hookloop run` and `hookloop acp`.
//!
//! | event | hook | does |
//! |---|---|---|
//! | `SessionStart` | `cat .claude/conventions.md` | plain stdout: the conventions, as context |
//! | `UserPromptSubmit` | `no-secrets.py` | `{"decision": "block"}` for a prompt with a password |
//! | `PreToolUse` `mcp__fs__.*` | `protect.py` | `permissionDecision: deny` for a path under `secrets/` |
//! | `PostToolUse` `mcp__fs__write` | `remind.sh` | `additionalContext`: run the tests |
//! | `Stop` | `run-tests.sh` | runs `./test.sh` (red until `fixed.txt` exists); exit 2 with its output while red |
//!
//! Each hook appends the event it read to `.claude/events.jsonl`.

#![allow(dead_code)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

/// The conventions the session start hook prints.
pub const CONVENTIONS: &str = "Use four spaces. Never touch secrets/.";
/// What the post-tool hook reminds.
pub const REMINDER: &str = "Run ./test.sh after every change.";
/// How the Stop hook's block starts.
pub const RED: &str = "Tests are failing; fix them before you stop:";
/// What `test.sh` says while red.
pub const FAILURE: &str = "FAIL: fixed.txt is missing";
/// The user prompt hook's reason.
pub const HELD: &str = "The prompt holds a password; it was not submitted.";

const LOG: &str = "printf '%s\\n' \"$input\" >> \"$CLAUDE_PROJECT_DIR/.claude/events.jsonl\"";

/// Writes the project into `dir`; its settings file.
pub fn write(dir: &Path) -> PathBuf {
    let hooks = dir.join(".claude/hooks");
    std::fs::create_dir_all(&hooks).unwrap();
    std::fs::write(
        dir.join(".claude/conventions.md"),
        format!("{CONVENTIONS}\n"),
    )
    .unwrap();
    script(
        &dir.join("test.sh"),
        &format!(
            "#!/usr/bin/env bash\ntest -f fixed.txt || {{ echo '{FAILURE}'; exit 1; }}\necho ok\n"
        ),
    );
    script(
        &hooks.join("run-tests.sh"),
        &format!(
            r#"#!/usr/bin/env bash
# Stop: keep working while the tests fail.
input=$(cat)
{LOG}
cd "$CLAUDE_PROJECT_DIR"
if ! output=$(./test.sh 2>&1); then
  echo "{RED}" >&2
  echo "$output" >&2
  exit 2
fi
exit 0
"#
        ),
    );
    script(
        &hooks.join("protect.py"),
        r#"#!/usr/bin/env python3
# PreToolUse: nothing under secrets/.
import json, os, sys

event = json.load(sys.stdin)
with open(os.path.join(os.environ["CLAUDE_PROJECT_DIR"], ".claude/events.jsonl"), "a") as log:
    log.write(json.dumps(event) + "\n")
path = event.get("tool_input", {}).get("path", "")
if path.startswith("secrets/"):
    print(json.dumps({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": f"{path} is off limits: secrets/ is never written",
    }}))
sys.exit(0)
"#,
    );
    script(
        &hooks.join("remind.sh"),
        &format!(
            r#"#!/usr/bin/env bash
input=$(cat)
{LOG}
echo '{{"hookSpecificOutput": {{"hookEventName": "PostToolUse", "additionalContext": "{REMINDER}"}}}}'
"#
        ),
    );
    script(
        &hooks.join("no-secrets.py"),
        &format!(
            r#"#!/usr/bin/env python3
import json, re, sys

event = json.load(sys.stdin)
if re.search(r"(?i)\bpassword\b", event["prompt"]):
    print(json.dumps({{"decision": "block", "reason": "{HELD}"}}))
sys.exit(0)
"#
        ),
    );
    let command = |c: &str| json!([{"type": "command", "command": c}]);
    let settings = json!({
        "permissions": {"allow": ["mcp__fs__write"]},
        "hooks": {
            "SessionStart": [{"matcher": "startup",
                "hooks": command("cat \"$CLAUDE_PROJECT_DIR/.claude/conventions.md\"")}],
            "UserPromptSubmit": [{"hooks": command("\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/no-secrets.py")}],
            "PreToolUse": [{"matcher": "mcp__fs__.*",
                "hooks": command("\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/protect.py")}],
            "PostToolUse": [{"matcher": "mcp__fs__write",
                "hooks": command("\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/remind.sh")}],
            "Stop": [{"hooks": command("\"$CLAUDE_PROJECT_DIR\"/.claude/hooks/run-tests.sh")}]
        }
    });
    let path = dir.join(".claude/settings.json");
    std::fs::write(&path, serde_json::to_string_pretty(&settings).unwrap()).unwrap();
    path
}

/// An executable file.
pub fn script(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// The events the hooks read, in order.
pub fn events(dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(dir.join(".claude/events.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The events of one name.
pub fn events_named(dir: &Path, name: &str) -> Vec<Value> {
    events(dir)
        .into_iter()
        .filter(|e| e["hook_event_name"] == name)
        .collect()
}

/// The JSON body of every hook result a model request carries, `{"hook", "server", "text"}`.
pub fn hook_bodies(request: &Value) -> Vec<Value> {
    request["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "tool")
        .filter_map(|m| serde_json::from_str::<Value>(m["content"].as_str()?).ok())
        .filter(|body| body.get("hook").is_some())
        .collect()
}

/// The text of the tool results of a request whose call named `tool`.
pub fn results_of(request: &Value, tool: &str) -> Vec<String> {
    let messages = request["messages"].as_array().cloned().unwrap_or_default();
    let ids: Vec<Value> = messages
        .iter()
        .flat_map(|m| m["tool_calls"].as_array().cloned().unwrap_or_default())
        .filter(|c| c["function"]["name"] == tool)
        .map(|c| c["id"].clone())
        .collect();
    messages
        .iter()
        .filter(|m| m["role"] == "tool" && ids.contains(&m["tool_call_id"]))
        .map(|m| m["content"].as_str().unwrap_or_default().to_owned())
        .collect()
}
