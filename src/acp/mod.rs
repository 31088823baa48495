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
//! What the client sees while a prompt runs comes from a [`ProgressObserver`]: model text as
//! `agent_message_chunk`s as it streams in (the whole text once, when a reply did not stream),
//! reasoning the provider streams as `agent_thought_chunk`s, each tool call as `tool_call`
//! (pending) then `tool_call_update` (in progress, then completed or failed, with its output),
//! and — so a UI can show why the agent kept working — each hook objection, `_PostCompact` injection or `_PreToolUse` denial as a
//! completed `tool_call` of kind `other` titled with the hook and server, each other hook's
//! injected context (`_SessionStart`, `_UserPromptSubmit`, `_PostToolUse`, `_PreCompact`) as one
//! of kind `think` titled "<hook> from <server>", and a spent budget, a declined objection, a
//! compaction or a failed-open hook as an `agent_thought_chunk`. So is, once, a recorded
//! session's transcript that could not be written whole (checked after each prompt).
//!
//! # Framing
//!
//! Frames are read by a [`FrameReader`] with a size cap ([`DEFAULT_MAX_FRAME_BYTES`]); a frame
//! over it is answered with an `invalid request` error (with its id when its first bytes show
//! one) and the connection goes on. A frame that is not JSON gets the protocol crate's parse
//! error; a request whose parameters do not fit gets `invalid params`. Nothing a client sends
//! ends the connection but the end of its input.

mod elicit;
pub mod frame;
pub mod output;
pub mod permission;
pub mod records;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use agent_client_protocol::schema::ProtocolVersion;
use agent_client_protocol::v1::schema::{
    AgentCapabilities, CancelNotification, CloseSessionRequest, CloseSessionResponse, ContentBlock,
    ContentChunk, ElicitationCapabilities, Implementation, InitializeRequest, InitializeResponse,
    ListSessionsRequest, ListSessionsResponse, LoadSessionRequest, LoadSessionResponse,
    McpCapabilities, McpServer, NewSessionRequest, NewSessionResponse, PromptCapabilities,
    PromptRequest, PromptResponse, ResumeSessionRequest, ResumeSessionResponse,
    SessionCapabilities, SessionCloseCapabilities, SessionId, SessionInfo, SessionListCapabilities,
    SessionNotification, SessionResumeCapabilities, SessionUpdate, StopReason, ToolCall,
    ToolCallContent, ToolCallStatus, ToolCallUpdate, ToolCallUpdateFields, ToolKind, UsageUpdate,
};
use agent_client_protocol::v1::schema::{Notice as AcpNotice, NoticeSeverity};
use agent_client_protocol::v1::{ConnectionTo, Dispatch, Responder};
use agent_client_protocol::{Agent, Client, Lines};
use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::{mpsc, oneshot};

use self::elicit::ClientPerson;
pub use self::frame::DEFAULT_MAX_FRAME_BYTES;
use self::frame::{Frame, FrameReader};
pub use self::output::Output;
use self::permission::ClientAsker;
pub use self::permission::Permissions;
use crate::config::{ConfigError, env_lookup, parse_number};
use crate::driver::{CancelHandle, Observer, PromptStop, Session, SessionError};
use crate::hooks::{Hook, ServerName};
use crate::llm::{Delta, LlmClient};
use crate::machine::{Effect, Input, Machine, Message, Purpose, SkipReason, ToolHints};
use crate::mcp::ToolHost;
use crate::progress::{Event, ProgressObserver};
use crate::text::lock;
use crate::transcript::{RecordDir, Recorder};

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

/// What a client asked for in `session/new`, in the engine's terms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionSpec {
    /// The session's working directory (absolute, per the protocol).
    pub cwd: PathBuf,
    /// The session's own MCP servers, in the client's order.
    pub servers: Vec<ServerSpec>,
    /// Whether the session asks the client before destructive tools run: a new session's
    /// [`Config`](crate::Config) turns [`ask_permission`](crate::ConfigBuilder::ask_permission)
    /// on when this is [`Permissions::Ask`]. A restored session replays its record under the
    /// record's setting, then goes on under this one.
    pub permissions: Permissions,
}

/// One MCP server a client attached to a session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ServerSpec {
    /// A child process speaking MCP over stdio.
    Stdio {
        name: ServerName,
        command: PathBuf,
        args: Vec<String>,
        env: Vec<(String, String)>,
    },
    /// A server speaking MCP's streamable HTTP transport.
    Http {
        name: ServerName,
        url: String,
        headers: Vec<(String, String)>,
    },
}

impl ServerSpec {
    /// The server's name.
    pub fn name(&self) -> &ServerName {
        match self {
            Self::Stdio { name, .. } | Self::Http { name, .. } => name,
        }
    }
}

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
    /// the factory adds no recorder.
    fn restore(
        &self,
        spec: SessionSpec,
        machine: Machine,
    ) -> impl Future<Output = Result<Session<Self::Llm, Self::Host>, Self::Error>> + Send;

    /// The directory sessions are recorded in, if they are: what `session/list` lists and
    /// `session/load` and `session/resume` read.
    fn record_dir(&self) -> Option<&Path>;
}

/// A session a [`SessionFactory`] built. The agent gives it a
/// [`PermissionAsker`](crate::PermissionAsker) that asks the session's client.
pub struct Created<L, H> {
    pub session: Session<L, H>,
    /// Its recorder and the file its transcript goes to (what [`Session::record_in`] returns),
    /// if it is recorded. The file's stem becomes the session id; the recorder is checked after
    /// each prompt, so the client hears when the transcript could not be written whole.
    pub record: Option<(Recorder, PathBuf)>,
}

