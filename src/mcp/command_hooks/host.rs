//! [`WithCommandHooks`]: a [`ToolHost`] that adds command hooks to another as servers of
//! hooks only. The machine asks each source as it asks any server — the same rounds, the
//! allowlist, the timeout and kill, the `_Stop` budget and the consecutive rule — and the
//! source answers by running the matching commands and reading their answers under their host's
//! rules. Nothing here decides what an answer means for the session: that is the machine's.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use serde_json::json;
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use super::events::{self, Facts, Invocation, Target};
use super::files::{CommandHooks, CommandHooksError, Handler, Source};
use super::run::{self, Ran};
use crate::bridge::hosts::{Reply, Verdict};
use crate::hooks::{Hook, MAX_HOOK_TEXT_BYTES, ServerName};
use crate::machine::{Catalog, HookFault, HookReply, ServerTools, ToolCall, ToolInfo, ToolOutput};
use crate::ports::{HookCall, Person, ToolHost};
use crate::text::{Cut, cut};

/// Commands of one session that run at once, across its sources; the rest wait for a slot
/// within their hook's timeout.
pub const MAX_CONCURRENT_COMMANDS: usize = 8;

/// A tool host with command hooks beside its servers.
///
/// Each source of [`CommandHooks`] shows in the catalog as a server of that name listing only
/// the `_` hooks its commands run at, after the inner host's servers. The session's policy
/// should carry [`Policy::hook_details`](crate::Policy::hook_details), or the commands' events
/// lack what only those details say (`stop_hook_active`, `last_assistant_message`,
/// `tool_use_id`).
pub struct WithCommandHooks<H> {
    inner: H,
    sources: Vec<Live>,
    shared: Arc<Shared>,
}

struct Live {
    source: Source,
    /// The hooks some command of the source runs at.
    hooks: Vec<Hook>,
    /// Bumped to kill the source's running commands.
    kill: watch::Sender<u64>,
}

struct Shared {
    cwd: PathBuf,
    session_id: Mutex<Arc<str>>,
    transcript: Mutex<Option<String>>,
    slots: Semaphore,
}

impl<H: ToolHost> WithCommandHooks<H> {
    /// `inner` with `hooks`, whose commands run in `cwd`. A source named like one of the inner
    /// host's servers is an error.
    pub fn new(
        inner: H,
        hooks: CommandHooks,
        cwd: impl Into<PathBuf>,
    ) -> Result<Self, CommandHooksError> {
        let catalog = inner.catalog();
        for source in &hooks.sources {
            if catalog.servers.iter().any(|s| s.server == source.name) {
                return Err(CommandHooksError::Names(format!(
                    "the command hooks of {} are named {}, as an MCP server is; name them \
                     otherwise with NAME=PATH",
                    source.files[0].display(),
                    source.name
                )));
            }
        }
        let session_id: Arc<str> = Arc::from(format!("{:016x}", fastrand::u64(..)));
        // One id for the servers' `_meta` and the commands' events.
        inner.set_session_id(&session_id);
        let sources = hooks
            .sources
            .into_iter()
            .map(|source| Live {
                hooks: hosted(&source),
                source,
                kill: watch::channel(0).0,
            })
            .collect();
        Ok(Self {
            inner,
            sources,
            shared: Arc::new(Shared {
                cwd: cwd.into(),
                session_id: Mutex::new(session_id),
                transcript: Mutex::new(None),
                slots: Semaphore::new(MAX_CONCURRENT_COMMANDS),
            }),
        })
    }

    /// `inner` alone.
    pub fn without(inner: H) -> Self {
        Self {
            inner,
            sources: Vec::new(),
            shared: Arc::new(Shared {
                cwd: PathBuf::new(),
                session_id: Mutex::new(Arc::from("")),
                transcript: Mutex::new(None),
                slots: Semaphore::new(MAX_CONCURRENT_COMMANDS),
            }),
        }
    }

    /// The host the command hooks sit beside.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    /// The command hooks' sources, by name.
    pub fn source_names(&self) -> impl Iterator<Item = &ServerName> {
        self.sources.iter().map(|live| &live.source.name)
    }

    /// The session's transcript from now on, for the commands' `transcript_path`; `None`
    /// (`null` in the events) when the session is not recorded.
    pub fn set_transcript_path(&self, path: Option<&Path>) {
        *lock(&self.shared.transcript) = path.map(|p| p.to_string_lossy().into_owned());
    }

    fn live(&self, server: &ServerName) -> Option<&Live> {
        self.sources.iter().find(|live| live.source.name == *server)
    }
}

