//! Finding and reading each host's configuration, and refusing what cannot run as written.

use std::path::PathBuf;

use serde_json::json;

use super::*;

struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("hookloop-files-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn write(&self, path: &str, text: &str) -> PathBuf {
        let path = self.0.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        path
    }

    fn load(&self, specs: &[&str]) -> Result<CommandHooks, CommandHooksError> {
        let specs: Vec<SourceSpec> = specs
            .iter()
            .map(|s| SourceSpec::parse(s).unwrap())
            .collect();
        CommandHooks::load(&specs, &self.0)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn settings(hooks: serde_json::Value) -> String {
    json!({"permissions": {"allow": []}, "hooks": hooks}).to_string()
}

fn stop_hook(command: &str) -> serde_json::Value {
    json!({"Stop": [{"hooks": [{"type": "command", "command": command}]}]})
}

#[test]
fn a_spec_is_a_name_and_a_path_or_a_path_alone() {
    let spec = SourceSpec::parse("guard=./x/settings.json").unwrap();
    assert_eq!(spec.name.as_ref().map(ServerName::as_str), Some("guard"));
    assert_eq!(spec.path(), Path::new("./x/settings.json"));
    // A path with an `=` whose left part is no server name stays a path.
    let spec = SourceSpec::parse("./a=b/settings.json").unwrap();
    assert_eq!(spec.name, None);
    assert_eq!(spec.path(), Path::new("./a=b/settings.json"));
    assert!(SourceSpec::parse("guard=").is_err());
    let list = SourceSpec::parse_list(".claude/settings.json::p=/plugins/x").unwrap();
    assert_eq!(list.len(), 2);
}

#[test]
fn claude_settings_files_of_one_project_make_one_claude_code_source() {
    let dir = Scratch::new("claude");
    dir.write(".claude/settings.json", &settings(stop_hook("./check.sh")));
    dir.write(
        ".claude/settings.local.json",
        &settings(json!({"PreToolUse": [{"matcher": "mcp__fs__.*",
            "hooks": [{"type": "command", "command": "./guard.sh", "timeout": 5}]}]})),
    );
    let hooks = dir
        .load(&[".claude/settings.json", ".claude/settings.local.json"])
        .unwrap();
    assert_eq!(hooks.sources.len(), 1);
    let source = &hooks.sources[0];
    assert_eq!(
        (source.name.as_str(), source.host),
        ("claude-code", Host::ClaudeCode)
    );
    assert_eq!(source.files.len(), 2);
    let guard = &source.handlers[1];
    assert_eq!(guard.event, "PreToolUse");
    assert_eq!(guard.timeout, Some(Duration::from_secs(5)));
    assert!(guard.matcher.matches("mcp__fs__read") && !guard.matcher.matches("Bash"));
    assert!(
        guard.origin.ends_with("hooks.PreToolUse[0].hooks[0]"),
        "{}",
        guard.origin
    );
}

#[test]
fn codex_hooks_json_and_config_toml_are_codex_sources() {
    let dir = Scratch::new("codex");
    dir.write(
        ".codex/hooks.json",
        &json!({"hooks": stop_hook("make test")}).to_string(),
    );
    dir.write(
        ".codex/config.toml",
        "[[hooks.SessionStart]]\nmatcher = \"startup\"\n[[hooks.SessionStart.hooks]]\ntype = \"command\"\ncommand = \"cat NOTES.md\"\n",
    );
    let hooks = dir
        .load(&[".codex/hooks.json", ".codex/config.toml"])
        .unwrap();
    let source = &hooks.sources[0];
    assert_eq!((source.name.as_str(), source.host), ("codex", Host::Codex));
    let events: Vec<&str> = source.handlers.iter().map(|h| h.event.as_str()).collect();
    assert_eq!(events, ["Stop", "SessionStart"]);
}

#[test]
fn a_plugin_is_named_by_its_manifest_and_its_commands_get_its_root() {
    let dir = Scratch::new("plugin");
    dir.write("logger/plugin.json", r#"{"name": "session-logger"}"#);
    dir.write(
        "logger/hooks/hooks.json",
        &json!({"hooks": {"SessionEnd": [{"hooks": [{"command": "${PLUGIN_ROOT}/log.sh"}]}]}})
            .to_string(),
    );
    dir.write(
        ".claude-plugin-dir/.claude-plugin/plugin.json",
        r#"{"name": "fmt"}"#,
    );
    dir.write(
        ".claude-plugin-dir/hooks/hooks.json",
        &json!({"hooks": stop_hook("${CLAUDE_PLUGIN_ROOT}/fmt.sh")}).to_string(),
    );
    let hooks = dir
        .load(&["logger", ".claude-plugin-dir/hooks/hooks.json"])
        .unwrap();
    let names: Vec<(&str, Host)> = hooks
        .sources
        .iter()
        .map(|s| (s.name.as_str(), s.host))
        .collect();
    assert_eq!(
        names,
        [("session-logger", Host::Goose), ("fmt", Host::ClaudeCode)]
    );
    let env = &hooks.sources[0].handlers[0].env;
    let root = dir.0.join("logger").canonicalize().unwrap();
    assert!(env.contains(&("PLUGIN_ROOT".into(), root.to_string_lossy().into_owned())));
    assert!(env.iter().any(|(k, _)| k == "CLAUDE_PLUGIN_ROOT"));
}

#[test]
fn a_plugin_without_a_manifest_is_told_apart_by_its_root_variable_or_refused() {
    let dir = Scratch::new("bare-plugin");
    dir.write(
        "p/hooks/hooks.json",
        &json!({"hooks": stop_hook("./run.sh")}).to_string(),
    );
    let error = dir.load(&["p"]).unwrap_err().to_string();
    assert!(error.contains("cannot tell which host"), "{error}");
    dir.write(
        "q/hooks/hooks.json",
        &json!({"hooks": stop_hook("${CLAUDE_PLUGIN_ROOT}/run.sh")}).to_string(),
    );
    assert_eq!(dir.load(&["q"]).unwrap().sources[0].host, Host::ClaudeCode);
}

#[test]
fn a_settings_files_env_reaches_its_hooks_and_disable_all_hooks_is_honoured() {
    let dir = Scratch::new("env");
    dir.write(
        "a.json",
        &json!({"env": {"LEVEL": "strict"}, "hooks": stop_hook("x")}).to_string(),
    );
    dir.write(
        "b.json",
        &json!({"disableAllHooks": true, "hooks": stop_hook("y")}).to_string(),
    );
    let hooks = dir.load(&["a.json", "b.json"]).unwrap();
    let handlers = &hooks.sources[0].handlers;
    assert_eq!(handlers.len(), 1);
    assert_eq!(
        &*handlers[0].env,
        [("LEVEL".to_owned(), "strict".to_owned())]
    );
}

#[test]
fn what_does_not_run_here_is_left_out_and_the_rest_loads() {
    let dir = Scratch::new("skipped");
    dir.write(
        "s.json",
        &settings(json!({
            "Notification": [{"hooks": [{"type": "command", "command": "notify"}]}],
            "FileChanged": [{"matcher": "*.json", "hooks": [{"type": "command", "command": "x"}]}],
            "Stop": [{"hooks": [
                {"type": "prompt", "prompt": "is it done?"},
                {"type": "command", "command": "bg", "async": true},
                {"type": "command", "command": "./check.sh"}
            ]}],
            // Where an event has no value to match, the hosts ignore the matcher, however odd.
            "UserPromptSubmit": [{"matcher": "[", "hooks": [{"type": "command", "command": "y"}]}]
        })),
    );
    let hooks = dir.load(&["s.json"]).unwrap();
    let commands: Vec<&str> = hooks.sources[0]
        .handlers
        .iter()
        .map(|h| h.command.as_str())
        .collect();
    assert_eq!(commands, ["./check.sh", "y"]);
}

#[test]
fn broken_files_and_hooks_are_errors_that_name_the_file_and_the_hook() {
    let dir = Scratch::new("broken");
    let cases = [
        ("{not json", "not JSON"),
        (r#"{"hooks": []}"#, "`hooks` is not an object"),
        (r#"{"hooks": {"Stop": {}}}"#, "`hooks.Stop` is not a list"),
        (
            r#"{"hooks": {"Stop": [{"hooks": [{"type": "command"}]}]}}"#,
            "hooks.Stop[0]: hooks[0] has no command",
        ),
        (
            r#"{"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "x", "timeout": -1}]}]}}"#,
            "timeout",
        ),
        (
            r#"{"hooks": {"PreToolUse": [{"matcher": "mcp__(?!fs)", "hooks": [{"type": "command", "command": "x"}]}]}}"#,
            "hooks.PreToolUse[0]: matcher \"mcp__(?!fs)\"",
        ),
        (
            r#"{"env": {"A": 1}, "hooks": {}}"#,
            "`env.A` is not a string",
        ),
    ];
    for (i, (text, expected)) in cases.iter().enumerate() {
        let file = format!("bad{i}.json");
        let path = dir.write(&file, text);
        let error = dir.load(&[&file]).unwrap_err().to_string();
        assert!(error.starts_with(&path.display().to_string()), "{error}");
        assert!(error.contains(expected), "{expected}: {error}");
    }
    let error = dir.load(&["missing.json"]).unwrap_err().to_string();
    assert!(error.contains("no such file"), "{error}");
}

#[test]
fn a_file_over_the_size_cap_is_refused_unread() {
    let dir = Scratch::new("big");
    let big = format!(
        "{{\"hooks\": {{}}, \"pad\": \"{}\"}}",
        "x".repeat(MAX_CONFIG_BYTES as usize)
    );
    dir.write("big.json", &big);
    let error = dir.load(&["big.json"]).unwrap_err().to_string();
    assert!(error.contains("over the limit"), "{error}");
}

#[test]
fn two_hosts_under_one_name_are_refused_and_a_name_parts_them() {
    let dir = Scratch::new("clash");
    dir.write("settings.json", &settings(stop_hook("a")));
    dir.write("hooks.json", &json!({"hooks": stop_hook("b")}).to_string());
    let error = dir
        .load(&["x=settings.json", "x=hooks.json"])
        .unwrap_err()
        .to_string();
    assert!(error.contains("are both named x"), "{error}");
    let hooks = dir.load(&["settings.json", "hooks.json"]).unwrap();
    assert_eq!(
        hooks.names().map(ServerName::as_str).collect::<Vec<_>>(),
        ["claude-code", "codex"]
    );
}