/// Settings of the agent that are not the engine's.
#[derive(Clone, Debug)]
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
    let outflow = Arc::new(Outflow::new(options.max_queued_frames));
    let (out_tx, out_rx) = mpsc::channel::<String>(options.max_queued_frames.max(1));
    let writer = tokio::spawn(write_lines(output, out_rx, Arc::clone(&outflow)));

    let (eof_tx, eof_rx) = oneshot::channel::<std::io::Result<()>>();
    let incoming = incoming_lines(
        FrameReader::new(BufReader::new(input), options.max_frame_bytes),
        out_tx.clone(),
        eof_tx,
    );
    let outgoing = futures_util::sink::unfold(out_tx, async |tx, line: String| {
        tx.send(line)
            .await
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "output closed"))?;
        Ok::<_, std::io::Error>(tx)
    });

    let state = Arc::new(AgentState {
        factory,
        permissions: options.permissions,
        max_sessions: options.max_sessions,
        open: AtomicUsize::new(0),
        sessions: Mutex::new(HashMap::new()),
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
                .mcp_capabilities(McpCapabilities::new().http(true).sse(false))
                .session_capabilities(sessions),
        )
        .agent_info(Implementation::new("hookloop", env!("CARGO_PKG_VERSION")))
}

struct AgentState<F> {
    factory: F,
    permissions: Permissions,
    max_sessions: usize,
    /// Sessions open or being set up: what counts against `max_sessions`.
    open: AtomicUsize,
    sessions: Mutex<HashMap<SessionId, SessionHandle>>,
    next_id: AtomicU64,
    outflow: Arc<Outflow>,
    /// The question modes the client advertised in `initialize`; none until it has.
    elicitation: Mutex<Option<ElicitationCapabilities>>,
    /// The client advertised `session.notices` in `initialize`.
    notices: AtomicBool,
}

/// The agent's side of one session: how to reach its actor.
struct SessionHandle {
    prompts: mpsc::UnboundedSender<PromptJob>,
    cancel: CancelHandle,
    /// The cancel flag of the prompt the session has accepted and not yet answered: `Some`
    /// while the session is busy.
    current: Arc<Mutex<Option<Arc<AtomicBool>>>>,
    actor: tokio::task::JoinHandle<()>,
    recorded: Option<Recorded>,
    /// How long the session may take to end: its `_SessionEnd` round and [`SHUTDOWN_MARGIN`].
    grace: Duration,
}

/// Where a session is recorded, for its side file.
struct Recorded {
    path: PathBuf,
    cwd: PathBuf,
    /// Its first prompt has given the session its title.
    titled: AtomicBool,
}

impl Recorded {
    /// Names the session after its first prompt, in the side file (off the async threads).
    fn title_from(&self, prompt: &str) {
        if self.titled.swap(true, Ordering::AcqRel) {
            return;
        }
        let (path, cwd, prompt) = (self.path.clone(), self.cwd.clone(), prompt.to_owned());
        tokio::task::spawn_blocking(move || {
            if let Err(e) = records::write_side_file(&path, &cwd, Some(&prompt)) {
                tracing::warn!(path = %path.display(), error = %e, "cannot title the session");
            }
        });
    }
}

impl SessionHandle {
    /// Cancels the prompt in flight, if any, and marks it so a cancel that lands before the
    /// session starts running it still applies to it.
    fn cancel(&self) {
        if let Some(flag) = lock(&self.current).as_ref() {
            flag.store(true, Ordering::Release);
        }
        self.cancel.cancel();
    }

    /// Ends the session: cancels its prompt, lets its actor close it, and drops it, which shuts
    /// its MCP servers down (each server's whole process group is killed). An actor that has
    /// not ended within its grace is aborted, which drops the session all the same.
    async fn end(self) {
        self.cancel();
        drop(self.prompts);
        let (mut actor, grace) = (self.actor, self.grace);
        if tokio::time::timeout(grace, &mut actor).await.is_err() {
            tracing::warn!("a session did not end within {grace:?}; aborting it");
            actor.abort();
            let _ = actor.await;
        }
    }
}

/// One accepted `session/prompt`, on its way to the session's actor.
struct PromptJob {
    text: String,
    responder: Responder<PromptResponse>,
    /// Set by `session/cancel` for this prompt, whenever it lands.
    cancelled: Arc<AtomicBool>,
}

