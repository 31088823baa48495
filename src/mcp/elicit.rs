//! Questions a server puts to the person at the keyboard (MCP elicitation), and the seam they
//! go through: a front end hands the host a [`Person`], so the host stays free of terminals and
//! of the Agent Client Protocol.
//!
//! Elicitation is never answered by the model, and never for a hook: a hook call that asks is
//! declined by the host before a [`Person`] hears of it (hooks are advisory and must not wait
//! on a person).

use std::future::Future;
use std::pin::Pin;

use serde_json::{Map, Value};

use crate::hooks::ServerName;

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
    /// `id` is the server's elicitation id, empty on protocol versions that dropped it.
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

/// Nobody to ask: every question is declined. What a host starts with.
#[derive(Clone, Copy, Debug, Default)]
pub struct Nobody;

impl Person for Nobody {
    fn elicit(&self, question: Elicitation) -> Answer<'_> {
        tracing::info!(server = %question.server, "no one to ask; elicitation declined");
        Box::pin(std::future::ready(ElicitAnswer::Decline))
    }
}

/// The form a schema fills in by itself: each property's `default`, where it has one.
pub fn schema_defaults(schema: &Map<String, Value>) -> Map<String, Value> {
    let Some(Value::Object(properties)) = schema.get("properties") else {
        return Map::new();
    };
    properties
        .iter()
        .filter_map(|(name, property)| Some((name.clone(), property.get("default")?.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn schema_defaults_takes_each_default_and_skips_properties_without_one() {
        let schema = json!({
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "Ada"},
                "age": {"type": "integer"},
                "ok": {"type": "boolean", "default": true}
            }
        });
        let Value::Object(schema) = schema else {
            unreachable!()
        };
        assert_eq!(
            Value::Object(schema_defaults(&schema)),
            json!({"name": "Ada", "ok": true})
        );
    }
}
