//! Supervision: each configured server lives in a [`Slot`]. A slot's current *life* is one
//! connection (and, for stdio, one process group). The slot performs the
//! [`Supervisor`]'s orders — start a life after a wait, retire the server — and reports what
//! happened to its lives as facts; every decision about restarts is the supervisor's.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, PaginatedRequestParams, ProtocolVersion, Tool,
};
use rmcp::service::{
    ClientCacheConfig, ClientLifecycleMode, Peer, RoleClient, RunningService, ServiceError,
};
use tokio::sync::Notify;

use super::client::{self, CallKind, Handler, InFlight};
use super::connect::{
    self, Connected, Handshake, falls_back, subscribe_tool_list, watch_tool_list,
};
use super::legacy;
use super::listing::{self, ListError};
use super::refresh::{self, Changes, ListChanged};
use super::shared::Shared;
use super::traced::{Expected, Pending};
use crate::hooks::ServerName;
use crate::machine::ToolInfo;
use crate::mcp::child::ChildGroup;
use crate::mcp::config::ServerConfig;
use crate::mcp::{McpError, convert};
use crate::ports::TransportKind;
use crate::supervisor::{self, Fact, HookTurn, Jitter, Order};
use crate::text::lock;

/// How a server is reached.
pub(super) enum Launch {
    Config(ServerConfig),
    /// A connection made by a test: an in-memory duplex to a server in this process.
    #[cfg(test)]
    Duplex(MakeDuplex),
}

/// Makes the in-memory connection of one life.
#[cfg(test)]
pub(super) type MakeDuplex = Box<dyn Fn() -> tokio::io::DuplexStream + Send + Sync>;

/// One configured server and its current life.
pub(super) struct Slot {
    pub(super) name: ServerName,
    launch: Launch,
    pub(super) shared: Arc<Shared>,
    state: Mutex<SlotState>,
    /// Woken whenever the life changes, for tool calls waiting on a restart.
    changed: Notify,
    /// Calls in flight, to tell a hook's question from a tool's.
    pub(super) in_flight: Arc<InFlight>,
    /// Traced calls whose request has not gone out yet, for their JSON-RPC ids.
    pub(super) pending: Pending,
}

pub(super) struct SlotState {
    pub(super) life: Life,
    pub(super) tools: Vec<ToolInfo>,
    next_life: u64,
}

pub(super) enum Life {
    Live(Arc<Conn>),
    /// Between lives: a start is ordered or under way.
    Down,
    /// Out of restarts; its tools have left the catalog.
    Retired,
}

/// One life of a server: its rmcp client and, for stdio, its process group.
pub(super) struct Conn {
    life: u64,
    service: RunningService<RoleClient, Handler>,
    pub(super) child: Option<Mutex<ChildGroup>>,
    /// The transport this life runs on.
    pub(super) transport: TransportKind,
    /// Whether any call of this life got an answer.
    answered: AtomicBool,
    /// The protocol version negotiated for this life, read once when it starts (every traced
    /// call names it).
    protocol_version: Option<String>,
}

impl Conn {
    /// The protocol version negotiated for this life.
    pub(super) fn protocol_version(&self) -> Option<&str> {
        self.protocol_version.as_deref()
    }

    /// Which life of its server this is.
    pub(super) fn life(&self) -> u64 {
        self.life
    }

    /// The client's handle on the server.
    pub(super) fn peer(&self) -> Peer<RoleClient> {
        self.service.peer().clone()
    }

    /// Kills the process group and stops the client. In-flight calls fail at once.
    pub(super) fn shut_down(&self) {
        if let Some(child) = &self.child {
            lock(child).kill();
        }
        self.service.cancellation_token().cancel();
    }
}

