//! [`McpHost`]: the [`ToolHost`] on real MCP servers — the catalog, and tool and hook calls.
//! Supervision (lives, restarts, retirement) is in [`slot`], under the [`Supervisor`]'s orders.
//!
//! A life ends badly when the machine orders the server killed or its transport breaks; the
//! process group dies with it, and the supervisor orders a new life after an exponential
//! backoff with jitter, or retires the server once its restart budget is spent.

mod client;
mod connect;
mod legacy;
mod listing;
mod refresh;
mod shared;
mod slot;
mod traced;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::future::join_all;
use rmcp::model::{CallToolRequestParams, JsonObject, RequestMetaObject};
use serde_json::{Value, json};
use tokio::time::Instant;

use self::client::CallKind;
use self::shared::Shared;
#[cfg(test)]
use self::slot::MakeDuplex;
use self::slot::{Launch, Life, Slot};
use crate::hooks::{self, Hook, ServerName};
use crate::machine::{Catalog, HookFault, HookReply, ServerTools, ToolCall, ToolOutput};
use crate::mcp::config::McpServers;
use crate::mcp::{HostOptions, McpError, Nobody, convert};
use crate::ports::{HookCall, Person, ToolHost, TransportKind};
use crate::supervisor::{self, Fact, Supervisor, SupervisorPolicy};
use crate::text::lock;

/// The `_meta` key of the session id on every hook call.
pub const META_SESSION: &str = "hookloop/session";
/// The `_meta` key of the hook's own context on every hook call.
pub const META_HOOK: &str = "hookloop/hook";
/// The `_meta` key of a subagent's hook calls: `{"id", "parent"}`, the agent asking.
pub const META_AGENT: &str = "hookloop/agent";

/// A server that did not start; the session runs without it.
#[derive(Debug)]
#[non_exhaustive]
pub struct StartupFailure {
    /// The server that failed to start.
    pub server: ServerName,
    /// Why.
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
        let policy = supervisor_policy(&options);
        let shared = Arc::new(Shared {
            generation: AtomicU64::new(0),
            tool_count: Mutex::new(0),
            supervisor: Mutex::new(Supervisor::new(policy, [])),
            clock: Instant::now(),
            closed: AtomicBool::new(false),
            records: Mutex::new(Default::default()),
            person: Mutex::new(Arc::new(Nobody)),
            roots: Mutex::new(options.roots.clone()),
            session_id: Mutex::new(Arc::from(options.session_id.as_str())),
            options,
        });
        let slots: Vec<Arc<Slot>> = launches
            .into_iter()
            .map(|(name, launch)| Slot::new(name, launch, Arc::clone(&shared)))
            .collect();
        let started = join_all(slots.iter().map(|slot| slot.first_life())).await;
        let mut failures = Vec::new();
        let mut live = Vec::new();
        // Servers are counted in the order they are configured; one whose tools would bring
        // the session past its limit is left out like one that failed to start.
        let mut count = 0;
        let max = shared.options.max_tools;
        for (slot, result) in slots.into_iter().zip(started) {
            let result = result.and_then(|()| {
                let tools = slot.lock().tools.len();
                if count + tools > max {
                    slot.shut_down();
                    return Err(McpError::Startup {
                        server: slot.name.clone(),
                        reason: format!(
                            "its {tools} tools would bring the session to {}, more than the \
                             limit of {max}",
                            count + tools
                        ),
                    });
                }
                count += tools;
                Ok(())
            });
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
        *lock(&host.shared.tool_count) = count;
        // Only the servers that started are supervised; the others are left out for good.
        *lock(&host.shared.supervisor) =
            Supervisor::new(policy, host.slots.iter().map(|slot| slot.name.clone()));
        for slot in &host.slots {
            slot.feed(Fact::ServerStarted {
                server: slot.name.clone(),
                at_ms: host.shared.now_ms(),
            });
        }
        Ok((host, failures))
    }

    /// The pid of a stdio server's current process (its process group id), if it is running.
    pub fn server_pid(&self, server: &str) -> Option<u32> {
        let slot = self.slot(server)?;
        match &slot.lock().life {
            Life::Live(conn) => conn.child.as_ref().and_then(|c| lock(c).pid()),
            Life::Down | Life::Retired => None,
        }
    }

    /// Offers `roots` to the servers as their roots from now on, and tells each running server
    /// they changed (`notifications/roots/list_changed`) when they did.
    pub async fn set_roots(&self, roots: Vec<PathBuf>) {
        {
            let mut current = lock(&self.shared.roots);
            if *current == roots {
                return;
            }
            *current = roots;
        }
        let peers: Vec<_> = self
            .slots
            .iter()
            .filter_map(|slot| match &slot.lock().life {
                Life::Live(conn) => Some((slot.name.clone(), conn.peer())),
                Life::Down | Life::Retired => None,
            })
            .collect();
        for (server, peer) in peers {
            if let Err(error) = peer.notify_roots_list_changed().await {
                tracing::debug!(%server, %error, "could not say the roots changed");
            }
        }
    }

