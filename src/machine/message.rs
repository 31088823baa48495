//! The conversation's vocabulary: messages, tool calls and tool output, provider-neutral.
//!
//! Providers translate these to their dialect (`src/llm/`); the MCP host translates tool output
//! from rmcp (`src/mcp/`). Nothing here knows either.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::machine::policy::{BYTES_PER_TOKEN, Media};

/// The id of one tool call, as the model (or the machine, for synthetic hook calls) named it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CallId(pub String);

impl CallId {
    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for CallId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for CallId {
    fn from(s: &str) -> Self {
        Self(s.to_owned())
    }
}

/// One message of the conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    /// The user's words: a prompt, or the summary that opens a compacted context.
    User {
        /// What the user (or the engine, for hook context) said.
        text: String,
    },
    /// The model's turn: text and the tool calls it asked for (possibly none).
    Assistant {
        /// The model's text.
        text: String,
        /// The tools it asked for.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
    },
    /// The answer to one earlier tool call. It always follows the assistant message that made
    /// the call, after the answers to that message's earlier calls.
    ToolResult {
        /// The call this answers.
        call_id: CallId,
        /// The result.
        output: ToolOutput,
    },
}

impl Message {
    /// A user message.
    pub fn user(text: impl Into<String>) -> Self {
        Self::User { text: text.into() }
    }

    /// A rough size in bytes, used for context accounting. Stable for a given message, so a
    /// history's running total is exact to this measure.
    /// The bytes this message costs in a request, for a dialect that carries binary content as
    /// `media` says: what the dialect sends, not what the history holds.
    pub fn size_bytes(&self, media: &Media) -> usize {
        // Per-message overhead approximates the role and framing a provider adds.
        const FRAMING: usize = 16;
        FRAMING
            + match self {
                Self::User { text } => text.len(),
                Self::Assistant { text, tool_calls } => {
                    text.len() + tool_calls.iter().map(ToolCall::size_bytes).sum::<usize>()
                }
                Self::ToolResult { call_id, output } => call_id.0.len() + output.size_bytes(media),
            }
    }
}

/// A tool call the model asked for, or one the machine synthesised to carry a hook's answer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// Unique within the conversation.
    pub id: CallId,
    /// The qualified name the model used: `<server>__<tool>`.
    pub name: String,
    /// The arguments as the model gave them. A provider that received arguments it could not
    /// parse as JSON keeps the raw text here as a JSON string; the machine then answers the
    /// call with an error naming the problem, and the history still shows what the model sent.
    pub arguments: Value,
}

impl ToolCall {
    fn size_bytes(&self) -> usize {
        self.id.0.len() + self.name.len() + json_size(&self.arguments)
    }
}

/// What a tool call produced.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolOutput {
    /// The content blocks, in the server's order.
    pub content: Vec<Content>,
    /// The tool reported failure (MCP's `isError`), or the engine refused or could not run it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl ToolOutput {
    /// A successful result of one text block.
    pub fn text(text: impl Into<String>) -> Self {
        Self {
            content: vec![Content::Text { text: text.into() }],
            is_error: false,
        }
    }

    /// An error result of one text block.
    pub fn error(text: impl Into<String>) -> Self {
        Self {
            content: vec![Content::Text { text: text.into() }],
            is_error: true,
        }
    }

    /// The text blocks joined by newlines; other blocks are left out.
    pub fn joined_text(&self) -> String {
        let mut out = String::new();
        for block in &self.content {
            if let Content::Text { text } = block {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(text);
            }
        }
        out
    }

    fn size_bytes(&self, media: &Media) -> usize {
        self.content
            .iter()
            .map(|block| block.size_bytes(media))
            .sum()
    }
}

/// One block of tool output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// Base64 data, as MCP carries it.
    Image {
        /// Its MIME type.
        mime_type: String,
        /// The image, base64-encoded.
        data: String,
    },
    /// An embedded resource: its text, or its base64 blob.
    Resource {
        /// The resource's URI.
        uri: String,
        /// Its MIME type, when the server gave one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
        /// Its text, for a text resource.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        text: Option<String>,
        /// Its bytes, base64-encoded, for a binary resource.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        blob: Option<String>,
    },
}