/// The hooks a source's commands run at: a command whose event carries the hook, and whose
/// matcher takes the event's value where that value is always the same.
fn hosted(source: &Source) -> Vec<Hook> {
    Hook::EVERY
        .into_iter()
        .filter(|hook| {
            events::events_of(source.host, *hook)
                .iter()
                .any(|(event, target)| {
                    source.handlers.iter().any(|h| {
                        h.event == *event
                            && match target {
                                Target::Fixed(value) => h.matcher.matches(value),
                                Target::None | Target::Varies => true,
                            }
                    })
                })
        })
        .collect()
}

impl<H: ToolHost> ToolHost for WithCommandHooks<H> {
    fn catalog_generation(&self) -> u64 {
        self.inner.catalog_generation()
    }

    fn catalog(&self) -> Catalog {
        let mut catalog = self.inner.catalog();
        for live in &self.sources {
            let files: Vec<String> = live
                .source
                .files
                .iter()
                .map(|f| f.display().to_string())
                .collect();
            let description = format!("{} command hooks of {}", live.source.host, files.join(", "));
            catalog.servers.push(ServerTools {
                server: live.source.name.clone(),
                tools: live
                    .hooks
                    .iter()
                    .map(|hook| ToolInfo {
                        description: description.clone(),
                        ..ToolInfo::new(hook.tool_name(), json!({"type": "object"}))
                    })
                    .collect(),
            });
        }
        catalog
    }

    async fn call_tool(&self, call: &ToolCall) -> ToolOutput {
        // A source has no tools: a call naming one is the inner host's to refuse.
        self.inner.call_tool(call).await
    }

    async fn call_hook(&self, call: &HookCall) -> HookReply {
        match self.live(&call.server) {
            Some(live) => ask(live, &self.shared, call).await,
            None => self.inner.call_hook(call).await,
        }
    }

    async fn kill_server(&self, server: &ServerName) {
        match self.live(server) {
            Some(live) => {
                tracing::warn!(%server, "killing the command hooks that still run");
                live.kill.send_modify(|generation| *generation += 1);
            }
            None => self.inner.kill_server(server).await,
        }
    }

    fn set_person(&self, person: Arc<dyn Person>) {
        self.inner.set_person(person);
    }

    fn set_session_id(&self, id: &str) {
        *lock(&self.shared.session_id) = Arc::from(id);
        self.inner.set_session_id(id);
    }

    fn take_supervision(&self) -> Vec<crate::supervisor::Event> {
        self.inner.take_supervision()
    }

