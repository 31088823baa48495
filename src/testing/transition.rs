//! What every rule of the explorer's oracle judges and what it says when one breaks: one fact
//! the machine accepted, with what it led to ([`Transition`]), and a broken rule
//! ([`Violation`]). The rule checks (`invariants`, `liveness`, `consent`, `rounds`, `words`)
//! import this file and nothing of one another's but what the invariants compose.

use std::fmt;

use crate::machine::{Effect, Input, Machine, Message, Phase};

/// One fact the machine accepted and what it led to: what each rule judges.
#[derive(Clone, Copy, Debug)]
pub struct Transition<'a> {
    /// The phase the machine was in when the fact came.
    pub before: Phase,
    /// The fact.
    pub fact: &'a Input,
    /// The machine after it.
    pub machine: &'a Machine,
    /// Every order it gave for the fact.
    pub effects: &'a [Effect],
    /// Its history when the fact came.
    pub history_before: &'a [Message],
}

/// A rule the machine broke on one fact.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// The rule, in the words of the spec or the crate doc.
    pub rule: &'static str,
    /// What showed it.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.rule, self.detail)
    }
}

impl std::error::Error for Violation {}

pub(super) fn broken(rule: &'static str, detail: impl Into<String>) -> Result<(), Violation> {
    Err(Violation {
        rule,
        detail: detail.into(),
    })
}

pub(super) fn ensure(
    ok: bool,
    rule: &'static str,
    detail: impl FnOnce() -> String,
) -> Result<(), Violation> {
    if ok { Ok(()) } else { broken(rule, detail()) }
}
