//! Subagents: the built-in `agent` tool, the child machine a call of it starts, and the result a
//! child's end gives that call.
//!
//! A child is a machine of its own, driven beside its parent: it starts from a fresh history
//! (the system prompt and its task), sees the same servers and hooks, and has its own round cap
//! (the policy's `max_rounds`, counted for it alone) and its own objection budget. What differs
//! from a top-level agent is which hooks it is asked: `_SubagentStart` where a session asks
//! `_SessionStart` (and no `_UserPromptSubmit`), `_SubagentStop` where a session asks `_Stop`,
//! and never `_SessionEnd`; every hook call carries the agent in its context. The parent sees
//! the child's end only as the `agent` call's result, one [`Input::ToolFinished`], built by
//! [`Machine::agent_result`].
//!
//! **Permission inheritance.** A child starts with the "always" decisions (allow or reject) its
//! parent holds when the `agent` call runs, and is never asked about their tools; the decisions
//! the child makes stay in it and its own children, and never flow back: the parent, and every
//! later child it starts from decisions of its own, asks again about a tool only a child
//! decided. `testing::explore::INHERITANCE` checks it on a parent and its child explored
//! together (`testing::families::Family::parent_and_child`).
//!
//! [`Input::ToolFinished`]: super::Input::ToolFinished

use std::sync::Arc;

use serde_json::{Value, json};

use super::catalog::Tools;
use super::identity::{AgentId, AgentRef};
use super::planted::{self, Bug};
use super::{Catalog, Core, FinishReason, Machine, ToolCall, ToolOutput, ToolSpec};
use crate::hooks::Hook;

/// The name of the built-in tool that runs a subagent. No MCP tool can take it: theirs are all
/// `<server>__<tool>`.
pub const AGENT_TOOL: &str = "agent";

/// What a machine knows of itself when it is a subagent.
#[derive(Clone, Debug)]
pub(crate) struct Child {
    pub(super) me: AgentRef,
    /// 1 for a child of the top-level agent.
    pub(super) depth: u32,
    pub(super) description: String,
    pub(super) prompt: String,
    /// The text of the child's last reply: its answer, once it ends its turn.
    pub(super) last_text: String,
    /// The result its call gets, once the child finished.
    pub(super) result: Option<ToolOutput>,
}

/// An `agent` call's task, from its arguments.
struct Task {
    description: String,
    prompt: String,
}

impl Task {
    /// The task of well-formed arguments, or the error text the call is answered with.
    fn parse(arguments: &Value) -> Result<Self, String> {
        let field = |name: &str| match arguments.get(name) {
            Some(Value::String(text)) => Ok(text.clone()),
            Some(_) => Err(format!(
                "invalid arguments for {AGENT_TOOL}: {name} must be a string"
            )),
            None => Err(format!(
                "invalid arguments for {AGENT_TOOL}: {name} is missing"
            )),
        };
        let description = field("description")?;
        let prompt = field("prompt")?;
        if prompt.trim().is_empty() {
            return Err(format!(
                "invalid arguments for {AGENT_TOOL}: prompt is empty; give the task in full"
            ));
        }
        Ok(Self {
            description,
            prompt,
        })
    }
}

/// The text of the error result an `agent` call past the per-reply limit gets.
pub(crate) fn agent_limit_text(limit: u32) -> String {
    format!("not run: at most {limit} {AGENT_TOOL} calls of one reply run; call it again later")
}

/// The text of the error result an `agent` call gets once the session's total has run.
pub(crate) fn agent_total_text(limit: u32) -> String {
    format!(
        "not run: this session has started its {limit} subagents, the most it may; do the rest \
without {AGENT_TOOL}"
    )
}

