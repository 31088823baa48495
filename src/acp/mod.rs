//! An [Agent Client Protocol](https://agentclientprotocol.com) agent over a byte stream (stdio
//! for `hookloop acp`), built on the `agent-client-protocol` crate.
//!
//! # Shape
//!
//! The protocol crate runs one dispatch loop per connection and blocks it while a handler runs,
//! so every handler here returns at once: `session/new` builds its [`Session`] in a task of its
//! own, and each session lives in its own task (an *actor*) that owns the `Session` and runs one
//! prompt at a time, sent to it through a channel. `session/cancel` reaches the running prompt
//! through the session's [`CancelHandle`](crate::CancelHandle) without going through the actor.
//! A second prompt on a busy session is answered with an error at once.
//!
//! What the client sees while a prompt runs comes from a [`ProgressObserver`](crate::progress::ProgressObserver): model text as
//! `agent_message_chunk`s as it streams in (the whole text once, when a reply did not stream),
//! reasoning the provider streams as `agent_thought_chunk`s, each tool call as `tool_call`
//! (pending) then `tool_call_update` (in progress, then completed or failed, with its output),
//! and — so a UI can show why the agent kept working — each hook objection, `_PostCompact` injection or `_PreToolUse` denial as a
//! completed `tool_call` of kind `other` titled with the hook and server, each other hook's
//! injected context (`_SessionStart`, `_UserPromptSubmit`, `_PostToolUse`, `_PreCompact`) as one
//! of kind `think` titled "`<hook>` from `<server>`", and a spent budget, a declined objection, a
//! compaction or a failed-open hook as an `agent_thought_chunk`. So is, once, a recorded
//! session's transcript that could not be written whole (checked after each prompt).
//!
//! A subagent's `agent` call is one `tool_call` of kind `think` titled with its description,
//! whose content follows the child: its text as it streams, a line per tool call with its
//! status, what its hooks did, and its answer (see `agents.rs` for the bounds). A child's
//! destructive tools are asked about through the same client, under an id of their own
//! (`<agent>/<call>`), since a call id is unique only within one agent's history.
//!
//! # Framing
//!
//! Frames are read by a [`FrameReader`] with a size cap ([`DEFAULT_MAX_FRAME_BYTES`]); a frame
//! over it is answered with an `invalid request` error (with its id when its first bytes show
//! one) and the connection goes on. A frame that is not JSON gets the protocol crate's parse
//! error; a request whose parameters do not fit gets `invalid params`. Nothing a client sends
//! ends the connection but the end of its input.

mod actor;
mod agents;
mod elicit;
pub mod frame;
mod lines;
pub mod output;
pub mod permission;
pub mod records;
#[cfg(feature = "mcp")]
mod servers;
mod sessions;
mod spec;
mod translate;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, CloseSessionRequest, Implementation, InitializeRequest,
    InitializeResponse, ListSessionsRequest, ListSessionsResponse, LoadSessionRequest,
    LoadSessionResponse, McpCapabilities, NewSessionRequest, PromptCapabilities, PromptRequest,
    ResumeSessionRequest, ResumeSessionResponse, SessionCapabilities, SessionCloseCapabilities,
    SessionListCapabilities, SessionResumeCapabilities,
};
use agent_client_protocol::v1::{ConnectionTo, Dispatch, Responder};
use agent_client_protocol::{Agent, Client, Lines};
use serde_json::json;
use tokio::io::{AsyncRead, AsyncWrite, BufReader};
use tokio::sync::{mpsc, oneshot};

pub use self::frame::DEFAULT_MAX_FRAME_BYTES;
use self::frame::FrameReader;
use self::lines::{Outflow, incoming_lines, write_lines};
pub use self::output::Output;
pub use self::permission::Permissions;
#[cfg(feature = "mcp")]
#[cfg_attr(docsrs, doc(cfg(feature = "mcp")))]
pub use self::servers::ServerStart;
use self::sessions::{AgentState, Reload};
pub use self::spec::{FailedServer, ServerSpec, SessionSpec};
use crate::config::{ConfigError, env_lookup, parse_number};
use crate::driver::Session;
use crate::machine::Machine;
use crate::ports::{LlmClient, ToolHost};
use crate::text::lock;
use crate::transcript::Recorder;

/// JSON-RPC error codes used here.
mod code {
    pub const PARSE_ERROR: i32 = -32700;
    pub const INVALID_REQUEST: i32 = -32600;
    pub const INVALID_PARAMS: i32 = -32602;
    pub const INTERNAL_ERROR: i32 = -32603;
}

/// How long a closing session may take beyond its `_SessionEnd` round (which has the hook
/// timeout): to end the prompt in flight and shut its servers down. A fixed grace for the
/// whole close cut `_SessionEnd` short whenever the hook timeout was set above it.
const SHUTDOWN_MARGIN: Duration = Duration::from_secs(5);

