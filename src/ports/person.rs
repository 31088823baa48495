//! The person at the keyboard, as the engine reaches them through a front end: questions a server
//! puts to them (MCP elicitation, [`Person`]) and the permission a destructive tool call waits
//! for ([`PermissionAsker`]). A front end implements both, so the host and the driver stay free of
//! terminals and of the Agent Client Protocol.
//!
//! Elicitation is never answered by the model, and never for a hook: a hook call that asks is
//! declined by the host before a [`Person`] hears of it (hooks are advisory and must not wait
//! on a person).

use std::future::Future;
use std::pin::Pin;

use serde_json::{Map, Value};

use crate::hooks::ServerName;
use crate::machine::{AgentId, PermissionDecision, ToolCall};

/// One question a server asks the person.
#[derive(Clone, Debug, PartialEq)]
#[non_exhaustive]
pub struct Elicitation {
    /// The server that asks.
    pub server: ServerName,
    /// What the server says it needs, in its words.
    pub message: String,
    /// How the person answers.
    pub mode: ElicitationMode,
}

/// How a question is answered.
#[derive(Clone, Debug, PartialEq)]
pub enum ElicitationMode {
    /// Fill in a form: `schema` is the requested JSON schema, an object of primitive
    /// properties (string, number, integer, boolean, enums), as the server sent it.
    Form {
        /// The JSON Schema of the answer.
        schema: Map<String, Value>,
    },
    /// Visit `url` out of band (a sign-in page, a payment); nothing comes back but the action.
    /// `id` is the server's elicitation id, empty on protocol versions that dropped it. The
    /// MCP host asks only with an `https:` URL or an `http:` one to this machine, as it parsed
    /// it: a question naming any other (`file:`, `javascript:`, a scheme that launches a
    /// program) is declined before a [`Person`] hears of it.
    Url {
        /// The URL to open.
        url: String,
        /// The elicitation's id.
        id: String,
    },
}

/// What the person did with a question.
#[derive(Clone, Debug, PartialEq)]
pub enum ElicitAnswer {
    /// Answered: the form's content (empty for URL mode).
    Accept(Map<String, Value>),
    /// Said no; the server goes on without it.
    Decline,
    /// Dismissed the question without choosing.
    Cancel,
}

/// A boxed answer future: [`Person`] is used as a trait object.
pub type Answer<'a> = Pin<Box<dyn Future<Output = ElicitAnswer> + Send + 'a>>;

/// The person at the keyboard, as a front end reaches them.
pub trait Person: Send + Sync {
    /// Asks `question`. The future may be dropped (the call was cancelled or timed out).
    fn elicit(&self, question: Elicitation) -> Answer<'_>;
}

/// Asks the user whether a call of a tool its server marks destructive may run: how a front end
/// performs [`Effect::AskPermission`](crate::machine::Effect::AskPermission). The machine asks
/// only when its policy says the front end can
/// ([`ConfigBuilder::ask_permission`](crate::ConfigBuilder::ask_permission)), keeps the "always"
/// decisions and answers rejected calls; an asker only relays the question.
///
/// A session holds its asker as a trait object (a front end sets it after the session is
/// built), hence the boxed future.
pub trait PermissionAsker: Send + Sync {
    /// The user's decision on `call`. A user who gives none (the question was dismissed, or
    /// could not be put) is best answered [`PermissionDecision::RejectOnce`]. A cancel of the
    /// prompt drops the future.
    fn decide<'a>(
        &'a self,
        call: &'a ToolCall,
    ) -> Pin<Box<dyn Future<Output = PermissionDecision> + Send + 'a>>;

    /// The user's decision on `call`, made by the subagent `agent`: call ids are the model's,
    /// unique within one agent's history only, so an asker that names calls to the user tells
    /// a child's apart here. By default, the same question as [`decide`](Self::decide).
    fn decide_in<'a>(
        &'a self,
        agent: &'a AgentId,
        call: &'a ToolCall,
    ) -> Pin<Box<dyn Future<Output = PermissionDecision> + Send + 'a>> {
        let _ = agent;
        self.decide(call)
    }
}