impl Machine {
    /// The subagent a call of the `agent` tool starts, when `call` is one this machine offered
    /// and let run: an idle machine with the same policy, system prompt and standing permission
    /// decisions, and a fresh history. The driver feeds it the catalog, then its
    /// [`task`](Self::agent_task) as the prompt. `None` for any other call.
    pub fn spawn_child(&self, call: &ToolCall) -> Option<Machine> {
        let core = self.sm.inner();
        if call.name != AGENT_TOOL || !core.offers_agent() {
            return None;
        }
        let task = Task::parse(&call.arguments).ok()?;
        let mut child = Core::new(core.policy.clone(), core.system_prompt.clone());
        // Permission inheritance: the parent's "always" decisions flow to the child; none of
        // the child's flows back (the parent sees the child only as the call's result).
        if !planted::on(Bug::StandingNotInherited) {
            child.standing = core.standing.clone();
        }
        if planted::on(Bug::ObjectionsInherited) {
            child.counters.objections = core.counters.objections;
        }
        child.child = Some(Box::new(Child {
            me: AgentRef {
                id: AgentId(call.id.0.clone()),
                parent: core.child.as_ref().map(|c| c.me.id.clone()),
            },
            depth: core.depth() + 1,
            description: task.description,
            prompt: task.prompt,
            last_text: String::new(),
            result: None,
        }));
        Some(Machine::from_core(child))
    }

    /// Who this machine is when it is a subagent; `None` for a top-level agent.
    pub fn agent(&self) -> Option<&AgentRef> {
        self.sm.inner().child.as_ref().map(|child| &child.me)
    }

    /// A subagent's task: the prompt the driver starts it with.
    pub fn agent_task(&self) -> Option<&str> {
        self.sm.inner().child.as_ref().map(|c| c.prompt.as_str())
    }

    /// The result a subagent's call gets, once its prompt finished: its final text when it
    /// ended its turn, otherwise an error result that says why it ended (failed, cancelled,
    /// out of rounds, cut short). `None` before it finished, and for a top-level agent.
    pub fn agent_result(&self) -> Option<&ToolOutput> {
        self.sm.inner().child.as_ref()?.result.as_ref()
    }
}

impl Core {
    /// The catalog as this agent uses it: the servers' tools, and `agent` when it may start
    /// subagents.
    pub(super) fn tools_of(&self, catalog: &Catalog) -> Arc<Tools> {
        let agent = self.offers_agent().then(agent_spec);
        let mut tools = Tools::new(catalog, &self.policy.hook_servers, agent);
        if planted::on(Bug::DestructiveHintsKept) && !self.tools.destructive.is_empty() {
            tools.destructive.clone_from(&self.tools.destructive);
        }
        if planted::on(Bug::WithdrawnToolOffered) {
            tools = tools.keeping(&self.tools);
        }
        Arc::new(tools)
    }

    /// Whether the model is offered `agent`: subagents are on and this agent is above the
    /// depth limit.
    pub(super) fn offers_agent(&self) -> bool {
        self.policy.offers_agent_at(self.depth())
    }

    /// 0 for the top-level agent.
    pub(super) fn depth(&self) -> u32 {
        self.child.as_ref().map_or(0, |child| child.depth)
    }

    /// The hook asked at a genuine end of turn: `_Stop`, or `_SubagentStop` in a subagent.
    pub(super) fn stop_hook(&self) -> Hook {
        match self.child {
            Some(_) => Hook::SubagentStop,
            None => Hook::Stop,
        }
    }

    /// The subjects of a stop round: none for `_Stop`, the agent and its answer for
    /// `_SubagentStop`; with the policy's hook details, the turn's last text
    /// (`_Stop`) and whether an objection came earlier in the prompt (both).
    pub(super) fn stop_subjects(&self) -> Vec<Value> {
        let details = self.policy.hook_details;
        let mut subject = match &self.child {
            Some(child) => json!({"agent": child.me.id, "result": child.last_text}),
            None if details => json!({"lastMessage": crate::text::cut(
                &self.turn.last_text,
                crate::hooks::MAX_HOOK_TEXT_BYTES,
                crate::text::Cut::Middle,
            )}),
            None => return Vec::new(),
        };
        if details {
            subject["afterObjection"] = Value::Bool(self.turn.objected);
        }
        vec![subject]
    }

    /// The hook a prompt's start asks first, with its subjects: `_SessionStart` once per
    /// session, or a subagent's `_SubagentStart`.
    pub(super) fn start_hook(&self) -> (Hook, Vec<Value>) {
        match &self.child {
            Some(child) => (
                Hook::SubagentStart,
                vec![json!({
                    "agent": child.me.id,
                    "description": child.description,
                    "prompt": child.prompt,
                })],
            ),
            None => (Hook::SessionStart, Vec::new()),
        }
    }