impl<F: SessionFactory> AgentState<F> {
    /// Takes a session slot if one is free; the state, for the task that opens the session.
    fn reserved(self: &Arc<Self>) -> Option<Arc<Self>> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_sessions).then_some(n + 1)
            })
            .ok()
            .map(|_| Arc::clone(self))
    }

    /// The refusal of a session over the limit.
    fn limit_error(&self) -> agent_client_protocol::Error {
        let message = format!(
            "session limit reached: {} sessions are open on this connection ({} caps it); \
             close one with session/close first",
            self.max_sessions,
            AgentOptions::MAX_SESSIONS_VAR
        );
        error(code::INVALID_REQUEST, message)
    }

    /// Serves a `session/load` or `session/resume`: takes a slot, rebuilds the session off the
    /// dispatch loop, and answers with `response`, freeing the slot if it failed.
    fn spawn_load<T>(
        self: &Arc<Self>,
        reload: Reload,
        responder: Responder<T>,
        response: T,
        cx: ConnectionTo<Client>,
    ) -> Result<(), agent_client_protocol::Error>
    where
        T: agent_client_protocol::JsonRpcResponse + Send + 'static,
    {
        let Some(state) = self.reserved() else {
            return responder.respond_with_error(self.limit_error());
        };
        tokio::spawn(async move {
            let Reload {
                id,
                cwd,
                servers,
                history,
            } = reload;
            let sent = match state.load_session(id, cwd, servers, history, cx).await {
                Ok(()) => responder.respond(response),
                Err(e) => {
                    state.release_slot();
                    tracing::info!(error = %e, "session not loaded");
                    responder.respond_with_error(e)
                }
            };
            if let Err(e) = sent {
                tracing::debug!(error = %e, "could not answer a session load");
            }
        });
        Ok(())
    }

    fn release_slot(&self) {
        self.open.fetch_sub(1, Ordering::AcqRel);
    }

    async fn new_session(
        self: Arc<Self>,
        request: NewSessionRequest,
        responder: Responder<NewSessionResponse>,
        cx: ConnectionTo<Client>,
    ) {
        let spec = match session_spec(request.cwd, request.mcp_servers, self.permissions) {
            Ok(spec) => spec,
            Err(message) => {
                self.release_slot();
                respond_error(responder, code::INVALID_PARAMS, message);
                return;
            }
        };
        let cwd = spec.cwd.clone();
        let Created { session, record } = match self.factory.create(spec).await {
            Ok(created) => created,
            Err(e) => {
                self.release_slot();
                respond_error(
                    responder,
                    code::INTERNAL_ERROR,
                    format!("could not start the session: {e}"),
                );
                return;
            }
        };
        let recorder = record.as_ref().map(|(recorder, _)| recorder.clone());
        let recorded = record.and_then(|(_, path)| {
            let id = path.file_stem()?.to_str()?.to_owned();
            if let Err(e) = records::write_side_file(&path, &cwd, None) {
                tracing::warn!(path = %path.display(), error = %e, "cannot write the session's side file; it will not be listed");
            }
            Some((id, Recorded { path, cwd, titled: AtomicBool::new(false) }))
        });
        let (id, recorded) = match recorded {
            Some((id, recorded)) => (SessionId::new(id), Some(recorded)),
            None => (
                SessionId::new(format!(
                    "hl-{}",
                    self.next_id.fetch_add(1, Ordering::Relaxed)
                )),
                None,
            ),
        };
        self.install(session, id.clone(), cx, recorded, recorder);
        tracing::info!(session = %id, "session started");
        if let Err(e) = responder.respond(NewSessionResponse::new(id)) {
            tracing::warn!(error = %e, "could not answer session/new");
        }
    }

    /// `session/load` (with `history`: the conversation is sent back first) and
    /// `session/resume` (without): restores a recorded session and opens it.
    async fn load_session(
        &self,
        id: SessionId,
        cwd: PathBuf,
        servers: Vec<McpServer>,
        history: bool,
        cx: ConnectionTo<Client>,
    ) -> Result<(), agent_client_protocol::Error> {
        let Some(dir) = self.factory.record_dir() else {
            return Err(error(
                code::INVALID_REQUEST,
                format!(
                    "sessions are not recorded here: set {} to load them",
                    RecordDir::ENV_VAR
                ),
            ));
        };
        if lock(&self.sessions).contains_key(&id) {
            let message = format!("session {id} is already open on this connection");
            return Err(error(code::INVALID_REQUEST, message));
        }
        let spec = session_spec(cwd, servers, self.permissions)
            .map_err(|m| error(code::INVALID_PARAMS, m))?;
        let load_error = |e: records::LoadError| {
            error(
                code::INVALID_PARAMS,
                format!("cannot load session {id}: {e}"),
            )
        };
        let path = records::find(dir, &id.0).map_err(load_error)?;
        let restored = records::restore(&path).map_err(load_error)?;
        let conversation = history.then(|| restored.machine.history().to_vec());
        // Recorded on in its own file, so what happens now is there for the next load.
        let (recorder, observer) = restored.record_on(&path).map_err(|e| {
            error(
                code::INTERNAL_ERROR,
                format!("cannot record session {id} on: {e}"),
            )
        })?;
        let recorded = Recorded {
            path,
            cwd: spec.cwd.clone(),
            // The side file keeps the title the first prompt gave it.
            titled: AtomicBool::new(true),
        };
        let mut session = self
            .factory
            .restore(spec, restored.machine)
            .await
            .map_err(|e| {
                error(
                    code::INTERNAL_ERROR,
                    format!("could not start the session: {e}"),
                )
            })?;
        if let Some(messages) = conversation {
            let notifier = Notifier {
                id: id.clone(),
                cx: cx.clone(),
                outflow: Arc::clone(&self.outflow),
            };
            for update in history_updates(&messages) {
                notifier.send(update);
            }
        }
        session.add_observer(observer);
        // The record replayed under the setting it was made with; from here on the agent's
        // current one applies, and the change goes into the record for the next load.
        session
            .set_ask_permission(self.permissions == Permissions::Ask)
            .map_err(|e| {
                error(
                    code::INTERNAL_ERROR,
                    format!("cannot apply {} to session {id}: {e}", Permissions::VAR),
                )
            })?;
        self.install(session, id.clone(), cx, Some(recorded), Some(recorder));
        tracing::info!(session = %id, history, "recorded session opened");
        Ok(())
    }

    /// `session/list`: the recorded sessions, newest first.
    fn list_sessions(
        &self,
        cwd: Option<&Path>,
    ) -> Result<Vec<SessionInfo>, agent_client_protocol::Error> {
        let Some(dir) = self.factory.record_dir() else {
            return Ok(Vec::new());
        };
        let found = records::list(dir, cwd).map_err(|e| {
            error(
                code::INTERNAL_ERROR,
                format!("cannot list {}: {e}", dir.display()),
            )
        })?;
        Ok(found
            .into_iter()
            .map(|r| SessionInfo::new(r.id, r.cwd).title(r.title))
            .collect())
    }

    /// Watches `session` for the client and starts its actor.
    fn install(
        &self,
        mut session: Session<F::Llm, F::Host>,
        id: SessionId,
        cx: ConnectionTo<Client>,
        recorded: Option<Recorded>,
        recorder: Option<Recorder>,
    ) {
        // Hook servers relate their calls to the client's session by the id the client knows,
        // the one a loaded session keeps.
        session.host().set_session_id(&id.0);
        let kinds = Arc::new(Mutex::new(HashMap::new()));
        if self.permissions == Permissions::Ask {
            session.set_permission_asker(ClientAsker {
                cx: cx.clone(),
                session: id.clone(),
                kinds: Arc::clone(&kinds),
            });
        }
        // Servers' questions go to a client that takes them; the host declines them otherwise.
        if let Some(modes) = lock(&self.elicitation).clone() {
            let person = ClientPerson::new(cx.clone(), id.clone(), modes);
            session.host().set_person(Arc::new(person));
        }
        session.add_observer(KindWatcher {
            kinds: Arc::clone(&kinds),
        });
        // Events and reply pieces share one translator: it must know whether a reply's text
        // was already streamed before it sends the whole text again.
        let budget = self
            .notices
            .load(Ordering::Acquire)
            .then(|| session.machine().policy().stop_max_rejections);
        let translator = Arc::new(Mutex::new(Translator::new(kinds, budget)));
        let notifier = Notifier {
            id: id.clone(),
            cx,
            outflow: Arc::clone(&self.outflow),
        };
        let (progress, pieces) = (notifier.clone(), notifier.clone());
        let events = Arc::clone(&translator);
        session.add_observer(
            ProgressObserver::new(move |_, event| {
                let updates = lock(&events).updates(event);
                for update in updates {
                    progress.send(update);
                }
            })
            .with_deltas(move |_, delta| {
                let update = lock(&translator).delta(delta);
                if let Some(update) = update {
                    pieces.send(update);
                }
            }),
        );
        let window = session.machine().policy().max_context_tokens;
        let grace = Duration::from_millis(session.machine().policy().hook_timeout_ms)
            .saturating_add(SHUTDOWN_MARGIN);
        let watcher = recorder.map(|recorder| RecordWatcher {
            recorder,
            notifier: notifier.clone(),
            reported: false,
        });
        session.add_observer(UsageReporter {
            window,
            purpose: Purpose::Turn,
            notifier,
        });
        let (tx, rx) = mpsc::unbounded_channel();
        let current = Arc::new(Mutex::new(None));
        let cancel = session.cancel_handle();
        let actor = tokio::spawn(run_session(
            session,
            rx,
            Arc::clone(&current),
            Arc::clone(&self.outflow),
            watcher,
        ));
        let handle = SessionHandle {
            prompts: tx,
            cancel,
            current,
            actor,
            recorded,
            grace,
        };
        lock(&self.sessions).insert(id, handle);
    }

    fn prompt(
        &self,
        request: PromptRequest,
        responder: Responder<PromptResponse>,
    ) -> Result<(), agent_client_protocol::Error> {
        let text = match prompt_text(&request.prompt) {
            Ok(text) => text,
            Err(message) => {
                return responder.respond_with_error(error(code::INVALID_PARAMS, message));
            }
        };
        let sessions = lock(&self.sessions);
        let Some(handle) = sessions.get(&request.session_id) else {
            let message = format!("unknown session {}", request.session_id);
            return responder.respond_with_error(error(code::INVALID_PARAMS, message));
        };
        let mut current = lock(&handle.current);
        if current.is_some() {
            let message = format!(
                "session {} is already running a prompt; wait for it or cancel it",
                request.session_id
            );
            return responder.respond_with_error(error(code::INVALID_REQUEST, message));
        }
        if let Some(recorded) = &handle.recorded {
            recorded.title_from(&text);
        }
        let cancelled = Arc::new(AtomicBool::new(false));
        *current = Some(Arc::clone(&cancelled));
        let job = PromptJob {
            text,
            responder,
            cancelled,
        };
        if let Err(mpsc::error::SendError(job)) = handle.prompts.send(job) {
            *current = None;
            return job
                .responder
                .respond_with_error(error(code::INTERNAL_ERROR, "the session has ended".into()));
        }
        Ok(())
    }

    fn cancel(&self, id: &SessionId) {
        match lock(&self.sessions).get(id) {
            Some(handle) => handle.cancel(),
            None => tracing::debug!(session = %id, "cancel for an unknown session"),
        }
    }

    /// `session/close`: the session leaves the map at once (later requests naming it are
    /// refused), and the answer comes once it has ended and its servers are shut down.
    fn close(
        self: &Arc<Self>,
        request: CloseSessionRequest,
        responder: Responder<CloseSessionResponse>,
    ) -> Result<(), agent_client_protocol::Error> {
        let Some(handle) = lock(&self.sessions).remove(&request.session_id) else {
            let message = format!("unknown session {}", request.session_id);
            return responder.respond_with_error(error(code::INVALID_PARAMS, message));
        };
        let state = Arc::clone(self);
        let id = request.session_id;
        tokio::spawn(async move {
            handle.end().await;
            state.release_slot();
            tracing::info!(session = %id, "session closed");
            if let Err(e) = responder.respond(CloseSessionResponse::new()) {
                tracing::debug!(error = %e, "could not answer session/close");
            }
        });
        Ok(())
    }

    /// Ends every session, all at once, each within its grace.
    async fn shut_down(&self) {
        // Nobody reads the frames any more that would make room for the sessions to go on.
        self.outflow.close();
        let handles: Vec<SessionHandle> = lock(&self.sessions).drain().map(|(_, h)| h).collect();
        futures_util::future::join_all(handles.into_iter().map(SessionHandle::end)).await;
    }
}

