//! rmcp's types to the engine's: a server's tool list to checked [`ToolInfo`]s, a tool result to
//! a [`ToolOutput`] or a [`HookReply`].

use std::collections::HashSet;

use rmcp::model::{CallToolResult, ContentBlock, ResourceContents, Tool};
use serde_json::{Value, json};

use crate::hooks::{self, Hook, ServerName};
use crate::machine::{Content, HookReply, ToolHints, ToolInfo, ToolOutput};
use crate::mcp::{HostOptions, McpError};
use crate::text::{self, Cut};

/// The longest qualified tool name: the limit model providers put on tool names.
pub(crate) const MAX_QUALIFIED_NAME: usize = 64;

/// Checks a server's tools. A tool whose name no provider would accept is skipped with a
/// warning; one bad tool never fails the session. Two tools of one name fail the server.
///
/// Hooks never reach a provider, so the provider's length limit does not apply to them: a
/// server with a long name keeps its hooks.
///
/// A tool only for an MCP App's interface (`_meta.ui.visibility` without `"model"`) is left
/// out: the model must not see or call it, and it is no hook. A hook stays a hook whatever its
/// visibility: a server may hide its hooks from the models of hosts that do not know them.
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
        let too_long = !hooks::is_hook(name) && qualified.len() > MAX_QUALIFIED_NAME;
        if !valid_tool_name(name) || too_long {
            tracing::warn!(
                %server, tool = name,
                "skipping a tool whose name is not 1 to {MAX_QUALIFIED_NAME} characters of \
                 A-Z, a-z, 0-9, '_' and '-' once qualified as {qualified:?}"
            );
            continue;
        }
        if !hooks::is_hook(name) && !visible_to_model(&tool) {
            tracing::debug!(%server, tool = name, "leaving out a tool only for an app's interface");
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
        let description = text::cut(
            description,
            options.max_description_bytes,
            Cut::Head {
                marker: DESCRIPTION_MARKER,
            },
        );
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

/// Whether a tool is for the model: MCP Apps' `_meta.ui.visibility` lists who may see it
/// (`"model"`, `"app"`), everyone when absent.
fn visible_to_model(tool: &Tool) -> bool {
    let visibility = tool
        .meta
        .as_ref()
        .and_then(|meta| meta.get("ui"))
        .and_then(|ui| ui.get("visibility"));
    match visibility {
        Some(Value::Array(audience)) => audience.iter().any(|a| a == "model"),
        // Absent, or not the list the extension defines: nothing says to hide it.
        _ => true,
    }
}

/// The serialised length of `value` as JSON, counted without building the text.
pub(crate) fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
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
    // This sink never fails, and what is counted here (a `Value`, rmcp's `Tool`) always
    // serialises: its map keys are strings.
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

/// The most bytes of binary content (images, blobs, as their base64 text) one tool result
/// passes to the model; a block past it is replaced by a description. One screenshot must not
/// fill the context window.
pub(crate) const MAX_BINARY_BYTES: usize = 1024 * 1024;

/// The most content blocks of one tool result the model sees; the blocks past it are left out
/// with one line that says how many. 200,000 empty image blocks once passed every byte budget
/// and made each request 9.6 MB.
pub(crate) const MAX_RESULT_BLOCKS: usize = 256;

/// What a binary block costs the binary budget beyond its bytes, so that empty ones are not
/// free: the block's own JSON in the request.
pub(crate) const BINARY_BLOCK_COST: usize = 64;

/// A tool result as the model sees it: text, images and embedded resources kept, the text
/// capped at `max_text` bytes in total (the middle of a longer text elided), binary content
/// capped at [`MAX_BINARY_BYTES`] in total (each block costing [`BINARY_BLOCK_COST`] more), at
/// most [`MAX_RESULT_BLOCKS`] blocks, `isError` kept.
pub(crate) fn tool_output(result: CallToolResult, max_text: usize) -> ToolOutput {
    let is_error = result.is_error.unwrap_or(false);
    let mut budget = max_text;
    // Caps each text to what is left of the budget, and spends it.
    let mut cap = |text: &str| {
        let text = text::cut(text, budget, Cut::Middle);
        budget = budget.saturating_sub(text.len());
        text
    };
    let mut binary_budget = MAX_BINARY_BYTES;
    // Whether a binary block of `len` bytes still fits, spending the budget if it does.
    let mut binary_fits = |len: usize| {
        let cost = len.saturating_add(BINARY_BLOCK_COST);
        let fits = cost <= binary_budget;
        if fits {
            binary_budget -= cost;
        }
        fits
    };
    let mut content = Vec::with_capacity(result.content.len().clamp(1, MAX_RESULT_BLOCKS + 1));
    let push_text = |content: &mut Vec<Content>, text: String| {
        content.push(Content::Text { text });
    };
    let blocks = result.content.len();
    for block in result.content.into_iter().take(MAX_RESULT_BLOCKS) {
        match block {
            ContentBlock::Text(t) => push_text(&mut content, cap(&t.text)),
            ContentBlock::Image(image) => {
                if binary_fits(image.data.len()) {
                    content.push(Content::Image {
                        mime_type: image.mime_type,
                        data: image.data,
                    });
                } else {
                    let said = binary_left_out("an image", &image.mime_type, image.data.len());
                    push_text(&mut content, cap(&said));
                }
            }
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
                } => {
                    if binary_fits(blob.len()) {
                        content.push(Content::Resource {
                            uri,
                            mime_type,
                            text: None,
                            blob: Some(blob),
                        });
                    } else {
                        let kind = mime_type.as_deref().unwrap_or("unknown");
                        let said = binary_left_out(&format!("the blob {uri}"), kind, blob.len());
                        push_text(&mut content, cap(&said));
                    }
                }
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
    if blocks > MAX_RESULT_BLOCKS {
        let said = format!(
            "[{} more content blocks left out: a result shows at most {MAX_RESULT_BLOCKS}]",
            blocks - MAX_RESULT_BLOCKS
        );
        push_text(&mut content, cap(&said));
    }
    // A result with only structured content still says something to the model.
    if content.is_empty()
        && let Some(structured) = result.structured_content
    {
        push_text(&mut content, cap(&structured.to_string()));
    }
    ToolOutput { content, is_error }
}

/// The text that stands in for binary content over [`MAX_BINARY_BYTES`].
fn binary_left_out(what: &str, mime_type: &str, len: usize) -> String {
    format!(
        "[{what} of type {mime_type} ({len} bytes as base64) left out: binary content of one \
         tool result is capped at {MAX_BINARY_BYTES} bytes]"
    )
}

/// A hook's result: its text blocks joined and capped, or an error result.
///
/// Only text objects or injects: an image, a resource link or a block of a kind this engine
/// does not know says nothing a hook could mean as an objection, so it is logged and ignored
/// rather than turned into placeholder text that would count as one.
pub(crate) fn hook_reply(
    server: &ServerName,
    hook: Hook,
    result: CallToolResult,
    max_text: usize,
) -> HookReply {
    let mut texts = Vec::with_capacity(result.content.len());
    for block in &result.content {
        match block {
            ContentBlock::Text(t) => texts.push(t.text.as_str()),
            other => tracing::warn!(
                %server, %hook, kind = block_kind(other),
                "ignoring a non-text block in a hook's answer: only text objects or injects"
            ),
        }
    }
    let text = crate::text::cut(&texts.join("\n"), max_text, crate::text::Cut::Middle);
    if result.is_error.unwrap_or(false) {
        HookReply::ErrorResult { text }
    } else {
        HookReply::Text { text }
    }
}

/// A content block's kind, for logs.
fn block_kind(block: &ContentBlock) -> &'static str {
    match block {
        ContentBlock::Text(_) => "text",
        ContentBlock::Image(_) => "image",
        ContentBlock::Audio(_) => "audio",
        ContentBlock::Resource(_) => "embedded resource",
        ContentBlock::ResourceLink(_) => "resource link",
        _ => "unknown",
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

    /// `tool` with `_meta.ui.visibility` set to `visibility`.
    fn with_visibility(name: &str, visibility: Value) -> Tool {
        let mut tool = tool(name, "d", json!({"type": "object"}));
        let Value::Object(meta) = json!({"ui": {"visibility": visibility}}) else {
            unreachable!("a literal object")
        };
        tool.meta = Some(meta.into());
        tool
    }

    #[test]
    fn app_only_tools_are_left_out_and_model_visible_ones_and_hooks_kept() {
        let tools = vec![
            with_visibility("app_only", json!(["app"])),
            with_visibility("nobody", json!([])),
            with_visibility("both", json!(["model", "app"])),
            with_visibility("model_only", json!(["model"])),
            with_visibility("_Stop", json!(["app"])),
            with_visibility("odd", json!("app")),
            tool("plain", "d", json!({"type": "object"})),
        ];
        let out = tools_from_server(&server(), tools, &HostOptions::default()).unwrap();
        let names: Vec<_> = out.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["both", "model_only", "_Stop", "odd", "plain"]);
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
    fn the_name_length_limit_skips_long_model_facing_tools_but_keeps_hooks() {
        let server = ServerName::new("s".repeat(58)).unwrap();
        let tools = vec![
            tool("search", "d", json!({"type": "object"})),
            tool("_PostCompact", "hook", json!({"type": "object"})),
            tool("_Stop", "hook", json!({"type": "object"})),
        ];
        let out = tools_from_server(&server, tools, &HostOptions::default()).unwrap();
        let names: Vec<_> = out.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["_PostCompact", "_Stop"]);
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
    fn json_schema_2020_12_keywords_reach_the_model_whole() {
        // The shape the conformance suite's preservation scenario offers.
        let schema = json!({
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://example.com/schemas/order",
            "type": "object",
            "$defs": {"address": {"$anchor": "addr", "type": "object",
                                  "properties": {"city": {"type": "string"}}}},
            "properties": {
                "ship_to": {"$ref": "#/$defs/address"},
                "bill_to": {"$ref": "https://example.com/remote.json"},
                "kind": {"enum": ["a", "b"]},
            },
            "allOf": [{"anyOf": [{"required": ["ship_to"]}, {"required": ["bill_to"]}]}],
            "if": {"properties": {"kind": {"const": "a"}}},
            "then": {"required": ["ship_to"]},
            "else": {"required": ["bill_to"]},
            "additionalProperties": false,
            "unevaluatedProperties": false,
        });
        let out = tools_from_server(
            &server(),
            vec![tool("order", "d", schema.clone())],
            &HostOptions::default(),
        )
        .unwrap();
        assert_eq!(out[0].input_schema, schema);
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
    fn a_result_of_endless_empty_images_shows_its_first_blocks_and_says_how_many_more() {
        let blocks =
            vec![ContentBlock::Image(ImageContent::new(String::new(), "image/png")); 200_000];
        let output = tool_output(CallToolResult::success(blocks), 50_000);
        assert_eq!(output.content.len(), MAX_RESULT_BLOCKS + 1);
        assert!(
            output.content[..MAX_RESULT_BLOCKS]
                .iter()
                .all(|c| matches!(c, Content::Image { .. }))
        );
        let Content::Text { text } = &output.content[MAX_RESULT_BLOCKS] else {
            panic!(
                "the last says what was left out: {:?}",
                output.content.last()
            )
        };
        assert_eq!(
            text,
            "[199744 more content blocks left out: a result shows at most 256]"
        );
    }

    #[test]
    fn each_binary_block_costs_the_budget_more_than_its_bytes() {
        // 200 images whose bytes alone just fit the budget; with each block's cost the last do not.
        let each = MAX_BINARY_BYTES / 200;
        let blocks =
            vec![ContentBlock::Image(ImageContent::new("i".repeat(each), "image/png")); 200];
        let output = tool_output(CallToolResult::success(blocks), 50_000);
        let kept = output
            .content
            .iter()
            .filter(|c| matches!(c, Content::Image { .. }))
            .count();
        assert_eq!(kept, MAX_BINARY_BYTES / (each + BINARY_BLOCK_COST));
        assert!(kept < 200);
        assert_eq!(output.content.len(), 200, "each left out says so");
    }

    #[test]
    fn binary_content_past_the_cap_is_replaced_by_a_description() {
        let small = "a".repeat(1000);
        let big = "b".repeat(MAX_BINARY_BYTES);
        let result = CallToolResult::success(vec![
            ContentBlock::Image(ImageContent::new(small.clone(), "image/png")),
            // Not after the first: the cap is per result.
            ContentBlock::Image(ImageContent::new(big.clone(), "image/jpeg")),
            ContentBlock::Resource(EmbeddedResource::new(
                ResourceContents::BlobResourceContents {
                    uri: "file:///blob".into(),
                    mime_type: Some("application/zip".into()),
                    blob: big,
                    meta: None,
                },
            )),
        ]);
        let output = tool_output(result, 50_000);
        assert_eq!(
            output.content[0],
            Content::Image {
                mime_type: "image/png".into(),
                data: small
            }
        );
        let Content::Text { text } = &output.content[1] else {
            panic!("a description, not the image: {:?}", output.content[1])
        };
        assert!(
            text.contains("image/jpeg") && text.contains("left out"),
            "{text}"
        );
        let Content::Text { text } = &output.content[2] else {
            panic!("a description, not the blob")
        };
        assert!(
            text.contains("file:///blob") && text.contains("application/zip"),
            "{text}"
        );
        let binary: usize = output
            .content
            .iter()
            .map(|c| match c {
                Content::Image { data, .. } => data.len(),
                Content::Resource { blob, .. } => blob.as_ref().map_or(0, String::len),
                Content::Text { .. } => 0,
            })
            .sum();
        assert!(binary <= MAX_BINARY_BYTES);
    }

    #[test]
    fn a_hook_answer_without_text_blocks_says_nothing() {
        let link = rmcp::model::Resource::new("file:///report", "report");
        let result = CallToolResult::success(vec![
            ContentBlock::resource_link(link),
            ContentBlock::Image(ImageContent::new("aGk=", "image/png")),
        ]);
        assert_eq!(
            hook_reply(&server(), Hook::Stop, result, 100),
            HookReply::Text {
                text: String::new()
            }
        );
        let mixed = CallToolResult::success(vec![
            ContentBlock::Image(ImageContent::new("aGk=", "image/png")),
            ContentBlock::text("2 open"),
        ]);
        assert_eq!(
            hook_reply(&server(), Hook::Stop, mixed, 100),
            HookReply::Text {
                text: "2 open".into()
            }
        );
    }

    #[test]
    fn hook_replies_keep_text_and_errors() {
        let ok = CallToolResult::success(vec![ContentBlock::text("a"), ContentBlock::text("b")]);
        assert_eq!(
            hook_reply(&server(), Hook::Stop, ok, 100),
            HookReply::Text {
                text: "a\nb".into()
            }
        );
        let err = CallToolResult::error(vec![ContentBlock::text("boom")]);
        assert_eq!(
            hook_reply(&server(), Hook::Stop, err, 100),
            HookReply::ErrorResult {
                text: "boom".into()
            }
        );
    }
}
