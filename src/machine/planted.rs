//! Planted bugs: mutations of the machine's rules that a test switches on, one at a time, to
//! show that the exhaustive explorer and the invariants find each (`tests/planted.rs`), and of
//! the supervisor's, which its property tests find (`tests/supervisor_props.rs`).
//!
//! Each bug is a one- or two-line guard beside the rule it breaks, written
//! `planted::on(Bug::…)`. Without the `planted` feature `on` is a constant `false` and every
//! guard compiles away; with it, `on` reads the bug switched on in the calling thread by
//! [`plant`]. A thread, not the machine, holds the switch so that a guard can sit in any
//! function of the machine (the catalog is built without a `Core`) and so that the explorer,
//! which drives one setup in one thread, explores the planted machine while the other tests
//! of the same binary, in other threads, run the true one. Replaying a counterexample after
//! the [`Planted`] guard is dropped runs the true machine, which then diverges from the record.

use super::Message;

/// A planted bug: each names the rule it breaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Bug {
    /// Sovereignty: hook tools are offered to the model beside the ordinary tools.
    HookOffered,
    /// Sovereignty: a model's call to a hook's name runs instead of being refused.
    HookCallRun,
    /// Sovereignty: hooks of servers the allowlist leaves out are asked too.
    HookOnDisallowedServer,
    /// Sovereignty: a hook timeout counts as the server's words (fail closed, not open).
    TimeoutSpeaks,
    /// Supervision: a server is killed on its first hook timeout.
    KillOnFirstTimeout,
    /// Supervision: a server is never killed, even on its second timeout in a row.
    NeverKilled,
    /// `_Stop`: one objection more than the budget allows.
    StopBudgetOffByOne,
    /// `_Stop`: an end of turn right after an objection asks `_Stop` again instead of ending.
    DeclinedObjectionAsksAgain,
    /// Injection: a hook's words enter the history as they came, not in their JSON body.
    HookUnencoded,
    /// Injection: `_PreCompact` guidance is injected into the history, not the instruction.
    PreCompactInjected,
    /// Injection: `_SessionStart` is asked at every prompt, not only the first.
    SessionStartEveryPrompt,
    /// Compaction: the summarized context drops the running prompt.
    SummaryDropsPrompt,
    /// Compaction: the summary comes after the running prompt.
    SummaryAfterPrompt,
    /// Compaction: `_PostCompact` context is put before the summary.
    PostCompactBeforeSummary,
    /// Denial: a call `_PreToolUse` denied runs anyway.
    DeniedCallRuns,
    /// Permission: a destructive call runs without the user being asked.
    PermissionNotAsked,
    /// Permission: a call the user rejected runs anyway.
    RejectedCallRuns,
    /// Permission: an "always" decision is forgotten, so the user is asked again.
    StandingForgotten,
    /// Pairing: a call a cancel cut short is left without a result.
    CancelledUnanswered,
    /// Catalog: a call whose tool a catalog change took away while it waited on `_PreToolUse` or
    /// the user runs anyway.
    WithdrawnToolRuns,
    /// Denial: one call of a reply denied by `_PreToolUse` denies the reply's other calls too.
    DenialSpreads,
    /// Permission: a call an earlier "always allow" answers is answered `cancelled`, unrun.
    StandingAllowSkips,
    /// Subagents: a child starts without its parent's "always" decisions, so it asks again.
    StandingNotInherited,
    /// Subagents: a child in a hook round stays in it when its parent's cancel reaches it.
    ChildOpenAfterCancel,
    /// Subagents: a child's genuine end of turn skips its `_SubagentStop` round.
    SubagentStopSkipped,
    /// Subagents: the catalog's `_SubagentStart` and `_SubagentStop` servers are dropped, so
    /// no child asks either.
    SubagentServersDropped,
    /// Round cap: a prompt makes one model request more than the cap allows.
    RoundCapOffByOne,
    /// Round cap: a new prompt inherits the last one's request count, so it ends early.
    RoundsCarriedOver,
    /// Compaction: the context is never compacted, however far over the line it is.
    NeverCompacts,
    /// Compaction: the flag that forbids two compactions without a reply between is not reset
    /// by the reply, so a prompt compacts once at most.
    CompactedFlagKept,
    /// Compaction: the usage the provider reported survives the compaction that made it stale,
    /// so the fresh context counts as over the line and is compacted again.
    UsageKeptAcrossCompaction,
    /// `_Stop`: a compaction resets the objections spent, so the budget is spent again.
    ObjectionsResetByCompaction,
    /// Permission: a catalog change keeps the destructive hints of the catalog before it.
    DestructiveHintsKept,
    /// Injection: after a compaction, `_PostToolUse` words are announced but never enter the
    /// history.
    InjectionDroppedAfterCompaction,
    /// Permission: a "reject once" is kept as if it were "reject always".
    RejectOnceStands,
    /// `_Stop`: a catalog change resets the objections spent, so the budget is spent again.
    ObjectionsResetByCatalog,
    /// Tools: once an objection came in a prompt, the model's later calls in it are answered
    /// unrun.
    ObjectedSkipsCalls,
    /// Supervision: a server killed on its second timeout is forgotten as a hook server, so
    /// none of its hooks is asked again though the catalog still gives them to it.
    KilledServerForgotten,
    /// Catalog: a catalog change that takes a tool away leaves it offered to the model.
    WithdrawnToolOffered,
    /// Compaction: a catalog change forgets the `_PostCompact` round a cancel cut short, so the
    /// next prompt does not ask it again.
    PostCompactOwedLostOnCatalog,
    /// Subagents: a child starts with its parent's objections spent, so its `_SubagentStop`
    /// budget is the parent's leftovers.
    ObjectionsInherited,
    /// Compaction: the `_PostCompact` round a cancel cut short stays owed once it is asked
    /// again, so every later prompt asks it.
    PostCompactOwedKept,
    /// Restart budget: a server is restarted once more than its budget allows.
    RestartPastBudget,
    /// Backoff: the wait before a restart stays at the base instead of doubling per bad end.
    BackoffNotDoubled,
    /// Retirement: a retired server's start is taken, and it comes back to life.
    RetiredComesBack,
}