/// Owns one session and runs its prompts, one at a time.
async fn run_session<L: LlmClient, H: ToolHost>(
    mut session: Session<L, H>,
    mut jobs: mpsc::UnboundedReceiver<PromptJob>,
    current: Arc<Mutex<Option<Arc<AtomicBool>>>>,
    outflow: Arc<Outflow>,
    mut record: Option<RecordWatcher>,
) {
    let cancel = session.cancel_handle();
    while let Some(PromptJob {
        text,
        responder,
        cancelled,
    }) = jobs.recv().await
    {
        let result = run_prompt(&mut session, text, &cancelled, &cancel, &outflow).await;
        // Before the answer, so the notice belongs to the prompt whose records were lost.
        if let Some(record) = &mut record {
            record.check().await;
        }
        // Free the session before answering, so a client that prompts again as soon as it has
        // the answer is not told the session is busy.
        *lock(&current) = None;
        let sent = match result {
            Ok(stop) => responder.respond(PromptResponse::new(stop_reason(stop))),
            Err(e) => {
                tracing::warn!(error = %e, "prompt failed");
                responder.respond_with_error(error(code::INTERNAL_ERROR, e.to_string()))
            }
        };
        if let Err(e) = sent {
            tracing::debug!(error = %e, "could not answer session/prompt");
        }
    }
    if let Err(e) = session.close().await {
        tracing::warn!(error = %e, "closing the session failed");
    }
}

/// Tells the client, once, that its session's transcript could not be written whole: a
/// recording that silently stops is worse than none, since a later `session/load` would restore
/// a session that is not the one the client had.
struct RecordWatcher {
    recorder: Recorder,
    notifier: Notifier,
    /// The client was told; a transcript that lost records stays incomplete, so once is enough.
    reported: bool,
}

