//! What the host connects to: [`McpServers`] (the `mcpServers` object of a `.mcp.json` file, in
//! file order) and how to reach each server.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::hooks::ServerName;
use crate::mcp::McpError;

/// How to reach one MCP server.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawServerConfig", into = "RawServerConfig")]
#[non_exhaustive]
pub enum ServerConfig {
    /// A child process speaking MCP over its stdin and stdout.
    Stdio(StdioConfig),
    /// A server speaking MCP over streamable HTTP; one that refuses it the way servers of the
    /// older transport do is reached over HTTP+SSE instead (see [`Sse`](Self::Sse)).
    Http(HttpConfig),
    /// A server speaking the HTTP+SSE transport of protocol 2024-11-05: the URL is its SSE
    /// stream, which names the endpoint that messages are posted to.
    Sse(HttpConfig),
}

/// A server the host starts as a child process, in its own process group.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StdioConfig {
    /// The program; looked up on `PATH` when it has no slash.
    pub command: String,
    /// The program's arguments.
    pub args: Vec<String>,
    /// Added to the child's otherwise clean environment (see [`CHILD_ENV_PASSTHROUGH`](crate::mcp::CHILD_ENV_PASSTHROUGH)).
    pub env: BTreeMap<String, String>,
    /// The child's working directory; the engine's when unset.
    pub cwd: Option<PathBuf>,
}

/// A server reached over HTTP, by either transport ([`ServerConfig::Http`],
/// [`ServerConfig::Sse`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpConfig {
    /// The server's URL.
    pub url: String,
    /// Sent with every request (an `Authorization` header, for instance).
    pub headers: BTreeMap<String, String>,
    /// How to authorize without a person (the `oauth` block): a grant in place of the login.
    pub oauth: Option<crate::mcp::auth::OAuthGrant>,
}

impl HttpConfig {
    /// The headers as HTTP headers, or which one is not valid.
    pub(crate) fn header_map(&self) -> Result<http::HeaderMap, String> {
        let mut headers = http::HeaderMap::with_capacity(self.headers.len());
        for (name, value) in &self.headers {
            let name = http::HeaderName::try_from(name.as_str())
                .map_err(|e| format!("invalid header name {name:?}: {e}"))?;
            let value = http::HeaderValue::try_from(value.as_str())
                .map_err(|e| format!("invalid value for header {name}: {e}"))?;
            headers.insert(name, value);
        }
        Ok(headers)
    }

    /// Whether the configuration sends its own `Authorization` header: the operator's choice
    /// of credentials, which OAuth leaves alone.
    pub(crate) fn has_authorization(&self) -> bool {
        self.headers
            .keys()
            .any(|h| h.eq_ignore_ascii_case("authorization"))
    }
}

impl ServerConfig {
    /// A child process running `command` with `args`.
    pub fn stdio(
        command: impl Into<String>,
        args: impl IntoIterator<Item = impl Into<String>>,
    ) -> Self {
        Self::Stdio(StdioConfig {
            command: command.into(),
            args: args.into_iter().map(Into::into).collect(),
            ..StdioConfig::default()
        })
    }

    /// A streamable HTTP server at `url`.
    pub fn http(url: impl Into<String>) -> Self {
        Self::Http(HttpConfig {
            url: url.into(),
            headers: BTreeMap::new(),
            oauth: None,
        })
    }

    /// A server of the HTTP+SSE transport (2024-11-05) whose SSE stream is at `url`.
    pub fn sse(url: impl Into<String>) -> Self {
        Self::Sse(HttpConfig {
            url: url.into(),
            headers: BTreeMap::new(),
            oauth: None,
        })
    }

    /// The same server with one more environment variable (stdio only; ignored for HTTP).
    pub fn env(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Self::Stdio(stdio) = &mut self {
            stdio.env.insert(name.into(), value.into());
        }
        self
    }

    /// The same server authorized by `grant` instead of a login (HTTP and SSE; ignored for
    /// stdio).
    pub fn oauth(mut self, grant: crate::mcp::auth::OAuthGrant) -> Self {
        if let Self::Http(http) | Self::Sse(http) = &mut self {
            http.oauth = Some(grant);
        }
        self
    }

