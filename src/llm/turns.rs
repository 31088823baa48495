//! The conversation as both dialects need it before rendering: turns that alternate between the
//! user and the assistant, start with the user, and, when the request offers no tools, hold no
//! tool blocks at all.
//!
//! Why each rule exists:
//! - Anthropic rejects a first message that is not the user's, and several local servers'
//!   chat templates reject roles that do not alternate. A summary request, or a history
//!   compacted by dropping old turns, may begin with an assistant message.
//! - Hook output reaches the model as a tool result, with the lower trust that carries, so tool
//!   pairs stay native blocks wherever the dialect allows them ([`ToolBlocks::Native`]). A turn
//!   whose only server steers (`_Stop`, no ordinary tool) offers no tools, yet its history holds
//!   the hook pairs: Chat Completions takes tool messages without a tool list; Messages needs a
//!   tool list, which it gets (see `anthropic`). Only a Messages summary request, which offers
//!   no tools at all, carries calls and results as plain text ([`ToolBlocks::Text`]).
//! - Consecutive user messages happen (a compacted context is [summary, prompt]; the summary
//!   instruction follows a tool result) and are merged; an assistant message with neither text
//!   nor calls says nothing and is dropped.

use std::borrow::Cow;
use std::collections::HashMap;

use crate::machine::{CallId, Content, LlmRequest, Message, ToolCall, ToolOutput};

/// The user turn put first when the conversation would otherwise open with the assistant.
pub const HISTORY_CUT_NOTE: &str =
    "(The conversation continues from an earlier point; older messages are not shown.)";

/// One turn of the normalised conversation.
#[derive(Debug)]
pub(crate) enum Turn<'a> {
    User(Vec<UserPart<'a>>),
    Assistant {
        /// Text segments, in order; joined by the renderer.
        texts: Vec<Cow<'a, str>>,
        calls: Vec<&'a ToolCall>,
    },
}

/// One part of a user turn.
#[derive(Debug)]
pub(crate) enum UserPart<'a> {
    Text(Cow<'a, str>),
    Result {
        call_id: &'a CallId,
        output: &'a ToolOutput,
    },
}

/// How tool calls and results are sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ToolBlocks {
    /// As the dialect's own tool messages or blocks.
    Native,
    /// As plain text in the assistant and user turns, for a request that cannot carry them.
    Text,
}

/// Normalises a request's messages and instruction. See the module docs for the rules.
pub(crate) fn turns<'a>(request: &LlmRequest<'a>, blocks: ToolBlocks) -> Vec<Turn<'a>> {
    let flatten = blocks == ToolBlocks::Text;
    let mut names: HashMap<&CallId, &str> = HashMap::new();
    let mut turns: Vec<Turn<'a>> = Vec::with_capacity(request.messages.len() + 2);
    for message in request.messages {
        match message {
            Message::User { text } => push_user(&mut turns, UserPart::Text(Cow::Borrowed(text))),
            Message::Assistant { text, tool_calls } => {
                let mut texts = Vec::new();
                if !text.is_empty() {
                    texts.push(Cow::Borrowed(text.as_str()));
                }
                let mut calls = Vec::new();
                for call in tool_calls {
                    names.insert(&call.id, &call.name);
                    if flatten {
                        texts.push(Cow::Owned(call_as_text(call)));
                    } else {
                        calls.push(call);
                    }
                }
                if !texts.is_empty() || !calls.is_empty() {
                    push_assistant(&mut turns, texts, calls);
                }
            }
            Message::ToolResult { call_id, output } => {
                let part = if flatten {
                    let name = names.get(call_id).copied().unwrap_or("a tool");
                    UserPart::Text(Cow::Owned(result_as_text(name, call_id, output)))
                } else {
                    UserPart::Result { call_id, output }
                };
                push_user(&mut turns, part);
            }
        }
    }
    if let Some(instruction) = request.instruction {
        push_user(&mut turns, UserPart::Text(Cow::Borrowed(instruction)));
    }
    if matches!(turns.first(), Some(Turn::Assistant { .. })) {
        turns.insert(
            0,
            Turn::User(vec![UserPart::Text(Cow::Borrowed(HISTORY_CUT_NOTE))]),
        );
    }
    turns
}

