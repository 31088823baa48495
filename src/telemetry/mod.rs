//! Traces of what a session did, as `tracing` spans named in the OpenTelemetry GenAI and MCP
//! semantic conventions (the names, and the version they follow, are in [`names`]).
//!
//! The spans are derived at the driver's boundary from the machine's orders and the facts that
//! answer them, and hold no policy:
//!
//! ```text
//! invoke_agent hookloop                      a prompt
//! ├── hookloop.hook _UserPromptSubmit        a hook round (events: objection, denial, …)
//! │   └── hookloop.hook.answer _… server     one server's answer
//! │       └── tools/call _…                  the MCP request
//! ├── chat {model}                           a model request
//! ├── execute_tool {tool}                    a tool call
//! │   └── tools/call {tool}                  the MCP request; its trace context goes to the
//! │                                          server in `params._meta`, its JSON-RPC id back
//! ├── execute_tool agent                     a subagent's call
//! │   └── invoke_agent hookloop              the subagent (`gen_ai.agent.id`), its hook
//! │       └── …                              rounds, requests and calls as above
//! ├── hookloop.permission {tool}             a question to the person
//! ├── hookloop.compaction                    a summary of the history, its sizes
//! │   └── chat {model}
//! └── hookloop.session.close                 the session's end (the last prompt's trace)
//!     └── hookloop.hook _SessionEnd
//! ```
//!
//! Every span and event has the target [`names::TARGET`] at `INFO`. An embedder gets them
//! through its own subscriber: with an OpenTelemetry layer (`tracing-opentelemetry`) on its own
//! tracer provider they become OpenTelemetry spans; with the `otel` feature the trace context
//! also reaches MCP servers. The binary exports them over OTLP when the standard variables ask
//! for it ([`export`]).

use std::time::Instant;

use tracing::{Span, field};

pub(crate) use self::events::{BoundaryTrace, effect_event};
use crate::hooks::{Hook, ServerName};
use crate::machine::{
    AgentId, Content, HookContext, HookReply, Input, LlmReply, LlmRequest, PermissionDecision,
    Purpose, ToolCall, ToolOutput,
};
use crate::ports::LlmError;

#[cfg(feature = "otel")]
pub use self::budget::{ContentBudget, DEFAULT_CONTENT_BUDGET, OMITTED};
pub use self::content::CAPTURE_VARIABLE;

#[cfg(feature = "otel")]
mod budget;
mod content;
mod events;
#[cfg(feature = "otel")]
pub mod export;
pub mod names;
#[cfg(feature = "otel")]
mod propagate;

/// A random number for ids that only need to be unlikely to repeat, without a dependency in the
/// core: std's hasher keys are random per process and differ for every `RandomState`.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish()
}

/// What a session's spans say about it beyond each order: the conversation, the model, and
/// whether they carry the messages.
#[derive(Clone, Debug)]
pub struct SessionTrace {
    conversation: String,
    provider: Option<String>,
    model: Option<String>,
    capture_content: bool,
    /// The last prompt's span, whose trace the session's close joins.
    #[cfg(feature = "otel")]
    last_prompt: Option<opentelemetry::Context>,
}

impl Default for SessionTrace {
    fn default() -> Self {
        Self::new()
    }
}

impl SessionTrace {
    /// A session with a fresh conversation id and no model named yet, whose model spans carry
    /// the messages only if [`CAPTURE_VARIABLE`] asks for it.
    pub fn new() -> Self {
        Self {
            conversation: format!("{:016x}{:016x}", random_u64(), random_u64()),
            provider: None,
            model: None,
            capture_content: content::capture_from_env(),
            #[cfg(feature = "otel")]
            last_prompt: None,
        }
    }

    /// Whether the model spans carry what was sent and what came back
    /// (`gen_ai.system_instructions`, `gen_ai.input.messages`, `gen_ai.output.messages`): off
    /// unless [`CAPTURE_VARIABLE`] asks for it, as the conventions want, since the messages may
    /// hold anything the person or the tools said.
    pub fn set_capture_content(&mut self, capture: bool) {
        self.capture_content = capture;
    }

    /// The conversation id (`gen_ai.conversation.id`) the spans carry.
    pub fn conversation_id(&self) -> &str {
        &self.conversation
    }

    /// Sets the conversation id: a front end's own session id, say, so that the trace and the
    /// front end's records name the session alike.
    pub fn set_conversation_id(&mut self, id: impl Into<String>) {
        self.conversation = id.into();
    }

