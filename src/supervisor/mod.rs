//! The supervisor: when an MCP server is restarted, and when it is retired. Sans-IO like the
//! machine: no clock, no I/O, no randomness. Time comes in as facts (`at_ms`, on the host's
//! clock), jitter too; the host feeds [`Fact`]s to [`Supervisor::handle`], takes the
//! [`Order`]s from [`Supervisor::poll_order`] and performs them.
//!
//! ```text
//!            ServerStarted                 ServerExited (streak ≤ budget)
//!  Starting ───────────────▶ Live ──────────────────────────▶ Restarting ──▶ StartServer{after}
//!     ▲                                                           │
//!     └──────────── StartFailed (streak ≤ budget) ◀───────────────┘
//!  any bad end with the streak past the budget ──▶ Retired ──▶ RetireServer (for good)
//! ```
//!
//! A life *ends badly* when it exits (killed on the machine's order, or its connection broke)
//! or fails to start. Bad ends in a row form a streak; a *clean* life — one that answered a
//! call and lasted [`SupervisorPolicy::healthy_after_ms`] — ends the streak, so its own bad end
//! starts a new one. A streak longer than the restart budget retires the server.

use std::collections::{BTreeMap, VecDeque};

use serde::{Deserialize, Serialize};

use crate::hooks::ServerName;
use crate::machine::planted::{self, Bug};

/// The restart policy. [`HostOptions`](crate::mcp::HostOptions) supplies it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SupervisorPolicy {
    /// Restarts allowed within one streak of bad ends.
    pub restart_budget: u32,
    /// The wait before the first restart of a streak; each further one doubles it.
    pub restart_backoff_ms: u64,
    /// The longest wait before a restart.
    pub max_restart_backoff_ms: u64,
    /// How long a life that answered a call must last to count as clean.
    pub healthy_after_ms: u64,
}

/// Where the jitter of a backoff falls: `0` waits half the backoff, [`Jitter::MAX`] all of it.
/// The host draws it; the supervisor only applies it, so a replay computes the same waits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Jitter(pub u16);

impl Jitter {
    /// The largest jitter: the whole backoff.
    pub const MAX: u16 = 1000;
}

/// What happened to a server, as the host saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "fact", rename_all = "snake_case")]
pub enum Fact {
    /// A life started: connected, negotiated, tools listed.
    ServerStarted {
        /// The server.
        server: ServerName,
        /// When, on the host's clock.
        at_ms: u64,
    },
    /// A start ordered by [`Order::StartServer`] (or the first) failed.
    StartFailed {
        /// The server.
        server: ServerName,
        /// When, on the host's clock.
        at_ms: u64,
        /// Why it could not start.
        error: String,
        /// The randomness for the backoff, drawn by the host.
        jitter: Jitter,
    },
    /// The current life ended: killed on the machine's order, or its connection broke.
    ServerExited {
        /// The server.
        server: ServerName,
        /// When, on the host's clock.
        at_ms: u64,
        /// Whether the life answered at least one call.
        answered: bool,
        /// Why it ended, as the host saw it.
        reason: String,
        /// The randomness for the backoff, drawn by the host.
        jitter: Jitter,
    },
}

impl Fact {
    /// The server the fact is about.
    pub fn server(&self) -> &ServerName {
        match self {
            Self::ServerStarted { server, .. }
            | Self::StartFailed { server, .. }
            | Self::ServerExited { server, .. } => server,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            Self::ServerStarted { .. } => "server_started",
            Self::StartFailed { .. } => "start_failed",
            Self::ServerExited { .. } => "server_exited",
        }
    }
}

/// What the supervisor wants done.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "order", rename_all = "snake_case")]
pub enum Order {
    /// Start a new life of the server after waiting `after_ms`; answer with
    /// [`Fact::ServerStarted`] or [`Fact::StartFailed`].
    StartServer {
        /// The server.
        server: ServerName,
        /// The backoff before the start, in ms.
        after_ms: u64,
    },
    /// The server is out of restarts: take its tools out of the catalog for good. No answer.
    RetireServer {
        /// The server.
        server: ServerName,
        /// Bad ends in a row that retired it.
        bad_ends: u32,
    },
}