    /// The same server with one more header (HTTP and SSE; ignored for stdio).
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Self::Http(http) | Self::Sse(http) = &mut self {
            http.headers.insert(name.into(), value.into());
        }
        self
    }
}

/// The servers of one session, in configuration order: the order hooks answer in.
///
/// Deserialises from the `mcpServers` object of a `.mcp.json` file, keeping the file's order:
///
/// ```
/// use hookloop::mcp::{McpServers, ServerConfig};
///
/// let servers = McpServers::from_json(r#"{"mcpServers": {
///     "todo": {"command": "todo-server", "args": ["--db", "todo.db"], "env": {"DEBUG": "1"}},
///     "search": {"type": "http", "url": "http://127.0.0.1:8080/mcp",
///                "headers": {"Authorization": "Bearer t"}}
/// }}"#)?;
/// let names: Vec<_> = servers.iter().map(|(name, _)| name.as_str()).collect();
/// assert_eq!(names, ["todo", "search"]);
/// assert!(matches!(servers.iter().nth(1), Some((_, ServerConfig::Http(_)))));
/// # Ok::<(), hookloop::mcp::McpError>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct McpServers {
    servers: Vec<(ServerName, ServerConfig)>,
}

impl McpServers {
    /// No servers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses a `.mcp.json` document: an object with an `mcpServers` object. `${VAR}` and
    /// `${VAR:-default}` in a server's `command`, `args`, `env` values, `url` and `headers`
    /// values are replaced by the process environment's variables, as other hosts that read
    /// `.mcp.json` do (see [`from_json_with`](Self::from_json_with)).
    pub fn from_json(text: &str) -> Result<Self, McpError> {
        Self::from_json_with(text, |name| {
            crate::config::env_lookup(name).map_err(|e| e.to_string())
        })
    }

    /// [`from_json`](Self::from_json), with the variables `lookup` gives (`Ok(None)`: unset).
    ///
    /// `${NAME}` (a name of letters, digits and `_`, not starting with a digit) becomes the
    /// variable's value; `${NAME:-default}` becomes the default when the variable is unset or
    /// empty. A `${NAME}` that is unset, with no default, is an error naming the server, the
    /// field and the variable: a server started with the literal text would fail later and
    /// less clearly, or send it to a remote server as a credential. Anything else — `$NAME`,
    /// a `${` that does not close — is kept as it is. Expanded values are not expanded again.
    pub fn from_json_with(
        text: &str,
        lookup: impl Fn(&str) -> Result<Option<String>, String>,
    ) -> Result<Self, McpError> {
        #[derive(Deserialize)]
        struct File {
            #[serde(rename = "mcpServers")]
            mcp_servers: InOrder<RawServerConfig>,
        }
        let file = serde_json::from_str::<File>(text)
            .map_err(|e| McpError::Config(format!("invalid .mcp.json: {e}")))?;
        let mut servers = Self::new();
        for (name, raw) in file.mcp_servers.0 {
            let config = raw
                .expand(&lookup)
                .and_then(ServerConfig::try_from)
                .map_err(|e| {
                    McpError::Config(format!("invalid .mcp.json: server {name:?}: {e}"))
                })?;
            servers.push(name, config)?;
        }
        Ok(servers)
    }

    /// Adds a server after the others. A second server of the same name is a config error.
    pub fn push(&mut self, name: ServerName, config: ServerConfig) -> Result<(), McpError> {
        if self.servers.iter().any(|(n, _)| *n == name) {
            return Err(McpError::Config(format!(
                "server {name:?} is configured twice"
            )));
        }
        self.servers.push((name, config));
        Ok(())
    }

    /// The same list with one more server; see [`push`](Self::push).
    pub fn with(mut self, name: &str, config: ServerConfig) -> Result<Self, McpError> {
        let name = ServerName::new(name).map_err(|e| McpError::Config(e.to_string()))?;
        self.push(name, config)?;
        Ok(self)
    }

    /// The servers, in configuration order.
    pub fn iter(&self) -> impl Iterator<Item = (&ServerName, &ServerConfig)> {
        self.servers.iter().map(|(n, c)| (n, c))
    }

    /// How many servers.
    pub fn len(&self) -> usize {
        self.servers.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.servers.is_empty()
    }
}