#[cfg(feature = "planted")]
impl Bug {
    /// The bugs in the machine, which the explorer finds.
    pub const MACHINE: [Self; 41] = [
        Self::HookOffered,
        Self::HookCallRun,
        Self::HookOnDisallowedServer,
        Self::TimeoutSpeaks,
        Self::KillOnFirstTimeout,
        Self::NeverKilled,
        Self::StopBudgetOffByOne,
        Self::DeclinedObjectionAsksAgain,
        Self::HookUnencoded,
        Self::PreCompactInjected,
        Self::SessionStartEveryPrompt,
        Self::SummaryDropsPrompt,
        Self::SummaryAfterPrompt,
        Self::PostCompactBeforeSummary,
        Self::DeniedCallRuns,
        Self::PermissionNotAsked,
        Self::RejectedCallRuns,
        Self::StandingForgotten,
        Self::CancelledUnanswered,
        Self::WithdrawnToolRuns,
        Self::DenialSpreads,
        Self::StandingAllowSkips,
        Self::RoundCapOffByOne,
        Self::RoundsCarriedOver,
        Self::NeverCompacts,
        Self::CompactedFlagKept,
        Self::UsageKeptAcrossCompaction,
        Self::ObjectionsResetByCompaction,
        Self::DestructiveHintsKept,
        Self::InjectionDroppedAfterCompaction,
        Self::RejectOnceStands,
        Self::ObjectedSkipsCalls,
        Self::ObjectionsResetByCatalog,
        Self::StandingNotInherited,
        Self::ChildOpenAfterCancel,
        Self::SubagentStopSkipped,
        Self::KilledServerForgotten,
        Self::WithdrawnToolOffered,
        Self::PostCompactOwedLostOnCatalog,
        Self::ObjectionsInherited,
        Self::PostCompactOwedKept,
    ];

    /// The bugs the explorer finds in the machine's state before any order shows them, so no
    /// replay of the counterexample diverges: `tests/planted.rs` checks each apart.
    pub const SILENT: [Self; 1] = [Self::SubagentServersDropped];

    /// The bugs in the supervisor, which sits outside the explorer: its property tests find
    /// them.
    pub const SUPERVISOR: [Self; 3] = [
        Self::RestartPastBudget,
        Self::BackoffNotDoubled,
        Self::RetiredComesBack,
    ];
}

/// `messages` with its last `by` moved to the front: a context put in the wrong place.
pub(crate) fn rotated(messages: &[Message], by: usize) -> Vec<Message> {
    let mut messages = messages.to_vec();
    let by = by.min(messages.len());
    messages.rotate_right(by);
    messages
}

#[cfg(feature = "planted")]
thread_local! {
    static ACTIVE: std::cell::Cell<Option<Bug>> = const { std::cell::Cell::new(None) };
}

/// Whether `bug` is switched on in this thread; always `false` without the `planted` feature.
#[inline(always)]
pub(crate) fn on(bug: Bug) -> bool {
    #[cfg(feature = "planted")]
    {
        ACTIVE.with(|active| active.get() == Some(bug))
    }
    #[cfg(not(feature = "planted"))]
    {
        let _ = bug;
        false
    }
}

/// Switches `bug` on in the calling thread until the returned guard is dropped.
#[cfg(feature = "planted")]
pub fn plant(bug: Bug) -> Planted {
    let previous = ACTIVE.with(|active| active.replace(Some(bug)));
    Planted { previous }
}

/// Keeps a bug switched on in its thread; dropped, it restores what was on before.
#[cfg(feature = "planted")]
#[must_use = "the bug is switched off when the guard is dropped"]
#[derive(Debug)]
pub struct Planted {
    previous: Option<Bug>,
}

#[cfg(feature = "planted")]
impl Drop for Planted {
    fn drop(&mut self) {
        ACTIVE.with(|active| active.set(self.previous));
    }
}
