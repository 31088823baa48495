//! What `hookloop hooks install` changes in a host's configuration, as pure functions on the
//! parsed documents: each stdio MCP server put behind `hookloop mcp proxy`, and the hook command
//! registered at the host's events; and the same taken back out. Nothing here reads or writes a
//! file ([`super`] does).
//!
//! An entry is hookloop's by its shape, not by a marker beside it: a server whose command is a
//! `hookloop` and whose arguments begin `mcp proxy`, a hook whose command runs
//! `hookloop hook <host>` (after `NAME=value` assignments). So a second install finds its own
//! entries and changes nothing, and uninstall touches nothing else.

use toml_edit::{ArrayOfTables, DocumentMut, Item, Table, value};

use super::json::{self, Json, Obj};
use crate::bridge::hosts::Host;
use crate::hooks::ServerName;

/// What an edit of the servers found, for the person to read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Servers {
    /// The servers behind the proxy after the edit (newly or already), in the file's order.
    pub proxied: Vec<String>,
    /// Servers left as they were, each with why.
    pub skipped: Vec<String>,
}

/// An edit that cannot be made: the document holds something of an unexpected shape where
/// the edit must go. The document is not written.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{at}: {what}")]
pub struct ShapeError {
    /// Where in the document (`mcpServers.todo.args`).
    pub at: String,
    /// What was expected there.
    pub what: String,
}

fn shape(at: impl Into<String>, what: impl Into<String>) -> ShapeError {
    ShapeError {
        at: at.into(),
        what: what.into(),
    }
}

/// The proxy's arguments in front of a server's own command: `mcp proxy --name NAME --`.
pub fn proxy_args(name: &str) -> [String; 5] {
    ["mcp", "proxy", "--name", name, "--"].map(str::to_owned)
}

/// Whether `command` names a hookloop binary (`hookloop`, `/usr/bin/hookloop`).
fn is_hookloop(command: &str) -> bool {
    std::path::Path::new(command)
        .file_name()
        .and_then(|n| n.to_str())
        == Some("hookloop")
}

/// The server's own command and arguments, if `command` and `args` are a proxy in front of it.
fn proxied(command: &str, args: &[String]) -> Option<(String, Vec<String>)> {
    if !is_hookloop(command) || args.len() < 2 || args[0] != "mcp" || args[1] != "proxy" {
        return None;
    }
    let split = args.iter().position(|a| a == "--")?;
    let (program, rest) = args[split + 1..].split_first()?;
    Some((program.clone(), rest.to_vec()))
}

/// The hook command registered for `host`: `MCP_HOOK_SERVERS=<servers> <hookloop> hook <host>`,
/// quoted for the shell the hosts run it in.
pub fn hook_command(hookloop: &str, host: Host, servers: &[String]) -> String {
    format!(
        "MCP_HOOK_SERVERS={} {} hook {}",
        shell_quote(&servers.join(",")),
        shell_quote(hookloop),
        host.name()
    )
}

fn shell_quote(word: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "/._,:=+-@%".contains(c);
    if !word.is_empty() && word.chars().all(plain) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// The words of a command line as a POSIX shell splits them (quotes and backslashes; nothing
/// is expanded).
fn shell_words(line: &str) -> Vec<String> {
    let (mut words, mut word, mut in_word) = (Vec::new(), String::new(), false);
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\'' => {
                in_word = true;
                word.extend(chars.by_ref().take_while(|&c| c != '\''));
            }
            '"' => {
                in_word = true;
                while let Some(c) = chars.next() {
                    match c {
                        '"' => break,
                        '\\' => word.extend(chars.next()),
                        c => word.push(c),
                    }
                }
            }
            '\\' => {
                in_word = true;
                word.extend(chars.next());
            }
            c if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    words
}

/// Whether `command` is hookloop's hook command for `host`: `hookloop hook <host>` after any
/// number of `NAME=value` assignments, and nothing else.
pub fn is_hook_command(command: &str, host: Host) -> bool {
    let words = shell_words(command);
    let start = words
        .iter()
        .position(|w| !w.contains('=') || w.starts_with('='))
        .unwrap_or(words.len());
    matches!(&words[start..], [program, hook, name]
        if is_hookloop(program) && hook == "hook" && name == host.name())
}

fn strings(items: Option<&Json>, at: &str) -> Result<Vec<String>, ShapeError> {
    let Some(items) = items else {
        return Ok(Vec::new());
    };
    let items = items
        .as_arr()
        .ok_or_else(|| shape(at, "an array of strings"))?;
    items
        .iter()
        .map(|i| i.as_str().map(str::to_owned))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| shape(at, "an array of strings"))
}