impl IntoIterator for McpServers {
    type Item = (ServerName, ServerConfig);
    type IntoIter = std::vec::IntoIter<(ServerName, ServerConfig)>;
    fn into_iter(self) -> Self::IntoIter {
        self.servers.into_iter()
    }
}

impl<'de> Deserialize<'de> for McpServers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let InOrder(entries) = InOrder::<ServerConfig>::deserialize(deserializer)?;
        let mut servers = McpServers::new();
        for (name, config) in entries {
            servers.push(name, config).map_err(de::Error::custom)?;
        }
        Ok(servers)
    }
}

/// A JSON object of server name to `T`, in document order (a `HashMap` would lose it).
struct InOrder<T>(Vec<(ServerName, T)>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for InOrder<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Entries<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for Entries<T> {
            type Value = InOrder<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object of server name to server config")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                // A map visitor sees entries in document order.
                let mut entries = Vec::new();
                while let Some(name) = map.next_key::<String>()? {
                    let name = ServerName::new(name).map_err(de::Error::custom)?;
                    let value = map
                        .next_value::<T>()
                        .map_err(|e| de::Error::custom(format_args!("server {name:?}: {e}")))?;
                    entries.push((name, value));
                }
                Ok(InOrder(entries))
            }
        }
        deserializer.deserialize_map(Entries(std::marker::PhantomData))
    }
}

impl Serialize for McpServers {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_map(self.servers.iter().map(|(n, c)| (n.as_str(), c)))
    }
}

/// The `.mcp.json` shape of one server, before it is checked.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServerConfig {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    command: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    args: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    env: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cwd: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    oauth: Option<crate::mcp::auth::OAuthGrant>,
}

impl RawServerConfig {
    /// The same entry with the variables of its `command`, `args`, `env` values, `url` and
    /// `headers` values expanded (see [`McpServers::from_json_with`]); the error names the
    /// field.
    fn expand(
        mut self,
        lookup: &impl Fn(&str) -> Result<Option<String>, String>,
    ) -> Result<Self, String> {
        let field = |name: &str, value: &mut String| {
            *value = expand_vars(value, lookup).map_err(|e| format!("{name}: {e}"))?;
            Ok::<_, String>(())
        };
        if let Some(command) = &mut self.command {
            field("command", command)?;
        }
        for (i, arg) in self.args.iter_mut().enumerate() {
            field(&format!("args[{i}]"), arg)?;
        }
        for (name, value) in &mut self.env {
            field(&format!("env.{name}"), value)?;
        }
        if let Some(url) = &mut self.url {
            field("url", url)?;
        }
        for (name, value) in &mut self.headers {
            field(&format!("headers.{name}"), value)?;
        }
        Ok(self)
    }
}

/// `text` with each `${NAME}` and `${NAME:-default}` replaced (see
/// [`McpServers::from_json_with`]).
fn expand_vars(
    text: &str,
    lookup: &impl Fn(&str) -> Result<Option<String>, String>,
) -> Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        // Only a name's own characters are read before it is known whether this is a
        // reference: searching the rest for its `}` first made a text of many `${` quadratic
        // (a 1.2 MB argument took minutes). Each byte is looked at a bounded number of times.
        let name_len = after
            .bytes()
            .enumerate()
            .take_while(|&(i, b)| {
                b == b'_' || b.is_ascii_alphabetic() || (i > 0 && b.is_ascii_digit())
            })
            .count();
        let name = &after[..name_len];
        let tail = &after[name_len..];
        let (default, end) = if name.is_empty() {
            (None, None)
        } else if tail.starts_with('}') {
            (None, Some(name_len))
        } else if let Some(default) = tail.strip_prefix(":-") {
            match default.find('}') {
                Some(close) => (Some(&default[..close]), Some(name_len + 2 + close)),
                None => {
                    // A `${` that never closes is text.
                    out.push_str(&rest[start..]);
                    return Ok(out);
                }
            }
        } else {
            (None, None)
        };
        let Some(end) = end else {
            // Not a reference (`${}`, `${1}`, `${a b}`, a `${` that never closes): kept as it
            // is, and the search goes on after its `${`.
            out.push_str("${");
            rest = after;
            continue;
        };
        let value = lookup(name).map_err(|e| format!("${{{name}}}: {e}"))?;
        match (
            value.filter(|v| default.is_none() || !v.is_empty()),
            default,
        ) {
            (Some(value), _) => out.push_str(&value),
            (None, Some(default)) => out.push_str(default),
            (None, None) => {
                return Err(format!(
                    "${{{name}}} is not set and has no default (write ${{{name}:-default}} to give one)"
                ));
            }
        }
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

