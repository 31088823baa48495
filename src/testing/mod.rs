//! Scripted fakes of the two injected traits, for tests and examples (feature `testing`).
//!
//! [`ScriptedLlm`] answers each request with the next step of its script and keeps every request
//! it saw, checking on each that every tool result answers exactly one earlier call and that no
//! hook is offered to the model. [`InProcessHost`] is a tool host whose tools and hooks are
//! closures and scripted answers in this process. Neither pretends to be a real provider or a
//! real MCP server; the integration tests of those use real ones.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Value, json};

use crate::hooks::{self, Hook, ServerName};
use crate::machine::{
    CallId, Catalog, HookReply, LlmReply, LlmRequest, Message, Purpose, ServerTools, StopReason,
    ToolCall, ToolHints, ToolInfo, ToolOutput, ToolSpec, Usage,
};
use crate::ports::{HookCall, LlmClient, LlmError, ToolHost};

pub mod compaction;
pub mod consent;
pub mod explore;
pub mod families;
mod invariants;
pub mod liveness;
pub mod rounds;
pub mod runs;
mod transition;
pub mod words;

pub use self::invariants::Invariants;
pub use self::transition::{Transition, Violation};
pub use crate::machine::check_pairing;

/// A request as the scripted model saw it.
#[derive(Clone, Debug, PartialEq)]
pub struct SeenRequest {
    /// What the request was for.
    pub purpose: Purpose,
    /// The system prompt.
    pub system: Option<String>,
    /// The history sent.
    pub messages: Vec<Message>,
    /// The tools offered.
    pub tools: Vec<ToolSpec>,
    /// The summary instruction, for a summary request.
    pub instruction: Option<String>,
}

/// One step of a model script.
#[derive(Clone, Debug)]
pub enum Step {
    /// Answer with this reply.
    Reply(LlmReply),
    /// Fail with this message.
    Fail(String),
    /// Never answer (the test cancels).
    Hang,
}

impl Step {
    /// A text reply that ends the turn.
    pub fn text(text: impl Into<String>) -> Self {
        Self::Reply(LlmReply {
            text: text.into(),
            stop: StopReason::EndTurn,
            ..LlmReply::default()
        })
    }

    /// A reply that calls these tools, each `(qualified name, arguments)`, with ids `c1`, `c2`…
    /// numbered from `first_id`.
    pub fn tools(first_id: u32, calls: &[(&str, Value)]) -> Self {
        let tool_calls = calls
            .iter()
            .zip(first_id..)
            .map(|((name, arguments), n)| ToolCall {
                id: CallId(format!("c{n}")),
                name: (*name).to_owned(),
                arguments: arguments.clone(),
            })
            .collect();
        Self::Reply(LlmReply {
            text: String::new(),
            tool_calls,
            stop: StopReason::ToolUse,
            usage: None,
        })
    }

    /// A reply that stops for `stop` with no tool calls.
    pub fn stop(stop: StopReason) -> Self {
        Self::Reply(LlmReply {
            text: format!("stopping: {stop:?}"),
            stop,
            ..LlmReply::default()
        })
    }

    /// The same step, reporting this many input tokens.
    pub fn with_input_tokens(self, input_tokens: u64) -> Self {
        match self {
            Self::Reply(mut reply) => {
                reply.usage = Some(Usage {
                    input_tokens,
                    output_tokens: 10,
                    ..Usage::default()
                });
                Self::Reply(reply)
            }
            other => other,
        }
    }
}

/// A model that follows a script, one step per request, and remembers every request.
///
/// When the script runs out it fails the request with `script exhausted`, so a test that
/// expected fewer requests fails loudly instead of hanging.
#[derive(Clone, Debug, Default)]
pub struct ScriptedLlm {
    inner: Arc<Mutex<Script>>,
}

#[derive(Debug, Default)]
struct Script {
    steps: VecDeque<Step>,
    seen: Vec<SeenRequest>,
    violations: Vec<String>,
}

impl ScriptedLlm {
    /// A model that takes these steps in order.
    pub fn new(steps: impl IntoIterator<Item = Step>) -> Self {
        let script = Script {
            steps: steps.into_iter().collect(),
            ..Script::default()
        };
        Self {
            inner: Arc::new(Mutex::new(script)),
        }
    }

    /// Appends steps to the script.
    pub fn push(&self, steps: impl IntoIterator<Item = Step>) {
        self.lock().steps.extend(steps);
    }

