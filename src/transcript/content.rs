//! `--redact-content`: transcripts that show a session's course without its words.
//!
//! Prompts, replies, tool arguments and output, and hook answers are recorded verbatim by
//! default. A header with `content_redacted` makes the recorder replace each non-blank text with
//! its length (`[42 bytes]`), and each string inside tool arguments likewise, so a record can be
//! shared: tools, hooks, objections, compactions, stop reasons and timings stay, the words go.
//! Blank text is kept as it is: it carries no content, and whether a hook answered blank decides
//! whether it objected. Such a record no longer pins what the model was sent, so it is refused
//! by replay.

use serde_json::Value;

use crate::machine::{Content, Effect, HookReply, Input, LlmReply, Notice, ToolCall, ToolOutput};

/// The fact with its content replaced by lengths.
pub(crate) fn redact_input(fact: &Input) -> Input {
    match fact {
        Input::Prompted { text } => Input::Prompted { text: length(text) },
        Input::LlmReplied { reply } => Input::LlmReplied {
            reply: LlmReply {
                text: length(&reply.text),
                tool_calls: calls(&reply.tool_calls),
                ..reply.clone()
            },
        },
        Input::ToolFinished { id, output } => Input::ToolFinished {
            id: id.clone(),
            output: tool_output(output),
        },
        Input::HookAnswered {
            server,
            hook,
            reply,
            subject,
        } => Input::HookAnswered {
            server: server.clone(),
            hook: *hook,
            subject: *subject,
            reply: match reply {
                HookReply::Text { text } => HookReply::Text { text: length(text) },
                HookReply::ErrorResult { text } => HookReply::ErrorResult { text: length(text) },
                HookReply::Failed { .. } | HookReply::TimedOut | HookReply::Skipped { .. } => {
                    reply.clone()
                }
            },
        },
        // Catalogs, errors and signals are the session's course, not its words.
        Input::CatalogChanged { .. }
        | Input::LlmFailed { .. }
        | Input::PermissionDecided { .. }
        | Input::PermissionSettingChanged { .. }
        | Input::Cancelled
        | Input::PromptInterrupted
        | Input::Closed => fact.clone(),
    }
}

/// The order with its content replaced by lengths.
pub(crate) fn redact_effect(effect: &Effect) -> Effect {
    match effect {
        Effect::CallTools { calls: list } => Effect::CallTools { calls: calls(list) },
        Effect::AskPermission { call } => Effect::AskPermission {
            call: ToolCall {
                arguments: json_strings(&call.arguments),
                ..call.clone()
            },
        },
        Effect::Notify { notice } => Effect::Notify {
            notice: match notice {
                Notice::Objection {
                    server,
                    text,
                    budget_left,
                } => Notice::Objection {
                    server: server.clone(),
                    text: length(text),
                    budget_left: *budget_left,
                },
                Notice::PostCompactInjected { server, text } => Notice::PostCompactInjected {
                    server: server.clone(),
                    text: length(text),
                },
                Notice::HookInjected { hook, server, text } => Notice::HookInjected {
                    hook: *hook,
                    server: server.clone(),
                    text: length(text),
                },
                Notice::ToolDenied { server, tool, text } => Notice::ToolDenied {
                    server: server.clone(),
                    tool: tool.clone(),
                    text: length(text),
                },
                Notice::StopSkipped { .. }
                | Notice::HookSkipped { .. }
                | Notice::Compacted { .. }
                | Notice::HookFailedOpen { .. }
                | Notice::PermissionRejected { .. }
                | Notice::UnknownToolRefused { .. } => notice.clone(),
            },
        },
        // A hook's subjects carry the prompt, a call's arguments or its output.
        Effect::CallHooks {
            hook,
            servers,
            timeout,
            context,
            subjects,
        } => Effect::CallHooks {
            hook: *hook,
            servers: servers.clone(),
            timeout: *timeout,
            context: context.clone(),
            subjects: subjects.iter().map(json_strings).collect(),
        },
        Effect::CallLlm { .. } | Effect::KillServer { .. } | Effect::Finish { .. } => {
            effect.clone()
        }
    }
}

