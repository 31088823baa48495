//! The agent's open sessions: opening them (new, load, resume), listing, prompting, cancelling
//! and closing them. Each request is answered without blocking the protocol's dispatch loop.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use agent_client_protocol::Client;
use agent_client_protocol::v1::schema::{
    CloseSessionRequest, CloseSessionResponse, ElicitationCapabilities, McpServer,
    NewSessionRequest, NewSessionResponse, PromptRequest, PromptResponse, SessionId, SessionInfo,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use tokio::sync::mpsc;

use super::actor::{KindWatcher, Notifier, PromptJob, RecordWatcher, UsageReporter, run_session};
use super::elicit::ClientPerson;
use super::lines::Outflow;
use super::permission::{ClientAsker, Permissions};
use super::records;
use super::spec::{prompt_text, session_spec};
use super::translate::{Translator, history_updates};
use super::{AgentOptions, Created, SHUTDOWN_MARGIN, SessionFactory, code, error, respond_error};
use crate::driver::{CancelHandle, Session};
use crate::machine::Purpose;
use crate::ports::ToolHost;
use crate::progress::ProgressObserver;
use crate::text::lock;
use crate::transcript::{RecordDir, Recorder};

pub(super) struct AgentState<F> {
    pub(super) factory: F,
    pub(super) permissions: Permissions,
    pub(super) max_sessions: usize,
    /// Sessions open or being set up: what counts against `max_sessions`.
    pub(super) open: AtomicUsize,
    pub(super) sessions: Mutex<HashMap<SessionId, SessionHandle>>,
    /// Ids of sessions being loaded or resumed. An id is reserved here in the same step that
    /// checks it is not open (under the `sessions` lock), so two loads of one id cannot both
    /// go ahead; taken before `sessions` is never locked.
    pub(super) loading: Mutex<HashSet<SessionId>>,
    pub(super) next_id: AtomicU64,
    pub(super) outflow: Arc<Outflow>,
    /// The question modes the client advertised in `initialize`; none until it has.
    pub(super) elicitation: Mutex<Option<ElicitationCapabilities>>,
    /// The client advertised `session.notices` in `initialize`.
    pub(super) notices: AtomicBool,
}

/// The agent's side of one session: how to reach its actor.
pub(super) struct SessionHandle {
    pub(super) prompts: mpsc::UnboundedSender<PromptJob>,
    pub(super) cancel: CancelHandle,
    /// The cancel flag of the prompt the session has accepted and not yet answered: `Some`
    /// while the session is busy.
    pub(super) current: Arc<Mutex<Option<Arc<AtomicBool>>>>,
    pub(super) actor: tokio::task::JoinHandle<()>,
    pub(super) recorded: Option<Recorded>,
    /// How long the session may take to end: its `_SessionEnd` round and [`SHUTDOWN_MARGIN`].
    pub(super) grace: Duration,
}

/// Where a session is recorded, for its side file.
pub(super) struct Recorded {
    pub(super) path: PathBuf,
    pub(super) cwd: PathBuf,
    /// Its first prompt has given the session its title.
    pub(super) titled: AtomicBool,
    /// This process's hold on the session, while it is open: no other process loads it.
    pub(super) _lock: Option<records::SessionLock>,
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
    pub(super) fn cancel(&self) {
        if let Some(flag) = lock(&self.current).as_ref() {
            flag.store(true, Ordering::Release);
        }
        self.cancel.cancel();
    }

    /// Ends the session: cancels its prompt, lets its actor close it, and drops it, which shuts
    /// its MCP servers down (each server's whole process group is killed). An actor that has
    /// not ended within its grace is aborted, which drops the session all the same.
    pub(super) async fn end(self) {
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

impl<F: SessionFactory> AgentState<F> {
    /// Takes a session slot if one is free; the state, for the task that opens the session.
    pub(super) fn reserved(self: &Arc<Self>) -> Option<Arc<Self>> {
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max_sessions).then_some(n + 1)
            })
            .ok()
            .map(|_| Arc::clone(self))
    }

    /// The refusal of a session over the limit.
    pub(super) fn limit_error(&self) -> agent_client_protocol::Error {
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
    pub(super) fn spawn_load<T>(
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

    pub(super) async fn new_session(
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
        let Created {
            session,
            record,
            failed,
        } = match self.factory.create(spec).await {
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
            let lock = records::lock(&path)
                .inspect_err(|e| tracing::warn!(path = %path.display(), error = %e, "cannot lock the new session's record"))
                .ok();
            Some((id, Recorded { path, cwd, titled: AtomicBool::new(false), _lock: lock }))
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
        self.install(session, id.clone(), cx.clone(), recorded, recorder);
        tracing::info!(session = %id, "session started");
        if let Err(e) = responder.respond(NewSessionResponse::new(id.clone())) {
            tracing::warn!(error = %e, "could not answer session/new");
        }
        // After the answer, so the client knows the session the update is about.
        self.tell_failed(&id, &cx, &failed);
    }

    /// `session/load` (with `history`: the conversation is sent back first) and
    /// `session/resume` (without): restores a recorded session and opens it.
    pub(super) async fn load_session(
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
        // Held until the session is installed, or the load fails.
        let _reserved = self.reserve_id(&id)?;
        let spec = session_spec(cwd, servers, self.permissions)
            .map_err(|m| error(code::INVALID_PARAMS, m))?;
        let load_error = |e: records::LoadError| {
            error(
                code::INVALID_PARAMS,
                format!("cannot load session {id}: {e}"),
            )
        };
        let path = records::find(dir, &id.0).map_err(load_error)?;
        // Held from before the record is read until the session closes: another process that
        // loads it meanwhile is refused, and never rewrites it under this one.
        let session_lock = records::lock(&path).map_err(load_error)?;
        // Reading, replaying and rewriting a record takes time in proportion to its size: off
        // the runtime's threads, so the other sessions go on meanwhile.
        let loaded = tokio::task::spawn_blocking({
            let (path, id) = (path.clone(), id.clone());
            move || {
                let restored = records::restore(&path).map_err(|e| {
                    error(
                        code::INVALID_PARAMS,
                        format!("cannot load session {id}: {e}"),
                    )
                })?;
                let conversation = history
                    .then(|| history_updates(restored.machine.history(), restored.records()));
                // Recorded on in its own file, so what happens now is there for the next load.
                let recording = restored.record_on(&path).map_err(|e| {
                    error(
                        code::INTERNAL_ERROR,
                        format!("cannot record session {id} on: {e}"),
                    )
                })?;
                Ok::<_, agent_client_protocol::Error>((restored, conversation, recording))
            }
        })
        .await
        .map_err(|e| {
            error(
                code::INTERNAL_ERROR,
                format!("loading session {id} failed: {e}"),
            )
        })?;
        let (restored, conversation, (recorder, observer, kept)) = loaded?;
        let interrupted = restored.interruption().map(|cut| {
            let kept = kept.as_deref().map_or(String::new(), |kept| {
                format!(
                    " The record as the crash left it is kept as {}.",
                    kept.display()
                )
            });
            tracing::warn!(session = %id, %cut, "a record cut by a crash was closed");
            format!("{cut}.{kept}")
        });
        let recorded = Recorded {
            path,
            cwd: spec.cwd.clone(),
            // The side file keeps the title the first prompt gave it.
            titled: AtomicBool::new(true),
            _lock: Some(session_lock),
        };
        let Created {
            mut session,
            failed,
            ..
        } = self
            .factory
            .restore(spec, restored.machine)
            .await
            .map_err(|e| {
                error(
                    code::INTERNAL_ERROR,
                    format!("could not start the session: {e}"),
                )
            })?;
        if let Some(updates) = conversation {
            let notifier = Notifier {
                id: id.clone(),
                cx: cx.clone(),
                outflow: Arc::clone(&self.outflow),
            };
            for update in updates {
                notifier.send(update);
            }
        }
        if let Some(cut) = interrupted {
            let notifier = Notifier {
                id: id.clone(),
                cx: cx.clone(),
                outflow: Arc::clone(&self.outflow),
            };
            notifier.send(self.warning("The session was restored after the agent stopped", &cut));
        }
        self.tell_failed(&id, &cx, &failed);
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

    /// Reserves `id` for a load, unless a session of that id is open or being opened.
    fn reserve_id(
        &self,
        id: &SessionId,
    ) -> Result<IdReserved<'_, F>, agent_client_protocol::Error> {
        let sessions = lock(&self.sessions);
        let mut loading = lock(&self.loading);
        if sessions.contains_key(id) || !loading.insert(id.clone()) {
            let message = format!("session {id} is already open on this connection");
            return Err(error(code::INVALID_REQUEST, message));
        }
        Ok(IdReserved {
            state: self,
            id: id.clone(),
        })
    }

    /// `session/list`: the recorded sessions, newest first.
    pub(super) fn list_sessions(
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
            .map(|r| {
                let info = SessionInfo::new(r.id, r.cwd).title(r.title);
                if r.open {
                    info.meta(
                        serde_json::json!({"hookloop/open": true})
                            .as_object()
                            .cloned(),
                    )
                } else {
                    info
                }
            })
            .collect())
    }

    /// Tells the client, once, which of the session's servers did not start and why.
    fn tell_failed(
        &self,
        id: &SessionId,
        cx: &ConnectionTo<Client>,
        failed: &[super::FailedServer],
    ) {
        if failed.is_empty() {
            return;
        }
        let names: Vec<&str> = failed.iter().map(|f| f.server.as_str()).collect();
        let why: Vec<String> = failed
            .iter()
            .map(|f| format!("{}: {}", f.server, f.why))
            .collect();
        let title = format!(
            "MCP server(s) did not start: {}; the session runs without them",
            names.join(", ")
        );
        let notifier = Notifier {
            id: id.clone(),
            cx: cx.clone(),
            outflow: Arc::clone(&self.outflow),
        };
        notifier.send(self.warning(&title, &why.join("\n")));
    }

    /// Something the person should know about their session, once: a `notice` (warning) for
    /// a client that takes notices, an `agent_thought_chunk` otherwise.
    pub(super) fn warning(
        &self,
        title: &str,
        detail: &str,
    ) -> agent_client_protocol::v1::schema::SessionUpdate {
        use agent_client_protocol::v1::schema::{Notice, NoticeSeverity, SessionUpdate};
        if self.notices.load(Ordering::Acquire) {
            SessionUpdate::Notice(
                Notice::new(NoticeSeverity::Warning, title).description(detail.to_owned()),
            )
        } else {
            super::translate::thought(&format!("{title}: {detail}"))
        }
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
        session.trace_mut().set_conversation_id(&*id.0);
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
        let (child_progress, child_pieces) = (notifier.clone(), notifier.clone());
        let events = Arc::clone(&translator);
        let (child_events, child_deltas) = (Arc::clone(&translator), Arc::clone(&translator));
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
            })
            .with_agents(move |_, agent, event| {
                let update = lock(&child_events).agent_event(agent, event);
                if let Some(update) = update {
                    child_progress.send(update);
                }
            })
            .with_agent_deltas(move |_, agent, delta| {
                let update = lock(&child_deltas).agent_delta(agent, delta);
                if let Some(update) = update {
                    child_pieces.send(update);
                }
            }),
        );
        let window = session.machine().policy().max_context_tokens;
        let grace = session
            .machine()
            .policy()
            .hook_timeout()
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

    pub(super) fn prompt(
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

    pub(super) fn cancel(&self, id: &SessionId) {
        match lock(&self.sessions).get(id) {
            Some(handle) => handle.cancel(),
            None => tracing::debug!(session = %id, "cancel for an unknown session"),
        }
    }

    /// `session/close`: the session leaves the map at once (later requests naming it are
    /// refused), and the answer comes once it has ended and its servers are shut down.
    pub(super) fn close(
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
    pub(super) async fn shut_down(&self) {
        // Nobody reads the frames any more that would make room for the sessions to go on.
        self.outflow.close();
        let handles: Vec<SessionHandle> = lock(&self.sessions).drain().map(|(_, h)| h).collect();
        futures_util::future::join_all(handles.into_iter().map(SessionHandle::end)).await;
    }
}

/// An id reserved for a load ([`AgentState::reserve_id`]); given back when dropped, by which
/// time the session is in the map or the load has failed.
struct IdReserved<'a, F> {
    state: &'a AgentState<F>,
    id: SessionId,
}

impl<F> Drop for IdReserved<'_, F> {
    fn drop(&mut self) {
        lock(&self.state.loading).remove(&self.id);
    }
}

/// What a `session/load` or `session/resume` asks to rebuild.
pub(super) struct Reload {
    pub(super) id: SessionId,
    pub(super) cwd: PathBuf,
    pub(super) servers: Vec<McpServer>,
    /// Send the conversation back to the client (`session/load`) or not (`session/resume`).
    pub(super) history: bool,
}