/// The text of one tool output, for dialects (or flattened requests) that take only text.
/// Binary blocks are described, not sent: their bytes mean nothing as text.
pub(crate) fn output_text(output: &ToolOutput) -> Cow<'_, str> {
    // The common case, one text block of a successful call, needs no copy.
    if let (false, [Content::Text { text }]) = (output.is_error, output.content.as_slice()) {
        return Cow::Borrowed(text);
    }
    let mut out = String::new();
    if output.is_error {
        out.push_str("Error: ");
    }
    for (i, block) in output.content.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        content_text(block, &mut out);
    }
    Cow::Owned(out)
}

/// One content block as text; see [`output_text`].
pub(crate) fn content_text(block: &Content, out: &mut String) {
    match block {
        Content::Text { text } => out.push_str(text),
        Content::Image { mime_type, data } => out.push_str(&format!(
            "[image {mime_type}, {} bytes of base64 not shown]",
            data.len()
        )),
        Content::Resource {
            uri,
            mime_type,
            text,
            blob,
        } => {
            out.push_str("[resource ");
            out.push_str(uri);
            if let Some(mime) = mime_type {
                out.push_str(", ");
                out.push_str(mime);
            }
            match (text, blob) {
                (Some(text), _) => {
                    out.push_str("]\n");
                    out.push_str(text);
                }
                (None, Some(blob)) => {
                    out.push_str(&format!(", {} bytes of base64 not shown]", blob.len()));
                }
                (None, None) => out.push(']'),
            }
        }
    }
}

fn call_as_text(call: &ToolCall) -> String {
    let arguments = match &call.arguments {
        serde_json::Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    format!(
        "[tool call {} (id {}) with arguments {arguments}]",
        call.name, call.id
    )
}

fn result_as_text(name: &str, call_id: &CallId, output: &ToolOutput) -> String {
    format!("[result of {name} (id {call_id})]\n{}", output_text(output))
}

fn push_user<'a>(turns: &mut Vec<Turn<'a>>, part: UserPart<'a>) {
    match turns.last_mut() {
        Some(Turn::User(parts)) => parts.push(part),
        _ => turns.push(Turn::User(vec![part])),
    }
}

fn push_assistant<'a>(
    turns: &mut Vec<Turn<'a>>,
    texts: Vec<Cow<'a, str>>,
    calls: Vec<&'a ToolCall>,
) {
    // Merging after an assistant turn that made calls would put text after calls whose results
    // have not come yet; the pairing invariant rules that case out (results follow their call),
    // so only a call-free assistant turn is ever followed by another assistant turn.
    match turns.last_mut() {
        Some(Turn::Assistant {
            texts: prev_texts,
            calls: prev_calls,
        }) if prev_calls.is_empty() => {
            prev_texts.extend(texts);
            prev_calls.extend(calls);
        }
        _ => turns.push(Turn::Assistant { texts, calls }),
    }
}