fn json_strings(items: &[String]) -> Json {
    Json::Arr(items.iter().cloned().map(Json::Str).collect())
}

/// The member `key` of `root`, an object, created empty when missing.
fn object_at<'a>(root: &'a mut Obj, key: &str, at: &str) -> Result<&'a mut Obj, ShapeError> {
    if json::get_mut(root, key).is_none() {
        root.push((key.to_owned(), Json::Obj(Vec::new())));
    }
    json::get_mut(root, key)
        .and_then(Json::as_obj_mut)
        .ok_or_else(|| shape(at, "an object"))
}

/// The root of a JSON document, which must be an object.
pub fn root(doc: &mut Json) -> Result<&mut Obj, ShapeError> {
    doc.as_obj_mut()
        .ok_or_else(|| shape("the document", "an object"))
}

/// The stdio servers of `doc`'s `key` (`mcpServers`), each put behind the proxy with
/// `hookloop` as its command. A server of a URL (HTTP or SSE), one without a command, and one
/// whose name the proxy does not take are left as they are, and named in `skipped`.
pub fn wrap_json_servers(
    doc: &mut Json,
    key: &str,
    command_key: &str,
    hookloop: &str,
) -> Result<Servers, ShapeError> {
    let mut found = Servers::default();
    let root = root(doc)?;
    let Some(servers) = json::get_mut(root, key) else {
        return Ok(found);
    };
    let servers = servers
        .as_obj_mut()
        .ok_or_else(|| shape(key, "an object of servers"))?;
    for (name, server) in servers.iter_mut() {
        let at = format!("{key}.{name}");
        let server = server.as_obj_mut().ok_or_else(|| shape(&at, "an object"))?;
        let Some(command) = server
            .iter()
            .find(|(k, _)| k == command_key)
            .and_then(|(_, v)| v.as_str())
            .map(str::to_owned)
        else {
            found.skipped.push(format!(
                "{name}: no `{command_key}` (a URL server the proxy cannot front)"
            ));
            continue;
        };
        let args = strings(
            server.iter().find(|(k, _)| k == "args").map(|(_, v)| v),
            &format!("{at}.args"),
        )?;
        if proxied(&command, &args).is_some() {
            found.proxied.push(name.clone());
            continue;
        }
        if let Err(e) = ServerName::new(name.as_str()) {
            found.skipped.push(format!("{name}: {e}"));
            continue;
        }
        let mut wrapped = proxy_args(name).to_vec();
        wrapped.push(command);
        wrapped.extend(args);
        json::set(server, command_key, Json::str(hookloop));
        json::set(server, "args", json_strings(&wrapped));
        found.proxied.push(name.clone());
    }
    Ok(found)
}

/// Takes every server of `doc`'s `key` out from behind the proxy: its own command and
/// arguments back (no `args` when it has none). Returns the servers restored.
pub fn unwrap_json_servers(
    doc: &mut Json,
    key: &str,
    command_key: &str,
) -> Result<Vec<String>, ShapeError> {
    let mut restored = Vec::new();
    let root = root(doc)?;
    let Some(servers) = json::get_mut(root, key).and_then(Json::as_obj_mut) else {
        return Ok(restored);
    };
    for (name, server) in servers.iter_mut() {
        let Some(server) = server.as_obj_mut() else {
            continue;
        };
        let Some(command) = server
            .iter()
            .find(|(k, _)| k == command_key)
            .and_then(|(_, v)| v.as_str())
        else {
            continue;
        };
        let Ok(args) = strings(server.iter().find(|(k, _)| k == "args").map(|(_, v)| v), "") else {
            continue;
        };
        let Some((program, rest)) = proxied(command, &args) else {
            continue;
        };
        json::set(server, command_key, Json::Str(program));
        if rest.is_empty() {
            json::remove(server, "args");
        } else {
            json::set(server, "args", json_strings(&rest));
        }
        restored.push(name.clone());
    }
    Ok(restored)
}

