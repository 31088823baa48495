//! rmcp's types to the engine's: a server's tool list to checked [`ToolInfo`]s, a tool result to
//! a [`ToolOutput`] or a [`HookReply`].

use std::collections::HashSet;

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents, Tool};
use serde_json::{Value, json};

use crate::hooks::{self, ServerName};
use crate::machine::{Content, HookReply, ToolHints, ToolInfo, ToolOutput};
use crate::mcp::{HostOptions, McpError};

/// The longest qualified tool name: the limit model providers put on tool names.
pub(crate) const MAX_QUALIFIED_NAME: usize = 64;

/// Checks a server's tools. A tool whose name no provider would accept is skipped with a
/// warning; one bad tool never fails the session. Two tools of one name fail the server.
pub(crate) fn tools_from_server(
    server: &ServerName,
    tools: Vec<Tool>,
    options: &HostOptions,
) -> Result<Vec<ToolInfo>, McpError> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(tools.len());
    for tool in tools {
        let name = tool.name.as_ref();
        let qualified = hooks::qualify(server.as_str(), name);
        if !valid_tool_name(name) || qualified.len() > MAX_QUALIFIED_NAME {
            tracing::warn!(
                %server, tool = name,
                "skipping a tool whose name is not 1 to {MAX_QUALIFIED_NAME} characters of \
                 A-Z, a-z, 0-9, '_' and '-' once qualified as {qualified:?}"
            );
            continue;
        }
        if !seen.insert(name.to_owned()) {
            return Err(McpError::DuplicateTool {
                server: server.clone(),
                tool: name.to_owned(),
                qualified,
            });
        }
        let description = tool.description.as_deref().unwrap_or_default();
        let description = cut_description(description, options.max_description_bytes);
        let schema = Value::Object((*tool.input_schema).clone());
        let input_schema = if json_len(&schema) > options.max_schema_bytes {
            tracing::warn!(
                %server, tool = name,
                "the tool's input schema is over {} bytes; offering it as {{\"type\":\"object\"}}",
                options.max_schema_bytes
            );
            json!({"type": "object"})
        } else {
            schema
        };
        let hints = tool
            .annotations
            .as_ref()
            .map_or_else(ToolHints::default, |a| ToolHints {
                read_only: a.read_only_hint,
                destructive: a.destructive_hint,
                open_world: a.open_world_hint,
            });
        out.push(ToolInfo {
            name: name.to_owned(),
            description,
            input_schema,
            hints,
        });
    }
    Ok(out)
}

/// The serialised length of a JSON value, counted without building the text.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // A `Value` always serialises (its keys are strings) and this sink never fails.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

fn valid_tool_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

const DESCRIPTION_MARKER: &str = " [description truncated]";

fn cut_description(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max.saturating_sub(DESCRIPTION_MARKER.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + DESCRIPTION_MARKER.len());
    out.push_str(&text[..end]);
    out.push_str(DESCRIPTION_MARKER);
    out
}

/// A tool result as the model sees it: text, images and embedded resources kept, the text
/// capped at `max_text` bytes in total (the middle of a longer text elided), `isError` kept.
pub(crate) fn tool_output(result: CallToolResult, max_text: usize) -> ToolOutput {
    let is_error = result.is_error.unwrap_or(false);
    let mut budget = max_text;
    // Caps each text to what is left of the budget, and spends it.
    let mut cap = |text: &str| {
        let text = hooks::cap_middle(text, budget);
        budget = budget.saturating_sub(text.len());
        text
    };
    let mut content = Vec::with_capacity(result.content.len().max(1));
    let push_text = |content: &mut Vec<Content>, text: String| {
        content.push(Content::Text { text });
    };
    for block in result.content {
        match block {
            ContentBlock::Text(t) => push_text(&mut content, cap(&t.text)),
            ContentBlock::Image(image) => content.push(Content::Image {
                mime_type: image.mime_type,
                data: image.data,
            }),
            ContentBlock::Audio(audio) => push_text(
                &mut content,
                cap(&format!("[audio of type {} left out]", audio.mime_type)),
            ),
            ContentBlock::Resource(embedded) => match embedded.resource {
                ResourceContents::TextResourceContents {
                    uri,
                    mime_type,
                    text,
                    ..
                } => {
                    content.push(Content::Resource {
                        uri,
                        mime_type,
                        text: Some(cap(&text)),
                        blob: None,
                    });
                }
                ResourceContents::BlobResourceContents {
                    uri,
                    mime_type,
                    blob,
                    ..
                } => content.push(Content::Resource {
                    uri,
                    mime_type,
                    text: None,
                    blob: Some(blob),
                }),
                // A resource kind newer than this engine: say so rather than drop it silently.
                _ => push_text(
                    &mut content,
                    cap("[an embedded resource of an unknown kind]"),
                ),
            },
            ContentBlock::ResourceLink(link) => {
                push_text(&mut content, cap(&format!("[resource link: {}]", link.uri)));
            }
            _ => push_text(&mut content, cap("[content of an unknown kind]")),
        }
    }
    // A result with only structured content still says something to the model.
    if content.is_empty()
        && let Some(structured) = result.structured_content
    {
        push_text(&mut content, cap(&structured.to_string()));
    }
    ToolOutput { content, is_error }
}