impl RecordWatcher {
    async fn check(&mut self) {
        if self.reported {
            return;
        }
        let recorder = self.recorder.clone();
        // The check waits for the writer thread to flush what is queued.
        let checked = tokio::task::spawn_blocking(move || recorder.check()).await;
        let why = match checked {
            Ok(Ok(())) => return,
            Ok(Err(e)) => e.to_string(),
            Err(e) => format!("checking the recording failed: {e}"),
        };
        tracing::warn!(error = %why, "the session's transcript is incomplete");
        self.reported = true;
        self.notifier.send(thought(&format!(
            "The transcript of this session is incomplete: {why}. Loading it later will not restore this session as it is."
        )));
    }
}

/// Keeps each model-facing tool's [`ToolKind`] as the session's catalog changes.
struct KindWatcher {
    kinds: Arc<Mutex<HashMap<String, ToolKind>>>,
}

impl Observer for KindWatcher {
    fn on_fact(&mut self, _at: Duration, fact: &Input) {
        let Input::CatalogChanged { catalog } = fact else {
            return;
        };
        let kinds = catalog
            .servers
            .iter()
            .flat_map(|s| {
                s.tools.iter().map(|t| {
                    let name = crate::hooks::qualify(s.server.as_str(), &t.name);
                    (name, tool_kind(t.hints))
                })
            })
            .collect();
        *lock(&self.kinds) = kinds;
    }
}

/// A call's kind from its server's hints: a read-only tool reads (or fetches, when it reaches
/// outside the machine), one that changes things edits; with no hints it is `other`. MCP's
/// annotations say nothing that would tell a search, a move or a command apart.
fn tool_kind(hints: ToolHints) -> ToolKind {
    match (hints.read_only, hints.destructive, hints.open_world) {
        (Some(true), _, Some(true)) => ToolKind::Fetch,
        (Some(true), _, _) => ToolKind::Read,
        (Some(false), _, _) | (None, Some(true), _) => ToolKind::Edit,
        (None, Some(false) | None, _) => ToolKind::Other,
    }
}

/// Sends one session's updates to the client, counting each in the [`Outflow`].
#[derive(Clone)]
struct Notifier {
    id: SessionId,
    cx: ConnectionTo<Client>,
    outflow: Arc<Outflow>,
}

impl Notifier {
    fn send(&self, update: SessionUpdate) {
        self.outflow.sent();
        // A failed send means the connection is gone; the prompt is being cancelled.
        let _ = self
            .cx
            .send_notification(SessionNotification::new(self.id.clone(), update));
    }
}

/// Reports, after each model reply of a turn, how much of the context window the session
/// uses (`usage_update`): the reply's input and output tokens, as the provider counted them.
/// A compaction summary's reply is not reported (its input is the context being dropped),
/// nor a reply without a usable count.
struct UsageReporter {
    window: u64,
    purpose: Purpose,
    notifier: Notifier,
}

impl Observer for UsageReporter {
    fn on_effect(&mut self, _at: Duration, effect: &Effect) {
        if let Effect::CallLlm { purpose, .. } = effect {
            self.purpose = *purpose;
        }
    }

    fn on_fact(&mut self, _at: Duration, fact: &Input) {
        let Input::LlmReplied { reply } = fact else {
            return;
        };
        let Some(usage) = reply.usage.filter(|u| u.input_tokens > 0) else {
            return;
        };
        if self.purpose == Purpose::Turn {
            let used = usage.input_tokens.saturating_add(usage.output_tokens);
            self.notifier
                .send(SessionUpdate::UsageUpdate(UsageUpdate::new(
                    used,
                    self.window,
                )));
        }
    }
}

/// Runs one prompt, stepping it only while the client reads what it is sent.
///
/// A session takes every cancel sent before a prompt starts as meant for an earlier one (it
/// marks them seen on the prompt's first step), so a `session/cancel` that landed while this
/// prompt waited in the queue is sent again right after that first step.
async fn run_prompt<L: LlmClient, H: ToolHost>(
    session: &mut Session<L, H>,
    text: String,
    cancelled: &AtomicBool,
    cancel: &CancelHandle,
    outflow: &Outflow,
) -> Result<PromptStop, SessionError> {
    let mut run = std::pin::pin!(session.prompt(text));
    let mut started = false;
    std::future::poll_fn(|cx| {
        if outflow.poll_room(cx).is_pending() {
            return Poll::Pending;
        }
        let poll = run.as_mut().poll(cx);
        if !started {
            started = true;
            if poll.is_pending() && cancelled.load(Ordering::Acquire) {
                cancel.cancel();
            }
        }
        poll
    })
    .await
}

/// Frames handed to the protocol crate and not yet written out: what a client that stops
/// reading makes the agent hold.
///
/// Session updates count one each when sent; every written line counts one off (never below
/// zero). Sessions are stepped only while the count is under the cap, so a client that does not
/// read leaves at most the cap plus one step's updates queued, and nothing is dropped: the
/// sessions wait instead. Other frames written meanwhile (replies) count off too, which only
/// ever lets a client that reads some of its frames get a few more.
struct Outflow {
    queued: AtomicUsize,
    cap: usize,
    /// The writer ended: nothing will make room any more, so nobody waits.
    closed: AtomicBool,
    waiters: Mutex<Vec<Waker>>,
}

impl Outflow {
    fn new(cap: usize) -> Self {
        Self {
            queued: AtomicUsize::new(0),
            cap: cap.max(1),
            closed: AtomicBool::new(false),
            waiters: Mutex::new(Vec::new()),
        }
    }

    /// A session update was handed to the protocol crate.
    fn sent(&self) {
        self.queued.fetch_add(1, Ordering::AcqRel);
    }

    /// A line was written to the client.
    fn wrote(&self) {
        let _ = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if !self.full() {
            self.wake_all();
        }
    }

