//! Who an agent is: its id and its parent's, as hooks, effects and transcripts name it. Apart
//! from the subagents' rules (`agents.rs`) so that what names an agent depends on nothing else
//! of the machine.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An agent's id, unique within its session and stable across a replay: a top-level agent's
/// children are `agent-1`, `agent-2`, …; a child's children `agent-1.1`, …. It is also the id
/// of the `agent` call that started it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct AgentId(pub String);

impl fmt::Display for AgentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A subagent as its hooks see it (`_meta["hookloop/agent"]`): its id and its parent's, none
/// when the parent is the session's top-level agent.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRef {
    /// The subagent's id, stable within the session.
    pub id: AgentId,
    /// The id of the subagent that started it; none for a child of the top-level agent.
    pub parent: Option<AgentId>,
}
