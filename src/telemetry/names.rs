//! Every span, attribute and event name the engine's traces use, in one place so a rename of
//! the conventions is one edit here.
//!
//! The names follow the OpenTelemetry GenAI semantic conventions and their MCP conventions,
//! [`CONVENTIONS`] (Development stability). Names of the engine's own (`hookloop.*`) cover
//! what the conventions have no name for: hook rounds, their answers, compactions, supervision
//! and permission questions.

/// The conventions these names follow.
pub const CONVENTIONS: &str =
    "open-telemetry/semantic-conventions-genai v0.1.0 (gen-ai spans, agent spans, mcp)";

/// The `tracing` target of every span and event below: a subscriber or an OpenTelemetry layer
/// picks the engine's trace out of its logs with it.
pub const TARGET: &str = "hookloop::telemetry";

// Operation names (`gen_ai.operation.name`), which also begin the span names.
/// A prompt run by the agent loop: `invoke_agent {gen_ai.agent.name}`.
pub const OP_INVOKE_AGENT: &str = "invoke_agent";
/// A model request: `chat {gen_ai.request.model}`.
pub const OP_CHAT: &str = "chat";
/// A tool call: `execute_tool {gen_ai.tool.name}`.
pub const OP_EXECUTE_TOOL: &str = "execute_tool";

// GenAI attributes.
/// The operation a span performs.
pub const OPERATION_NAME: &str = "gen_ai.operation.name";
/// The agent's name.
pub const AGENT_NAME: &str = "gen_ai.agent.name";
/// A subagent's id: the id of the `agent` call that started it.
pub const AGENT_ID: &str = "gen_ai.agent.id";
/// The conversation (session) a span belongs to.
pub const CONVERSATION_ID: &str = "gen_ai.conversation.id";
/// Who serves the model (`openai`, `anthropic`).
pub const PROVIDER_NAME: &str = "gen_ai.provider.name";
/// The model asked.
pub const REQUEST_MODEL: &str = "gen_ai.request.model";
/// The output token limit of a request.
pub const REQUEST_MAX_TOKENS: &str = "gen_ai.request.max_tokens";
/// Whether the request streamed its reply.
pub const REQUEST_STREAM: &str = "gen_ai.request.stream";
/// The model that answered.
pub const RESPONSE_MODEL: &str = "gen_ai.response.model";
/// Why the model stopped (a string array).
pub const RESPONSE_FINISH_REASONS: &str = "gen_ai.response.finish_reasons";
/// Seconds from the request to the first streamed piece of the reply.
pub const RESPONSE_TIME_TO_FIRST_CHUNK: &str = "gen_ai.response.time_to_first_chunk";
/// Prompt tokens, cached ones included.
pub const USAGE_INPUT_TOKENS: &str = "gen_ai.usage.input_tokens";
/// Reply tokens.
pub const USAGE_OUTPUT_TOKENS: &str = "gen_ai.usage.output_tokens";
/// Prompt tokens read from the provider's cache.
pub const USAGE_CACHE_READ_INPUT_TOKENS: &str = "gen_ai.usage.cache_read.input_tokens";
/// Prompt tokens written to the provider's cache.
pub const USAGE_CACHE_CREATION_INPUT_TOKENS: &str = "gen_ai.usage.cache_creation.input_tokens";
/// The messages sent (opt-in content).
pub const INPUT_MESSAGES: &str = "gen_ai.input.messages";
/// The reply (opt-in content).
pub const OUTPUT_MESSAGES: &str = "gen_ai.output.messages";
/// The system prompt, sent apart from the messages (opt-in content).
pub const SYSTEM_INSTRUCTIONS: &str = "gen_ai.system_instructions";
/// The tool's name.
pub const TOOL_NAME: &str = "gen_ai.tool.name";
/// The model's id of the call.
pub const TOOL_CALL_ID: &str = "gen_ai.tool.call.id";
/// `function` for an MCP tool the model called.
pub const TOOL_TYPE: &str = "gen_ai.tool.type";
/// A class of error the operation ended with.
pub const ERROR_TYPE: &str = "error.type";
/// `error.type` of a tool result marked as an error (the MCP conventions' `tool_error`).
pub const TOOL_ERROR: &str = "tool_error";

// MCP attributes.
/// The JSON-RPC method of an MCP request; with the tool's name, the MCP span's name.
pub const MCP_METHOD_NAME: &str = "mcp.method.name";
/// The method of a tool call.
pub const MCP_TOOLS_CALL: &str = "tools/call";
/// The MCP version the server negotiated.
pub const MCP_PROTOCOL_VERSION: &str = "mcp.protocol.version";
/// The JSON-RPC id of the request.
pub const JSONRPC_REQUEST_ID: &str = "jsonrpc.request.id";
/// `pipe` for a stdio server, `tcp` for an HTTP one.
pub const NETWORK_TRANSPORT: &str = "network.transport";
/// The W3C trace context keys put in `params._meta` of an MCP request.
pub const META_TRACEPARENT: &str = "traceparent";
/// See [`META_TRACEPARENT`].
pub const META_TRACESTATE: &str = "tracestate";