impl TryFrom<RawServerConfig> for ServerConfig {
    type Error = String;
    fn try_from(raw: RawServerConfig) -> Result<Self, String> {
        let kind = raw
            .kind
            .as_deref()
            .unwrap_or(if raw.url.is_some() { "http" } else { "stdio" });
        match kind {
            "stdio" => {
                let command = raw
                    .command
                    .filter(|c| !c.trim().is_empty())
                    .ok_or("a stdio server needs a \"command\"")?;
                if raw.url.is_some() || !raw.headers.is_empty() || raw.oauth.is_some() {
                    return Err("a stdio server takes no \"url\", \"headers\" or \"oauth\"".into());
                }
                Ok(Self::Stdio(StdioConfig {
                    command,
                    args: raw.args,
                    env: raw.env,
                    cwd: raw.cwd,
                }))
            }
            "http" | "streamable-http" | "streamableHttp" => Ok(Self::Http(raw.http("http")?)),
            "sse" => Ok(Self::Sse(raw.http("sse")?)),
            other => Err(format!(
                "server type {other:?} is not supported (use \"stdio\", \"http\" or \"sse\")"
            )),
        }
    }
}

impl RawServerConfig {
    /// The URL and headers of a server of type `kind` (`http` or `sse`), checked.
    fn http(self, kind: &str) -> Result<HttpConfig, String> {
        let url = self
            .url
            .ok_or_else(|| format!("an {kind} server needs a \"url\""))?;
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("url {url:?} is not an http(s) url"));
        }
        if self.command.is_some() || !self.args.is_empty() || !self.env.is_empty() {
            return Err(format!(
                "an {kind} server takes no \"command\", \"args\" or \"env\""
            ));
        }
        Ok(HttpConfig {
            url,
            headers: self.headers,
            oauth: self.oauth,
        })
    }
}

