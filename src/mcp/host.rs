//! [`McpHost`]: the [`ToolHost`] on real MCP servers, with supervision.
//!
//! Each configured server lives in a slot. A slot's current *life* is one connection (and, for
//! stdio, one process group). A life ends badly when the machine orders the server killed or
//! its transport breaks; the process group dies with it, and the next use of the server starts
//! a new life after an exponential backoff with jitter. Lives that end badly in a row count
//! against the restart budget — a server that restarts cleanly and then hangs again still
//! spends it — and once the budget is spent the server's tools leave the catalog for good.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use futures_util::future::join_all;
use rmcp::ClientHandler;
use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, Implementation, JsonObject,
    ProtocolVersion, RequestMetaObject, ServerNotification, SubscriptionFilter,
};
use rmcp::service::{
    ClientLifecycleMode, NotificationContext, Peer, RoleClient, RunningService, ServiceError,
    Subscription, serve_client_with_lifecycle,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::hooks::{self, Hook, ServerName};
use crate::machine::{Catalog, HookReply, ServerTools, ToolCall, ToolInfo, ToolOutput};
use crate::mcp::child::ChildGroup;
use crate::mcp::config::{HostOptions, HttpConfig, McpServers, ServerConfig};
use crate::mcp::{HookCall, McpError, ToolHost, convert};
use crate::text::lock;

/// The `_meta` key of the session id on every hook call.
pub const META_SESSION: &str = "hookloop/session";
/// The `_meta` key of the hook's own context on every hook call.
pub const META_HOOK: &str = "hookloop/hook";

/// A server that did not start; the session runs without it.
#[derive(Debug)]
pub struct StartupFailure {
    pub server: ServerName,
    pub error: McpError,
}

/// The MCP servers of one session: a [`ToolHost`] over rmcp.
///
/// Built by [`connect`](Self::connect). Dropping it kills every child process group.
pub struct McpHost {
    slots: Vec<Arc<Slot>>,
    by_name: HashMap<String, usize>,
    shared: Arc<Shared>,
}

impl McpHost {
    /// Starts every server at once, each bounded by the start-up timeout, and lists its tools.
    ///
    /// A server that fails to start is returned in the failures and left out (its tools are
    /// absent), unless [`HostOptions::all_or_nothing`] is set, when any failure fails the call.
    /// Too many servers or tools is an error either way.
    pub async fn connect(
        servers: McpServers,
        options: HostOptions,
    ) -> Result<(Self, Vec<StartupFailure>), McpError> {
        if servers.len() > options.max_servers {
            return Err(McpError::Config(format!(
                "{} servers are configured, more than the limit of {}",
                servers.len(),
                options.max_servers
            )));
        }
        let launches = servers
            .into_iter()
            .map(|(name, config)| (name, Launch::Config(config)))
            .collect();
        Self::start(launches, options).await
    }

    async fn start(
        launches: Vec<(ServerName, Launch)>,
        options: HostOptions,
    ) -> Result<(Self, Vec<StartupFailure>), McpError> {
        let shared = Arc::new(Shared {
            options,
            generation: AtomicU64::new(0),
            tool_count: Mutex::new(0),
        });
        let slots: Vec<Arc<Slot>> = launches
            .into_iter()
            .map(|(name, launch)| Slot::new(name, launch, Arc::clone(&shared)))
            .collect();
        let started = join_all(slots.iter().map(|slot| slot.first_life())).await;
        let mut failures = Vec::new();
        let mut live = Vec::new();
        for (slot, result) in slots.into_iter().zip(started) {
            match result {
                Ok(()) => live.push(slot),
                Err(error) => {
                    tracing::warn!(server = %slot.name, %error, "server failed to start; the session runs without it");
                    failures.push(StartupFailure {
                        server: slot.name.clone(),
                        error,
                    });
                }
            }
        }
        let host = Self {
            by_name: live
                .iter()
                .enumerate()
                .map(|(i, slot)| (slot.name.as_str().to_owned(), i))
                .collect(),
            slots: live,
            shared,
        };
        if host.shared.options.all_or_nothing && !failures.is_empty() {
            return Err(McpError::NotAllStarted { failures });
        }
        let count: usize = host.slots.iter().map(|s| s.lock().tools.len()).sum();
        if count > host.shared.options.max_tools {
            return Err(McpError::TooManyTools {
                count,
                max: host.shared.options.max_tools,
            });
        }
        *lock(&host.shared.tool_count) = count;
        Ok((host, failures))
    }

    /// The pid of a stdio server's current process (its process group id), if it is running.
    pub fn server_pid(&self, server: &str) -> Option<u32> {
        let slot = self.slot(server)?;
        match &slot.lock().life {
            Life::Live(conn) => conn.child.as_ref().and_then(|c| lock(c).pid()),
            Life::Dead { .. } | Life::Exhausted => None,
        }
    }

    /// The session id sent to hook servers.
    pub fn session_id(&self) -> &str {
        &self.shared.options.session_id
    }

    fn slot(&self, server: &str) -> Option<&Arc<Slot>> {
        self.slots.get(*self.by_name.get(server)?)
    }

    /// The arguments of a tool call as the JSON object MCP requires, or the problem in words.
    fn arguments(call: &ToolCall) -> Result<JsonObject, String> {
        match &call.arguments {
            Value::Object(map) => Ok(map.clone()),
            // Several models send no arguments at all for a tool that takes none.
            Value::Null => Ok(JsonObject::new()),
            Value::String(raw) => Err(format!(
                "the arguments of {} must be a JSON object; got text that is not one: {}",
                call.name,
                crate::text::cut(raw, 200, crate::text::Cut::Middle)
            )),
            other => Err(format!(
                "the arguments of {} must be a JSON object; got {}",
                call.name,
                json_kind(other)
            )),
        }
    }
}

impl Drop for McpHost {
    fn drop(&mut self) {
        for slot in &self.slots {
            if let Life::Live(conn) = &slot.lock().life {
                conn.shut_down();
            }
        }
    }
}

impl ToolHost for McpHost {
    fn catalog_generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    fn catalog(&self) -> Catalog {
        let servers = self
            .slots
            .iter()
            .filter_map(|slot| {
                let state = slot.lock();
                match state.life {
                    Life::Exhausted => None,
                    // A dead server keeps its tools: using one is what restarts it.
                    Life::Live(_) | Life::Dead { .. } => Some(ServerTools {
                        server: slot.name.clone(),
                        tools: state.tools.clone(),
                    }),
                }
            })
            .collect();
        Catalog { servers }
    }

    async fn call_tool(&self, call: &ToolCall) -> ToolOutput {
        let unknown = || ToolOutput::error(crate::machine::unknown_tool_text(&call.name));
        let Some((server, tool)) = hooks::split_qualified(&call.name) else {
            return unknown();
        };
        let Some(slot) = self.slot(server) else {
            return unknown();
        };
        // Hooks are the engine's to call; the machine refuses them too, this is the host's
        // own guard.
        if hooks::is_hook(tool) || !slot.lock().tools.iter().any(|t| t.name == tool) {
            return unknown();
        }
        let arguments = match Self::arguments(call) {
            Ok(arguments) => arguments,
            Err(problem) => return ToolOutput::error(problem),
        };
        let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments);
        let timeout = self.shared.options.call_timeout;
        let max = self.shared.options.max_output_bytes;
        // Dropping the call (timeout or the embedder's cancel) makes rmcp send
        // `notifications/cancelled` for it.
        match tokio::time::timeout(timeout, slot.call(params)).await {
            Err(_) => ToolOutput::error(format!(
                "{} did not answer within {:.1} s and was cancelled",
                call.name,
                timeout.as_secs_f64()
            )),
            Ok(Err(error)) => ToolOutput::error(format!("{} failed: {error}", call.name)),
            Ok(Ok(result)) => convert::tool_output(result, max),
        }
    }

    async fn call_hook(&self, call: &HookCall) -> HookReply {
        let Some(slot) = self.slot(call.server.as_str()) else {
            return HookReply::Failed {
                error: format!("no server named {}", call.server),
            };
        };
        let mut params =
            CallToolRequestParams::new(call.hook.tool_name()).with_arguments(JsonObject::new());
        params.meta = Some(hook_meta(&self.shared.options.session_id, call));
        let max = self.shared.options.max_output_bytes;
        match tokio::time::timeout(call.timeout, slot.call(params)).await {
            Err(_) => HookReply::TimedOut,
            Ok(Err(error)) => HookReply::Failed {
                error: error.to_string(),
            },
            Ok(Ok(result)) => convert::hook_reply(result, max),
        }
    }

    async fn kill_server(&self, server: &ServerName) {
        if let Some(slot) = self.slot(server.as_str()) {
            let life = match &slot.lock().life {
                Life::Live(conn) => conn.life,
                Life::Dead { .. } | Life::Exhausted => return,
            };
            slot.end_life(life, "killed on the engine's order");
        }
    }
}

