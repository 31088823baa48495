//! The round cap (`Policy::max_rounds`), from the facts and orders alone: a prompt makes at most
//! the cap's number of model requests for its turns (summaries are not rounds), and it ends for
//! the cap exactly when it has made that many — never before, never with no cap.

use crate::machine::{Canon, Effect, FinishReason, Input, Policy, Purpose};

use super::transition::{Transition, Violation, ensure};

/// The rule a request past the cap breaks.
pub const BOUND: &str = "a prompt makes at most max_rounds model requests";
/// The rule a prompt ended for the cap too early (or with no cap) breaks.
pub const ENDS_AT_CAP: &str =
    "a prompt ends for the round cap exactly when it made max_rounds requests";

/// What the rules remember between facts: the running prompt's requests.
#[derive(Clone, Debug)]
pub struct RoundCap {
    /// The cap; 0 is none.
    cap: u32,
    /// Model requests for the running prompt's turns. Counted only under a cap, so that an
    /// explorer's states stay finite without one.
    requests: u32,
}

impl RoundCap {
    /// The rules of a session under `policy`.
    pub fn new(policy: &Policy) -> Self {
        Self {
            cap: policy.max_rounds,
            requests: 0,
        }
    }

    /// Appends what the rules remember to `e`, for an explorer's fingerprint.
    pub fn fingerprint(&self, e: &mut Canon) {
        if self.cap != 0 {
            e.num(self.requests.into());
        }
    }

    /// Checks the orders an accepted fact led to.
    pub fn check(&mut self, step: &Transition<'_>) -> Result<(), Violation> {
        if let Input::Prompted { .. } = step.fact {
            self.requests = 0;
        }
        for effect in step.effects {
            match effect {
                Effect::CallLlm {
                    purpose: Purpose::Turn,
                    ..
                } if self.cap != 0 => {
                    self.requests += 1;
                    ensure(self.requests <= self.cap, BOUND, || {
                        format!("request {} under a cap of {}", self.requests, self.cap)
                    })?;
                }
                Effect::Finish {
                    reason: FinishReason::MaxTurnRequests,
                } => {
                    ensure(
                        self.cap != 0 && self.requests == self.cap,
                        ENDS_AT_CAP,
                        || {
                            format!(
                                "ended after {} requests under a cap of {}",
                                self.requests, self.cap
                            )
                        },
                    )?;
                }
                _ => {}
            }
        }
        Ok(())
    }
}