    /// Names the provider (`openai`, `anthropic`) and the model requests go to, for the model
    /// spans (`chat {model}`).
    pub fn set_model(&mut self, provider: impl Into<String>, model: impl Into<String>) {
        self.provider = Some(provider.into());
        self.model = Some(model.into());
    }

    /// The span of one prompt: `invoke_agent hookloop`.
    pub(crate) fn invoke_agent(&mut self) -> Span {
        let span = self.invoke(None);
        #[cfg(feature = "otel")]
        {
            self.last_prompt = propagate::context_of(&span);
        }
        span
    }

    /// The span of the session's close, and of the `_SessionEnd` round in it:
    /// `hookloop.session.close`, in the trace of the last prompt (under its `invoke_agent`
    /// span, which has ended) so that a session's end is found with what it did.
    pub(crate) fn close(&self) -> Span {
        let span = tracing::info_span!(
            target: names::TARGET,
            "hookloop.session.close",
            "otel.name" = names::SPAN_SESSION_CLOSE,
            { names::CONVERSATION_ID } = %self.conversation,
        );
        #[cfg(feature = "otel")]
        if let Some(prompt) = &self.last_prompt {
            propagate::set_parent(&span, prompt);
        }
        span
    }

    /// The span of a subagent's run, under the `execute_tool agent` span of the call that
    /// started it: `invoke_agent hookloop` with the child's id (`gen_ai.agent.id`).
    pub(crate) fn invoke_subagent(&self, agent: &AgentId) -> Span {
        self.invoke(Some(agent))
    }

    fn invoke(&self, agent: Option<&AgentId>) -> Span {
        tracing::info_span!(
            target: names::TARGET,
            "invoke_agent",
            "otel.name" = format_args!("{} {}", names::OP_INVOKE_AGENT, names::AGENT),
            { names::OPERATION_NAME } = names::OP_INVOKE_AGENT,
            { names::AGENT_NAME } = names::AGENT,
            { names::AGENT_ID } = agent.map(|a| a.0.as_str()),
            { names::CONVERSATION_ID } = %self.conversation,
            { names::PROVIDER_NAME } = self.provider.as_deref(),
            { names::REQUEST_MODEL } = self.model.as_deref(),
            { names::PROMPT_END_REASON } = field::Empty,
            { names::ERROR_TYPE } = field::Empty,
            "otel.status_code" = field::Empty,
            "otel.status_description" = field::Empty,
        )
    }

    /// The span of one model request: `chat {model}`, with what it sends if content is
    /// captured.
    pub(crate) fn chat(&self, request: &LlmRequest<'_>) -> Span {
        // Without a model named, the conventions' name is the operation alone.
        let model = self.model.as_deref();
        let space = if model.is_some() { " " } else { "" };
        let purpose = match request.purpose {
            Purpose::Turn => "turn",
            Purpose::Summary { .. } => "summary",
        };
        let span = tracing::info_span!(
            target: names::TARGET,
            "chat",
            "otel.name" = format_args!("{}{space}{}", names::OP_CHAT, model.unwrap_or_default()),
            "otel.kind" = "client",
            { names::OPERATION_NAME } = names::OP_CHAT,
            { names::PROVIDER_NAME } = self.provider.as_deref(),
            { names::REQUEST_MODEL } = model,
            { names::REQUEST_MAX_TOKENS } = request.max_output_tokens,
            { names::REQUEST_STREAM } = field::Empty,
            { names::CONVERSATION_ID } = %self.conversation,
            { names::LLM_PURPOSE } = purpose,
            { names::RESPONSE_MODEL } = field::Empty,
            { names::RESPONSE_FINISH_REASONS } = field::Empty,
            { names::RESPONSE_TIME_TO_FIRST_CHUNK } = field::Empty,
            { names::USAGE_INPUT_TOKENS } = field::Empty,
            { names::USAGE_OUTPUT_TOKENS } = field::Empty,
            { names::USAGE_CACHE_READ_INPUT_TOKENS } = field::Empty,
            { names::USAGE_CACHE_CREATION_INPUT_TOKENS } = field::Empty,
            { names::SYSTEM_INSTRUCTIONS } = field::Empty,
            { names::INPUT_MESSAGES } = field::Empty,
            { names::OUTPUT_MESSAGES } = field::Empty,
            { names::ERROR_TYPE } = field::Empty,
            "otel.status_code" = field::Empty,
            "otel.status_description" = field::Empty,
        );
        if self.capture_content && !span.is_disabled() {
            content::record_input(&span, request);
        }
        span
    }

