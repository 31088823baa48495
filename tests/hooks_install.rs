//! `hookloop hooks install | uninstall <host>` on real files in a temp tree: each host's files
//! as it reads them, idempotence, `--dry-run`, uninstall leaving the person's own entries, and
//! the hostile cases: a malformed file, a symbolic link, a huge file, installs at once.

mod binary;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

struct Tree {
    root: PathBuf,
}

impl Tree {
    fn new(tag: &str) -> Self {
        let root = std::env::temp_dir().join(format!(
            "hookloop-install-{tag}-{}-{}",
            std::process::id(),
            fastrand::u32(..)
        ));
        for dir in ["home", "project", "runtime"] {
            std::fs::create_dir_all(root.join(dir)).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root.join("runtime"), std::fs::Permissions::from_mode(0o700))
            .unwrap();
        Self { root }
    }

    fn project(&self, name: &str) -> PathBuf {
        self.root.join("project").join(name)
    }

    fn home(&self, name: &str) -> PathBuf {
        self.root.join("home").join(name)
    }

    fn write(&self, path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn hooks(&self, args: &[&str]) -> Output {
        std::process::Command::new(binary::hookloop())
            .arg("hooks")
            .args(args)
            .env("HOME", self.root.join("home"))
            .env("XDG_RUNTIME_DIR", self.root.join("runtime"))
            .env_remove("CODEX_HOME")
            .current_dir(self.root.join("project"))
            .output()
            .unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.hooks(args);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn json_file(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

const SERVERS: &str = r#"{"mcpServers": {"todo": {"command": "node", "args": ["todo.js"], "env": {"K": "v"}},
  "web": {"type": "http", "url": "https://example.test/mcp"}}}"#;

#[test]
fn claude_code_install_wraps_the_servers_adds_the_hooks_and_a_second_install_changes_nothing() {
    let tree = Tree::new("claude");
    tree.write(&tree.project(".mcp.json"), SERVERS);
    let settings = r#"{"model": "opus", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "my-check"}]}]}}"#;
    tree.write(&tree.project(".claude/settings.json"), settings);
    let out = tree.hooks(&["install", "claude-code"]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("web: no `command`"),
        "the URL server is named as left alone"
    );
    let mcp = json_file(&tree.project(".mcp.json"));
    let todo = &mcp["mcpServers"]["todo"];
    assert_eq!(todo["command"], binary::hookloop());
    assert_eq!(
        todo["args"],
        json!(["mcp", "proxy", "--name", "todo", "--", "node", "todo.js"])
    );
    assert_eq!(todo["env"], json!({"K": "v"}));
    assert_eq!(mcp["mcpServers"]["web"]["url"], "https://example.test/mcp");
    let hooks = json_file(&tree.project(".claude/settings.json"));
    assert_eq!(hooks["model"], "opus");
    let stop = hooks["hooks"]["Stop"].as_array().unwrap();
    assert_eq!(stop.len(), 2, "the person's Stop hook and hookloop's");
    assert_eq!(stop[0]["hooks"][0]["command"], "my-check");
    let command = format!(
        "MCP_HOOK_SERVERS=todo {} hook claude-code",
        binary::hookloop()
    );
    assert_eq!(stop[1]["hooks"][0]["command"], command);
    for event in ["SessionStart", "PreToolUse", "PostToolUse", "SessionEnd"] {
        assert_eq!(
            hooks["hooks"][event][0]["hooks"][0]["command"], command,
            "{event}"
        );
    }

    let written: Vec<String> = [".mcp.json", ".claude/settings.json"]
        .map(|f| std::fs::read_to_string(tree.project(f)).unwrap())
        .to_vec();
    let again = tree.ok(&["install", "claude-code"]);
    assert_eq!(again.matches("nothing to change").count(), 2, "{again}");
    let now: Vec<String> = [".mcp.json", ".claude/settings.json"]
        .map(|f| std::fs::read_to_string(tree.project(f)).unwrap())
        .to_vec();
    assert_eq!(now, written, "not a byte changed");

    tree.ok(&["uninstall", "claude-code"]);
    assert_eq!(
        json_file(&tree.project(".mcp.json")),
        serde_json::from_str::<Value>(SERVERS).unwrap()
    );
    assert_eq!(
        json_file(&tree.project(".claude/settings.json")),
        serde_json::from_str::<Value>(settings).unwrap()
    );
}

#[test]
fn claude_code_user_install_edits_the_mcp_servers_of_claude_json_and_nothing_else_in_it() {
    let tree = Tree::new("claude-user");
    let state = r#"{"numStartups": 12, "projects": {"/x": {"mcpServers": {}}}, "mcpServers": {"todo": {"command": "srv"}}}"#;
    tree.write(&tree.home(".claude.json"), state);
    tree.ok(&["install", "claude-code", "--user"]);
    let json = json_file(&tree.home(".claude.json"));
    assert_eq!(json["numStartups"], 12);
    assert_eq!(json["mcpServers"]["todo"]["args"][5], "srv");
    assert!(tree.home(".claude/settings.json").is_file());
    assert!(
        !tree.project(".mcp.json").exists(),
        "the project is not touched"
    );
    tree.ok(&["uninstall", "claude-code", "--user"]);
    assert_eq!(
        json_file(&tree.home(".claude.json")),
        serde_json::from_str::<Value>(state).unwrap()
    );
    assert!(
        !tree.home(".claude/settings.json").exists(),
        "a file it made empty is removed"
    );
}

#[test]
fn dry_run_prints_the_change_and_writes_nothing() {
    let tree = Tree::new("dry");
    tree.write(&tree.project(".gemini/settings.json"), SERVERS);
    let out = tree.ok(&["install", "gemini", "--dry-run"]);
    assert!(out.contains("--- ") && out.contains("+++ "), "{out}");
    assert!(out.contains("+        \"proxy\","), "{out}");
    assert!(out.contains("hook gemini"), "{out}");
    assert_eq!(
        std::fs::read_to_string(tree.project(".gemini/settings.json")).unwrap(),
        SERVERS
    );
    let entries: Vec<_> = std::fs::read_dir(tree.project(".gemini"))
        .unwrap()
        .collect();
    assert_eq!(entries.len(), 1, "no temporary file left");
}

#[test]
fn gemini_and_cursor_get_their_own_events_and_formats() {
    let tree = Tree::new("gemini-cursor");
    tree.write(&tree.project(".gemini/settings.json"), SERVERS);
    tree.ok(&["install", "gemini"]);
    let gemini = json_file(&tree.project(".gemini/settings.json"));
    for event in [
        "SessionStart",
        "BeforeAgent",
        "BeforeTool",
        "AfterTool",
        "AfterAgent",
        "SessionEnd",
    ] {
        let command = gemini["hooks"][event][0]["hooks"][0]["command"]
            .as_str()
            .unwrap();
        assert!(command.ends_with(" hook gemini"), "{event}: {command}");
    }
    assert_eq!(gemini["mcpServers"]["todo"]["args"][1], "proxy");

    tree.write(&tree.project(".cursor/mcp.json"), SERVERS);
    tree.ok(&["install", "cursor"]);
    let cursor = json_file(&tree.project(".cursor/hooks.json"));
    assert_eq!(cursor["version"], 1);
    for event in [
        "sessionStart",
        "beforeShellExecution",
        "beforeMCPExecution",
        "postToolUse",
        "stop",
        "sessionEnd",
    ] {
        let command = cursor["hooks"][event][0]["command"].as_str().unwrap();
        assert!(command.ends_with(" hook cursor"), "{event}: {command}");
    }
    tree.ok(&["uninstall", "cursor"]);
    assert!(!tree.project(".cursor/hooks.json").exists());
    assert_eq!(
        json_file(&tree.project(".cursor/mcp.json")),
        serde_json::from_str::<Value>(SERVERS).unwrap()
    );
}

#[test]
fn a_malformed_file_is_refused_with_where_and_nothing_is_written() {
    let tree = Tree::new("malformed");
    tree.write(&tree.project(".mcp.json"), SERVERS);
    let broken = "{\"hooks\": {\"Stop\": [}\n";
    tree.write(&tree.project(".claude/settings.json"), broken);
    let out = tree.hooks(&["install", "claude-code"]);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("settings.json") && stderr.contains("not JSON"),
        "{stderr}"
    );
    assert!(stderr.contains("nothing was changed"), "{stderr}");
    assert_eq!(
        std::fs::read_to_string(tree.project(".mcp.json")).unwrap(),
        SERVERS,
        "the other file either"
    );
    assert_eq!(
        std::fs::read_to_string(tree.project(".claude/settings.json")).unwrap(),
        broken
    );

    // The right syntax with the wrong shape where the change goes.
    tree.write(
        &tree.project(".claude/settings.json"),
        r#"{"hooks": {"Stop": "no"}}"#,
    );
    let out = tree.hooks(&["install", "claude-code"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("hooks.Stop: an array expected"));
    assert_eq!(
        std::fs::read_to_string(tree.project(".mcp.json")).unwrap(),
        SERVERS
    );

    // A key given twice, a TOML error, and bytes that are not text.
    tree.write(
        &tree.project(".gemini/settings.json"),
        r#"{"mcpServers": {}, "mcpServers": {}}"#,
    );
    assert!(!tree.hooks(&["install", "gemini"]).status.success());
    tree.write(
        &tree.project(".codex/config.toml"),
        "[mcp_servers.todo\ncommand = 1\n",
    );
    let out = tree.hooks(&["install", "codex"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not TOML"));
    std::fs::create_dir_all(tree.project(".cursor")).unwrap();
    std::fs::write(tree.project(".cursor/mcp.json"), b"{\"a\": \"\xff\"}").unwrap();
    let out = tree.hooks(&["install", "cursor"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not UTF-8"));
}

#[test]
fn a_config_that_is_a_symlink_is_written_through_and_said_so() {
    let tree = Tree::new("symlink");
    let elsewhere = tree.root.join("dotfiles/settings.json");
    tree.write(&elsewhere, SERVERS);
    std::fs::create_dir_all(tree.project(".gemini")).unwrap();
    std::os::unix::fs::symlink(&elsewhere, tree.project(".gemini/settings.json")).unwrap();
    let out = tree.hooks(&["install", "gemini"]);
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is a symbolic link") && stderr.contains("dotfiles"),
        "{stderr}"
    );
    let link = std::fs::symlink_metadata(tree.project(".gemini/settings.json")).unwrap();
    assert!(link.file_type().is_symlink(), "the link stays a link");
    assert_eq!(
        json_file(&elsewhere)["mcpServers"]["todo"]["args"][1],
        "proxy"
    );

    // A link to nothing is refused, and stays as it was.
    std::fs::remove_file(&elsewhere).unwrap();
    let out = tree.hooks(&["install", "gemini"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("symbolic link whose target"));
    assert!(!elsewhere.exists());
}

#[test]
fn a_huge_file_is_refused_unread() {
    let tree = Tree::new("huge");
    tree.write(&tree.project(".mcp.json"), SERVERS);
    let settings = tree.project(".claude/settings.json");
    tree.write(&settings, "");
    // Sparse: 33 MiB on paper, nothing on disk.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&settings)
        .unwrap()
        .set_len(33 << 20)
        .unwrap();
    let out = tree.hooks(&["install", "claude-code"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("longer than"));
    assert_eq!(std::fs::metadata(&settings).unwrap().len(), 33 << 20);
    assert_eq!(
        std::fs::read_to_string(tree.project(".mcp.json")).unwrap(),
        SERVERS
    );
}

#[test]
fn installs_at_once_take_turns_and_leave_one_entry_each() {
    let tree = Tree::new("concurrent");
    tree.write(&tree.project(".mcp.json"), SERVERS);
    let runs: Vec<_> = (0..8)
        .map(|n| {
            let action = if n % 2 == 0 { "install" } else { "uninstall" };
            std::process::Command::new(binary::hookloop())
                .args(["hooks", action, "claude-code"])
                .env("HOME", tree.root.join("home"))
                .env("XDG_RUNTIME_DIR", tree.root.join("runtime"))
                .current_dir(tree.root.join("project"))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for run in runs {
        let out = run.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Whatever order they ran in, one more install leaves exactly one of each.
    tree.ok(&["install", "claude-code"]);
    let mcp = json_file(&tree.project(".mcp.json"));
    assert_eq!(
        mcp["mcpServers"]["todo"]["args"],
        json!(["mcp", "proxy", "--name", "todo", "--", "node", "todo.js"])
    );
    let hooks = json_file(&tree.project(".claude/settings.json"));
    for (event, groups) in hooks["hooks"].as_object().unwrap() {
        assert_eq!(groups.as_array().unwrap().len(), 1, "{event}");
    }
    let leftovers: Vec<_> = std::fs::read_dir(tree.project(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn no_server_to_proxy_and_goose_are_refused_clearly() {
    let tree = Tree::new("refused");
    let out = tree.hooks(&["install", "claude-code"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no stdio MCP server"));
    assert!(!tree.project(".claude").exists());
    let out = tree.hooks(&["install", "goose"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("config.yaml"));
    let out = tree.hooks(&["install", "vim"]);
    assert!(!out.status.success());
}