/// One event to register: its name and its matcher (`None`: the event takes none).
pub type Event = (&'static str, Option<&'static str>);

fn is_our_group(group: &Json, host: Host, nested: bool) -> bool {
    if !nested {
        return group
            .get("command")
            .and_then(Json::as_str)
            .is_some_and(|c| is_hook_command(c, host));
    }
    match group.get("hooks").and_then(Json::as_arr).map(Vec::as_slice) {
        Some([hook]) => hook
            .get("command")
            .and_then(Json::as_str)
            .is_some_and(|c| is_hook_command(c, host)),
        _ => false,
    }
}

/// Registers `command` at each of `events` in `doc`'s `hooks`: in the nested format (Claude
/// Code, Gemini CLI, goose: `{"matcher", "hooks": [{"type": "command", "command"}]}`) or
/// Cursor's flat one (`{"command"}`, with `"version": 1` at the top). An entry of hookloop's
/// already there is replaced in its place (a changed server list updates it); any other is
/// kept.
pub fn add_json_hooks(
    doc: &mut Json,
    host: Host,
    events: &[Event],
    command: &str,
    nested: bool,
) -> Result<(), ShapeError> {
    let root = root(doc)?;
    if !nested && json::get_mut(root, "version").is_none() {
        root.insert(0, ("version".to_owned(), Json::Num(1.into())));
    }
    let hooks = object_at(root, "hooks", "hooks")?;
    for &(event, matcher) in events {
        let at = format!("hooks.{event}");
        let ours = if nested {
            let mut group = Vec::new();
            if let Some(matcher) = matcher {
                group.push(("matcher".to_owned(), Json::str(matcher)));
            }
            let hook = vec![
                ("type".to_owned(), Json::str("command")),
                ("command".to_owned(), Json::str(command)),
            ];
            group.push(("hooks".to_owned(), Json::Arr(vec![Json::Obj(hook)])));
            Json::Obj(group)
        } else {
            Json::Obj(vec![("command".to_owned(), Json::str(command))])
        };
        if json::get_mut(hooks, event).is_none() {
            hooks.push((event.to_owned(), Json::Arr(Vec::new())));
        }
        let Some(Json::Arr(groups)) = json::get_mut(hooks, event) else {
            return Err(shape(at, "an array"));
        };
        let mut placed = false;
        groups.retain_mut(|group| {
            if !is_our_group(group, host, nested) {
                return true;
            }
            if placed {
                return false;
            }
            placed = true;
            *group = ours.clone();
            true
        });
        if !placed {
            groups.push(ours);
        }
    }
    Ok(())
}

/// Takes hookloop's entries for `host` out of `doc`'s `hooks`, and an event's list, `hooks`
/// and Cursor's `version` with them when nothing else is left in them.
pub fn remove_json_hooks(doc: &mut Json, host: Host, nested: bool) -> Result<(), ShapeError> {
    let root = root(doc)?;
    let Some(hooks) = json::get_mut(root, "hooks").and_then(Json::as_obj_mut) else {
        return Ok(());
    };
    let mut touched = false;
    hooks.retain_mut(|(_, groups)| {
        let Json::Arr(list) = groups else {
            return true;
        };
        let before = list.len();
        list.retain(|group| !is_our_group(group, host, nested));
        touched |= list.len() != before;
        !(list.is_empty() && before != 0)
    });
    if touched && hooks.is_empty() {
        json::remove(root, "hooks");
        if !nested && root.len() == 1 && root[0].0 == "version" {
            root.clear();
        }
    }
    Ok(())
}

fn toml_strings(table: &Table, key: &str, at: &str) -> Result<Vec<String>, ShapeError> {
    let Some(item) = table.get(key) else {
        return Ok(Vec::new());
    };
    let array = item
        .as_array()
        .ok_or_else(|| shape(at, "an array of strings"))?;
    array
        .iter()
        .map(|v| v.as_str().map(str::to_owned))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| shape(at, "an array of strings"))
}