impl From<ServerConfig> for RawServerConfig {
    fn from(config: ServerConfig) -> Self {
        match config {
            ServerConfig::Stdio(s) => Self {
                command: Some(s.command),
                args: s.args,
                env: s.env,
                cwd: s.cwd,
                ..Self::default()
            },
            ServerConfig::Http(h) => Self {
                kind: Some("http".into()),
                url: Some(h.url),
                headers: h.headers,
                oauth: h.oauth,
                ..Self::default()
            },
            ServerConfig::Sse(h) => Self {
                kind: Some("sse".into()),
                url: Some(h.url),
                headers: h.headers,
                oauth: h.oauth,
                ..Self::default()
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mcp_json_keeps_file_order_and_both_kinds() {
        let servers = McpServers::from_json(
            r#"{"mcpServers": {
                "zeta": {"command": "z", "args": ["-v"], "env": {"A": "1"}, "cwd": "/tmp"},
                "alpha": {"type": "http", "url": "http://127.0.0.1:1/mcp", "headers": {"X": "y"}},
                "mid": {"type": "stdio", "command": "m"}
            }}"#,
        )
        .unwrap();
        let names: Vec<_> = servers.iter().map(|(n, _)| n.as_str().to_owned()).collect();
        assert_eq!(names, ["zeta", "alpha", "mid"]);
        let (_, zeta) = servers.iter().next().unwrap();
        assert_eq!(
            *zeta,
            ServerConfig::Stdio(StdioConfig {
                command: "z".into(),
                args: vec!["-v".into()],
                env: BTreeMap::from([("A".into(), "1".into())]),
                cwd: Some("/tmp".into()),
            })
        );
        let text = serde_json::to_string(&servers).unwrap();
        let back: McpServers = serde_json::from_str(&text).unwrap();
        assert_eq!(back, servers);
    }

    #[test]
    fn bad_entries_are_errors_that_name_them() {
        let cases = [
            (r#"{"mcpServers": {"a b": {"command": "x"}}}"#, "a b"),
            (r#"{"mcpServers": {"a__b": {"command": "x"}}}"#, "a__b"),
            (r#"{"mcpServers": {"s": {"args": []}}}"#, "command"),
            (
                r#"{"mcpServers": {"s": {"type": "websocket", "url": "ws://x"}}}"#,
                "websocket",
            ),
            (
                r#"{"mcpServers": {"s": {"type": "sse", "url": "ws://x"}}}"#,
                "ws://x",
            ),
            (
                r#"{"mcpServers": {"s": {"type": "sse", "command": "x", "url": "http://x"}}}"#,
                "an sse server takes no",
            ),
            (
                r#"{"mcpServers": {"s": {"type": "sse"}}}"#,
                "needs a \"url\"",
            ),
            (
                r#"{"mcpServers": {"s": {"type": "http", "url": "ftp://x"}}}"#,
                "ftp://x",
            ),
            (
                r#"{"mcpServers": {"s": {"command": "x", "bogus": 1}}}"#,
                "bogus",
            ),
            (
                r#"{"mcpServers": {"s": {"command": "x"}, "s": {"command": "y"}}}"#,
                "twice",
            ),
        ];
        for (json, needle) in cases {
            let err = McpServers::from_json(json).unwrap_err().to_string();
            assert!(err.contains(needle), "{json}: {err}");
        }
    }

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Result<Option<String>, String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| Ok(map.get(name).cloned())
    }

    #[test]
    fn variables_expand_in_command_args_env_url_and_headers() {
        let lookup = vars(&[
            ("BIN", "/opt/todo"),
            ("TOKEN", "s3cret"),
            ("HOST", "127.0.0.1"),
        ]);
        let servers = McpServers::from_json_with(
            r#"{"mcpServers": {
                "todo": {"command": "${BIN}", "args": ["--db", "${DB:-todo.json}", "$BIN", "${BIN"],
                         "env": {"API_TOKEN": "${TOKEN}", "MODE": "${MODE:-fast}"}, "cwd": "${BIN}"},
                "web": {"url": "http://${HOST}:8080/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}
            }}"#,
            lookup,
        )
        .unwrap();
        let mut it = servers.iter();
        let Some((_, ServerConfig::Stdio(todo))) = it.next() else {
            panic!("todo is stdio");
        };
        assert_eq!(todo.command, "/opt/todo");
        // `$BIN` is not a reference, an unclosed `${` is text; `cwd` is not expanded.
        assert_eq!(todo.args, ["--db", "todo.json", "$BIN", "${BIN"]);
        assert_eq!(todo.env["API_TOKEN"], "s3cret");
        assert_eq!(todo.env["MODE"], "fast");
        assert_eq!(todo.cwd.as_deref(), Some(std::path::Path::new("${BIN}")));
        let Some((_, ServerConfig::Http(web))) = it.next() else {
            panic!("web is http");
        };
        assert_eq!(web.url, "http://127.0.0.1:8080/mcp");
        assert_eq!(web.headers["Authorization"], "Bearer s3cret");
    }

    #[test]
    fn a_default_applies_to_an_empty_variable_and_values_are_not_expanded_twice() {
        let lookup = vars(&[("EMPTY", ""), ("LOOP", "${LOOP}")]);
        let servers = McpServers::from_json_with(
            r#"{"mcpServers": {"s": {"command": "x", "args": ["${EMPTY:-d}", "${EMPTY}", "${LOOP}", "${}", "${1A:-x}", "a${EMPTY:-}b"]}}}"#,
            lookup,
        )
        .unwrap();
        let Some((_, ServerConfig::Stdio(s))) = servers.iter().next() else {
            panic!("stdio");
        };
        assert_eq!(s.args, ["d", "", "${LOOP}", "${}", "${1A:-x}", "ab"]);
    }

    #[test]
    fn text_that_is_not_a_reference_is_kept_byte_for_byte() {
        let lookup = vars(&[("A", "a"), ("B", "b")]);
        for (text, expanded) in [
            ("${A b}", "${A b}"),
            ("${A", "${A"),
            ("${A:-x", "${A:-x"),
            ("${A:-x ${B}", "a"),
            ("${A b} ${B}", "${A b} b"),
            ("${${A}}", "${a}"),
            ("${C:-${B}}", "${B}"),
            ("${A}:-x}", "a:-x}"),
            ("${_9}${9}", "${9}"),
            ("$${A}$", "$a$"),
            ("${é}${A}", "${é}a"),
        ] {
            let lookup =
                |name: &str| Ok(lookup(name)?.or_else(|| (name == "_9").then(String::new)));
            assert_eq!(expand_vars(text, &lookup).unwrap(), expanded, "{text}");
        }
    }

    #[test]
    fn a_text_of_megabytes_of_open_references_expands_in_one_pass() {
        // Each `${` used to search the rest of the text for its `}`: this took hours.
        let lookup = vars(&[("A", "a")]);
        for text in [
            format!("{}}}", "${".repeat(1 << 20)),
            format!("{}}}", "${x y".repeat(1 << 19)),
            format!("{}}}", "${A:".repeat(1 << 19)),
            "${A}".repeat(1 << 19),
        ] {
            let expanded = expand_vars(&text, &lookup).unwrap();
            let want = if text.starts_with("${A}") {
                "a".repeat(1 << 19)
            } else {
                text.clone()
            };
            assert!(expanded == want, "{} bytes", text.len());
        }
    }

    #[test]
    fn an_unset_variable_without_default_is_an_error_naming_server_field_and_variable() {
        for (json, field) in [
            (
                r#"{"mcpServers": {"web": {"url": "http://h/mcp", "headers": {"Authorization": "Bearer ${API_TOKEN}"}}}}"#,
                "headers.Authorization",
            ),
            (
                r#"{"mcpServers": {"web": {"command": "x", "args": ["a", "${API_TOKEN}"]}}}"#,
                "args[1]",
            ),
            (
                r#"{"mcpServers": {"web": {"command": "${API_TOKEN}"}}}"#,
                "command",
            ),
        ] {
            let err = McpServers::from_json_with(json, vars(&[]))
                .unwrap_err()
                .to_string();
            for needle in ["\"web\"", field, "${API_TOKEN}", "not set"] {
                assert!(err.contains(needle), "{json}: {err} lacks {needle}");
            }
        }
        // A lookup that fails (a value that is not UTF-8) names the variable too.
        let failing = |_: &str| Err::<Option<String>, String>("not unicode".into());
        let err =
            McpServers::from_json_with(r#"{"mcpServers": {"s": {"command": "${X}"}}}"#, failing)
                .unwrap_err()
                .to_string();
        assert!(err.contains("${X}") && err.contains("not unicode"), "{err}");
    }

    #[test]
    fn an_sse_server_is_its_own_kind_with_expanded_url_and_headers() {
        let servers = McpServers::from_json_with(
            r#"{"mcpServers": {"old": {"type": "sse", "url": "http://${HOST}/sse",
                                        "headers": {"Authorization": "Bearer ${TOKEN}"}}}}"#,
            vars(&[("HOST", "127.0.0.1:9"), ("TOKEN", "t0k")]),
        )
        .unwrap();
        let expected =
            ServerConfig::sse("http://127.0.0.1:9/sse").header("Authorization", "Bearer t0k");
        assert_eq!(servers.iter().next().map(|(_, c)| c), Some(&expected));
        // It writes back as `"type": "sse"`, and reads again as itself.
        let text = serde_json::to_string(&servers).unwrap();
        assert!(text.contains(r#""type":"sse""#), "{text}");
        let back: McpServers = serde_json::from_str(&text).unwrap();
        assert_eq!(back, servers);
    }

    #[test]
    fn an_expanded_url_is_checked_after_expansion() {
        let ok = McpServers::from_json_with(
            r#"{"mcpServers": {"s": {"type": "http", "url": "${BASE}/mcp"}}}"#,
            vars(&[("BASE", "https://example.test")]),
        );
        assert!(ok.is_ok(), "{ok:?}");
        let err = McpServers::from_json_with(
            r#"{"mcpServers": {"s": {"type": "http", "url": "${BASE}/mcp"}}}"#,
            vars(&[("BASE", "ftp://example.test")]),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("ftp://example.test/mcp"), "{err}");
    }
}
