//! One session's actor: it owns the [`Session`], runs its prompts one at a time, and tells the
//! client what happens (usage, a transcript that could not be written whole).

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use agent_client_protocol::Client;
use agent_client_protocol::v1::schema::{
    PromptResponse, SessionId, SessionNotification, SessionUpdate, StopReason, ToolKind,
    UsageUpdate,
};
use agent_client_protocol::v1::{ConnectionTo, Responder};
use tokio::sync::mpsc;

use super::lines::Outflow;
use super::translate::{thought, tool_kind};
use super::{code, error};
use crate::driver::{CancelHandle, PromptStop, Session, SessionError};
use crate::machine::{Effect, Input, Purpose};
use crate::ports::{LlmClient, Observer, ToolHost};
use crate::text::lock;
use crate::transcript::Recorder;

/// One accepted `session/prompt`, on its way to the session's actor.
pub(super) struct PromptJob {
    pub(super) text: String,
    pub(super) responder: Responder<PromptResponse>,
    /// Set by `session/cancel` for this prompt, whenever it lands.
    pub(super) cancelled: Arc<AtomicBool>,
}

/// Owns one session and runs its prompts, one at a time.
pub(super) async fn run_session<L: LlmClient, H: ToolHost>(
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
pub(super) struct RecordWatcher {
    pub(super) recorder: Recorder,
    pub(super) notifier: Notifier,
    /// The client was told; a transcript that lost records stays incomplete, so once is enough.
    pub(super) reported: bool,
}

impl RecordWatcher {
    pub(super) async fn check(&mut self) {
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
pub(super) struct KindWatcher {
    pub(super) kinds: Arc<Mutex<HashMap<String, ToolKind>>>,
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

/// Sends one session's updates to the client, counting each in the [`Outflow`].
#[derive(Clone)]
pub(super) struct Notifier {
    pub(super) id: SessionId,
    pub(super) cx: ConnectionTo<Client>,
    pub(super) outflow: Arc<Outflow>,
}

impl Notifier {
    pub(super) fn send(&self, update: SessionUpdate) {
        // A failed send means the connection is gone; the prompt is being cancelled.
        let _ = self
            .outflow
            .send_update(&self.cx, SessionNotification::new(self.id.clone(), update));
    }
}

/// Reports, after each model reply of a turn, how much of the context window the session
/// uses (`usage_update`): the reply's input and output tokens, as the provider counted them.
/// A compaction summary's reply is not reported (its input is the context being dropped),
/// nor a reply without a usable count.
pub(super) struct UsageReporter {
    pub(super) window: u64,
    pub(super) purpose: Purpose,
    pub(super) notifier: Notifier,
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

/// How ACP names the way a prompt ended.
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