fn toml_array(items: &[String]) -> Item {
    value(
        items
            .iter()
            .map(String::as_str)
            .collect::<toml_edit::Array>(),
    )
}

/// Codex's `[mcp_servers.<name>]`: each stdio server (a `command`) put behind the proxy; one of
/// a `url` is left as it is.
pub fn wrap_toml_servers(doc: &mut DocumentMut, hookloop: &str) -> Result<Servers, ShapeError> {
    let mut found = Servers::default();
    let Some(servers) = doc.get_mut("mcp_servers") else {
        return Ok(found);
    };
    let servers = servers
        .as_table_like_mut()
        .ok_or_else(|| shape("mcp_servers", "a table of servers"))?;
    for (name, server) in servers.iter_mut() {
        let name = name.get().to_owned();
        let at = format!("mcp_servers.{name}");
        let server = server.as_table_mut().ok_or_else(|| shape(&at, "a table"))?;
        let Some(command) = server
            .get("command")
            .and_then(Item::as_str)
            .map(str::to_owned)
        else {
            found.skipped.push(format!(
                "{name}: no `command` (a URL server the proxy cannot front)"
            ));
            continue;
        };
        let args = toml_strings(server, "args", &format!("{at}.args"))?;
        if proxied(&command, &args).is_some() {
            found.proxied.push(name);
            continue;
        }
        if let Err(e) = ServerName::new(name.as_str()) {
            found.skipped.push(format!("{name}: {e}"));
            continue;
        }
        let mut wrapped = proxy_args(&name).to_vec();
        wrapped.push(command);
        wrapped.extend(args);
        replace_value(server, "command", value(hookloop));
        replace_value(server, "args", toml_array(&wrapped));
        found.proxied.push(name);
    }
    Ok(found)
}

/// Sets `key` in `table`, keeping the decoration (comments, spacing) of a value already there.
fn replace_value(table: &mut Table, key: &str, new: Item) {
    match (table.get_mut(key), new) {
        (Some(Item::Value(old)), Item::Value(mut new)) => {
            *new.decor_mut() = old.decor().clone();
            *old = new;
        }
        (_, new) => {
            table.insert(key, new);
        }
    }
}

/// Takes Codex's servers out from behind the proxy.
pub fn unwrap_toml_servers(doc: &mut DocumentMut) -> Vec<String> {
    let mut restored = Vec::new();
    let Some(servers) = doc.get_mut("mcp_servers").and_then(Item::as_table_like_mut) else {
        return restored;
    };
    for (name, server) in servers.iter_mut() {
        let Some(server) = server.as_table_mut() else {
            continue;
        };
        let Some(command) = server.get("command").and_then(Item::as_str) else {
            continue;
        };
        let Ok(args) = toml_strings(server, "args", "") else {
            continue;
        };
        let Some((program, rest)) = proxied(command, &args) else {
            continue;
        };
        replace_value(server, "command", value(program));
        if rest.is_empty() {
            server.remove("args");
        } else {
            replace_value(server, "args", toml_array(&rest));
        }
        restored.push(name.get().to_owned());
    }
    restored
}

fn is_our_toml_group(group: &Table, host: Host) -> bool {
    let Some(hooks) = group.get("hooks").and_then(Item::as_array_of_tables) else {
        return false;
    };
    hooks.len() == 1
        && hooks
            .get(0)
            .and_then(|h| h.get("command"))
            .and_then(Item::as_str)
            .is_some_and(|c| is_hook_command(c, host))
}