    /// The protocol version a server negotiated, while it runs (for `hookloop mcp list`).
    pub fn protocol_version(&self, server: &str) -> Option<String> {
        let slot = self.slot(server)?;
        match &slot.lock().life {
            Life::Live(conn) => conn.protocol_version().map(str::to_owned),
            Life::Down | Life::Retired => None,
        }
    }

    /// The transport a server's current life runs on, while it runs: what an `http` server
    /// fell back to shows here.
    pub fn transport(&self, server: &str) -> Option<TransportKind> {
        let slot = self.slot(server)?;
        match &slot.lock().life {
            Life::Live(conn) => Some(conn.transport),
            Life::Down | Life::Retired => None,
        }
    }

    /// The session id sent to hook servers.
    pub fn session_id(&self) -> Arc<str> {
        Arc::clone(&lock(&self.shared.session_id))
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
        self.shared.closed.store(true, Ordering::Release);
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
                    Life::Retired => None,
                    // A server between lives keeps its tools: a call waits for its restart.
                    Life::Live(_) | Life::Down => Some(ServerTools {
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
        let call_it = async {
            let conn = slot.live_for_tool().await?;
            slot.call(&conn, params, CallKind::Tool).await
        };
        match tokio::time::timeout(timeout, call_it).await {
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
                error: HookFault::NoSuchServer {
                    server: call.server.clone(),
                },
            };
        };
        // Decided when the round starts: a server between lives sits it out, so that restart
        // time is never charged to the hook's timeout.
        let conn = match slot.live_for_hook() {
            Ok(conn) => conn,
            Err(reason) => return HookReply::Skipped { reason },
        };
        let mut params = CallToolRequestParams::new(call.hook.tool_name())
            .with_arguments(call.arguments.clone());
        params.meta = Some(hook_meta(&self.session_id(), call));
        let max = self.shared.options.max_output_bytes;
        // The hook's timeout is the driver's: it drops this call at the round's deadline,
        // which makes rmcp send `notifications/cancelled` for it.
        match slot.call(&conn, params, CallKind::Hook).await {
            Err(error) => HookReply::Failed {
                error: HookFault::Call(error.to_string()),
            },
            Ok(result) => convert::hook_reply(&call.server, call.hook, result, max),
        }
    }

    async fn kill_server(&self, server: &ServerName) {
        if let Some(slot) = self.slot(server.as_str()) {
            let life = match &slot.lock().life {
                Life::Live(conn) => conn.life(),
                Life::Down | Life::Retired => return,
            };
            slot.end_life(life, "killed on the engine's order");
        }
    }

    fn set_person(&self, person: Arc<dyn Person>) {
        *lock(&self.shared.person) = person;
    }

    fn set_session_id(&self, id: &str) {
        *lock(&self.shared.session_id) = Arc::from(id);
    }

    fn take_supervision(&self) -> Vec<supervisor::Event> {
        lock(&self.shared.records).drain(..).collect()
    }

    fn supervision_policy(&self) -> Option<SupervisorPolicy> {
        Some(supervisor_policy(&self.shared.options))
    }
}

/// The supervisor's policy from the host's options.
fn supervisor_policy(options: &HostOptions) -> SupervisorPolicy {
    let ms = crate::millis::of;
    SupervisorPolicy {
        restart_budget: options.restart_budget,
        restart_backoff_ms: ms(options.restart_backoff),
        max_restart_backoff_ms: ms(options.max_restart_backoff),
        healthy_after_ms: ms(options.healthy_after),
    }
}

/// The `_meta` of a hook call: the session id and the hook's context.
fn hook_meta(session: &str, call: &HookCall) -> RequestMetaObject {
    let hook = match call.hook {
        Hook::Stop | Hook::SubagentStop => json!({
            "name": call.hook.tool_name(),
            "objectionsSoFar": call.context.objections_so_far,
            "budgetLeft": call.context.budget_left,
        }),
        Hook::PostCompact | Hook::PreCompact => json!({
            "name": call.hook.tool_name(),
            "compactions": call.context.compactions,
        }),
        Hook::SessionStart
        | Hook::UserPromptSubmit
        | Hook::PreToolUse
        | Hook::PostToolUse
        | Hook::SessionEnd
        | Hook::SubagentStart => json!({"name": call.hook.tool_name()}),
    };
    let mut meta = RequestMetaObject::new();
    meta.0
        .0
        .insert(META_SESSION.into(), Value::String(session.into()));
    meta.0.0.insert(META_HOOK.into(), hook);
    if let Some(agent) = &call.context.agent {
        meta.0.0.insert(META_AGENT.into(), json!(agent));
    }
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