/// Turns a `session/new` into a running [`Session`]: the seam where the real model provider
/// and MCP host (or fakes, in tests) plug into the agent.
pub trait SessionFactory: Send + Sync + 'static {
    /// The model client of every session.
    type Llm: LlmClient + 'static;
    /// The tool host of one session.
    type Host: ToolHost + 'static;
    /// Why a session could not be set up (a server would not start, say).
    type Error: std::fmt::Display + Send;

    /// Builds a session for `spec`: starts its MCP servers and gives it a model client; says
    /// where it is recorded, if it is.
    fn create(
        &self,
        spec: SessionSpec,
    ) -> impl Future<Output = Result<Created<Self::Llm, Self::Host>, Self::Error>> + Send;

    /// Builds a session for `spec` that goes on from `machine`, a machine restored from a
    /// record (with [`Session::with_machine`]). The agent records it on in its record itself:
    /// the [`Created`]'s `record` is not used.
    fn restore(
        &self,
        spec: SessionSpec,
        machine: Machine,
    ) -> impl Future<Output = Result<Created<Self::Llm, Self::Host>, Self::Error>> + Send;

    /// The directory sessions are recorded in, if they are: what `session/list` lists and
    /// `session/load` and `session/resume` read.
    fn record_dir(&self) -> Option<&Path>;
}

/// A session a [`SessionFactory`] built. The agent gives it a
/// [`PermissionAsker`](crate::PermissionAsker) that asks the session's client.
#[non_exhaustive]
pub struct Created<L, H> {
    /// The session, not yet prompted.
    pub session: Session<L, H>,
    /// Its recorder and the file its transcript goes to (what [`Session::record_in`] returns),
    /// if it is recorded. The file's stem becomes the session id; the recorder is checked after
    /// each prompt, so the client hears when the transcript could not be written whole.
    pub record: Option<(Recorder, PathBuf)>,
    /// The servers the client listed that did not start: the session runs without them, and
    /// the client is told, once, which and why.
    pub failed: Vec<FailedServer>,
}

impl<L, H> Created<L, H> {
    /// A session that is not recorded.
    pub fn new(session: Session<L, H>) -> Self {
        Self {
            session,
            record: None,
            failed: Vec::new(),
        }
    }

    /// A session recorded by `recorder` into `file` (what [`Session::record_in`] returns).
    pub fn recorded(session: Session<L, H>, recorder: Recorder, file: PathBuf) -> Self {
        Self {
            record: Some((recorder, file)),
            ..Self::new(session)
        }
    }

    /// The same session, which runs without these servers of the client's.
    #[must_use]
    pub fn without(mut self, failed: Vec<FailedServer>) -> Self {
        self.failed = failed;
        self
    }
}

/// Settings of the agent that are not the engine's.
///
/// Start from [`AgentOptions::default`] (or [`from_env`](Self::from_env)) and change what you
/// need:
///
/// ```
/// use hookloop::acp::{AgentOptions, Permissions};
///
/// let options = AgentOptions::default()
///     .with_max_sessions(4)
///     .with_permissions(Permissions::Never);
/// assert_eq!(options.max_sessions, 4);
/// assert_eq!(options.max_frame_bytes, hookloop::acp::DEFAULT_MAX_FRAME_BYTES);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct AgentOptions {
    /// Incoming frames longer than this are refused. Default: 4 MiB.
    pub max_frame_bytes: usize,
    /// Sessions one connection may have open at once; `session/new` over it is refused until
    /// one is closed. Default: [`DEFAULT_MAX_SESSIONS`](Self::DEFAULT_MAX_SESSIONS).
    pub max_sessions: usize,
    /// Outgoing frames the agent holds for a client that is not reading them; at this many,
    /// every session waits before its next step until the client reads. Default: 256.
    pub max_queued_frames: usize,
    /// Whether destructive tools ask the client first (`HOOKLOOP_ACP_PERMISSIONS`).
    pub permissions: Permissions,
}

impl AgentOptions {
    /// The variable [`from_env`](Self::from_env) reads the session limit from.
    pub const MAX_SESSIONS_VAR: &'static str = "HOOKLOOP_MAX_SESSIONS";
    /// The session limit when [`MAX_SESSIONS_VAR`](Self::MAX_SESSIONS_VAR) is unset.
    pub const DEFAULT_MAX_SESSIONS: usize = 32;

    /// The defaults, with the session limit and the permission setting from the process
    /// environment.
    pub fn from_env() -> Result<Self, ConfigError> {
        Self::from_lookup(&env_lookup)
    }