/// Joins text segments with a blank line between them.
pub(crate) fn join_texts(texts: &[Cow<'_, str>]) -> String {
    texts.join("\n\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::machine::{Purpose, ToolSpec};

    fn call(id: &str, name: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: json!({}),
        }
    }

    fn request<'a>(
        messages: &'a [Message],
        tools: &'a [ToolSpec],
        instruction: Option<&'a str>,
    ) -> LlmRequest<'a> {
        LlmRequest {
            purpose: Purpose::Turn,
            system: None,
            messages,
            tools,
            instruction,
            max_output_tokens: 100,
            lineage: None,
        }
    }

    fn spec() -> Vec<ToolSpec> {
        vec![ToolSpec {
            name: "fs__read".into(),
            description: String::new(),
            input_schema: json!({"type": "object"}),
        }]
    }

    fn shape(turns: &[Turn<'_>]) -> String {
        turns
            .iter()
            .map(|turn| match turn {
                Turn::User(parts) => format!(
                    "U[{}]",
                    parts
                        .iter()
                        .map(|p| match p {
                            UserPart::Text(t) => format!("t:{t}"),
                            UserPart::Result { call_id, .. } => format!("r:{call_id}"),
                        })
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                Turn::Assistant { texts, calls } => format!(
                    "A[{}|{}]",
                    texts.join(","),
                    calls
                        .iter()
                        .map(|c| c.id.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
            })
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn consecutive_user_messages_and_results_merge_into_one_turn() {
        let messages = vec![
            Message::user("summary"),
            Message::user("prompt"),
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![call("a", "fs__read"), call("b", "fs__read")],
            },
            Message::ToolResult {
                call_id: "a".into(),
                output: ToolOutput::text("1"),
            },
            Message::ToolResult {
                call_id: "b".into(),
                output: ToolOutput::text("2"),
            },
            Message::user("more"),
        ];
        let tools = spec();
        let turns = turns(&request(&messages, &tools, None), ToolBlocks::Native);
        assert_eq!(
            shape(&turns),
            "U[t:summary,t:prompt] A[|a,b] U[r:a,r:b,t:more]"
        );
    }

    #[test]
    fn empty_assistant_messages_are_dropped_and_text_only_ones_merge() {
        let messages = vec![
            Message::user("go"),
            Message::Assistant {
                text: "one".into(),
                tool_calls: vec![],
            },
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![],
            },
            Message::Assistant {
                text: "two".into(),
                tool_calls: vec![call("a", "fs__read")],
            },
            Message::ToolResult {
                call_id: "a".into(),
                output: ToolOutput::text("1"),
            },
        ];
        let tools = spec();
        let turns = turns(&request(&messages, &tools, None), ToolBlocks::Native);
        assert_eq!(shape(&turns), "U[t:go] A[one,two|a] U[r:a]");
    }

    #[test]
    fn a_conversation_never_opens_with_the_assistant() {
        let messages = vec![Message::Assistant {
            text: "earlier".into(),
            tool_calls: vec![],
        }];
        let turns = turns(&request(&messages, &[], Some("sum up")), ToolBlocks::Native);
        assert_eq!(
            shape(&turns),
            format!("U[t:{HISTORY_CUT_NOTE}] A[earlier|] U[t:sum up]")
        );
    }

    #[test]
    fn as_text_calls_and_results_become_text() {
        let messages = vec![
            Message::user("go"),
            Message::Assistant {
                text: "reading".into(),
                tool_calls: vec![ToolCall {
                    id: "a".into(),
                    name: "fs__read".into(),
                    arguments: serde_json::Value::String("{oops".into()),
                }],
            },
            Message::ToolResult {
                call_id: "a".into(),
                output: ToolOutput::error("no such file"),
            },
        ];
        let turns = turns(&request(&messages, &[], Some("sum up")), ToolBlocks::Text);
        assert_eq!(
            shape(&turns),
            "U[t:go] A[reading,[tool call fs__read (id a) with arguments {oops]|] \
             U[t:[result of fs__read (id a)]\nError: no such file,t:sum up]"
        );
    }

    #[test]
    fn binary_content_is_described_not_sent_as_text() {
        let output = ToolOutput {
            content: vec![
                Content::Text { text: "see".into() },
                Content::Image {
                    mime_type: "image/png".into(),
                    data: "AAAA".into(),
                },
                Content::Resource {
                    uri: "file:///a".into(),
                    mime_type: None,
                    text: Some("body".into()),
                    blob: None,
                },
                Content::Resource {
                    uri: "file:///b".into(),
                    mime_type: Some("application/pdf".into()),
                    text: None,
                    blob: Some("QUJD".into()),
                },
            ],
            is_error: false,
        };
        assert_eq!(
            output_text(&output),
            "see\n[image image/png, 4 bytes of base64 not shown]\n[resource file:///a]\nbody\n\
             [resource file:///b, application/pdf, 4 bytes of base64 not shown]"
        );
    }
}