    /// Every request seen so far.
    pub fn requests(&self) -> Vec<SeenRequest> {
        self.lock().seen.clone()
    }

    /// Steps not yet taken.
    pub fn remaining(&self) -> usize {
        self.lock().steps.len()
    }

    /// Invariant violations seen on requests (pairing, hooks offered). Empty when all is well.
    pub fn violations(&self) -> Vec<String> {
        self.lock().violations.clone()
    }

    fn lock(&self) -> MutexGuard<'_, Script> {
        // A panic while holding the lock is a test failure already; keep reading.
        crate::text::lock(&self.inner)
    }
}

impl LlmClient for ScriptedLlm {
    async fn complete(&self, request: LlmRequest<'_>) -> Result<LlmReply, LlmError> {
        let step = {
            let mut script = self.lock();
            let n = script.seen.len();
            if let Err(violation) = check_pairing(request.messages) {
                script.violations.push(format!("request {n}: {violation}"));
            }
            for tool in request.tools {
                if hooks::is_hook(hooks::bare_name(&tool.name)) {
                    script
                        .violations
                        .push(format!("request {n}: hook {} offered", tool.name));
                }
            }
            script.seen.push(SeenRequest {
                purpose: request.purpose,
                system: request.system.map(str::to_owned),
                messages: request.messages.to_vec(),
                tools: request.tools.to_vec(),
                instruction: request.instruction.map(str::to_owned),
            });
            script.steps.pop_front()
        };
        match step {
            Some(Step::Reply(reply)) => Ok(reply),
            Some(Step::Fail(message)) => Err(LlmError::Other(message)),
            Some(Step::Hang) => std::future::pending().await,
            None => Err(LlmError::Other("script exhausted".into())),
        }
    }
}

/// How a scripted hook answers one call.
#[derive(Clone, Debug)]
pub enum HookStep {
    /// Answer this text (empty = no objection).
    Say(String),
    /// Answer with an `isError` result.
    ErrorResult(String),
    /// Fail as a broken transport would.
    Fail(String),
    /// Never answer: the call times out.
    Hang,
    /// Answer this text after a delay (a timeout if longer than the hook timeout).
    SayAfter(Duration, String),
}

type ToolFn = Arc<dyn Fn(&Value) -> ToolOutput + Send + Sync>;

/// A tool host in this process: tools are closures, hooks answer from scripts.
#[derive(Clone, Default)]
pub struct InProcessHost {
    inner: Arc<Mutex<HostState>>,
    generation: Arc<AtomicU64>,
}

#[derive(Default)]
struct HostState {
    servers: Vec<ServerName>,
    tools: Vec<(ServerName, ToolInfo, Option<ToolFn>)>,
    hook_scripts: HashMap<(ServerName, Hook), VecDeque<HookStep>>,
    tool_delay: Option<Duration>,
    log: Vec<HostEvent>,
}

/// Something the host was asked to do.
#[derive(Clone, Debug, PartialEq)]
pub enum HostEvent {
    /// A tool was called.
    Tool {
        /// The qualified tool name.
        name: String,
        /// The arguments.
        arguments: Value,
    },
    /// A hook was called.
    Hook {
        /// The server.
        server: ServerName,
        /// The hook.
        hook: Hook,
    },
    /// A server was killed.
    Kill {
        /// The server.
        server: ServerName,
    },
}

impl InProcessHost {
    /// A host with no servers.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a tool (bare name) to `server`, answering with `f`.
    pub fn tool(
        self,
        server: &str,
        name: &str,
        f: impl Fn(&Value) -> ToolOutput + Send + Sync + 'static,
    ) -> Self {
        self.add(server, name, Some(Arc::new(f)));
        self
    }

    /// Adds a hook to `server`, answering calls with `steps` in turn; once they run out, with
    /// no objection.
    pub fn hook(self, server: &str, hook: Hook, steps: impl IntoIterator<Item = HookStep>) -> Self {
        self.add(server, hook.tool_name(), None);
        let server = server_name(server);
        self.lock()
            .hook_scripts
            .entry((server, hook))
            .or_default()
            .extend(steps);
        self
    }

