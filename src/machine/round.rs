//! Bookkeeping of what the machine waits for: the outstanding calls of one reply, and the
//! answers of one hook round.

use super::MachineError;
use super::message::{CallId, ToolCall, ToolOutput};
use crate::hooks::{Hook, ServerName};

/// The outstanding calls of one model reply, in the order the model made them.
#[derive(Clone, Debug, Default)]
pub(crate) struct ToolBatch {
    pub(super) ids: Vec<CallId>,
    pub(super) results: Vec<Option<ToolOutput>>,
    /// The calls that run (not refused, not denied), for `_PostToolUse`.
    pub(super) ran: Vec<ToolCall>,
}

impl ToolBatch {
    /// Records one result; true when every call has one.
    pub(super) fn answer(
        &mut self,
        id: &CallId,
        output: &ToolOutput,
    ) -> Result<bool, MachineError> {
        let slot = self
            .ids
            .iter()
            .zip(&mut self.results)
            .find_map(|(known, slot)| (known == id && slot.is_none()).then_some(slot))
            .ok_or_else(|| MachineError::UnknownCall(id.clone()))?;
        *slot = Some(output.clone());
        Ok(self.results.iter().all(Option::is_some))
    }
}

/// One hook called on several servers, each once per subject (the calls a `_PreToolUse` round
/// gates, say; one subject for most hooks). Answers are kept by subject, then in server
/// configuration order.
#[derive(Clone, Debug)]
pub(crate) struct HookRound {
    pub(super) hook: Hook,
    pub(super) servers: Vec<ServerName>,
    /// `answers[subject * servers.len() + server]`.
    pub(super) answers: Vec<Answer>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Answer {
    Waiting,
    Quiet,
    Said(String),
}

impl HookRound {
    /// A round of `hook` on `servers`, each called once per subject (at least once).
    pub(super) fn new(hook: Hook, servers: Vec<ServerName>, subjects: usize) -> Self {
        let answers = (0..servers.len() * subjects.max(1))
            .map(|_| Answer::Waiting)
            .collect();
        Self {
            hook,
            servers,
            answers,
        }
    }

    /// The slot of one call still waiting for its answer, if it is one.
    pub(super) fn waiting_slot(
        &mut self,
        server: &ServerName,
        subject: usize,
    ) -> Option<&mut Answer> {
        let index = self.servers.iter().position(|s| s == server)?;
        let slot = self.answers.get_mut(subject * self.servers.len() + index)?;
        (*slot == Answer::Waiting).then_some(slot)
    }

    pub(super) fn is_complete(&self) -> bool {
        !self.answers.contains(&Answer::Waiting)
    }

    /// The non-empty answers: `(subject, server, text)`, by subject, then in server order.
    pub(super) fn said(self) -> impl Iterator<Item = (usize, ServerName, String)> {
        let per_subject = self.servers.len().max(1);
        let servers = self.servers;
        self.answers
            .into_iter()
            .enumerate()
            .filter_map(move |(i, answer)| match answer {
                // `answers` holds `servers.len()` slots per subject, so the index is in range.
                Answer::Said(text) => {
                    Some((i / per_subject, servers[i % per_subject].clone(), text))
                }
                Answer::Waiting | Answer::Quiet => None,
            })
    }
}