    /// Records a model request's outcome on its `chat` span (`None`: cancelled), and the reply
    /// if content is captured.
    pub(crate) fn chat_ended(&self, span: &Span, outcome: Option<&Result<LlmReply, LlmError>>) {
        let reason = chat_ended(span, outcome);
        if let (Some(reason), Some(Ok(reply))) = (reason, outcome)
            && self.capture_content
            && !span.is_disabled()
        {
            content::record_output(span, reply, &reason);
        }
    }
}

/// Records how a prompt ended on its `invoke_agent` span: the name of its stop (`end_turn`,
/// `max_tokens`, …), or `failed` with the failure's class and message.
pub(crate) fn prompt_ended(span: &Span, end: Result<&str, (&str, String)>) {
    let reason = match end {
        Ok(reason) => reason,
        Err((class, message)) => {
            fail(span, class, "the prompt failed", &message);
            "failed"
        }
    };
    span.record(names::PROMPT_END_REASON, reason);
}

/// Records how a subagent ended on its `invoke_agent` span, from the result its call gets.
pub(crate) fn subagent_ended(span: &Span, output: &ToolOutput) {
    tool_ended(span, output);
}

/// The time to the first piece of a streamed reply, recorded once on its `chat` span.
pub(crate) struct FirstChunk {
    span: Span,
    sent: Instant,
    seen: bool,
}

impl FirstChunk {
    /// Starts the clock as the request goes out.
    pub(crate) fn new(span: &Span) -> Self {
        Self {
            span: span.clone(),
            sent: Instant::now(),
            seen: false,
        }
    }

    /// A piece of the reply arrived.
    pub(crate) fn seen(&mut self) {
        if !std::mem::replace(&mut self.seen, true) {
            self.span.record(names::REQUEST_STREAM, true);
            self.span.record(
                names::RESPONSE_TIME_TO_FIRST_CHUNK,
                self.sent.elapsed().as_secs_f64(),
            );
        }
    }
}

/// The longest model name a span records: the name comes from the provider's answer, which
/// the engine does not trust to be short.
#[cfg(feature = "providers")]
const MAX_MODEL_NAME: usize = 256;

/// Records the model a provider's answer says answered (`gen_ai.response.model`) on the
/// current span: the `chat` span the driver runs the request in. Nothing when the answer names
/// none, or outside a `chat` span.
#[cfg(feature = "providers")]
pub(crate) fn response_model(model: Option<&str>) {
    let Some(model) = model else { return };
    let span = Span::current();
    if span.is_disabled() {
        return;
    }
    let model = crate::text::cut(
        model,
        MAX_MODEL_NAME,
        crate::text::Cut::Head { marker: "…" },
    );
    span.record(names::RESPONSE_MODEL, model.as_str());
}

/// Records a model request's outcome on its `chat` span (`None`: cancelled); the finish
/// reason of a reply.
fn chat_ended(span: &Span, outcome: Option<&Result<LlmReply, LlmError>>) -> Option<String> {
    match outcome {
        None => {
            fail(span, "cancelled", "the prompt was cancelled", "");
            None
        }
        Some(Ok(reply)) => {
            let reason = serde_json::to_value(&reply.stop)
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default();
            record_strings(
                span,
                names::RESPONSE_FINISH_REASONS,
                std::slice::from_ref(&reason),
            );
            if let Some(usage) = &reply.usage {
                span.record(names::USAGE_INPUT_TOKENS, usage.input_tokens);
                span.record(names::USAGE_OUTPUT_TOKENS, usage.output_tokens);
                span.record(
                    names::USAGE_CACHE_READ_INPUT_TOKENS,
                    usage.cache_read_tokens,
                );
                span.record(
                    names::USAGE_CACHE_CREATION_INPUT_TOKENS,
                    usage.cache_creation_tokens,
                );
            }
            Some(reason)
        }
        Some(Err(error)) => {
            fail(
                span,
                error_class(error),
                "the model request failed",
                &error.to_string(),
            );
            None
        }
    }
}

/// The span of one tool call: `execute_tool {tool}`.
pub(crate) fn execute_tool(call: &ToolCall) -> Span {
    tracing::info_span!(
        target: names::TARGET,
        "execute_tool",
        "otel.name" = format_args!("{} {}", names::OP_EXECUTE_TOOL, call.name),
        { names::OPERATION_NAME } = names::OP_EXECUTE_TOOL,
        { names::TOOL_NAME } = %call.name,
        { names::TOOL_CALL_ID } = %call.id.as_str(),
        { names::TOOL_TYPE } = "function",
        { names::ERROR_TYPE } = field::Empty,
        "otel.status_code" = field::Empty,
        "otel.status_description" = field::Empty,
    )
}