// The engine's own.
/// The agent's name in `gen_ai.agent.name`.
pub const AGENT: &str = "hookloop";
/// How a prompt ended (`end_turn`, `max_tokens`, `cancelled`, …).
pub const PROMPT_END_REASON: &str = "hookloop.prompt.end_reason";
/// What a model request was for: `turn` or `summary`.
pub const LLM_PURPOSE: &str = "hookloop.llm.purpose";
/// The MCP server a span talks to, by its configured name.
pub const MCP_SERVER: &str = "hookloop.mcp.server";
/// A hook round: `hookloop.hook {hookloop.hook.name}`.
pub const SPAN_HOOK_ROUND: &str = "hookloop.hook";
/// One server's answer in a round: `hookloop.hook.answer {hookloop.hook.name} {server}`.
pub const SPAN_HOOK_ANSWER: &str = "hookloop.hook.answer";
/// The hook's tool name (`_Stop`, `_PreToolUse`, …).
pub const HOOK_NAME: &str = "hookloop.hook.name";
/// How many servers a round asked.
pub const HOOK_SERVERS: &str = "hookloop.hook.servers";
/// What came of a round or of one server's answer: `objection`, `denied`, `quiet`, `text`,
/// `timeout`, `failed_open`, `skipped`.
pub const HOOK_OUTCOME: &str = "hookloop.hook.outcome";
/// `_Stop` objections so far in the session, as the round began.
pub const HOOK_OBJECTIONS_SO_FAR: &str = "hookloop.hook.objections_so_far";
/// `_Stop` rounds left in the session's budget, as the round began.
pub const HOOK_BUDGET_LEFT: &str = "hookloop.hook.budget_left";
/// The end of a session (ACP `session/close`, the end of a run) and its `_SessionEnd` round:
/// under the last prompt's `invoke_agent` span, in its trace.
pub const SPAN_SESSION_CLOSE: &str = "hookloop.session.close";
/// A compaction of the history.
pub const SPAN_COMPACTION: &str = "hookloop.compaction";
/// Messages in the history before a compaction.
pub const COMPACTION_MESSAGES_BEFORE: &str = "hookloop.compaction.messages_before";
/// Messages in the history after it.
pub const COMPACTION_MESSAGES_AFTER: &str = "hookloop.compaction.messages_after";
/// Whether the model summarized (else the oldest messages were dropped).
pub const COMPACTION_SUMMARIZED: &str = "hookloop.compaction.summarized";
/// A question to the person about a destructive call: `hookloop.permission {tool}`.
pub const SPAN_PERMISSION: &str = "hookloop.permission";
/// The person's decision: `allow_once`, `allow_always`, `reject_once`, `reject_always`, or
/// `cancelled`.
pub const PERMISSION_DECISION: &str = "hookloop.permission.decision";

// Events.
/// A `_Stop` objection: the model is asked again.
pub const EVENT_OBJECTION: &str = "hookloop.objection";
/// `_Stop` was not asked at an end of turn (budget spent, or the objection declined).
pub const EVENT_STOP_SKIPPED: &str = "hookloop.stop_skipped";
/// A hook answer went into the context.
pub const EVENT_HOOK_INJECTED: &str = "hookloop.hook_injected";
/// A `_PreToolUse` answer denied a call.
pub const EVENT_TOOL_DENIED: &str = "hookloop.tool_denied";
/// A hook call ended without a usable answer.
pub const EVENT_HOOK_FAILED_OPEN: &str = "hookloop.hook_failed_open";
/// A server sat a round out.
pub const EVENT_HOOK_SKIPPED: &str = "hookloop.hook_skipped";
/// The history was compacted.
pub const EVENT_COMPACTED: &str = "hookloop.compacted";
/// The person rejected a call.
pub const EVENT_PERMISSION_REJECTED: &str = "hookloop.permission_rejected";
/// The model called a hook or a tool that does not exist.
pub const EVENT_UNKNOWN_TOOL: &str = "hookloop.unknown_tool_refused";
/// The engine ordered a server killed.
pub const EVENT_KILL: &str = "hookloop.supervision.kill";
/// A supervision event of the tool host: a server exited, was restarted or retired.
pub const EVENT_SUPERVISION: &str = "hookloop.supervision";
/// The `_Stop` rounds left after an objection (an event attribute).
pub const BUDGET_LEFT: &str = "hookloop.budget_left";
/// The reason of an event.
pub const REASON: &str = "hookloop.reason";
/// The text of a hook answer (opt-in content).
pub const TEXT: &str = "hookloop.text";
