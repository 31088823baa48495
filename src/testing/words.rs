//! Hook words: what a hook round leads the machine to say (an objection, an injected context, a
//! denial, compaction guidance) is exactly what a server of that round said, and what enters
//! the history is the encoded JSON body of it. A timeout, an error result, a failed or skipped
//! call and an empty answer say nothing: a hook fails open.

use crate::hooks::{self, Hook, ServerName};
use crate::machine::{Canon, Effect, HookReply, Input, Message, Notice, Phase};

use super::transition::{Transition, Violation, ensure};

/// The rule a hook's words break when they did not come from its server.
pub const RULE: &str = "a hook's words are only what its servers said, injected encoded";

/// What the rule remembers: the open round's non-empty answers.
#[derive(Clone, Debug, Default)]
pub struct HookWords {
    said: Vec<(ServerName, String)>,
}

impl HookWords {
    /// Appends what the rule remembers to `e`, for an explorer's fingerprint.
    pub fn fingerprint(&self, e: &mut Canon) {
        e.num(self.said.len() as u64);
        for (server, text) in &self.said {
            e.str(server.as_str());
            e.str(text);
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
        if step
            .effects
            .iter()
            .any(|e| matches!(e, Effect::CallHooks { .. }))
            || matches!(step.fact, Input::Cancelled | Input::Closed)
        {
            self.said.clear();
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
