//! The rules of the hook bridge (`hookloop hook <host>` and `hookloop mcp proxy`), pure: what
//! an end of turn in another host may do before any server is asked, and when a server whose
//! hooks time out is restarted. Both take the machine's own [`Policy`] constants, so the
//! bridge and the engine cannot drift apart; the bridge keeps their state between invocations
//! and processes, these functions decide.

use super::Policy;

/// Why an end of turn is let go without asking `_Stop` (or `_SubagentStop`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotAsked {
    /// `SPROUT_AGENT_STOP_MAX_REJECTIONS` is 0: the hook is never called.
    Off,
    /// The end of turn came right after an objection, the model having done nothing since:
    /// it heard and declined, and the turn ends.
    RightAfterObjection,
    /// The session's objections are spent.
    BudgetSpent,
}

impl NotAsked {
    /// The reason, as a line says it.
    pub const fn why(self) -> &'static str {
        match self {
            Self::Off => "SPROUT_AGENT_STOP_MAX_REJECTIONS is 0: not asked",
            Self::RightAfterObjection => {
                "ended again right after an objection: the model heard and declined"
            }
            Self::BudgetSpent => "the objection budget of this session is spent",
        }
    }
}

/// What is known of a session at one of its ends of turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndOfTurn {
    /// The latch: the last end of turn was objected to and no other event of the session
    /// came since (a tool call, a prompt clears it).
    pub latched: bool,
    /// What the host says: `Some(true)` a stop that follows a block (`stop_hook_active`),
    /// `Some(false)` one that does not, `None` when the host does not say.
    pub continuing: Option<bool>,
    /// The objections counted so far (of the session, or of this subagent).
    pub objections: u32,
    /// The budget, `SPROUT_AGENT_STOP_MAX_REJECTIONS`.
    pub max: u32,
}

/// Whether `_Stop` may be asked at this end of turn, and the latch after it (always cleared:
/// the latch lets one end of turn go, then the next is judged afresh).
///
/// The host's flag only rules a stop out: Claude Code and Codex keep `stop_hook_active` true
/// for the whole continuation after a block, tool calls and all, so alone it would end every
/// turn after the first objection and the budget would never be spent.
pub fn may_object(end: EndOfTurn) -> (Result<(), NotAsked>, bool) {
    let decision = if end.max == 0 {
        Err(NotAsked::Off)
    } else if end.latched && end.continuing != Some(false) {
        Err(NotAsked::RightAfterObjection)
    } else if end.objections >= end.max {
        Err(NotAsked::BudgetSpent)
    } else {
        Ok(())
    };
    (decision, false)
}

/// A server's run of hook timeouts, as the proxy that serves its hooks counts them: the
/// [`Policy::KILL_AFTER_TIMEOUTS`]th in a row restarts it, and an answer ends the run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TimeoutRun {
    timeouts: u32,
}

impl TimeoutRun {
    /// A hook call timed out; true when the server is to be restarted (the run starts over,
    /// so a restarted server is again allowed one slow answer).
    pub fn timed_out(&mut self) -> bool {
        self.timeouts += 1;
        if self.timeouts >= Policy::KILL_AFTER_TIMEOUTS {
            self.timeouts = 0;
            true
        } else {
            false
        }
    }

    /// A hook call was answered (or the server was restarted): the run is over.
    pub fn answered(&mut self) {
        self.timeouts = 0;
    }

    /// Timeouts in the current run.
    pub fn len(&self) -> u32 {
        self.timeouts
    }

    /// Whether no timeout is in the current run.
    pub fn is_empty(&self) -> bool {
        self.timeouts == 0
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[derive(Clone, Debug)]
    enum Event {
        /// An end of turn, the host's flag, and whether the server would object if asked.
        Stop(Option<bool>, bool),
        /// A tool call or a prompt.
        Other,
    }

    fn event() -> impl Strategy<Value = Event> {
        prop_oneof![
            (prop::option::of(any::<bool>()), any::<bool>()).prop_map(|(c, o)| Event::Stop(c, o)),
            Just(Event::Other),
        ]
    }

    proptest! {
        /// Over any session, objections never pass the budget, none is asked with a budget of
        /// 0, and no two ends of turn in a row (nothing between) are both objected to.
        #[test]
        fn objections_stay_within_the_budget_and_never_come_twice_in_a_row(
            events in prop::collection::vec(event(), 0..64),
            max in 0u32..5,
        ) {
            let (mut latched, mut objections, mut last_objected) = (false, 0u32, false);
            for event in events {
                match event {
                    Event::Other => {
                        latched = false;
                        last_objected = false;
                    }
                    Event::Stop(continuing, objects) => {
                        let (asked, latch) =
                            may_object(EndOfTurn { latched, continuing, objections, max });
                        latched = latch;
                        if max == 0 {
                            prop_assert_eq!(asked, Err(NotAsked::Off));
                        }
                        let objected = asked.is_ok() && objects;
                        if objected {
                            prop_assert!(!last_objected || continuing == Some(false));
                            objections += 1;
                            latched = true;
                        }
                        last_objected = objected;
                    }
                }
                prop_assert!(objections <= max);
            }
        }

        /// The proxy restarts exactly on every second timeout since the last answer or restart.
        #[test]
        fn a_restart_comes_on_the_second_timeout_in_a_row_and_only_then(
            calls in prop::collection::vec(any::<bool>(), 0..64),
        ) {
            let mut run = TimeoutRun::default();
            let mut in_a_row = 0;
            for timed_out in calls {
                if timed_out {
                    in_a_row += 1;
                    let restart = run.timed_out();
                    prop_assert_eq!(restart, in_a_row == Policy::KILL_AFTER_TIMEOUTS);
                    if restart {
                        in_a_row = 0;
                    }
                } else {
                    run.answered();
                    in_a_row = 0;
                }
                prop_assert_eq!(run.len(), in_a_row);
            }
        }
    }

    #[test]
    fn a_host_saying_the_stop_follows_no_block_overrides_the_latch() {
        let end = EndOfTurn {
            latched: true,
            continuing: Some(false),
            objections: 0,
            max: 3,
        };
        assert_eq!(may_object(end), (Ok(()), false));
        let end = EndOfTurn {
            continuing: Some(true),
            ..end
        };
        assert_eq!(may_object(end), (Err(NotAsked::RightAfterObjection), false));
        let end = EndOfTurn {
            latched: false,
            objections: 3,
            ..end
        };
        assert_eq!(may_object(end).0, Err(NotAsked::BudgetSpent));
    }
}