/// Records a tool call's outcome on its `execute_tool` span.
pub(crate) fn tool_ended(span: &Span, output: &ToolOutput) {
    if output.is_error {
        let text = output
            .content
            .iter()
            .find_map(|c| match c {
                Content::Text { text } => Some(text.as_str()),
                Content::Image { .. } | Content::Resource { .. } => None,
            })
            .unwrap_or_default();
        fail(span, names::TOOL_ERROR, "the tool reported an error", text);
    }
}

/// The span of one hook round: `hookloop.hook {hook}`.
pub(crate) fn hook_round(hook: Hook, servers: usize, context: &HookContext) -> Span {
    tracing::info_span!(
        target: names::TARGET,
        "hookloop.hook",
        "otel.name" = format_args!("{} {}", names::SPAN_HOOK_ROUND, hook.tool_name()),
        { names::HOOK_NAME } = hook.tool_name(),
        { names::HOOK_SERVERS } = servers,
        { names::HOOK_OBJECTIONS_SO_FAR } = context.objections_so_far,
        { names::HOOK_BUDGET_LEFT } = context.budget_left,
        { names::HOOK_OUTCOME } = field::Empty,
    )
}

/// The span of one server's answer in a hook round: `hookloop.hook.answer {hook} {server}`.
pub(crate) fn hook_answer(hook: Hook, server: &ServerName) -> Span {
    tracing::info_span!(
        target: names::TARGET,
        "hookloop.hook.answer",
        "otel.name" = format_args!(
            "{} {} {}",
            names::SPAN_HOOK_ANSWER,
            hook.tool_name(),
            server.as_str()
        ),
        { names::HOOK_NAME } = hook.tool_name(),
        { names::MCP_SERVER } = server.as_str(),
        { names::HOOK_OUTCOME } = field::Empty,
        { names::ERROR_TYPE } = field::Empty,
        "otel.status_code" = field::Empty,
        "otel.status_description" = field::Empty,
    )
}

/// Records what a server's hook call came to on its answer span: `text` or `quiet` (an
/// answer, with or without something to say), `timeout`, `failed_open` (an error result or a
/// failed call: the machine counts either as nothing said) or `skipped`.
pub(crate) fn hook_answered(span: &Span, reply: &HookReply) {
    let outcome = match reply {
        HookReply::Text { text } if text.trim().is_empty() => "quiet",
        HookReply::Text { .. } => "text",
        HookReply::ErrorResult { text } => {
            fail(span, names::TOOL_ERROR, "the hook reported an error", text);
            "failed_open"
        }
        HookReply::Failed { error } => {
            fail(
                span,
                "transport",
                "the hook call failed",
                &error.to_string(),
            );
            "failed_open"
        }
        HookReply::TimedOut => {
            fail(span, "timeout", "no answer within the hook timeout", "");
            "timeout"
        }
        HookReply::Skipped { .. } => "skipped",
    };
    span.record(names::HOOK_OUTCOME, outcome);
}

/// The span of a question to the person about a destructive call: `hookloop.permission {tool}`.
pub(crate) fn permission(call: &ToolCall) -> Span {
    tracing::info_span!(
        target: names::TARGET,
        "hookloop.permission",
        "otel.name" = format_args!("{} {}", names::SPAN_PERMISSION, call.name),
        { names::TOOL_NAME } = %call.name,
        { names::TOOL_CALL_ID } = %call.id.as_str(),
        { names::PERMISSION_DECISION } = field::Empty,
    )
}

/// Records the person's decision, from the fact that answers the question (a cancel, or the
/// decision).
pub(crate) fn permission_decided(span: &Span, fact: &Input) {
    let decision = match fact {
        Input::PermissionDecided { decision, .. } => Some(*decision),
        _ => None,
    };
    let decision = match decision {
        Some(PermissionDecision::AllowOnce) => "allow_once",
        Some(PermissionDecision::AllowAlways) => "allow_always",
        Some(PermissionDecision::RejectOnce) => "reject_once",
        Some(PermissionDecision::RejectAlways) => "reject_always",
        None => "cancelled",
    };
    span.record(names::PERMISSION_DECISION, decision);
}

