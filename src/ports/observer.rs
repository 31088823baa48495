//! The observer seam: [`Observer`] sees everything that crosses the machine's boundary, for
//! progress lines, transcripts and traces.

use std::time::Duration;

use crate::machine::{AgentId, CallId, Effect, Input};
use crate::ports::Delta;

/// Sees everything that crosses the machine's boundary, in order, with the time since the
/// session started. Front ends draw their progress from it; a transcript recorder writes it down.
pub trait Observer: Send {
    /// An order the machine emitted, before the driver performs it.
    fn on_effect(&mut self, at: Duration, effect: &Effect) {
        let _ = (at, effect);
    }

    /// A fact the driver fed to the machine.
    fn on_fact(&mut self, at: Duration, fact: &Input) {
        let _ = (at, fact);
    }

    /// A call of the last [`Effect::CallTools`] begins to run. A reply's calls run a few at a
    /// time ([`Session::tool_concurrency`](crate::Session::tool_concurrency)), so a call may
    /// wait after the order for a free slot; a call the prompt's end finds still waiting never
    /// starts. Progress only: the machine never sees it.
    fn on_call_started(&mut self, at: Duration, id: &CallId) {
        let _ = (at, id);
    }

    /// A supervision fact or order of the tool host (a server exited, was restarted or
    /// retired), as the driver learned of it.
    fn on_supervision(&mut self, at: Duration, event: &crate::supervisor::Event) {
        let _ = (at, event);
    }

    /// A piece of the model's reply as it streams in, before the reply is a fact. Progress
    /// only: the machine never sees it, and the whole reply follows as
    /// [`Input::LlmReplied`] (a reply that fails midway follows as `LlmFailed`).
    fn on_delta(&mut self, at: Duration, delta: &Delta) {
        let _ = (at, delta);
    }

    /// An order of the subagent `agent` (the id of the `agent` call that started it), before
    /// the driver performs it. A subagent's orders and facts come only through these methods,
    /// never through [`on_effect`](Self::on_effect) and [`on_fact`](Self::on_fact).
    fn on_agent_effect(&mut self, at: Duration, agent: &AgentId, effect: &Effect) {
        let _ = (at, agent, effect);
    }

    /// A fact the driver fed to the subagent `agent`: its first is its catalog, its second its
    /// task as [`Input::Prompted`].
    fn on_agent_fact(&mut self, at: Duration, agent: &AgentId, fact: &Input) {
        let _ = (at, agent, fact);
    }

    /// A piece of a subagent's reply as it streams in. Progress only.
    fn on_agent_delta(&mut self, at: Duration, agent: &AgentId, delta: &Delta) {
        let _ = (at, agent, delta);
    }

    /// A call of a subagent's last [`Effect::CallTools`] begins to run. Progress only.
    fn on_agent_call_started(&mut self, at: Duration, agent: &AgentId, id: &CallId) {
        let _ = (at, agent, id);
    }
}
