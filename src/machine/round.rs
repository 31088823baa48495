//! Bookkeeping of what the machine waits for: the outstanding calls of one reply, and the
//! answers of one hook round.

use super::MachineError;
use super::message::{CallId, ToolOutput};
use crate::hooks::{Hook, ServerName};

/// The outstanding calls of one model reply, in the order the model made them.
#[derive(Debug, Default)]
pub(crate) struct ToolBatch {
    pub(super) ids: Vec<CallId>,
    pub(super) results: Vec<Option<ToolOutput>>,
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

/// One hook called on several servers; answers kept in server configuration order.
#[derive(Debug)]
pub(crate) struct HookRound {
    pub(super) hook: Hook,
    pub(super) servers: Vec<ServerName>,
    pub(super) answers: Vec<Answer>,
}

#[derive(Debug, PartialEq, Eq)]
pub(super) enum Answer {
    Waiting,
    Quiet,
    Said(String),
}

impl HookRound {
    pub(super) fn new(hook: Hook, servers: Vec<ServerName>) -> Self {
        let answers = servers.iter().map(|_| Answer::Waiting).collect();
        Self {
            hook,
            servers,
            answers,
        }
    }

    pub(super) fn is_complete(&self) -> bool {
        !self.answers.contains(&Answer::Waiting)
    }

    pub(super) fn said(self) -> impl Iterator<Item = (ServerName, String)> {
        self.servers
            .into_iter()
            .zip(self.answers)
            .filter_map(|(server, answer)| match answer {
                Answer::Said(text) => Some((server, text)),
                Answer::Waiting | Answer::Quiet => None,
            })
    }
}