    /// Gives a tool its server's hints (as MCP annotations would).
    pub fn hints(self, server: &str, name: &str, hints: ToolHints) -> Self {
        let server = server_name(server);
        let mut state = self.lock();
        for (s, info, _) in &mut state.tools {
            if *s == server && info.name == name {
                info.hints = hints;
            }
        }
        drop(state);
        self.generation.fetch_add(1, Ordering::SeqCst);
        self
    }

    /// Delays every tool call (for cancellation tests).
    pub fn tool_delay(self, delay: Duration) -> Self {
        self.lock().tool_delay = Some(delay);
        self
    }

    /// Removes a server and its tools from the catalog.
    pub fn remove_server(&self, server: &str) {
        let server = server_name(server);
        let mut state = self.lock();
        state.servers.retain(|s| *s != server);
        state.tools.retain(|(s, _, _)| *s != server);
        drop(state);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Everything the host was asked to do, in order.
    pub fn log(&self) -> Vec<HostEvent> {
        self.lock().log.clone()
    }

    /// How many times `hook` was called on `server`.
    pub fn hook_calls(&self, server: &str, hook: Hook) -> usize {
        let server = server_name(server);
        self.log()
            .iter()
            .filter(|e| matches!(e, HostEvent::Hook { server: s, hook: h } if *s == server && *h == hook))
            .count()
    }

    fn add(&self, server: &str, name: &str, f: Option<ToolFn>) {
        let server = server_name(server);
        let mut state = self.lock();
        if !state.servers.contains(&server) {
            state.servers.push(server.clone());
        }
        let info = ToolInfo {
            name: name.to_owned(),
            description: format!("{name} on {server}"),
            input_schema: json!({"type": "object"}),
            hints: ToolHints::default(),
        };
        state.tools.push((server, info, f));
        drop(state);
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    fn lock(&self) -> MutexGuard<'_, HostState> {
        crate::text::lock(&self.inner)
    }
}

fn server_name(name: &str) -> ServerName {
    ServerName::new(name).unwrap_or_else(|e| panic!("test server name: {e}"))
}

impl ToolHost for InProcessHost {
    fn catalog_generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    fn catalog(&self) -> Catalog {
        let state = self.lock();
        let servers = state
            .servers
            .iter()
            .map(|server| ServerTools {
                server: server.clone(),
                tools: state
                    .tools
                    .iter()
                    .filter(|(s, _, _)| s == server)
                    .map(|(_, info, _)| info.clone())
                    .collect(),
            })
            .collect();
        Catalog { servers }
    }

    async fn call_tool(&self, call: &ToolCall) -> ToolOutput {
        let (f, delay) = {
            let mut state = self.lock();
            state.log.push(HostEvent::Tool {
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
            let f = hooks::split_qualified(&call.name).and_then(|(server, tool)| {
                state
                    .tools
                    .iter()
                    .find(|(s, info, _)| s.as_str() == server && info.name == tool)
                    .and_then(|(_, _, f)| f.clone())
            });
            (f, state.tool_delay)
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        match f {
            Some(f) => f(&call.arguments),
            None => ToolOutput::error(format!("unknown tool: {}", call.name)),
        }
    }

    async fn call_hook(&self, call: &HookCall) -> HookReply {
        let step = {
            let mut state = self.lock();
            state.log.push(HostEvent::Hook {
                server: call.server.clone(),
                hook: call.hook,
            });
            state
                .hook_scripts
                .get_mut(&(call.server.clone(), call.hook))
                .and_then(VecDeque::pop_front)
        };
        let answer = async {
            match step {
                None => HookReply::Text {
                    text: String::new(),
                },
                Some(HookStep::Say(text)) => HookReply::Text { text },
                Some(HookStep::ErrorResult(text)) => HookReply::ErrorResult { text },
                Some(HookStep::Fail(error)) => HookReply::Failed {
                    error: error.into(),
                },
                Some(HookStep::Hang) => std::future::pending().await,
                Some(HookStep::SayAfter(delay, text)) => {
                    tokio::time::sleep(delay).await;
                    HookReply::Text { text }
                }
            }
        };
        tokio::time::timeout(call.timeout, answer)
            .await
            .unwrap_or(HookReply::TimedOut)
    }

    async fn kill_server(&self, server: &ServerName) {
        self.lock().log.push(HostEvent::Kill {
            server: server.clone(),
        });
    }
}

/// A tool that echoes its arguments as text.
pub fn echo(arguments: &Value) -> ToolOutput {
    ToolOutput::text(arguments.to_string())
}