/// A fact or an order, as a transcript records it. Untagged: a fact carries its `fact` tag and
/// an order its `order` tag already.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Event {
    /// A fact the supervisor took.
    Fact(Fact),
    /// An order it gave.
    Order(Order),
}

/// Whether a server's hook may be called in a round that starts now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HookTurn {
    /// The server is live: call it.
    Call,
    /// The server is not live; the round goes on without it (no objection, not a timeout).
    Skip {
        /// Why the server sat the round out.
        reason: String,
    },
}

/// A fact the supervisor did not expect: a bug in the host, never the fault of a server.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("supervisor: unexpected {fact} for server {server} while it is {state}")]
pub struct UnexpectedFact {
    /// The fact.
    pub fact: &'static str,
    /// The server it was about.
    pub server: ServerName,
    /// The state the server was in.
    pub state: &'static str,
}

/// The supervision of one session's servers. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct Supervisor {
    policy: SupervisorPolicy,
    servers: BTreeMap<ServerName, Entry>,
    orders: VecDeque<Order>,
}

#[derive(Clone, Debug)]
struct Entry {
    state: State,
    /// Bad ends in a row.
    streak: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Its first start is under way.
    Starting,
    Live {
        since_ms: u64,
    },
    /// A restart is ordered and not yet answered.
    Restarting,
    /// Out of restarts, for the rest of the session.
    Retired,
}

impl State {
    fn name(self) -> &'static str {
        match self {
            Self::Starting => "starting",
            Self::Live { .. } => "live",
            Self::Restarting => "restarting",
            Self::Retired => "retired",
        }
    }
}

impl Supervisor {
    /// A supervisor of `servers`, each of whose first start is under way.
    pub fn new(policy: SupervisorPolicy, servers: impl IntoIterator<Item = ServerName>) -> Self {
        let servers = servers
            .into_iter()
            .map(|server| {
                let entry = Entry {
                    state: State::Starting,
                    streak: 0,
                };
                (server, entry)
            })
            .collect();
        Self {
            policy,
            servers,
            orders: VecDeque::new(),
        }
    }

    /// Feeds one fact. A fact about a server the supervisor does not know, or one that does not
    /// fit the server's state, is refused and changes nothing.
    pub fn handle(&mut self, fact: Fact) -> Result<(), UnexpectedFact> {
        let kind = fact.kind();
        let policy = self.policy;
        let Some(entry) = self.servers.get_mut(fact.server()) else {
            return Err(UnexpectedFact {
                fact: kind,
                server: fact.server().clone(),
                state: "unknown",
            });
        };
        let unexpected = |entry: &Entry| UnexpectedFact {
            fact: kind,
            server: fact.server().clone(),
            state: entry.state.name(),
        };
        let order = match (&fact, entry.state) {
            (Fact::ServerStarted { at_ms, .. }, State::Retired)
                if planted::on(Bug::RetiredComesBack) =>
            {
                entry.state = State::Live { since_ms: *at_ms };
                None
            }
            (Fact::ServerStarted { at_ms, .. }, State::Starting | State::Restarting) => {
                entry.state = State::Live { since_ms: *at_ms };
                None
            }
            (Fact::StartFailed { jitter, .. }, State::Starting | State::Restarting) => {
                entry.streak += 1;
                Some(bad_end(&policy, entry, fact.server(), *jitter))
            }
            (
                Fact::ServerExited {
                    at_ms,
                    answered,
                    jitter,
                    ..
                },
                State::Live { since_ms },
            ) => {
                let lived = at_ms.saturating_sub(since_ms);
                // A clean life ends the streak; its own bad end is the first of a new one.
                if *answered && lived >= policy.healthy_after_ms {
                    entry.streak = 1;
                } else {
                    entry.streak += 1;
                }
                Some(bad_end(&policy, entry, fact.server(), *jitter))
            }
            (
                Fact::ServerStarted { .. } | Fact::StartFailed { .. } | Fact::ServerExited { .. },
                State::Starting | State::Live { .. } | State::Restarting | State::Retired,
            ) => return Err(unexpected(entry)),
        };
        tracing::debug!(server = %fact.server(), fact = kind, state = entry.state.name(), "supervisor");
        self.orders.extend(order);
        Ok(())
    }