    /// The writer is gone; stop holding sessions back.
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake_all();
    }

    fn full(&self) -> bool {
        !self.closed.load(Ordering::Acquire) && self.queued.load(Ordering::Acquire) >= self.cap
    }

    /// Ready when a session may take its next step.
    fn poll_room(&self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.full() {
            return Poll::Ready(());
        }
        {
            let mut waiters = lock(&self.waiters);
            if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
                waiters.push(cx.waker().clone());
            }
        }
        // Room may have been made between the check and the registration.
        if self.full() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }

    fn wake_all(&self) {
        let waiters = std::mem::take(&mut *lock(&self.waiters));
        for waker in waiters {
            waker.wake();
        }
    }
}

fn stop_reason(stop: PromptStop) -> StopReason {
    match stop {
        PromptStop::EndTurn => StopReason::EndTurn,
        PromptStop::MaxTokens => StopReason::MaxTokens,
        PromptStop::MaxTurnRequests => StopReason::MaxTurnRequests,
        PromptStop::Refusal => StopReason::Refusal,
        PromptStop::Cancelled => StopReason::Cancelled,
        // ACP has no word for it; the turn is over and nothing more will come.
        PromptStop::OtherStop => StopReason::EndTurn,
    }
}

/// The engine's view of a session's `cwd` and `mcpServers`, or what is wrong with them.
fn session_spec(
    cwd: PathBuf,
    mcp_servers: Vec<McpServer>,
    permissions: Permissions,
) -> Result<SessionSpec, String> {
    if !cwd.is_absolute() {
        return Err(format!("cwd must be an absolute path, got {cwd:?}"));
    }
    let mut servers = Vec::with_capacity(mcp_servers.len());
    for server in mcp_servers {
        let spec = match server {
            McpServer::Stdio(s) => ServerSpec::Stdio {
                name: server_name(s.name)?,
                command: s.command,
                args: s.args,
                env: s.env.into_iter().map(|v| (v.name, v.value)).collect(),
            },
            McpServer::Http(s) => ServerSpec::Http {
                name: server_name(s.name)?,
                url: s.url,
                headers: s.headers.into_iter().map(|h| (h.name, h.value)).collect(),
            },
            McpServer::Sse(s) => {
                return Err(format!(
                    "MCP server {:?}: the SSE transport is not supported; use stdio or http",
                    s.name
                ));
            }
            // The enum grows with the protocol; refuse what this agent does not know.
            #[allow(unreachable_patterns)]
            _ => return Err("unsupported MCP server transport".into()),
        };
        if servers.iter().any(|s: &ServerSpec| s.name() == spec.name()) {
            return Err(format!(
                "MCP server name {:?} is used twice",
                spec.name().as_str()
            ));
        }
        servers.push(spec);
    }
    Ok(SessionSpec {
        cwd,
        servers,
        permissions,
    })
}

fn server_name(name: String) -> Result<ServerName, String> {
    ServerName::new(name).map_err(|e| e.to_string())
}

/// The prompt as one text: text blocks as they are, resource links as a line naming them.
fn prompt_text(blocks: &[ContentBlock]) -> Result<String, String> {
    let mut parts = Vec::with_capacity(blocks.len());
    for (i, block) in blocks.iter().enumerate() {
        match block {
            ContentBlock::Text(text) => parts.push(text.text.clone()),
            ContentBlock::ResourceLink(link) => {
                let title = link.title.as_deref().unwrap_or(&link.name);
                parts.push(format!("[{title}]({})", link.uri));
            }
            ContentBlock::Image(_) => return Err(unsupported(i, "image")),
            ContentBlock::Audio(_) => return Err(unsupported(i, "audio")),
            ContentBlock::Resource(_) => return Err(unsupported(i, "embedded resource")),
            #[allow(unreachable_patterns)]
            _ => return Err(unsupported(i, "unknown")),
        }
    }
    if parts.is_empty() {
        return Err("the prompt is empty".into());
    }
    Ok(parts.join("\n\n"))
}

fn unsupported(index: usize, kind: &str) -> String {
    format!(
        "prompt block {index}: {kind} content is not supported (the agent's prompt capabilities \
         allow text and resource_link blocks only)"
    )
}

/// Turns progress events into session updates, numbering the synthetic tool calls.
struct Translator {
    next: u64,
    /// Each model-facing tool's kind, from its server's hints.
    kinds: Arc<Mutex<HashMap<String, ToolKind>>>,
    /// Calls already shown as `tool_call`s when the user was asked about them: when they run,
    /// they are not shown again.
    announced: HashSet<String>,
    /// The session's `_Stop` budget, when the client takes `notice` updates: each objection
    /// and a spent budget are then also shown as a notice of the budget's state.
    budget: Option<u32>,
    /// The current reply's text has been sent piece by piece, so its whole text is not sent
    /// again. Cleared when a model request starts.
    streamed: bool,
}

impl Translator {
    fn new(kinds: Arc<Mutex<HashMap<String, ToolKind>>>, budget: Option<u32>) -> Self {
        Self {
            next: 0,
            kinds,
            announced: HashSet::new(),
            budget,
            streamed: false,
        }
    }

    /// A piece of the current reply: text as a message chunk, reasoning as a thought chunk.
    fn delta(&mut self, delta: &Delta) -> Option<SessionUpdate> {
        match delta {
            Delta::Text(text) if text.is_empty() => None,
            Delta::Thinking(text) if text.is_empty() => None,
            Delta::Text(text) => {
                self.streamed = true;
                Some(SessionUpdate::AgentMessageChunk(ContentChunk::new(
                    ContentBlock::from(text.clone()),
                )))
            }
            Delta::Thinking(text) => Some(thought(text)),
        }
    }

    /// A model tool call, `pending` until the session starts it.
    fn pending_call(&self, id: String, name: String, arguments: Value) -> SessionUpdate {
        let kind = lock(&self.kinds)
            .get(&name)
            .copied()
            .unwrap_or(ToolKind::Other);
        SessionUpdate::ToolCall(
            ToolCall::new(id, name)
                .kind(kind)
                .status(ToolCallStatus::Pending)
                .raw_input(arguments),
        )
    }