/// The effect as a transcript writes it: a hook's subjects with their object keys sorted, as
/// the format has them, whether or not a dependency turned on serde_json's `preserve_order`
/// (the machine builds subjects with `json!`, whose key order then follows the source). `None`
/// when the effect is written as it is.
pub(crate) fn canonical_effect(effect: &Effect) -> Option<Effect> {
    let Effect::CallHooks {
        hook,
        servers,
        timeout,
        context,
        subjects,
    } = effect
    else {
        return None;
    };
    Some(Effect::CallHooks {
        hook: *hook,
        servers: servers.clone(),
        timeout: *timeout,
        context: context.clone(),
        subjects: subjects.iter().map(sorted_keys).collect(),
    })
}

/// The value with every object's keys in sorted order.
fn sorted_keys(value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(sorted_keys).collect()),
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(key, item)| (key.clone(), sorted_keys(item)))
                    .collect(),
            )
        }
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::String(_) => value.clone(),
    }
}

/// `[N bytes]` for non-blank text.
fn length(text: &str) -> String {
    if text.trim().is_empty() {
        text.to_owned()
    } else {
        format!("[{} bytes]", text.len())
    }
}

fn calls(calls: &[ToolCall]) -> Vec<ToolCall> {
    calls
        .iter()
        .map(|call| ToolCall {
            arguments: json_strings(&call.arguments),
            ..call.clone()
        })
        .collect()
}

/// The value with every string (keys aside) replaced by its length.
fn json_strings(value: &Value) -> Value {
    match value {
        Value::String(text) => Value::String(length(text)),
        Value::Array(items) => Value::Array(items.iter().map(json_strings).collect()),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, item)| (key.clone(), json_strings(item)))
                .collect(),
        ),
        Value::Null | Value::Bool(_) | Value::Number(_) => value.clone(),
    }
}

fn tool_output(output: &ToolOutput) -> ToolOutput {
    let content = output
        .content
        .iter()
        .map(|block| match block {
            Content::Text { text } => Content::Text { text: length(text) },
            Content::Image { mime_type, data } => Content::Image {
                mime_type: mime_type.clone(),
                data: length(data),
            },
            Content::Resource {
                uri,
                mime_type,
                text,
                blob,
            } => Content::Resource {
                uri: uri.clone(),
                mime_type: mime_type.clone(),
                text: text.as_deref().map(length),
                blob: blob.as_deref().map(length),
            },
        })
        .collect();
    ToolOutput {
        content,
        is_error: output.is_error,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{Hook, ServerName};

    #[test]
    fn text_becomes_its_length_and_blank_text_stays() {
        assert_eq!(
            redact_input(&Input::Prompted {
                text: "my secret plan".into()
            }),
            Input::Prompted {
                text: "[14 bytes]".into()
            }
        );
        let blank = Input::HookAnswered {
            server: ServerName::new("todo").unwrap(),
            hook: Hook::Stop,
            reply: HookReply::Text { text: "  ".into() },
            subject: None,
        };
        assert_eq!(redact_input(&blank), blank);
    }

    #[test]
    fn tool_arguments_keep_their_shape_and_lose_their_strings() {
        let effect = Effect::CallTools {
            calls: vec![ToolCall {
                id: "c1".into(),
                name: "fs__write".into(),
                arguments: json!({"path": "/home/me/notes", "lines": [1, "two"], "append": true}),
            }],
        };
        let Effect::CallTools { calls } = redact_effect(&effect) else {
            unreachable!()
        };
        assert_eq!(calls[0].name, "fs__write");
        assert_eq!(
            calls[0].arguments,
            json!({"path": "[14 bytes]", "lines": [1, "[3 bytes]"], "append": true})
        );
    }
}