    /// The defaults, with the session limit (at least 1) and the permission setting read
    /// through `lookup`.
    pub fn from_lookup(
        lookup: &impl Fn(&str) -> Result<Option<String>, ConfigError>,
    ) -> Result<Self, ConfigError> {
        let mut options = Self::default();
        if let Some(n) = parse_number(lookup, Self::MAX_SESSIONS_VAR, 1usize)? {
            options.max_sessions = n;
        }
        if let Some(value) = lookup(Permissions::VAR)? {
            options.permissions =
                Permissions::parse(&value).ok_or_else(|| ConfigError::Invalid {
                    var: Permissions::VAR,
                    value: value.clone(),
                    reason: "expected `ask` or `never`".into(),
                })?;
        }
        Ok(options)
    }
}

impl AgentOptions {
    /// Sets [`max_frame_bytes`](Self::max_frame_bytes).
    pub fn with_max_frame_bytes(mut self, max: usize) -> Self {
        self.max_frame_bytes = max;
        self
    }

    /// Sets [`max_sessions`](Self::max_sessions).
    pub fn with_max_sessions(mut self, max: usize) -> Self {
        self.max_sessions = max;
        self
    }

    /// Sets [`max_queued_frames`](Self::max_queued_frames).
    pub fn with_max_queued_frames(mut self, max: usize) -> Self {
        self.max_queued_frames = max;
        self
    }

    /// Sets [`permissions`](Self::permissions).
    pub fn with_permissions(mut self, permissions: Permissions) -> Self {
        self.permissions = permissions;
        self
    }
}

impl Default for AgentOptions {
    fn default() -> Self {
        Self {
            max_frame_bytes: DEFAULT_MAX_FRAME_BYTES,
            max_sessions: Self::DEFAULT_MAX_SESSIONS,
            max_queued_frames: 256,
            permissions: Permissions::Ask,
        }
    }
}

/// Why the agent stopped serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AcpError {
    /// Reading or writing the byte stream failed.
    #[error("i/o error on the protocol stream: {0}")]
    Io(#[from] std::io::Error),
    /// The protocol layer gave up on the connection.
    #[error("protocol error: {0}")]
    Protocol(String),
}

/// Serves one client on `input`/`output` until its input ends, then cancels the sessions still
/// running and waits (briefly) for them to end so their MCP servers are shut down.
pub async fn serve<F: SessionFactory>(
    factory: F,
    options: AgentOptions,
    input: impl AsyncRead + Unpin + Send + 'static,
    output: impl AsyncWrite + Unpin + Send + 'static,
) -> Result<(), AcpError> {
    // Answers owed: the replies a client that does not read may leave queued, beside the
    // requests that run long (a prompt per session, a slot being opened per session), so that
    // those alone never stop the reading.
    let owed_cap = options
        .max_queued_frames
        .saturating_add(options.max_sessions.saturating_mul(2));
    let outflow = Arc::new(Outflow::new(options.max_queued_frames, owed_cap));
    let (out_tx, out_rx) = mpsc::channel::<String>(options.max_queued_frames.max(1));
    let writer = tokio::spawn(write_lines(output, out_rx, Arc::clone(&outflow)));

    let (eof_tx, eof_rx) = oneshot::channel::<std::io::Result<()>>();
    let incoming = incoming_lines(
        FrameReader::new(BufReader::new(input), options.max_frame_bytes),
        out_tx.clone(),
        eof_tx,
        Arc::clone(&outflow),
    );
    let passed = Arc::clone(&outflow);
    let outgoing = futures_util::sink::unfold(out_tx, move |tx, line: String| {
        let passed = Arc::clone(&passed);
        async move {
            let reply = lines::is_reply(&line);
            tx.send(line).await.map_err(|_| {
                std::io::Error::new(std::io::ErrorKind::BrokenPipe, "output closed")
            })?;
            if reply {
                passed.answered();
            }
            Ok::<_, std::io::Error>(tx)
        }
    });

    let state = Arc::new(AgentState {
        factory,
        permissions: options.permissions,
        max_sessions: options.max_sessions,
        open: AtomicUsize::new(0),
        sessions: Mutex::new(HashMap::new()),
        loading: Mutex::new(HashSet::new()),
        next_id: AtomicU64::new(1),
        outflow,
        elicitation: Mutex::new(None),
        notices: AtomicBool::new(false),
    });
    let connection =
        builder(Arc::clone(&state)).connect_to(Lines::new(Box::pin(outgoing), incoming));

    let ended = tokio::select! {
        result = connection => result.map_err(|e| AcpError::Protocol(e.to_string())),
        eof = eof_rx => match eof {
            Ok(Ok(())) | Err(_) => Ok(()),
            Ok(Err(e)) => Err(AcpError::Io(e)),
        },
    };
    state.shut_down().await;
    drop(state);
    // Every sender is gone once the connection is: the writer flushes what is queued and ends.
    match writer.await {
        Ok(result) => result?,
        Err(e) => return Err(AcpError::Protocol(format!("writer task failed: {e}"))),
    }
    ended
}