impl Slot {
    pub(super) fn new(name: ServerName, launch: Launch, shared: Arc<Shared>) -> Arc<Self> {
        Arc::new(Self {
            name,
            launch,
            shared,
            state: Mutex::new(SlotState {
                life: Life::Down,
                tools: Vec::new(),
                next_life: 0,
            }),
            changed: Notify::new(),
            in_flight: Arc::default(),
            pending: Pending::default(),
        })
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, SlotState> {
        lock(&self.state)
    }

    /// Starts the first life; the supervisor learns of it once the host has its servers.
    pub(super) async fn first_life(self: &Arc<Self>) -> Result<(), McpError> {
        let opened = self.open().await?;
        let mut state = self.lock();
        state.tools = opened.tools;
        state.life = Life::Live(Arc::clone(&opened.conn));
        drop(state);
        self.refresh_on_change(&opened.conn, opened.changes);
        Ok(())
    }

    /// Ends the current life for good, if there is one (a server left out after it started).
    pub(super) fn shut_down(&self) {
        if let Life::Live(conn) = std::mem::replace(&mut self.lock().life, Life::Retired) {
            conn.shut_down();
        }
    }

    /// The current life for a tool call, waiting for a restart under way.
    pub(super) async fn live_for_tool(self: &Arc<Self>) -> Result<Arc<Conn>, McpError> {
        loop {
            let changed = self.changed.notified();
            tokio::pin!(changed);
            // Registered before the state is read, so a change in between is not missed.
            changed.as_mut().enable();
            let closed = match &self.lock().life {
                Life::Live(conn) if !conn.service.is_closed() => return Ok(Arc::clone(conn)),
                Life::Live(conn) => Some(conn.life),
                Life::Retired => return Err(self.retired()),
                Life::Down => None,
            };
            match closed {
                Some(life) => self.end_life(life, "its connection closed"),
                None => changed.await,
            }
        }
    }

    /// The current life for a hook call that starts now, or why the server sits this round
    /// out. Never waits for a restart: restart time is not the hook's.
    pub(super) fn live_for_hook(self: &Arc<Self>) -> Result<Arc<Conn>, String> {
        if let HookTurn::Skip { reason } = lock(&self.shared.supervisor).hook_turn(&self.name) {
            return Err(reason);
        }
        let closed = match &self.lock().life {
            Life::Live(conn) if !conn.service.is_closed() => return Ok(Arc::clone(conn)),
            Life::Live(conn) => conn.life,
            Life::Down => return Err("it is restarting".to_owned()),
            Life::Retired => return Err("it ran out of restarts".to_owned()),
        };
        self.end_life(closed, "its connection closed");
        Err("its connection closed; it is restarting".to_owned())
    }

    /// Calls a tool or a hook on `conn`; a broken transport ends the life. A server that
    /// needs input first (`input_required`, 2026-07-28) is answered through the life's
    /// [`Handler`], and asked again.
    pub(super) async fn call(
        self: &Arc<Self>,
        conn: &Conn,
        mut params: CallToolRequestParams,
        kind: CallKind,
    ) -> Result<CallToolResult, McpError> {
        let _in_flight = self.in_flight.enter(kind);
        let (span, _expected) = self.trace_call(conn, &mut params);
        // Boxed where it is made: rmcp's call is a large future, copied whole at every move
        // (into the task-local scope, the timeout, the host's call) unboxed.
        let call = Box::pin(conn.service.call_tool(params));
        match tracing::Instrument::instrument(client::in_call(kind, call), span.clone()).await {
            Ok(result) => {
                conn.answered.store(true, Ordering::Release);
                Ok(result)
            }
            Err(error) => {
                // The transport's message may name the server's URL, query and all.
                let reason = crate::text::without_url_secrets(&error.to_string()).into_owned();
                crate::telemetry::mcp_failed(&span, &reason);
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

    /// The span of a `tools/call` request, under the span of the call it serves, and its trace
    /// context in the request's `_meta` (nothing is added when no trace records it); while the
    /// guard lives, the request's id is recorded on the span as it goes out.
    fn trace_call(
        &self,
        conn: &Conn,
        params: &mut CallToolRequestParams,
    ) -> (tracing::Span, Option<Expected>) {
        let pipe = matches!(conn.transport, TransportKind::Stdio);
        let span = crate::telemetry::mcp_call(
            self.name.as_str(),
            &params.name,
            conn.protocol_version(),
            pipe,
        );
        let mut expected = None;
        for (key, value) in crate::telemetry::trace_context(&span) {
            if key == crate::telemetry::names::META_TRACEPARENT {
                expected = Some(self.pending.expect(&value, &span));
            }
            let meta = params
                .meta
                .get_or_insert_with(rmcp::model::RequestMetaObject::new);
            meta.0
                .0
                .insert(key.to_owned(), serde_json::Value::String(value));
        }
        (span, expected)
    }

    /// Ends the current life, if it is still `life` (reports about an earlier life are stale
    /// and ignored), and tells the supervisor.
    pub(super) fn end_life(self: &Arc<Self>, life: u64, reason: &str) {
        let conn = {
            let mut state = self.lock();
            match &state.life {
                Life::Live(conn) if conn.life == life => {}
                Life::Live(_) | Life::Down | Life::Retired => return,
            }
            match std::mem::replace(&mut state.life, Life::Down) {
                Life::Live(conn) => conn,
                // Matched as `Live` just above, under the same lock.
                Life::Down | Life::Retired => return,
            }
        };
        tracing::warn!(server = %self.name, life, reason, "server marked dead");
        conn.shut_down();
        self.feed(Fact::ServerExited {
            server: self.name.clone(),
            at_ms: self.shared.now_ms(),
            answered: conn.answered.load(Ordering::Acquire),
            reason: reason.to_owned(),
            jitter: jitter(),
        });
    }

    /// Feeds a fact to the supervisor and performs its orders.
    pub(super) fn feed(self: &Arc<Self>, fact: Fact) {
        // Recorded under the supervisor's lock, so that the records keep the order in which
        // it handled them, each fact followed by its orders.
        let orders: Vec<Order> = {
            let mut supervisor = lock(&self.shared.supervisor);
            let recorded = supervisor::Event::Fact(fact.clone());
            if let Err(error) = supervisor.handle(fact) {
                tracing::error!(%error, "supervision fact refused");
                return;
            }
            self.shared.record(recorded);
            let orders: Vec<Order> = std::iter::from_fn(|| supervisor.poll_order()).collect();
            for order in &orders {
                self.shared.record(supervisor::Event::Order(order.clone()));
            }
            orders
        };
        for order in orders {
            self.perform(order);
        }
    }

    fn perform(self: &Arc<Self>, order: Order) {
        match order {
            Order::StartServer { server, after_ms } => {
                debug_assert_eq!(server, self.name, "orders answer the slot's own facts");
                let slot = Arc::downgrade(self);
                tokio::spawn(restart(slot, Duration::from_millis(after_ms)));
            }
            Order::RetireServer { server, bad_ends } => {
                debug_assert_eq!(server, self.name, "orders answer the slot's own facts");
                let options = &self.shared.options;
                tracing::warn!(
                    server = %self.name,
                    "server ended badly {bad_ends} times in a row, past its restart budget of \
                     {}; its tools leave the catalog",
                    options.restart_budget
                );
                let mut state = self.lock();
                state.life = Life::Retired;
                *lock(&self.shared.tool_count) -= state.tools.len();
                drop(state);
                self.shared.catalog_changed();
                self.changed.notify_waiters();
            }
        }
    }

    fn retired(&self) -> McpError {
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
    async fn open(self: &Arc<Self>) -> Result<Opened, McpError> {
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

    async fn open_inner(self: &Arc<Self>, life: u64) -> Result<Opened, McpError> {
        let lifecycle = ClientLifecycleMode::Auto {
            preferred_versions: vec![ProtocolVersion::LATEST],
            legacy_version: Some(ProtocolVersion::LATEST_WITH_INITIALIZE),
        };
        // Changes said from the handshake on are kept for the listing task, which starts
        // once the life is in place.
        let (changed, changes) = ListChanged::new();
        let (service, child, transport) = match self.handshake(&changed, lifecycle).await {
            Ok(connected) => connected,
            // rmcp's probe gives discovery 10 s, then sends `initialize` on the same
            // connection; a server slow to answer (a cold start, an authorization on the way)
            // answers the discovery while the client waits for `initialize`. It speaks the
            // discovery revision: ask it again that way, within the start-up timeout only.
            Err(Handshake::Init(error)) if connect::answered_discovery_late(&error) => {
                tracing::debug!(server = %self.name, %error, "discovery answered late; asking again");
                let discover = ClientLifecycleMode::Discover {
                    preferred_versions: vec![ProtocolVersion::LATEST],
                };
                self.handshake(&changed, discover)
                    .await
                    .map_err(|e| e.into_error(&self.name))?
            }
            // A server that answers `server/discover` with something other than a discovery
            // result or a "legacy" error is still often a good `initialize` server: try that
            // once. A broken transport (a dead process, an auth refusal) is not retried.
            Err(Handshake::Init(error)) if falls_back(&error) => {
                tracing::debug!(server = %self.name, %error, "discovery failed; trying initialize");
                self.handshake(&changed, ClientLifecycleMode::Initialize)
                    .await
                    .map_err(|e| e.into_error(&self.name))?
            }
            Err(error) => return Err(error.into_error(&self.name)),
        };
        let protocol_version = service
            .peer()
            .peer_info()
            .map(|info| info.protocol_version.to_string());
        let conn = Arc::new(Conn {
            life,
            service,
            child,
            transport,
            answered: AtomicBool::new(false),
            protocol_version,
        });
        let peer = conn.peer();
        // rmcp keeps list pages a server marks cacheable, one per cursor: a server that pages
        // with fresh cursors would fill it. Every listing here asks the server.
        peer.set_response_cache_config(ClientCacheConfig::disabled())
            .await;
        let tools = self
            .list_tools(&peer)
            .await
            .and_then(|tools| convert::tools_from_server(&self.name, tools, &self.shared.options));
        let tools = match tools {
            Ok(tools) => tools,
            Err(error) => {
                conn.shut_down();
                return Err(error);
            }
        };
        let version = conn.protocol_version();
        tracing::debug!(server = %self.name, life, tools = tools.len(), ?version, %transport, "server started");
        if let Some(subscription) = subscribe_tool_list(&peer).await {
            tokio::spawn(watch_tool_list(subscription, changed));
        }
        Ok(Opened {
            conn,
            tools,
            changes,
        })
    }

    /// Lists the server's tools within the caps of [`listing`] and the start-up timeout.
    async fn list_tools(&self, peer: &Peer<RoleClient>) -> Result<Vec<Tool>, McpError> {
        let options = &self.shared.options;
        let page =
            |cursor| peer.list_tools(Some(PaginatedRequestParams::default().with_cursor(cursor)));
        listing::list_tools(page, options.max_tools, options.startup_timeout)
            .await
            .map_err(|error: ListError| McpError::Startup {
                server: self.name.clone(),
                reason: crate::text::without_url_secrets(&error.to_string()).into_owned(),
            })
    }

    /// Starts the task that lists `conn`'s tools again whenever the server says they changed,
    /// merged and paced by [`refresh`], until the life ends.
    fn refresh_on_change(self: &Arc<Self>, conn: &Conn, changes: Changes) {
        let slot = Arc::downgrade(self);
        let peer = conn.peer();
        let life = conn.life;
        tokio::spawn(refresh::refresh_on_change(changes, move || {
            let slot = slot.clone();
            let peer = peer.clone();
            async move {
                match slot.upgrade() {
                    Some(slot) => slot.refresh_tools(&peer, life).await,
                    None => false,
                }
            }
        }));
    }

    /// Lists the server's tools again and replaces its catalog entry; keeps the old entry if
    /// the listing fails or breaks a cap. False once `life` is no longer the current life.
    async fn refresh_tools(&self, peer: &Peer<RoleClient>, life: u64) -> bool {
        let current = |slot: &Self| matches!(&slot.lock().life, Life::Live(c) if c.life == life);
        if !current(self) {
            return false;
        }
        let listed = self
            .list_tools(peer)
            .await
            .and_then(|tools| convert::tools_from_server(&self.name, tools, &self.shared.options));
        if !current(self) {
            return false;
        }
        match listed {
            Ok(tools) => self.set_tools(tools),
            Err(error) => {
                tracing::warn!(server = %self.name, %error, "keeping the server's old tool list")
            }
        }
        true
    }

    /// The client side of a life that notes its tool-list changes in `changed`.
    pub(super) fn handler(self: &Arc<Self>, changed: &ListChanged) -> Handler {
        Handler {
            server: self.name.clone(),
            shared: Arc::downgrade(&self.shared),
            calls: Arc::clone(&self.in_flight),
            list_changed: changed.clone(),
        }
    }
}

impl Slot {
    /// Connects and negotiates one life with `lifecycle`, over the server's transport.
    async fn handshake(
        self: &Arc<Self>,
        changed: &ListChanged,
        lifecycle: ClientLifecycleMode,
    ) -> Result<Connected, Handshake> {
        let handler = self.handler(changed);
        match &self.launch {
            Launch::Config(ServerConfig::Stdio(config)) => {
                connect::stdio(&self.name, config, handler, &self.pending, lifecycle).await
            }
            Launch::Config(ServerConfig::Http(config)) => {
                let oauth = self.shared.options.oauth.clone();
                match connect::streamable(
                    &self.name,
                    config,
                    oauth,
                    handler,
                    &self.pending,
                    lifecycle,
                )
                .await
                {
                    // A server of the older transport refuses the POST in its own way.
                    Err(Handshake::Init(error)) => {
                        let handler = self.handler(changed);
                        let options = &self.shared.options;
                        legacy::fall_back_to_sse(
                            &self.name,
                            config,
                            options,
                            handler,
                            &self.pending,
                            error,
                        )
                        .await
                    }
                    other => other,
                }
            }
            Launch::Config(ServerConfig::Sse(config)) => {
                legacy::sse(
                    &self.name,
                    config,
                    &self.shared.options,
                    handler,
                    &self.pending,
                )
                .await
            }
            #[cfg(test)]
            Launch::Duplex(make) => {
                connect::duplex(make(), handler, &self.pending, lifecycle).await
            }
        }
    }
}

/// A life just started: its connection, its tools, and the changes said since it connected.
struct Opened {
    conn: Arc<Conn>,
    tools: Vec<ToolInfo>,
    changes: Changes,
}

/// Performs [`Order::StartServer`]: waits, starts a life, and reports how it went. Holds the
/// slot weakly, so a dropped host starts nothing.
async fn restart(slot: Weak<Slot>, after: Duration) {
    tokio::time::sleep(after).await;
    let Some(slot) = slot.upgrade() else { return };
    if slot.shared.closed.load(Ordering::Acquire) {
        return;
    }
    match slot.open().await {
        Ok(Opened {
            conn,
            tools,
            changes,
        }) => {
            if slot.shared.closed.load(Ordering::Acquire) {
                conn.shut_down();
                return;
            }
            tracing::info!(server = %slot.name, life = conn.life, "server restarted");
            // The supervisor hears of the life before anyone can end it.
            slot.feed(Fact::ServerStarted {
                server: slot.name.clone(),
                at_ms: slot.shared.now_ms(),
            });
            slot.set_tools(tools);
            slot.lock().life = Life::Live(Arc::clone(&conn));
            slot.refresh_on_change(&conn, changes);
            slot.changed.notify_waiters();
        }
        Err(error) => {
            tracing::warn!(server = %slot.name, %error, "server failed to restart");
            slot.feed(Fact::StartFailed {
                server: slot.name.clone(),
                at_ms: slot.shared.now_ms(),
                error: error.to_string(),
                jitter: jitter(),
            });
        }
    }
}

/// The jitter of the next backoff: the one random draw of supervision, made here so the
/// supervisor stays deterministic.
fn jitter() -> Jitter {
    Jitter(fastrand::u16(0..=Jitter::MAX))
}

/// Whether an rmcp error means the connection is gone (rather than the server refusing one
/// request).
fn breaks_transport(error: &ServiceError) -> bool {
    matches!(
        error,
        ServiceError::TransportClosed | ServiceError::TransportSend(_)
    )
}