    fn supervision_policy(&self) -> Option<crate::supervisor::SupervisorPolicy> {
        self.inner.supervision_policy()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// How one command of a round ended.
struct Answered<'a> {
    invocation: &'a Invocation,
    handler: &'a Handler,
    ran: Ran,
}

/// One hook call on a source: its events, the commands whose matchers take them (each command
/// once per event), all run at once within the call's timeout, their answers combined.
async fn ask(live: &Live, shared: &Shared, call: &HookCall) -> HookReply {
    let deadline = Instant::now() + call.timeout;
    let facts = Facts {
        session_id: lock(&shared.session_id).to_string(),
        transcript_path: lock(&shared.transcript).clone(),
        cwd: shared.cwd.to_string_lossy().into_owned(),
    };
    let source = &live.source;
    let invocations = events::invocations(
        source.host,
        call.hook,
        &call.arguments,
        &call.context,
        &facts,
    );
    let mut chosen: Vec<(&Invocation, &Handler)> = Vec::new();
    for invocation in &invocations {
        let mut seen = HashSet::new();
        for handler in &source.handlers {
            let takes = match &invocation.target {
                Some(value) => handler.matcher.matches(value),
                None => true,
            };
            if handler.event == invocation.event.name() && takes && seen.insert(&handler.command) {
                chosen.push((invocation, handler));
            }
        }
    }
    let inputs: Vec<Vec<u8>> = invocations
        .iter()
        .map(|i| i.event.to_json().into_bytes())
        .collect();
    let mut running: FuturesUnordered<_> = chosen
        .iter()
        .enumerate()
        .map(|(order, (invocation, handler))| {
            let index = invocations
                .iter()
                .position(|i| std::ptr::eq(i, *invocation))
                .unwrap_or(0);
            let stdin = &inputs[index];
            let mut kill = live.kill.subscribe();
            async move {
                let ran = run_one(shared, handler, stdin, deadline, &mut kill).await;
                (order, ran)
            }
        })
        .collect();
    let mut ended: Vec<(usize, Ran)> = Vec::with_capacity(chosen.len());
    while let Some(one) = running.next().await {
        ended.push(one);
    }
    ended.sort_by_key(|(order, _)| *order);
    let answers = ended
        .into_iter()
        .map(|(order, ran)| Answered {
            invocation: chosen[order].0,
            handler: chosen[order].1,
            ran,
        })
        .collect::<Vec<_>>();
    combine(&source.name, call.hook, &answers)
}

/// Runs one command once a slot is free, within its own timeout where that is sooner.
async fn run_one(
    shared: &Shared,
    handler: &Handler,
    stdin: &[u8],
    deadline: Instant,
    kill: &mut watch::Receiver<u64>,
) -> Ran {
    let Ok(Ok(_slot)) = tokio::time::timeout_at(deadline, shared.slots.acquire()).await else {
        return Ran::TimedOut;
    };
    let deadline = handler
        .timeout
        .and_then(|own| Instant::now().checked_add(own))
        .map_or(deadline, |own| own.min(deadline));
    let command = run::Command {
        text: &handler.command,
        cwd: &shared.cwd,
        env: &handler.env,
    };
    let ran = run::run(&command, stdin, deadline, kill).await;
    tracing::debug!(hook = %handler.origin, ?ran, "command hook ran");
    ran
}

/// The commands' answers as the source's one reply: every block or context they gave, in
/// configuration order; else a timeout, a failure or an error exit, in that order of weight
/// (each fails open in the machine); else nothing to say.
fn combine(server: &ServerName, hook: Hook, answers: &[Answered<'_>]) -> HookReply {
    let mut said: Vec<String> = Vec::new();
    let mut timed_out = false;
    let mut failed: Vec<String> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    for answer in answers {
        let origin = &answer.handler.origin;
        let (code, stdout, stderr, cut_short) = match &answer.ran {
            Ran::Exited {
                code,
                stdout,
                stderr,
                cut,
            } => (*code, stdout, stderr, *cut),
            Ran::TimedOut => {
                tracing::warn!(%server, hook = %origin, "command hook timed out; its process group was killed");
                timed_out = true;
                continue;
            }
            Ran::Failed(why) => {
                tracing::warn!(%server, hook = %origin, "command hook failed: {why}");
                failed.push(format!("{origin}: {why}"));
                continue;
            }
        };
        if cut_short {
            tracing::warn!(%server, hook = %origin, "its stdout passed {} bytes and was cut", run::MAX_STDOUT_BYTES);
        }
        let reply = Reply {
            exit_code: code,
            stdout: stdout.clone(),
            stderr: stderr.clone(),
        };
        let decoded = answer.invocation.event.decode(&reply);
        for what in &decoded.ignored {
            tracing::warn!(%server, hook = %origin, "the hook asked for {what}: not done");
        }
        let event = answer.invocation.event.name();
        let takes = answer.invocation.takes;
        let before = said.len();
        match decoded.verdict {
            Verdict::Block(text) if takes.block => {
                if hook == Hook::UserPromptSubmit {
                    tracing::warn!(%server, hook = %origin, "the hook blocks the prompt: hookloop does not hold prompts back; the model gets its reason as context");
                }
                said.push(if text.trim().is_empty() {
                    format!("blocked by a {event} hook, with no reason given")
                } else {
                    text
                });
            }
            Verdict::Context(text) if takes.context => said.push(text),
            Verdict::Block(_) => {
                tracing::warn!(%server, hook = %origin, "a block at {event} has no equivalent at {hook}: ignored");
            }
            Verdict::Context(_) => {
                tracing::warn!(%server, hook = %origin, "context at {event} has no equivalent at {hook}: ignored");
            }
            Verdict::Quiet => {}
        }
        if said.len() == before && code != 0 && code != 2 {
            let first = stderr.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
            errors.push(format!(
                "{origin}: exit {code}: {}",
                crate::text::one_line(first, 300)
            ));
        }
    }
    if !said.is_empty() {
        return HookReply::Text {
            text: cut(&said.join("\n\n"), MAX_HOOK_TEXT_BYTES, Cut::Middle),
        };
    }
    if timed_out {
        return HookReply::TimedOut;
    }
    if !failed.is_empty() {
        return HookReply::Failed {
            error: HookFault::Commands(cut(&failed.join("; "), MAX_HOOK_TEXT_BYTES, Cut::Middle)),
        };
    }
    if !errors.is_empty() {
        return HookReply::ErrorResult {
            text: cut(&errors.join("; "), MAX_HOOK_TEXT_BYTES, Cut::Middle),
        };
    }
    HookReply::Text {
        text: String::new(),
    }
}

#[cfg(test)]
mod tests;
