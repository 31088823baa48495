//! A planted bug for the explorer's liveness checks: a subject (a session's machine, a
//! subagent) that never orders a round of one hook. Where it would, it goes on as if every
//! server of the round had answered with nothing to say.

use std::collections::VecDeque;

use hookloop::hooks::Hook;
use hookloop::machine::{Canon, Effect, HookReply, Input, Machine, MachineError};
use hookloop::testing::explore::Subject;

/// `inner`, except that its rounds of `hook` are answered empty before anyone sees them.
#[derive(Clone)]
pub struct SkipRound<S> {
    inner: S,
    hook: Hook,
    /// The orders left after the skipped rounds, waiting to be polled.
    out: VecDeque<Effect>,
}

impl<S: Subject> SkipRound<S> {
    /// `inner`, never ordering a round of `hook`.
    pub fn new(inner: S, hook: Hook) -> Self {
        Self {
            inner,
            hook,
            out: VecDeque::new(),
        }
    }

    /// Answers the skipped round `order` as if each of its servers said nothing, once per
    /// subject (once when the round has none).
    fn answer_empty(&mut self, order: Effect) -> Result<(), MachineError> {
        let Effect::CallHooks {
            hook,
            servers,
            subjects,
            ..
        } = order
        else {
            return Ok(());
        };
        let subjects: Vec<Option<u32>> = if subjects.is_empty() {
            vec![None]
        } else {
            (0..subjects.len())
                .map(|i| Some(u32::try_from(i).expect("a round has few subjects")))
                .collect()
        };
        for subject in subjects {
            for server in &servers {
                self.inner.handle(Input::HookAnswered {
                    server: server.clone(),
                    hook,
                    reply: HookReply::Text {
                        text: String::new(),
                    },
                    subject,
                })?;
            }
        }
        Ok(())
    }
}

impl<S: Subject> Subject for SkipRound<S> {
    fn machine(&self) -> &Machine {
        self.inner.machine()
    }

    fn handle(&mut self, fact: Input) -> Result<(), MachineError> {
        self.inner.handle(fact)?;
        let mut effects: Vec<Effect> = std::iter::from_fn(|| self.inner.poll_effect()).collect();
        while let Some(at) = effects
            .iter()
            .position(|e| matches!(e, Effect::CallHooks { hook, .. } if *hook == self.hook))
        {
            let order = effects.remove(at);
            effects.truncate(at);
            self.answer_empty(order)?;
            effects.extend(std::iter::from_fn(|| self.inner.poll_effect()));
        }
        self.out.extend(effects);
        Ok(())
    }

    fn poll_effect(&mut self) -> Option<Effect> {
        self.out.pop_front()
    }

    fn fingerprint(&self, out: &mut Canon) {
        self.inner.fingerprint(out);
    }
}