/// A hook's result: its text blocks joined and capped, or an error result.
pub(crate) fn hook_reply(result: CallToolResult, max_text: usize) -> HookReply {
    let output = tool_output(result, max_text);
    let text = output.joined_text();
    if output.is_error {
        HookReply::ErrorResult { text }
    } else {
        HookReply::Text { text }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use rmcp::model::{EmbeddedResource, ImageContent, ToolAnnotations};

    use super::*;

    fn tool(name: &str, description: &str, schema: Value) -> Tool {
        let Value::Object(schema) = schema else {
            panic!("schema must be an object")
        };
        Tool::new(name.to_owned(), description.to_owned(), Arc::new(schema))
    }

    fn server() -> ServerName {
        ServerName::new("srv").unwrap()
    }

    #[test]
    fn bad_names_are_skipped_and_the_rest_kept() {
        let long = "t".repeat(MAX_QUALIFIED_NAME);
        let tools = vec![
            tool("good", "d", json!({"type": "object"})),
            tool("has space", "d", json!({"type": "object"})),
            tool("dotted.name", "d", json!({"type": "object"})),
            tool("", "d", json!({"type": "object"})),
            tool(&long, "d", json!({"type": "object"})),
            tool("_Stop", "hook", json!({"type": "object"})),
        ];
        let out = tools_from_server(&server(), tools, &HostOptions::default()).unwrap();
        let names: Vec<_> = out.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["good", "_Stop"]);
    }

    #[test]
    fn tool_annotations_become_hints() {
        let annotated = tool("w", "", json!({"type": "object"})).with_annotations(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(true)
                .open_world(false),
        );
        let plain = tool("p", "", json!({"type": "object"}));
        let infos =
            tools_from_server(&server(), vec![annotated, plain], &HostOptions::default()).unwrap();
        assert_eq!(
            infos[0].hints,
            ToolHints {
                read_only: Some(false),
                destructive: Some(true),
                open_world: Some(false),
            }
        );
        assert!(infos[1].hints.is_unknown());
    }

    #[test]
    fn duplicate_names_fail_naming_both() {
        let tools = vec![
            tool("x", "a", json!({"type": "object"})),
            tool("x", "b", json!({"type": "object"})),
        ];
        let err = tools_from_server(&server(), tools, &HostOptions::default()).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("\"x\"") && text.contains("srv__x"), "{text}");
    }

    #[test]
    fn long_descriptions_are_cut_and_big_schemas_replaced() {
        let options = HostOptions::default();
        let big_schema = json!({"type": "object", "description": "s".repeat(9000)});
        let tools = vec![tool("t", &"é".repeat(2000), big_schema)];
        let out = tools_from_server(&server(), tools, &options).unwrap();
        assert!(out[0].description.len() <= options.max_description_bytes);
        assert!(out[0].description.ends_with(DESCRIPTION_MARKER));
        assert_eq!(out[0].input_schema, json!({"type": "object"}));
    }

    #[test]
    fn results_keep_images_resources_and_is_error_and_cap_text() {
        let mut result = CallToolResult::success(vec![
            ContentBlock::text("x".repeat(100_000)),
            ContentBlock::Image(ImageContent::new("aGk=", "image/png")),
            ContentBlock::Resource(EmbeddedResource::new(
                ResourceContents::TextResourceContents {
                    uri: "file:///a".into(),
                    mime_type: Some("text/plain".into()),
                    text: "contents".into(),
                    meta: None,
                },
            )),
        ]);
        result.is_error = Some(true);
        let output = tool_output(result, 1000);
        assert!(output.is_error);
        let Content::Text { text } = &output.content[0] else {
            panic!("text first")
        };
        assert!(
            text.len() <= 1000 && text.contains("bytes elided"),
            "{text}"
        );
        assert_eq!(
            output.content[1],
            Content::Image {
                mime_type: "image/png".into(),
                data: "aGk=".into()
            }
        );
        assert!(matches!(&output.content[2], Content::Resource { uri, .. } if uri == "file:///a"));
    }

    #[test]
    fn hook_replies_keep_text_and_errors() {
        let ok = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(
            hook_reply(ok, 100),
            HookReply::Text {
                text: "a\nb".into()
            }
        );
        let err = CallToolResult::error(vec![ContentBlock::text("boom")]);
        assert_eq!(
            hook_reply(err, 100),
            HookReply::ErrorResult {
                text: "boom".into()
            }
        );
    }
}
