//! Hook words: what a hook round leads the machine to say (an objection, an injected context, a
//! denial, compaction guidance) is exactly what a server of that round said, and what enters
//! the history is the encoded JSON body of it. A timeout, an error result, a failed or skipped
//! call and an empty answer say nothing: a hook fails open. And the converse, for the hooks
//! whose words are context (`_SessionStart`, `_UserPromptSubmit`, `_PostToolUse`, `_Stop`,
//! `_PostCompact` and the subagent twins): when the facts complete such a round, every
//! non-empty answer of it is in the history, as its server's encoded body, on that fact.

use crate::hooks::{self, Hook, ServerName};
use crate::machine::{Canon, Effect, HookReply, Input, Message, Notice, Phase};

use super::transition::{Transition, Violation, ensure};

/// The rule a hook's words break when they did not come from its server.
pub const RULE: &str = "a hook's words are only what its servers said, injected encoded";
/// The rule a context hook's words break when they never reach the history.
pub const INJECTED: &str = "what a context hook's server said is injected when its round completes";

/// What the rule remembers: the open round's non-empty answers.
#[derive(Clone, Debug, Default)]
pub struct HookWords {
    said: Vec<(ServerName, String)>,
    /// The open round's hook and how many answers it still waits for, counted from its
    /// order and the facts.
    open: Option<(Hook, usize)>,
}

/// Whether a hook's words are context the history carries.
fn injects(hook: Hook) -> bool {
    matches!(
        hook,
        Hook::SessionStart
            | Hook::UserPromptSubmit
            | Hook::PostToolUse
            | Hook::Stop
            | Hook::PostCompact
            | Hook::SubagentStart
            | Hook::SubagentStop
    )
}

/// How many hook pairs of `server`'s `hook` with `body` a history holds.
fn pairs(history: &[Message], server: &str, hook: Hook, body: &str) -> usize {
    let name = hooks::qualify(server, hook.tool_name());
    history
        .iter()
        .filter_map(|message| match message {
            Message::Assistant { tool_calls, .. } => Some(tool_calls),
            _ => None,
        })
        .flatten()
        .filter(|call| call.name == name)
        .filter(|call| {
            history.iter().any(|message| {
                matches!(message, Message::ToolResult { call_id, output }
                    if *call_id == call.id && output.joined_text() == body)
            })
        })
        .count()
}

impl HookWords {
    /// Appends what the rule remembers to `e`, for an explorer's fingerprint.
    pub fn fingerprint(&self, e: &mut Canon) {
        e.num(self.said.len() as u64);
        for (server, text) in &self.said {
            e.str(server.as_str());
            e.str(text);
        }
        match self.open {
            None => e.tag(0),
            Some((hook, left)) => {
                e.tag(1);
                e.num(hook.index() as u64);
                e.num(left as u64);
            }
        }
    }

    /// Checks the words a fact led to.
    pub fn check(&mut self, step: &Transition<'_>) -> Result<(), Violation> {
        if let Input::HookAnswered {
            server,
            hook,
            reply: HookReply::Text { text },
            ..
        } = step.fact
            && step.before == Phase::of_hook(*hook)
            && !text.trim().is_empty()
        {
            self.said.push((server.clone(), text.trim().to_owned()));
        }
        let completed = match (step.fact, &mut self.open) {
            (Input::HookAnswered { hook, .. }, Some((open, left)))
                if hook == open && step.before == Phase::of_hook(*hook) && *left > 0 =>
            {
                *left -= 1;
                (*left == 0).then_some(*hook)
            }
            _ => None,
        };
        if completed.is_some() {
            self.open = None;
        }
        for effect in step.effects {
            let Effect::Notify { notice } = effect else {
                continue;
            };
            let (server, text) = match notice {
                Notice::Objection { server, text, .. }
                | Notice::PostCompactInjected { server, text }
                | Notice::HookInjected { server, text, .. }
                | Notice::ToolDenied { server, text, .. } => (server, text),
                _ => continue,
            };
            ensure(self.heard(server, |said| said == text), RULE, || {
                format!("{server} said {text:?}? it said {:?}", self.said)
            })?;
        }
        // Hook pairs enter the history only on the answer that completes a round (the rule of
        // `Invariants::check_injections`); a model's own call to a hook's name is not one.
        let after = step.machine.history();
        if matches!(step.fact, Input::HookAnswered { .. })
            && after.len() > step.history_before.len()
            && after.starts_with(step.history_before)
        {
            let added = &after[step.history_before.len()..];
            for message in added {
                let Message::ToolResult { call_id, output } = message else {
                    continue;
                };
                let pair = added.iter().find_map(|m| match m {
                    Message::Assistant { tool_calls, .. } => {
                        tool_calls.iter().find(|c| c.id == *call_id)
                    }
                    _ => None,
                });
                let Some((server, hook)) = pair.and_then(|call| {
                    let (server, bare) = hooks::split_qualified(&call.name)?;
                    Some((server, Hook::from_tool_name(bare)?))
                }) else {
                    continue;
                };
                let body = output.joined_text();
                ensure(
                    self.heard_from(server, |said| {
                        body == hooks::encode_hook_body(hook, server, said)
                    }),
                    RULE,
                    || format!("{server}'s {hook} injected as {body:?}"),
                )?;
            }
        }
        if let Some(hook) = completed.filter(|hook| injects(*hook)) {
            self.check_injected(step, hook)?;
        }
        let opened = step.effects.iter().find_map(|e| match e {
            Effect::CallHooks {
                hook,
                servers,
                subjects,
                ..
            } => Some((*hook, servers.len() * subjects.len().max(1))),
            _ => None,
        });
        if opened.is_some() || matches!(step.fact, Input::Cancelled | Input::Closed) {
            self.said.clear();
            self.open = opened;
        }
        Ok(())
    }

    /// Each non-empty answer of the round `hook` the fact completed is in the history once
    /// more than before the fact, as its server's encoded body (a server that said the same
    /// words twice, as two subjects, twice).
    fn check_injected(&self, step: &Transition<'_>, hook: Hook) -> Result<(), Violation> {
        let mut counted: Vec<(&ServerName, &str, usize)> = Vec::new();
        for (server, text) in &self.said {
            match counted
                .iter_mut()
                .find(|(s, t, _)| *s == server && *t == text.as_str())
            {
                Some((.., n)) => *n += 1,
                None => counted.push((server, text, 1)),
            }
        }
        for (server, text, n) in counted {
            let body = hooks::encode_hook_body(hook, server.as_str(), text);
            let before = pairs(step.history_before, server.as_str(), hook, &body);
            let after = pairs(step.machine.history(), server.as_str(), hook, &body);
            ensure(after >= before + n, INJECTED, || {
                format!(
                    "{server} said {text:?} to {hook}; after {} the history holds {after} such \
                     pairs, {before} before",
                    step.fact.kind()
                )
            })?;
        }
        Ok(())
    }

    fn heard(&self, server: &ServerName, words: impl Fn(&str) -> bool) -> bool {
        self.heard_from(server.as_str(), words)
    }

    fn heard_from(&self, server: &str, words: impl Fn(&str) -> bool) -> bool {
        self.said
            .iter()
            .any(|(s, text)| s.as_str() == server && words(text))
    }
}