impl Content {
    fn size_bytes(&self, media: &Media) -> usize {
        match self {
            Self::Text { text } => text.len(),
            Self::Image { mime_type, data } if media.sends_image(mime_type) => {
                let cap = media.max_image_tokens.saturating_mul(BYTES_PER_TOKEN);
                data.len().min(usize::try_from(cap).unwrap_or(usize::MAX))
            }
            // Described in one line: the data itself is never sent.
            Self::Image { mime_type, .. } => mime_type.len() + Media::DESCRIPTION_BYTES,
            Self::Resource {
                uri,
                mime_type,
                text,
                blob,
            } => {
                let body = match (text, blob) {
                    (Some(text), _) => text.len(),
                    (None, Some(_)) => Media::DESCRIPTION_BYTES,
                    (None, None) => 0,
                };
                uri.len() + mime_type.as_ref().map_or(0, String::len) + body
            }
        }
    }
}

/// A tool as the model is offered it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    /// Qualified: `<server>__<tool>`.
    pub name: String,
    /// What the tool does, for the model.
    pub description: String,
    /// A JSON Schema object.
    pub input_schema: Value,
}

impl ToolSpec {
    pub(crate) fn size_bytes(&self) -> usize {
        self.name.len() + self.description.len() + json_size(&self.input_schema)
    }
}

/// The serialised length of a JSON value, without allocating the text.
pub(crate) fn json_size(value: &Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing a `Value` to an infallible sink cannot fail: every key is a string.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn an_assistant_message_counts_its_text_and_each_calls_id_name_and_arguments() {
        let call = |id: &str| ToolCall {
            id: id.into(),
            name: "srv__tool".into(),
            arguments: json!({"path": "/tmp/a"}),
        };
        let message = Message::Assistant {
            text: "ok".into(),
            tool_calls: vec![call("c1"), call("c22")],
        };
        let arguments = r#"{"path":"/tmp/a"}"#.len();
        let calls = (2 + 9 + arguments) + (3 + 9 + arguments);
        assert_eq!(message.size_bytes(&Media::default()), 16 + 2 + calls);
    }

    #[test]
    fn each_block_of_a_result_counts_what_the_model_is_sent_of_it() {
        let png_only = Media {
            image_types: vec!["image/png".to_owned()],
            max_image_tokens: 10,
        };
        let size = |block: Content| block.size_bytes(&png_only);
        assert_eq!(
            size(Content::Text {
                text: "hello".into()
            }),
            5
        );
        // An image of a type the dialect sends costs its data, up to the provider's cap.
        let png = |data: &str| Content::Image {
            mime_type: "image/png".into(),
            data: data.into(),
        };
        assert_eq!(size(png("abc")), 3);
        assert_eq!(size(png(&"a".repeat(100))), 40);
        // Any other image is a one-line description of its type.
        let gif = Content::Image {
            mime_type: "image/gif".into(),
            data: "a".repeat(100),
        };
        assert_eq!(size(gif), 9 + Media::DESCRIPTION_BYTES);
        let resource =
            |mime_type: Option<&str>, text: Option<&str>, blob: Option<&str>| Content::Resource {
                uri: "file:///a".into(),
                mime_type: mime_type.map(Into::into),
                text: text.map(Into::into),
                blob: blob.map(Into::into),
            };
        assert_eq!(
            size(resource(Some("text/plain"), Some("hi"), None)),
            9 + 10 + 2
        );
        assert_eq!(
            size(resource(None, None, Some(&"a".repeat(100)))),
            9 + Media::DESCRIPTION_BYTES
        );
        assert_eq!(size(resource(None, None, None)), 9);
        // A result is the sum of its blocks.
        let output = ToolOutput {
            content: vec![
                Content::Text {
                    text: "hello".into(),
                },
                Content::Text {
                    text: "world!".into(),
                },
            ],
            is_error: false,
        };
        assert_eq!(output.size_bytes(&png_only), 11);
    }

    #[test]
    fn a_tool_costs_its_name_description_and_schema() {
        let spec = ToolSpec {
            name: "fs__read".into(),
            description: "Read a file.".into(),
            input_schema: json!({"type": "object"}),
        };
        assert_eq!(spec.size_bytes(), 8 + 12 + r#"{"type":"object"}"#.len());
    }

    #[test]
    fn json_size_matches_serialised_length() {
        let v = json!({"a": [1, 2, "three"], "b": {"c": null}});
        assert_eq!(json_size(&v), serde_json::to_string(&v).unwrap().len());
    }

    #[test]
    fn messages_round_trip_through_json() {
        let msgs = vec![
            Message::user("hi"),
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "fs__read".into(),
                    arguments: json!({"path": "/x"}),
                }],
            },
            Message::ToolResult {
                call_id: "c1".into(),
                output: ToolOutput::error("nope"),
            },
        ];
        let text = serde_json::to_string(&msgs).unwrap();
        let back: Vec<Message> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, msgs);
    }
}