/// The protocol handlers, each returning at once.
fn builder<F: SessionFactory>(
    state: Arc<AgentState<F>>,
) -> agent_client_protocol::v1::Builder<Agent, impl agent_client_protocol::HandleDispatchFrom<Client>>
{
    let init_state = Arc::clone(&state);
    let new_state = Arc::clone(&state);
    let prompt_state = Arc::clone(&state);
    let close_state = Arc::clone(&state);
    let list_state = Arc::clone(&state);
    let load_state = Arc::clone(&state);
    let resume_state = Arc::clone(&state);
    let cancel_state = state;
    Agent
        .v1()
        .name("hookloop")
        .on_receive_request(
            async move |request: InitializeRequest, responder, _cx| {
                tracing::info!(client_version = ?request.protocol_version, "initialize");
                *lock(&init_state.elicitation) = request.client_capabilities.elicitation;
                let notices = request
                    .client_capabilities
                    .session
                    .as_ref()
                    .is_some_and(|s| s.notices.is_some());
                init_state.notices.store(notices, Ordering::Release);
                let recorded = init_state.factory.record_dir().is_some();
                responder.respond(initialize_response(recorded))
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: NewSessionRequest, responder, cx| {
                // The slot is taken here, in order, so concurrent `session/new`s cannot all
                // pass the limit while their servers start.
                let Some(state) = new_state.reserved() else {
                    return responder.respond_with_error(new_state.limit_error());
                };
                tokio::spawn(async move { state.new_session(request, responder, cx).await });
                Ok(())
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: PromptRequest, responder, _cx| {
                prompt_state.prompt(request, responder)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: CloseSessionRequest, responder, _cx| {
                close_state.close(request, responder)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ListSessionsRequest, responder, _cx| match list_state
                .list_sessions(request.cwd.as_deref())
            {
                Ok(sessions) => responder.respond(ListSessionsResponse::new(sessions)),
                Err(e) => responder.respond_with_error(e),
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: LoadSessionRequest, responder, cx| {
                let reload = Reload {
                    id: request.session_id,
                    cwd: request.cwd,
                    servers: request.mcp_servers,
                    history: true,
                };
                load_state.spawn_load(reload, responder, LoadSessionResponse::new(), cx)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_request(
            async move |request: ResumeSessionRequest, responder, cx| {
                let reload = Reload {
                    id: request.session_id,
                    cwd: request.cwd,
                    servers: request.mcp_servers,
                    history: false,
                };
                resume_state.spawn_load(reload, responder, ResumeSessionResponse::new(), cx)
            },
            agent_client_protocol::on_receive_request!(),
        )
        .on_receive_notification(
            async move |notification: CancelNotification, _cx| {
                cancel_state.cancel(&notification.session_id);
                Ok(())
            },
            agent_client_protocol::on_receive_notification!(),
        )
        .on_receive_dispatch(
            // Without this, a message naming a session that no handler claims would wait
            // forever in the crate's retry queue.
            async |message: Dispatch, _cx: ConnectionTo<Client>| match message {
                Dispatch::Request(request, responder) => responder.respond_with_error(
                    agent_client_protocol::Error::method_not_found().data(json!(request.method())),
                ),
                Dispatch::Notification(_) => {
                    tracing::debug!(method = message.method(), "ignoring notification");
                    Ok(())
                }
                Dispatch::Response(result, router) => router.route_with_result(result),
            },
            agent_client_protocol::on_receive_dispatch!(),
        )
}

/// What the agent offers; loading, listing and resuming only when sessions are `recorded`.
fn initialize_response(recorded: bool) -> InitializeResponse {
    let mut sessions = SessionCapabilities::new().close(SessionCloseCapabilities::new());
    if recorded {
        sessions = sessions
            .list(SessionListCapabilities::new())
            .resume(SessionResumeCapabilities::new());
    }
    InitializeResponse::new(ProtocolVersion::V1)
        .agent_capabilities(
            AgentCapabilities::new()
                .load_session(recorded)
                .prompt_capabilities(PromptCapabilities::new())
                .mcp_capabilities(McpCapabilities::new().http(true).sse(true))
                .session_capabilities(sessions),
        )
        .agent_info(Implementation::new("hookloop", env!("CARGO_PKG_VERSION")))
}

fn error(code: i32, message: String) -> agent_client_protocol::Error {
    agent_client_protocol::Error::new(code, message)
}

fn respond_error<T: agent_client_protocol::JsonRpcResponse>(
    responder: Responder<T>,
    code: i32,
    message: String,
) {
    tracing::info!(%message, "request refused");
    if let Err(e) = responder.respond_with_error(error(code, message)) {
        tracing::debug!(error = %e, "could not send an error reply");
    }
}

#[cfg(test)]
mod tests;