    /// The next order, if any.
    pub fn poll_order(&mut self) -> Option<Order> {
        self.orders.pop_front()
    }

    /// Whether `server`'s hook may be called in a round that starts now. A server that is still
    /// (re)starting is skipped, so that restart time is never charged to a hook's timeout.
    pub fn hook_turn(&self, server: &ServerName) -> HookTurn {
        match self.servers.get(server).map(|entry| entry.state) {
            Some(State::Live { .. }) => HookTurn::Call,
            Some(State::Starting | State::Restarting) => HookTurn::Skip {
                reason: "it is restarting".to_owned(),
            },
            Some(State::Retired) => HookTurn::Skip {
                reason: "it ran out of restarts".to_owned(),
            },
            None => HookTurn::Skip {
                reason: "no such server".to_owned(),
            },
        }
    }

    /// Whether `server` is retired (and so never starts again in this session).
    pub fn is_retired(&self, server: &ServerName) -> bool {
        self.servers
            .get(server)
            .is_some_and(|entry| entry.state == State::Retired)
    }

    /// Bad ends in a row of `server`.
    pub fn streak(&self, server: &ServerName) -> u32 {
        self.servers.get(server).map_or(0, |entry| entry.streak)
    }
}

/// After a bad end: a restart after the backoff, or retirement once the streak is past the
/// budget.
fn bad_end(
    policy: &SupervisorPolicy,
    entry: &mut Entry,
    server: &ServerName,
    jitter: Jitter,
) -> Order {
    let budget = policy
        .restart_budget
        .saturating_add(u32::from(planted::on(Bug::RestartPastBudget)));
    if entry.streak > budget {
        entry.state = State::Retired;
        return Order::RetireServer {
            server: server.clone(),
            bad_ends: entry.streak,
        };
    }
    entry.state = State::Restarting;
    Order::StartServer {
        server: server.clone(),
        after_ms: backoff_ms(policy, entry.streak, jitter),
    }
}

