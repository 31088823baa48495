//! What every server of one host shares: the options, the catalog's generation and tool count,
//! the supervisor and its records, and what the servers may ask of the session (the person,
//! the roots, the session id).

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::time::Instant;

use crate::mcp::HostOptions;
use crate::ports::Person;
use crate::supervisor::{self, Supervisor};
use crate::text::lock;

/// Supervision records kept for [`ToolHost::take_supervision`](crate::ports::ToolHost) before the
/// oldest are dropped: a host nobody drains must not grow without bound.
const MAX_PENDING_RECORDS: usize = 1024;

/// What every slot of one host shares.
pub(super) struct Shared {
    pub(super) options: HostOptions,
    /// Bumped on every change of what the catalog returns.
    pub(super) generation: AtomicU64,
    /// Tools across all servers, kept under [`HostOptions::max_tools`].
    pub(super) tool_count: Mutex<usize>,
    /// Every restart decision. Never locked while a slot's state is.
    pub(super) supervisor: Mutex<Supervisor>,
    /// The supervisor's clock: its facts carry milliseconds since this instant.
    pub(super) clock: Instant,
    /// Set when the host is dropped: no life starts after it.
    pub(super) closed: AtomicBool,
    /// Facts and orders not yet taken by the driver.
    pub(super) records: Mutex<VecDeque<supervisor::Event>>,
    /// Who answers the servers' questions.
    pub(super) person: Mutex<Arc<dyn Person>>,
    /// The directories offered to servers as roots.
    pub(super) roots: Mutex<Vec<PathBuf>>,
    /// Sent to hook servers as `_meta["hookloop/session"]`: [`HostOptions::session_id`] until
    /// the front end names the session.
    pub(super) session_id: Mutex<Arc<str>>,
}

impl Shared {
    pub(super) fn catalog_changed(&self) {
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    pub(super) fn now_ms(&self) -> u64 {
        crate::millis::of(self.clock.elapsed())
    }

    pub(super) fn record(&self, event: supervisor::Event) {
        let mut records = lock(&self.records);
        if records.len() == MAX_PENDING_RECORDS {
            records.pop_front();
        }
        records.push_back(event);
    }
}