/// The span of a compaction by summary, around its model request; the sizes are recorded when
/// the machine reports the compaction ([`BoundaryTrace`]).
pub(crate) fn compaction(purpose: Purpose) -> Span {
    match purpose {
        Purpose::Turn => Span::none(),
        Purpose::Summary { from } => tracing::info_span!(
            target: names::TARGET,
            "hookloop.compaction",
            "otel.name" = names::SPAN_COMPACTION,
            "hookloop.compaction.from" = from,
            { names::COMPACTION_SUMMARIZED } = field::Empty,
            { names::COMPACTION_MESSAGES_BEFORE } = field::Empty,
            { names::COMPACTION_MESSAGES_AFTER } = field::Empty,
        ),
    }
}

/// The span of an MCP request, under the span of what it serves (`execute_tool`, a hook
/// answer): `tools/call {tool}`, in the MCP conventions.
pub fn mcp_call(server: &str, tool: &str, protocol_version: Option<&str>, pipe: bool) -> Span {
    tracing::info_span!(
        target: names::TARGET,
        "tools/call",
        "otel.name" = format_args!("{} {tool}", names::MCP_TOOLS_CALL),
        "otel.kind" = "client",
        { names::MCP_METHOD_NAME } = names::MCP_TOOLS_CALL,
        { names::TOOL_NAME } = tool,
        { names::OPERATION_NAME } = names::OP_EXECUTE_TOOL,
        { names::MCP_PROTOCOL_VERSION } = protocol_version,
        { names::JSONRPC_REQUEST_ID } = field::Empty,
        { names::MCP_SERVER } = server,
        { names::NETWORK_TRANSPORT } = if pipe { "pipe" } else { "tcp" },
        { names::ERROR_TYPE } = field::Empty,
        "otel.status_code" = field::Empty,
        "otel.status_description" = field::Empty,
    )
}

/// Records that an MCP request failed without an answer on its span.
pub fn mcp_failed(span: &Span, error: &str) {
    fail(span, "transport", "the request failed", error);
}

/// The W3C trace context of `span` (`traceparent`, and `tracestate` when there is one), for
/// an MCP request's `params._meta`: empty unless the `otel` feature is on and an OpenTelemetry
/// layer records the span.
pub fn trace_context(span: &Span) -> Vec<(&'static str, String)> {
    #[cfg(feature = "otel")]
    {
        propagate::trace_context(span)
    }
    #[cfg(not(feature = "otel"))]
    {
        let _ = span;
        Vec::new()
    }
}

/// Sends the spans ended so far to the collector, off the caller's thread, without waiting:
/// a session that closes must not wait on a collector. Nothing without the `otel` feature or
/// an exporter.
pub fn flush_in_background() {
    #[cfg(feature = "otel")]
    export::flush_in_background();
}

/// Sets a string-array attribute (`gen_ai.response.finish_reasons`): an array where an
/// OpenTelemetry layer records the span, the values joined with `,` elsewhere.
fn record_strings(span: &Span, key: &'static str, values: &[String]) {
    #[cfg(feature = "otel")]
    if propagate::set_strings(span, key, values) {
        return;
    }
    span.record(key, values.join(",").as_str());
}

/// The most of a failure's own text a captured status description carries: a span's status is
/// held with it until the span is sent, and a tool's error output has no size of its own.
const DETAIL_CAP: usize = 4096;

/// Marks a span failed, with the class of the error and a fixed description of it. The
/// failure's own text (a tool's error output, a hook's error text, which may echo a call's
/// arguments and result, a provider's or a subagent's words) is content: it joins the
/// description only when the operator opted in to content ([`CAPTURE_VARIABLE`]), as the
/// messages themselves do, and then without URL queries or user info, cut to [`DETAIL_CAP`].
fn fail(span: &Span, class: &str, fixed: &'static str, detail: &str) {
    span.record(names::ERROR_TYPE, class);
    span.record("otel.status_code", "error");
    if content::capture_from_env() && !detail.is_empty() {
        let detail = crate::text::without_url_secrets(detail);
        let detail = crate::text::cut(&detail, DETAIL_CAP, crate::text::Cut::Middle);
        span.record(
            "otel.status_description",
            format!("{fixed}: {detail}").as_str(),
        );
    } else {
        span.record("otel.status_description", fixed);
    }
}

/// A low-cardinality class of a model request's failure.
fn error_class(error: &LlmError) -> &'static str {
    match error {
        LlmError::Status { .. } => "http_status",
        LlmError::Transport(_) => "transport",
        LlmError::Timeout { .. } => "timeout",
        LlmError::InvalidResponse(_) => "invalid_response",
        LlmError::ReplyTooLarge { .. } => "reply_too_large",
        LlmError::ReplyDeadline { .. } => "reply_deadline",
        LlmError::Other(_) => "other",
    }
}