/// The `_meta` of a hook call: the session id and the hook's context.
fn hook_meta(session: &str, call: &HookCall) -> RequestMetaObject {
    let hook = match call.hook {
        Hook::Stop => json!({
            "name": call.hook.tool_name(),
            "objectionsSoFar": call.context.objections_so_far,
            "budgetLeft": call.context.budget_left,
        }),
        Hook::PostCompact => json!({
            "name": call.hook.tool_name(),
            "compactions": call.context.compactions,
        }),
    };
    let mut meta = RequestMetaObject::new();
    meta.0
        .0
        .insert(META_SESSION.into(), Value::String(session.into()));
    meta.0.0.insert(META_HOOK.into(), hook);
    meta
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What every slot of one host shares.
struct Shared {
    options: HostOptions,
    /// Bumped on every change of what [`McpHost::catalog`] returns.
    generation: AtomicU64,
    /// Tools across all servers, kept under [`HostOptions::max_tools`].
    tool_count: Mutex<usize>,
}

impl Shared {
    fn catalog_changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// How a server is reached.
enum Launch {
    Config(ServerConfig),
    /// A connection made by a test: an in-memory duplex to a server in this process.
    #[cfg(test)]
    Duplex(MakeDuplex),
}

/// Makes the in-memory connection of one life.
#[cfg(test)]
type MakeDuplex = Box<dyn Fn() -> tokio::io::DuplexStream + Send + Sync>;

/// One configured server and its current life.
struct Slot {
    name: ServerName,
    launch: Launch,
    shared: Arc<Shared>,
    state: Mutex<SlotState>,
    /// Held while a life starts, so that concurrent callers start one, not several.
    starting: tokio::sync::Mutex<()>,
}

struct SlotState {
    life: Life,
    tools: Vec<ToolInfo>,
    /// Lives in a row that ended badly.
    bad_streak: u32,
    next_life: u64,
}

enum Life {
    Live(Arc<Conn>),
    /// Restarts on next use, not before `retry_at`.
    Dead {
        retry_at: Instant,
    },
    /// Out of restarts; its tools have left the catalog.
    Exhausted,
}

/// One life of a server: its rmcp client and, for stdio, its process group.
struct Conn {
    life: u64,
    started: Instant,
    service: RunningService<RoleClient, Handler>,
    child: Option<Mutex<ChildGroup>>,
}

impl Conn {
    /// Kills the process group and stops the client. In-flight calls fail at once.
    fn shut_down(&self) {
        if let Some(child) = &self.child {
            lock(child).kill();
        }
        self.service.cancellation_token().cancel();
    }
}

impl Slot {
    fn new(name: ServerName, launch: Launch, shared: Arc<Shared>) -> Arc<Self> {
        Arc::new(Self {
            name,
            launch,
            shared,
            state: Mutex::new(SlotState {
                life: Life::Dead {
                    retry_at: Instant::now(),
                },
                tools: Vec::new(),
                bad_streak: 0,
                next_life: 0,
            }),
            starting: tokio::sync::Mutex::new(()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, SlotState> {
        lock(&self.state)
    }

    async fn first_life(self: &Arc<Self>) -> Result<(), McpError> {
        let (conn, tools) = self.open().await?;
        let mut state = self.lock();
        state.tools = tools;
        state.life = Life::Live(conn);
        Ok(())
    }

    /// Calls a tool on the current life, starting one first if the server is dead.
    async fn call(
        self: &Arc<Self>,
        params: CallToolRequestParams,
    ) -> Result<rmcp::model::CallToolResult, McpError> {
        let conn = self.live().await?;
        match conn.service.peer().call_tool(params).await {
            Ok(result) => Ok(result),
            Err(error) => {
                let reason = error.to_string();
                if breaks_transport(&error) {
                    self.end_life(conn.life, &reason);
                }
                Err(McpError::Unavailable {
                    server: self.name.clone(),
                    reason,
                })
            }
        }
    }

    /// The current life, or a new one.
    async fn live(self: &Arc<Self>) -> Result<Arc<Conn>, McpError> {
        let broken = match &self.lock().life {
            Life::Live(conn) if !conn.service.is_closed() => return Ok(Arc::clone(conn)),
            Life::Live(conn) => Some(conn.life),
            Life::Exhausted => return Err(self.exhausted()),
            Life::Dead { .. } => None,
        };
        if let Some(life) = broken {
            self.end_life(life, "its connection closed");
        }
        // The restart runs in its own task: a caller that stops waiting (a hook timeout, the
        // user's cancel) must not abandon a child half started.
        let slot = Arc::clone(self);
        tokio::spawn(async move { slot.restart().await })
            .await
            .unwrap_or_else(|e| {
                Err(McpError::Unavailable {
                    server: self.name.clone(),
                    reason: format!("its restart failed: {e}"),
                })
            })
    }

    async fn restart(self: Arc<Self>) -> Result<Arc<Conn>, McpError> {
        let _starting = self.starting.lock().await;
        let retry_at = match &self.lock().life {
            // Another caller restarted it while this one waited.
            Life::Live(conn) => return Ok(Arc::clone(conn)),
            Life::Exhausted => return Err(self.exhausted()),
            Life::Dead { retry_at } => *retry_at,
        };
        tokio::time::sleep_until(retry_at).await;
        match self.open().await {
            Ok((conn, tools)) => {
                tracing::info!(server = %self.name, life = conn.life, "server restarted");
                self.set_tools(tools);
                self.lock().life = Life::Live(Arc::clone(&conn));
                Ok(conn)
            }
            Err(error) => {
                tracing::warn!(server = %self.name, %error, "server failed to restart");
                let mut state = self.lock();
                state.bad_streak += 1;
                self.after_bad_life(&mut state);
                Err(error)
            }
        }
    }

    /// Ends life `life` badly, if it is still the current one; reports about an earlier life
    /// are stale and ignored.
    fn end_life(&self, life: u64, reason: &str) {
        let conn = {
            let mut state = self.lock();
            let conn = match &state.life {
                Life::Live(conn) if conn.life == life => Arc::clone(conn),
                Life::Live(_) | Life::Dead { .. } | Life::Exhausted => return,
            };
            // A life that proved itself for a while starts a new streak.
            if conn.started.elapsed() >= self.shared.options.healthy_after {
                state.bad_streak = 1;
            } else {
                state.bad_streak += 1;
            }
            self.after_bad_life(&mut state);
            conn
        };
        tracing::warn!(server = %self.name, life, reason, "server marked dead");
        conn.shut_down();
    }

    /// After a bad life: wait before the next, or give up once the budget is spent.
    fn after_bad_life(&self, state: &mut SlotState) {
        let options = &self.shared.options;
        if state.bad_streak > options.restart_budget {
            tracing::warn!(
                server = %self.name,
                lives = state.bad_streak,
                "server ended badly {} times in a row, past its restart budget of {}; its tools \
                 leave the catalog",
                state.bad_streak,
                options.restart_budget
            );
            state.life = Life::Exhausted;
            *lock(&self.shared.tool_count) -= state.tools.len();
            self.shared.catalog_changed();
            return;
        }
        let exponent = state.bad_streak.saturating_sub(1).min(16);
        let backoff = options
            .restart_backoff
            .saturating_mul(1 << exponent)
            .min(options.max_restart_backoff);
        // Jitter: somewhere in the upper half, so restarts of many servers do not align.
        let backoff = backoff.mul_f64(0.5 + fastrand::f64() / 2.0);
        state.life = Life::Dead {
            retry_at: Instant::now() + backoff,
        };
    }

    fn exhausted(&self) -> McpError {
        McpError::Unavailable {
            server: self.name.clone(),
            reason: "it ran out of restarts".into(),
        }
    }

    /// Replaces the server's tools after a restart or a `list_changed`, keeping the old ones
    /// if the new ones would break the session's tool limit.
    fn set_tools(&self, tools: Vec<ToolInfo>) {
        let mut state = self.lock();
        if state.tools == tools {
            return;
        }
        let mut count = lock(&self.shared.tool_count);
        let new_count = *count - state.tools.len() + tools.len();
        if new_count > self.shared.options.max_tools {
            tracing::warn!(
                server = %self.name,
                "the server's new tool list would bring the session to {new_count} tools, more \
                 than the limit of {}; keeping its old list",
                self.shared.options.max_tools
            );
            return;
        }
        *count = new_count;
        state.tools = tools;
        drop(count);
        drop(state);
        self.shared.catalog_changed();
    }

    /// Starts a life: connect, negotiate, list the tools; all within the start-up timeout.
    async fn open(self: &Arc<Self>) -> Result<(Arc<Conn>, Vec<ToolInfo>), McpError> {
        let life = {
            let mut state = self.lock();
            state.next_life += 1;
            state.next_life
        };
        let timeout = self.shared.options.startup_timeout;
        tokio::time::timeout(timeout, self.open_inner(life))
            .await
            .unwrap_or_else(|_| {
                Err(McpError::StartupTimeout {
                    server: self.name.clone(),
                    secs: timeout.as_secs(),
                })
            })
    }

    async fn open_inner(
        self: &Arc<Self>,
        life: u64,
    ) -> Result<(Arc<Conn>, Vec<ToolInfo>), McpError> {
        let failed = |reason: String| McpError::Startup {
            server: self.name.clone(),
            reason,
        };
        let handler = Handler {
            slot: Arc::downgrade(self),
            life,
        };
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::LATEST],
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        };
        let started = Instant::now();
        let (service, child) = match &self.launch {
            Launch::Config(ServerConfig::Stdio(config)) => {
                let (child, stdout, stdin) = ChildGroup::spawn(&self.name, config)
                    .map_err(|e| failed(format!("could not run {:?}: {e}", config.command)))?;
                // If the handshake fails or times out, dropping `child` kills the group.
                let service = serve_client_with_lifecycle(handler, (stdout, stdin), lifecycle)
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                (service, Some(Mutex::new(child)))
            }
            Launch::Config(ServerConfig::Http(config)) => {
                let transport = StreamableHttpClientTransport::from_config(
                    http_config(config).map_err(failed)?,
                );
                let service = serve_client_with_lifecycle(handler, transport, lifecycle)
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                (service, None)
            }
            #[cfg(test)]
            Launch::Duplex(make) => {
                let (read, write) = tokio::io::split(make());
                let service = serve_client_with_lifecycle(handler, (read, write), lifecycle)
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                (service, None)
            }
        };
        let conn = Arc::new(Conn {
            life,
            started,
            service,
            child,
        });
        let tools = match conn.service.peer().list_all_tools().await {
            Ok(tools) => tools,
            Err(e) => {
                conn.shut_down();
                return Err(failed(format!("tools/list failed: {e}")));
            }
        };
        match convert::tools_from_server(&self.name, tools, &self.shared.options) {
            Ok(tools) => {
                let peer = conn.service.peer().clone();
                let version = peer.peer_info().map(|i| i.protocol_version.to_string());
                tracing::debug!(server = %self.name, life, tools = tools.len(), ?version, "server started");
                if let Some(subscription) = subscribe_tool_list(&peer).await {
                    tokio::spawn(watch_tool_list(
                        Arc::downgrade(self),
                        peer,
                        life,
                        subscription,
                    ));
                }
                Ok((conn, tools))
            }
            Err(error) => {
                conn.shut_down();
                Err(error)
            }
        }
    }
}

fn http_config(config: &HttpConfig) -> Result<StreamableHttpClientTransportConfig, String> {
    let mut headers = HashMap::with_capacity(config.headers.len());
    for (name, value) in &config.headers {
        let name = http::HeaderName::try_from(name.as_str())
            .map_err(|e| format!("invalid header name {name:?}: {e}"))?;
        let value = http::HeaderValue::try_from(value.as_str())
            .map_err(|e| format!("invalid value for header {name}: {e}"))?;
        headers.insert(name, value);
    }
    Ok(StreamableHttpClientTransportConfig::with_uri(config.url.as_str()).custom_headers(headers))
}

/// Whether an rmcp error means the connection is gone (rather than the server refusing one
/// request).
fn breaks_transport(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
    )
}

/// The client side of one life: answers the server's notifications.
struct Handler {
    slot: Weak<Slot>,
    life: u64,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        ClientConfig::new(
            ClientCapabilities::default(),
            Implementation::new("hookloop", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_tool_list_changed(&self, context: NotificationContext<RoleClient>) {
        let Some(slot) = self.slot.upgrade() else {
            return;
        };
        // Listing needs the connection's reader, which is busy delivering this notification:
        // list from a task of its own.
        tokio::spawn(refresh_tools(slot, context.peer, self.life));
    }
}

/// Lists a server's tools again after it said they changed, and replaces its catalog entry,
/// unless the life that said so has ended since.
async fn refresh_tools(slot: Arc<Slot>, peer: Peer<RoleClient>, life: u64) {
    match peer.list_all_tools().await {
        Ok(tools) => {
            let current = matches!(&slot.lock().life, Life::Live(c) if c.life == life);
            if !current {
                return;
            }
            match convert::tools_from_server(&slot.name, tools, &slot.shared.options) {
                Ok(tools) => slot.set_tools(tools),
                Err(error) => {
                    tracing::warn!(server = %slot.name, %error, "keeping the old tool list")
                }
            }
        }
        Err(error) => {
            tracing::warn!(server = %slot.name, %error, "tools/list after list_changed failed")
        }
    }
}

/// On the stateless protocol (2026-07-28 on), a server sends `list_changed` only on a
/// subscription the client opened. Opens one when the server offers the notification; the
/// subscription is open once this returns, so no change after start-up is missed.
async fn subscribe_tool_list(peer: &Peer<RoleClient>) -> Option<Subscription> {
    let info = peer.peer_info()?;
    let offers = info
        .capabilities
        .tools
        .as_ref()
        .and_then(|tools| tools.list_changed)
        .unwrap_or(false);
    if info.protocol_version.has_initialize() || !offers {
        return None;
    }
    let filter = SubscriptionFilter::builder().tools_list_changed().build();
    match peer.listen(filter).await {
        Ok(subscription) => Some(subscription),
        Err(error) => {
            tracing::debug!(%error, "the server refused a list_changed subscription");
            None
        }
    }
}

/// Refreshes the catalog from a `list_changed` subscription until the life ends.
async fn watch_tool_list(
    slot: Weak<Slot>,
    peer: Peer<RoleClient>,
    life: u64,
    mut subscription: Subscription,
) {
    while let Ok(Some(notification)) = subscription.next().await {
        if matches!(
            notification,
            ServerNotification::ToolListChangedNotification(_)
        ) {
            let Some(slot) = slot.upgrade() else { return };
            refresh_tools(slot, peer.clone(), life).await;
        }
    }
}

#[cfg(test)]
impl McpHost {
    /// A host over in-memory connections made by `make`, one call per life.
    async fn duplex(
        servers: Vec<(&str, MakeDuplex)>,
        options: HostOptions,
    ) -> Result<(Self, Vec<StartupFailure>), McpError> {
        let launches = servers
            .into_iter()
            .map(|(name, make)| {
                let name = ServerName::new(name).map_err(|e| McpError::Config(e.to_string()))?;
                Ok((name, Launch::Duplex(make)))
            })
            .collect::<Result<_, McpError>>()?;
        Self::start(launches, options).await
    }
}

#[cfg(test)]
mod tests;