    fn updates(&mut self, event: Event) -> Vec<SessionUpdate> {
        match event {
            Event::Thinking { summary: false } => {
                self.streamed = false;
                Vec::new()
            }
            Event::HookCalled { .. } | Event::Finished { .. } => Vec::new(),
            Event::Thinking { summary: true } => {
                vec![thought(
                    "The context is full: asking the model for a summary to continue from.",
                )]
            }
            Event::ModelText { text } => {
                if std::mem::take(&mut self.streamed) {
                    return Vec::new();
                }
                vec![SessionUpdate::AgentMessageChunk(ContentChunk::new(
                    ContentBlock::from(text),
                ))]
            }
            Event::PermissionAsked {
                id,
                name,
                arguments,
            } => {
                self.announced.insert(id.clone());
                vec![self.pending_call(id, name, arguments)]
            }
            Event::ToolStarted {
                id,
                name,
                arguments,
            } => {
                if self.announced.remove(&id) {
                    return Vec::new();
                }
                vec![self.pending_call(id, name, arguments)]
            }
            Event::ToolRunning { id } => vec![in_progress(id)],
            Event::ToolRejected { id, tool, .. } => {
                self.announced.remove(&id);
                vec![finished(id, true, crate::machine::rejected_text(&tool))]
            }
            Event::ToolFinished {
                id,
                is_error,
                output,
                ..
            } => vec![finished(id, is_error, output)],
            Event::ToolRefused { name } => {
                let text = crate::machine::unknown_tool_text(&name);
                vec![self.synthetic(name, ToolKind::Other, ToolCallStatus::Failed, text, None)]
            }
            Event::Objection {
                server,
                text,
                budget_left,
            } => {
                let title = format!(
                    "{} objection from {server} ({budget_left} left)",
                    Hook::Stop
                );
                let raw = json!({"hook": Hook::Stop, "server": server, "text": text, "budget_left": budget_left});
                let call = self.synthetic(
                    title,
                    ToolKind::Other,
                    ToolCallStatus::Completed,
                    text,
                    Some(raw),
                );
                std::iter::once(call)
                    .chain(self.budget_notice(budget_left))
                    .collect()
            }
            Event::PostCompactInjected { server, text } => {
                let title = format!("{} from {server}", Hook::PostCompact);
                let raw = json!({"hook": Hook::PostCompact, "server": server, "text": text});
                vec![self.synthetic(
                    title,
                    ToolKind::Other,
                    ToolCallStatus::Completed,
                    text,
                    Some(raw),
                )]
            }
            Event::HookInjected { hook, server, text } => {
                // Context a hook added for the model to weigh: what the model thinks with.
                let title = format!("{hook} from {server}");
                let raw = json!({"hook": hook, "server": server, "text": text});
                vec![self.synthetic(
                    title,
                    ToolKind::Think,
                    ToolCallStatus::Completed,
                    text,
                    Some(raw),
                )]
            }
            Event::ToolDenied { server, tool, text } => {
                let title = format!("{tool} denied by {} of {server}", Hook::PreToolUse);
                let raw =
                    json!({"hook": Hook::PreToolUse, "server": server, "tool": tool, "text": text});
                vec![self.synthetic(
                    title,
                    ToolKind::Other,
                    ToolCallStatus::Completed,
                    text,
                    Some(raw),
                )]
            }
            Event::StopSkipped { reason } => {
                let said = thought(match reason {
                    SkipReason::BudgetSpent => {
                        "The _Stop objection budget is spent: the turn ends whatever the hooks say."
                    }
                    SkipReason::DeclinedObjection => {
                        "The model ended its turn again after an objection: it heard and declined, so the turn ends."
                    }
                });
                let spent = match reason {
                    SkipReason::BudgetSpent => self.budget_notice(0),
                    SkipReason::DeclinedObjection => None,
                };
                std::iter::once(said).chain(spent).collect()
            }
            Event::Compacted {
                summarized,
                messages_before,
                messages_after,
            } => {
                let how = if summarized { "summarized" } else { "trimmed" };
                vec![thought(&format!(
                    "History compacted ({how}): {messages_before} messages became {messages_after}."
                ))]
            }
            Event::HookFailedOpen {
                server,
                hook,
                reason,
            } => vec![thought(&format!(
                "{hook} on {server} gave no usable answer ({reason}); counted as no objection."
            ))],
            Event::ServerKilled { server } => vec![thought(&format!(
                "Server {server} was killed after its hooks timed out twice in a row."
            ))],
        }
    }

    /// The `_Stop` budget's state as a `notice`, for a client that takes notices.
    fn budget_notice(&self, left: u32) -> Option<SessionUpdate> {
        let budget = self.budget?;
        let used = budget.saturating_sub(left);
        let severity = if left == 0 {
            NoticeSeverity::Warning
        } else {
            NoticeSeverity::Info
        };
        let notice = AcpNotice::new(
            severity,
            format!("_Stop objections: {used} of {budget} used"),
        )
        .description(if left == 0 {
            "The objection budget is spent: hooks can no longer keep the agent working.".to_owned()
        } else {
            format!("{left} more objection(s) can keep the agent working this session.")
        })
        .meta(
            json!({"hookloop/objections": used, "hookloop/budget": budget})
                .as_object()
                .cloned(),
        );
        Some(SessionUpdate::Notice(notice))
    }

    /// A tool call the model did not make, standing for something the engine did.
    fn synthetic(
        &mut self,
        title: String,
        kind: ToolKind,
        status: ToolCallStatus,
        text: String,
        raw: Option<serde_json::Value>,
    ) -> SessionUpdate {
        self.next += 1;
        let mut call = ToolCall::new(format!("hookloop-{}", self.next), title)
            .kind(kind)
            .status(status)
            .content(vec![ToolCallContent::from(text)]);
        if let Some(raw) = raw {
            call = call.raw_output(raw);
        }
        SessionUpdate::ToolCall(call)
    }
}

