//! The pairing rule of a conversation: every tool result answers exactly one earlier call, and
//! every call is answered before the next turn. Requests must keep it (providers refuse a
//! history that breaks it), and the explorer's fingerprint relies on it to tell segments apart.

use std::collections::HashSet;

use super::message::{CallId, Message};

/// Checks the pairing invariant on one request's messages: every tool result answers a call
/// made earlier in the same request, exactly once, and every call is answered.
pub fn check_pairing(messages: &[Message]) -> Result<(), String> {
    let mut open: Vec<&CallId> = Vec::new();
    let mut answered: HashSet<&CallId> = HashSet::new();
    let mut made: HashSet<&CallId> = HashSet::new();
    for (i, message) in messages.iter().enumerate() {
        match message {
            Message::Assistant { tool_calls, .. } => {
                if let Some(id) = open.first() {
                    return Err(format!("message {i}: call {id} was never answered"));
                }
                for call in tool_calls {
                    if !made.insert(&call.id) {
                        return Err(format!("message {i}: call id {} used twice", call.id));
                    }
                    open.push(&call.id);
                }
            }
            Message::ToolResult { call_id, .. } => {
                if answered.contains(call_id) {
                    return Err(format!("message {i}: call {call_id} answered twice"));
                }
                let Some(pos) = open.iter().position(|id| *id == call_id) else {
                    return Err(format!(
                        "message {i}: result for {call_id}, which no earlier call made"
                    ));
                };
                open.remove(pos);
                answered.insert(call_id);
            }
            Message::User { .. } => {
                if let Some(id) = open.first() {
                    return Err(format!("message {i}: call {id} was never answered"));
                }
            }
        }
    }
    match open.first() {
        Some(id) => Err(format!("call {id} was never answered")),
        None => Ok(()),
    }
}