    /// Keeps the text of each reply, a subagent's answer when it is the last.
    pub(super) fn note_reply_text(&mut self, text: &str) {
        let last = match &mut self.child {
            Some(child) => &mut child.last_text,
            // Only `_Stop`'s details read it; without them nothing is kept.
            None if self.policy.hook_details => &mut self.turn.last_text,
            None => return,
        };
        last.clear();
        last.push_str(text);
    }

    /// At a subagent's finish, the result its call gets.
    pub(super) fn settle_agent(&mut self, reason: &FinishReason) {
        let max_rounds = self.policy.max_rounds;
        if let Some(child) = &mut self.child {
            child.result = Some(result_of(reason, &child.last_text, max_rounds));
        }
    }

    /// Whether one more `agent` call runs after `earlier` of its reply; one that does counts
    /// toward the session's total.
    pub(super) fn agent_call_allowed(&mut self, earlier: u32) -> Result<(), String> {
        match self.policy.subagents {
            Some(settings) if self.agents_run >= settings.max_total => {
                Err(agent_total_text(settings.max_total))
            }
            Some(settings) if earlier < settings.concurrency => {
                self.agents_run += 1;
                Ok(())
            }
            Some(settings) => Err(agent_limit_text(settings.concurrency)),
            None => Err(super::unknown_tool_text(AGENT_TOOL)),
        }
    }

    /// An id for an `agent` call, fresh in this history: the id of the child it starts.
    pub(super) fn fresh_agent_id(&mut self) -> super::CallId {
        loop {
            self.agents_started += 1;
            let n = self.agents_started;
            let id = match &self.child {
                Some(child) => format!("{}.{n}", child.me.id),
                None => format!("agent-{n}"),
            };
            let id = super::CallId(id);
            if !self.history.has_call_id(&id) {
                return id;
            }
        }
    }
}

/// Whether the arguments of an `agent` call are a task it can run; the error text if not.
pub(super) fn check_task(arguments: &Value) -> Result<(), String> {
    Task::parse(arguments).map(drop)
}

/// The tool the model calls to start a subagent.
fn agent_spec() -> ToolSpec {
    ToolSpec {
        name: AGENT_TOOL.to_owned(),
        description: "Run a subagent on a self-contained task and get its final answer. The \
subagent starts from a fresh conversation with the same tools: put everything it needs in \
`prompt`. Several calls in one reply run at the same time."
            .to_owned(),
        input_schema: json!({
            "type": "object",
            "properties": {
                "description": {
                    "type": "string",
                    "description": "A few words naming the task, for the user."
                },
                "prompt": {
                    "type": "string",
                    "description": "The whole task, as the subagent's first message."
                }
            },
            "required": ["description", "prompt"]
        }),
    }
}

/// The result a subagent's call gets when its prompt ended for `reason`.
fn result_of(reason: &FinishReason, text: &str, max_rounds: u32) -> ToolOutput {
    let with_text = |head: String| {
        if text.trim().is_empty() {
            head
        } else {
            format!("{head}; its last text:\n{text}")
        }
    };
    match reason {
        FinishReason::EndTurn => ToolOutput::text(text),
        FinishReason::Cancelled => ToolOutput::error("the subagent was cancelled"),
        FinishReason::Interrupted => {
            ToolOutput::error("the subagent was interrupted: the agent stopped while it ran")
        }
        FinishReason::Failed { error } => {
            ToolOutput::error(format!("the subagent failed: {error}"))
        }
        FinishReason::MaxTurnRequests => ToolOutput::error(with_text(format!(
            "the subagent ran out of rounds ({max_rounds} model requests) before it finished"
        ))),
        FinishReason::MaxTokens => ToolOutput::error(with_text(
            "the subagent's reply was cut at the output limit".to_owned(),
        )),
        FinishReason::Refusal => ToolOutput::error(with_text("the subagent refused".to_owned())),
        FinishReason::OtherStop { stop_reason } => ToolOutput::error(with_text(format!(
            "the subagent stopped for a reason hookloop does not know ({stop_reason})"
        ))),
    }
}

#[cfg(test)]
mod tests;