/// Codex's hooks in config.toml: `[[hooks.<Event>]]` (its `matcher`) holding
/// `[[hooks.<Event>.hooks]]` (`type = "command"`, `command`), as [`add_json_hooks`] does.
pub fn add_toml_hooks(
    doc: &mut DocumentMut,
    host: Host,
    events: &[Event],
    command: &str,
) -> Result<(), ShapeError> {
    if doc.get("hooks").is_none() {
        let mut table = Table::new();
        table.set_implicit(true);
        doc.insert("hooks", Item::Table(table));
    }
    let hooks = doc
        .get_mut("hooks")
        .and_then(Item::as_table_mut)
        .ok_or_else(|| shape("hooks", "a table"))?;
    for &(event, matcher) in events {
        let mut ours = Table::new();
        if let Some(matcher) = matcher {
            ours.insert("matcher", value(matcher));
        }
        let mut hook = Table::new();
        hook.insert("type", value("command"));
        hook.insert("command", value(command));
        let mut inner = ArrayOfTables::new();
        inner.push(hook);
        ours.insert("hooks", Item::ArrayOfTables(inner));
        if hooks.get(event).is_none() {
            hooks.insert(event, Item::ArrayOfTables(ArrayOfTables::new()));
        }
        let groups = hooks
            .get_mut(event)
            .and_then(Item::as_array_of_tables_mut)
            .ok_or_else(|| shape(format!("hooks.{event}"), "an array of tables ([[…]])"))?;
        let mut placed = false;
        groups.retain(|group| {
            if !is_our_toml_group(group, host) {
                return true;
            }
            let keep = !placed;
            placed = true;
            keep
        });
        let at = groups.iter().position(|g| is_our_toml_group(g, host));
        match at {
            Some(at) => {
                let group = groups.get_mut(at).expect("the position was just found");
                let before = group.to_string();
                if before != ours.to_string() {
                    *group = ours;
                }
            }
            None => groups.push(ours),
        }
    }
    Ok(())
}