/// The wait before the restart that follows the `streak`-th bad end in a row: the base
/// backoff doubled per bad end, capped, then placed by the jitter in its upper half so that
/// restarts of many servers do not align.
pub fn backoff_ms(policy: &SupervisorPolicy, streak: u32, jitter: Jitter) -> u64 {
    let exponent = if planted::on(Bug::BackoffNotDoubled) {
        0
    } else {
        streak.saturating_sub(1).min(16)
    };
    let full = policy
        .restart_backoff_ms
        .saturating_mul(1 << exponent)
        .min(policy.max_restart_backoff_ms);
    let jitter = u64::from(jitter.0.min(Jitter::MAX));
    let max = u64::from(Jitter::MAX);
    full / 2 + full / 2 * jitter / max
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> SupervisorPolicy {
        SupervisorPolicy {
            restart_budget: 2,
            restart_backoff_ms: 100,
            max_restart_backoff_ms: 1_000,
            healthy_after_ms: 60_000,
        }
    }

    fn name() -> ServerName {
        ServerName::new("s").unwrap()
    }

    fn started(at_ms: u64) -> Fact {
        Fact::ServerStarted {
            server: name(),
            at_ms,
        }
    }

    fn exited(at_ms: u64, answered: bool) -> Fact {
        Fact::ServerExited {
            server: name(),
            at_ms,
            answered,
            reason: "killed".into(),
            jitter: Jitter(Jitter::MAX),
        }
    }

    fn orders(s: &mut Supervisor) -> Vec<Order> {
        std::iter::from_fn(|| s.poll_order()).collect()
    }

    #[test]
    fn bad_ends_restart_with_a_doubling_backoff_until_the_budget_is_spent() {
        let mut s = Supervisor::new(policy(), [name()]);
        s.handle(started(0)).unwrap();
        let mut waits = Vec::new();
        for at in [10, 20] {
            s.handle(exited(at, false)).unwrap();
            let [Order::StartServer { after_ms, .. }] = orders(&mut s)[..] else {
                panic!("a restart")
            };
            waits.push(after_ms);
            assert!(matches!(s.hook_turn(&name()), HookTurn::Skip { .. }));
            assert!(!s.is_retired(&name()), "restarting is not retired");
            s.handle(started(at + 5)).unwrap();
        }
        assert_eq!(waits, [100, 200]);
        s.handle(exited(30, false)).unwrap();
        assert_eq!(
            orders(&mut s),
            [Order::RetireServer {
                server: name(),
                bad_ends: 3
            }]
        );
        assert!(s.is_retired(&name()));
        assert!(
            !s.is_retired(&ServerName::new("other").unwrap()),
            "a server it does not supervise is not retired"
        );
        assert!(
            s.handle(started(40)).is_err(),
            "a retired server never comes back"
        );
    }

    #[test]
    fn a_clean_life_ends_the_streak() {
        let mut s = Supervisor::new(policy(), [name()]);
        s.handle(started(0)).unwrap();
        s.handle(exited(10, false)).unwrap();
        s.handle(started(20)).unwrap();
        assert_eq!(s.streak(&name()), 1);
        s.handle(exited(70_000, true)).unwrap();
        assert_eq!(s.streak(&name()), 1);
        // Long but silent is not clean.
        s.handle(started(70_100)).unwrap();
        s.handle(exited(200_000, false)).unwrap();
        assert_eq!(s.streak(&name()), 2);
    }

    #[test]
    fn a_failed_restart_is_a_bad_end_too() {
        let mut s = Supervisor::new(policy(), [name()]);
        s.handle(started(0)).unwrap();
        s.handle(exited(1, false)).unwrap();
        orders(&mut s);
        s.handle(Fact::StartFailed {
            server: name(),
            at_ms: 2,
            error: "spawn".into(),
            jitter: Jitter(0),
        })
        .unwrap();
        assert_eq!(
            orders(&mut s),
            [Order::StartServer {
                server: name(),
                after_ms: 100
            }]
        );
    }

    #[test]
    fn facts_out_of_place_are_refused_naming_the_fact_and_the_state() {
        let mut s = Supervisor::new(policy(), [name()]);
        let err = s.handle(exited(1, false)).unwrap_err();
        assert_eq!(err.state, "starting");
        assert_eq!(
            err.to_string(),
            "supervisor: unexpected server_exited for server s while it is starting"
        );
        let other = ServerName::new("other").unwrap();
        let err = s
            .handle(Fact::ServerStarted {
                server: other,
                at_ms: 0,
            })
            .unwrap_err();
        assert_eq!(err.state, "unknown");
        assert_eq!(err.fact, "server_started");
    }

    #[test]
    fn the_backoff_is_capped_and_jittered_in_its_upper_half() {
        let p = policy();
        assert_eq!(backoff_ms(&p, 1, Jitter(0)), 50);
        assert_eq!(backoff_ms(&p, 1, Jitter(Jitter::MAX)), 100);
        assert_eq!(backoff_ms(&p, 40, Jitter(Jitter::MAX)), 1_000);
        assert_eq!(backoff_ms(&p, 40, Jitter(u16::MAX)), 1_000);
    }
}