/// A restored conversation as the updates that would have shown it: each user message as a
/// `user_message_chunk`, the model's text as an `agent_message_chunk`, and each tool call as a
/// `tool_call` ended with its recorded result. A compacted session shows its context as the
/// machine holds it: the summary first, as the user message it is.
fn history_updates(messages: &[Message]) -> Vec<SessionUpdate> {
    let mut updates = Vec::new();
    for message in messages {
        match message {
            Message::User { text } => updates.push(SessionUpdate::UserMessageChunk(
                ContentChunk::new(ContentBlock::from(text.clone())),
            )),
            Message::Assistant { text, tool_calls } => {
                if !text.trim().is_empty() {
                    updates.push(SessionUpdate::AgentMessageChunk(ContentChunk::new(
                        ContentBlock::from(text.clone()),
                    )));
                }
                for call in tool_calls {
                    updates.push(SessionUpdate::ToolCall(
                        ToolCall::new(call.id.to_string(), call.name.clone())
                            .kind(ToolKind::Other)
                            .status(ToolCallStatus::InProgress)
                            .raw_input(call.arguments.clone()),
                    ));
                }
            }
            Message::ToolResult { call_id, output } => {
                let status = if output.is_error {
                    ToolCallStatus::Failed
                } else {
                    ToolCallStatus::Completed
                };
                let text = output.joined_text();
                updates.push(SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
                    call_id.to_string(),
                    ToolCallUpdateFields::new()
                        .status(status)
                        .raw_output(json!({"text": text, "isError": output.is_error}))
                        .content(vec![ToolCallContent::from(text)]),
                )));
            }
        }
    }
    updates
}

/// A call's end: completed or failed, with its output.
fn finished(id: String, is_error: bool, output: String) -> SessionUpdate {
    let status = if is_error {
        ToolCallStatus::Failed
    } else {
        ToolCallStatus::Completed
    };
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        id,
        ToolCallUpdateFields::new()
            .status(status)
            .raw_output(json!({"text": output, "isError": is_error}))
            .content(vec![ToolCallContent::from(output)]),
    ))
}

fn in_progress(id: String) -> SessionUpdate {
    SessionUpdate::ToolCallUpdate(ToolCallUpdate::new(
        id,
        ToolCallUpdateFields::new().status(ToolCallStatus::InProgress),
    ))
}

fn thought(text: &str) -> SessionUpdate {
    SessionUpdate::AgentThoughtChunk(ContentChunk::new(ContentBlock::from(text)))
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

/// The incoming side: frames as lines for the protocol crate, oversized frames answered here.
fn incoming_lines<R: tokio::io::AsyncBufRead + Unpin + Send + 'static>(
    reader: FrameReader<R>,
    out: mpsc::Sender<String>,
    eof: oneshot::Sender<std::io::Result<()>>,
) -> impl futures_util::Stream<Item = std::io::Result<String>> + Send + 'static {
    futures_util::stream::unfold(
        (reader, out, Some(eof)),
        async |(mut reader, out, mut eof)| loop {
            match reader.next_frame().await {
                Ok(Some(Frame::Line(line))) => return Some((Ok(line), (reader, out, eof))),
                Ok(Some(Frame::Oversized { id, len })) => {
                    tracing::warn!(len, ?id, "refused an oversized frame");
                    let message = format!(
                        "frame of {len} bytes exceeds the {} byte limit",
                        reader.max()
                    );
                    refuse_frame(&out, id, code::INVALID_REQUEST, message).await;
                }
                Ok(Some(Frame::NotUtf8 { id, valid_up_to })) => {
                    tracing::warn!(?id, valid_up_to, "refused a frame that is not UTF-8");
                    let message = format!(
                        "parse error: the frame is not valid UTF-8 (invalid byte at offset \
                         {valid_up_to})"
                    );
                    refuse_frame(&out, id, code::PARSE_ERROR, message).await;
                }
                // End of input is the end of the connection: tell `serve`, which winds down.
                // The stream itself stays open so the protocol crate does not race it.
                Ok(None) => {
                    if let Some(eof) = eof.take() {
                        let _ = eof.send(Ok(()));
                    }
                    std::future::pending::<()>().await;
                }
                Err(e) => {
                    if let Some(eof) = eof.take() {
                        let _ = eof.send(Err(e));
                    }
                    std::future::pending::<()>().await;
                }
            }
        },
    )
    .boxed()
}

/// An error reply to a frame refused before the protocol crate saw it: the one reply this
/// module writes itself, since the crate never sees the frame. The id is `null` when the
/// frame's first bytes do not show one.
async fn refuse_frame(out: &mpsc::Sender<String>, id: Option<Value>, code: i32, message: String) {
    let reply = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    });
    // The writer is gone only when the connection is: nobody is left to tell.
    let _ = out.send(reply.to_string()).await;
}

/// Writes each outgoing frame as one line, flushing after each batch so a client sees it at
/// once. The frames queued when the writer wakes go out in one write: a round's updates often
/// come together, and each write is a system call.
async fn write_lines(
    output: impl AsyncWrite + Unpin,
    lines: mpsc::Receiver<String>,
    outflow: Arc<Outflow>,
) -> std::io::Result<()> {
    let written = write_each(output, lines, &outflow).await;
    outflow.close();
    written
}

/// The most frames one write takes.
const FRAMES_PER_WRITE: usize = 64;

async fn write_each(
    mut output: impl AsyncWrite + Unpin,
    mut lines: mpsc::Receiver<String>,
    outflow: &Outflow,
) -> std::io::Result<()> {
    let mut batch = Vec::with_capacity(FRAMES_PER_WRITE);
    let mut bytes = Vec::new();
    while lines.recv_many(&mut batch, FRAMES_PER_WRITE).await > 0 {
        bytes.clear();
        for line in &batch {
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
        }
        output.write_all(&bytes).await?;
        output.flush().await?;
        for _ in batch.drain(..) {
            outflow.wrote();
        }
        if bytes.capacity() > MAX_KEPT_BUFFER {
            // One large frame must not pin its size for the life of the connection.
            bytes = Vec::new();
        }
    }
    Ok(())
}

/// The largest write buffer kept between batches.
const MAX_KEPT_BUFFER: usize = 1 << 20;

/// What a `session/load` or `session/resume` asks to rebuild.
struct Reload {
    id: SessionId,
    cwd: PathBuf,
    servers: Vec<McpServer>,
    /// Send the conversation back to the client (`session/load`) or not (`session/resume`).
    history: bool,
}

#[cfg(test)]
mod tests;