/// Takes hookloop's Codex hooks out of config.toml, and an event's array and `hooks` with
/// them when nothing else is left in them.
pub fn remove_toml_hooks(doc: &mut DocumentMut, host: Host) {
    let Some(hooks) = doc.get_mut("hooks").and_then(Item::as_table_mut) else {
        return;
    };
    let mut emptied = Vec::new();
    for (event, groups) in hooks.iter_mut() {
        let Some(groups) = groups.as_array_of_tables_mut() else {
            continue;
        };
        let before = groups.len();
        groups.retain(|group| !is_our_toml_group(group, host));
        if groups.is_empty() && before != 0 {
            emptied.push(event.get().to_owned());
        }
    }
    let touched = !emptied.is_empty();
    for event in emptied {
        hooks.remove(&event);
    }
    if touched && hooks.is_empty() {
        doc.remove("hooks");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hook_command_is_found_by_its_shape_however_quoted() {
        let line = hook_command(
            "/opt/my tools/hookloop",
            Host::Codex,
            &["a".into(), "b".into()],
        );
        assert_eq!(
            line,
            "MCP_HOOK_SERVERS=a,b '/opt/my tools/hookloop' hook codex"
        );
        assert!(is_hook_command(&line, Host::Codex));
        assert!(!is_hook_command(&line, Host::ClaudeCode));
        assert!(is_hook_command("hookloop hook gemini", Host::Gemini));
        for other in [
            "hookloop hook codex --extra",
            "my-hookloop hook codex",
            "echo hookloop hook codex",
            "hookloop hook codex; rm -rf x",
            "",
        ] {
            assert!(!is_hook_command(other, Host::Codex), "{other}");
        }
    }

    #[test]
    fn a_server_is_wrapped_once_and_unwrapped_to_what_it_was() {
        let text = r#"{"mcpServers": {
            "todo": {"command": "node", "args": ["todo.js", "--x"], "env": {"K": "v"}},
            "bare": {"command": "srv"},
            "web": {"type": "http", "url": "https://example.test/mcp"},
            "bad name": {"command": "x"}}}"#;
        let original = Json::parse(text).unwrap();
        let mut doc = original.clone();
        let found = wrap_json_servers(&mut doc, "mcpServers", "command", "/bin/hookloop").unwrap();
        assert_eq!(found.proxied, ["todo", "bare"]);
        assert_eq!(found.skipped.len(), 2, "{:?}", found.skipped);
        let todo = doc.get("mcpServers").unwrap().get("todo").unwrap();
        assert_eq!(todo.get("command").unwrap().as_str(), Some("/bin/hookloop"));
        let args: Vec<&str> = todo
            .get("args")
            .unwrap()
            .as_arr()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(
            args,
            [
                "mcp", "proxy", "--name", "todo", "--", "node", "todo.js", "--x"
            ]
        );

        let once = doc.clone();
        wrap_json_servers(&mut doc, "mcpServers", "command", "/other/hookloop").unwrap();
        assert_eq!(doc, once, "a second wrap changes nothing");

        let restored = unwrap_json_servers(&mut doc, "mcpServers", "command").unwrap();
        assert_eq!(restored, ["todo", "bare"]);
        assert_eq!(doc, original);
    }

    #[test]
    fn hooks_are_added_once_beside_the_persons_own_and_removed_alone() {
        let text = r#"{"model": "x", "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "my-check"}]}]}}"#;
        let original = Json::parse(text).unwrap();
        let mut doc = original.clone();
        let events = [("Stop", None), ("PreToolUse", Some("*"))];
        let command = hook_command("hookloop", Host::ClaudeCode, &["todo".into()]);
        add_json_hooks(&mut doc, Host::ClaudeCode, &events, &command, true).unwrap();
        let once = doc.clone();
        assert_eq!(
            once.get("hooks")
                .unwrap()
                .get("Stop")
                .unwrap()
                .as_arr()
                .unwrap()
                .len(),
            2
        );
        add_json_hooks(&mut doc, Host::ClaudeCode, &events, &command, true).unwrap();
        assert_eq!(doc, once, "a second install changes nothing");
        // A new server list updates hookloop's entry in its place.
        let wider = hook_command("hookloop", Host::ClaudeCode, &["todo".into(), "b".into()]);
        add_json_hooks(&mut doc, Host::ClaudeCode, &events, &wider, true).unwrap();
        assert_eq!(
            doc.get("hooks")
                .unwrap()
                .get("Stop")
                .unwrap()
                .as_arr()
                .unwrap()
                .len(),
            2
        );
        remove_json_hooks(&mut doc, Host::ClaudeCode, true).unwrap();
        assert_eq!(doc, original);
    }

    #[test]
    fn cursor_hooks_come_and_go_with_their_version() {
        let mut doc = Json::Obj(Vec::new());
        let command = hook_command("hookloop", Host::Cursor, &["todo".into()]);
        add_json_hooks(&mut doc, Host::Cursor, &[("stop", None)], &command, false).unwrap();
        assert_eq!(
            doc.pretty(),
            format!(
                "{{\n  \"version\": 1,\n  \"hooks\": {{\n    \"stop\": [\n      {{\n        \"command\": \"{command}\"\n      }}\n    ]\n  }}\n}}\n"
            )
        );
        remove_json_hooks(&mut doc, Host::Cursor, false).unwrap();
        assert_eq!(doc, Json::Obj(Vec::new()));
    }

    #[test]
    fn codex_toml_keeps_its_comments_and_comes_back_byte_for_byte() {
        let text = "# mine\nmodel = \"m\"\n\n[mcp_servers.todo]\ncommand = \"node\" # the server\nargs = [\"todo.js\"]\n\n[mcp_servers.web]\nurl = \"https://example.test\"\n";
        let mut doc: DocumentMut = text.parse().unwrap();
        let found = wrap_toml_servers(&mut doc, "/bin/hookloop").unwrap();
        assert_eq!(found.proxied, ["todo"]);
        let command = hook_command("/bin/hookloop", Host::Codex, &found.proxied);
        add_toml_hooks(
            &mut doc,
            Host::Codex,
            &[("Stop", None), ("PostToolUse", Some("*"))],
            &command,
        )
        .unwrap();
        let installed = doc.to_string();
        assert!(
            installed.contains("# mine") && installed.contains("# the server"),
            "{installed}"
        );
        assert!(installed.contains("[[hooks.Stop.hooks]]"), "{installed}");
        let mut again: DocumentMut = installed.parse().unwrap();
        wrap_toml_servers(&mut again, "/bin/hookloop").unwrap();
        add_toml_hooks(
            &mut again,
            Host::Codex,
            &[("Stop", None), ("PostToolUse", Some("*"))],
            &command,
        )
        .unwrap();
        assert_eq!(
            again.to_string(),
            installed,
            "a second install changes nothing"
        );
        unwrap_toml_servers(&mut again);
        remove_toml_hooks(&mut again, Host::Codex);
        assert_eq!(again.to_string(), text);
    }
}
