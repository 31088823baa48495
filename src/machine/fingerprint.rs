//! A canonical encoding of everything the machine's future depends on, for an explorer that
//! visits each distinct state once (feature `testing`), at two grains.
//!
//! # The exact grain, and why it is sound
//!
//! Two machines with the same exact encoding accept the same facts and answer each with the
//! same orders, except for words inside messages and the digests that pin them. The encoding
//! keeps: the state and its data (the outstanding calls of a batch and which have results, the
//! hook, servers and answers of a round, the continuation); the policy's settings that a fact
//! changes (whether to ask permission; the rest is fixed for a session); the session counters;
//! the prompt's round count, compaction latch and pinned index; the owed `_PostCompact`, `_SessionStart` and
//! `_SessionEnd` flags; the id counter; the count of `agent` calls named (the next child's id);
//! for a subagent, who it is (its id, its parent's, its depth), the sizes of its task and last
//! text, and its result once it finished; the catalog as the machine uses it (model tool names,
//! their size, the servers of each hook, the destructive tools); the standing permission
//! decisions; and the *shape* of the history: each message's kind, its size, every call's id
//! and name, each result's call id and error flag.
//!
//! It drops the words (prompt, reply and hook text, arguments, tool output). The machine reads
//! words only through (a) their size, which decides compaction and is kept, per message and in
//! the estimate's figures; (b) whether a hook answer or a summary is empty once trimmed, decided
//! when the fact arrives and kept as its outcome (a round's answer is quiet or said, a summary
//! is a user message or the fallback's dropped turns); (c) call ids and tool names, kept. It
//! also drops the history's lineage and the catalog's, which are identities that no decision
//! reads, and the outbox, which a driver has drained before it feeds the next fact.
//!
//! `Done` is encoded alone: it is absorbing, refuses every fact but `Closed`, and answers that
//! with nothing, whatever led there.
//!
//! # The coarse grain, and why it is sound
//!
//! The coarse grain merges states that differ only in what no rule of the machine, and no check
//! of the shared invariants, can tell apart. It starts from the exact grain and:
//!
//! - **names call ids by order of first appearance** ([`Canon::id`]) instead of spelling them.
//!   The machine compares ids only for equality (a result answers the call with its id; a new
//!   call whose id is taken is renamed to a fresh one, and a fresh id is never one in the
//!   history), and so do the invariants; two states that are the same up to a one-to-one
//!   renaming of ids have futures that are the same up to that renaming. Sizes still count each
//!   id's bytes, so the renaming never merges histories of different sizes. The id counter is
//!   kept: the fresh ids are spelled from it, and `call_hl9` and `call_hl10` differ in length,
//!   so two states that differ only in the counter would later differ in size.
//! - **drops the prompt's round count when the policy has no round cap** (`max_rounds` 0): the
//!   cap is the count's only reader.
//! - **drops the compaction counter**: it reaches only the figure a `_PreCompact`/`_PostCompact`
//!   hook is told, which no rule reads.
//! - **folds the turns before the current prompt** to what compaction reads of them: for each
//!   unit (a user message, or an assistant message with the results that follow it) its size in
//!   tokens and whether it starts a turn, plus whether the folded part is validly paired with no
//!   call left open. Older turns are read by nothing else: the context estimate reads the
//!   history's byte total and usage anchor (kept whole); the summary's start
//!   (`fitting_suffix`) and the fallback (`drop_oldest`) cut at unit and turn boundaries by
//!   token sums; id uniqueness is a matter of equality (above); the orders' message counts are
//!   checked only against the machine's own history; the invariants look at the newest
//!   assistant message and at what a fact appended, both in the current prompt, and check the
//!   pairing of whole requests, which the validity bit decides for the folded part because a
//!   request starts at a unit boundary.
//!
//! # The abstract grain, and why it is sound within its size region
//!
//! The coarse grain still keeps sizes, the id counter and one entry per older unit, so its
//! states never stop growing. The abstract grain starts from the coarse one and keeps sizes
//! only as the comparisons the machine makes with them; it drops the id counter, whose only
//! reach beyond equality is the length of a fresh id, a few bytes of a small message's size. It is sound while the *size region* holds
//! ([`Machine::size_region`]): the tokens of every small message in the history (a message is
//! long when it alone is over the context budget `B`), plus the fixed part of a request (system
//! prompt, tools, summary instruction), plus a reported usage within `B`, stay under `B/2`.
//! Within the region every comparison the machine makes has the outcome it would have if small
//! messages weighed nothing and a long one weighed more than `B`:
//!
//! - the estimate (`B` is the bound): before usage is known it is over exactly when a long
//!   message is held; after, exactly when the usage is over `B` or a long message came after the
//!   reported request. The encoding keeps these three facts, and whether a long message came
//!   after the last request (the next anchor's).
//! - the summary's start (`fitting_suffix`, room about `B`): the newest unit always, and every
//!   older unit back to, not including, the newest long message;
//! - dropping the oldest (`drop_oldest`, target `B/2`): with a small prompt, everything after
//!   the prompt is kept, and of the turns before it those from the first turn after the newest
//!   long message (or from the first turn if there is none); with a long prompt, the prompt and
//!   the newest unit after it only;
//! - `fitting_suffix(0) > 0`, the compaction guard: whether anything precedes the newest unit.
//!
//! So the history before the newest exchange is cut only at a few bounds: `u`, just after the
//! newest long message before the prompt; `t`, the first turn at or after `u`; the prompt `p`;
//! and `p + 1`. The encoding keeps, for each of the segments between them, whether it is empty,
//! whether it is validly paired with no call open and shares no id with what follows (two such
//! segments concatenate to one that is, and only then: a segment starts at a unit, so a call
//! left open in one meets a message that is no result), and which of the alphabet's spelled ids
//! it holds (they decide whether the machine renames a new call); and for the prompt whether it
//! is long. The newest exchange is kept message by message, each as long or small with its
//! shape. Every cut a compaction makes is at a bound, so the segments after it are unions of
//! segments before it; every other fact appends to the newest exchange or moves it into the
//! segments. Two states with equal encodings therefore answer every fact of the alphabet with
//! the same kinds of orders and reach states with equal encodings, as long as both stay in the
//! region. The explorer checks the region on every state it visits and measures the most
//! tokens one fact adds, which gives how many facts any sequence may have and stay in it.
//!
//! `tests/explore.rs` checks the coarser grains against the exact one: the same phases and
//! kinds of orders, the planted violations at the same depth, on a sample of the configuration
//! classes at a small bound.

use super::agents::Child;
use super::history::BYTES_PER_TOKEN;
use super::message::CallId;
use super::pairing::check_pairing;
use super::policy::Media;
use super::round::{Answer, HookRound, ToolBatch};
use super::{Machine, Message, Resume, State, Then};
use crate::hooks::Hook;

/// How much of a state an encoding keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Grain {
    /// Everything but words, lineages and the outbox.
    Exact,
    /// Also merges what no rule can tell apart (see the module docs).
    Coarse,
    /// Also reads sizes only against the policy's budget and folds the older history to a
    /// fixed number of segments (see the module docs): a finite space, sound while
    /// [`Machine::size_region`] holds.
    Abstract,
}

/// A canonical encoding under construction: the bytes, the grain, and the names given so far
/// to call ids (by order of first appearance, at the coarse grain).
#[derive(Debug)]
pub struct Canon {
    bytes: Vec<u8>,
    grain: Grain,
    /// In order of first appearance: a state holds a handful of ids, so a list beats a map.
    ids: Vec<CallId>,
    /// Ids a fact can spell (the explorer's alphabet): kept as they are at every grain.
    spelled: Vec<CallId>,
}

impl Canon {
    /// An empty encoding at `grain`.
    pub fn new(grain: Grain) -> Self {
        Self {
            bytes: Vec::new(),
            grain,
            ids: Vec::new(),
            spelled: Vec::new(),
        }
    }

    /// Keeps `ids` spelled at the coarse grain too: the ids the facts of an alphabet carry,
    /// whose presence in the history decides whether the machine renames a new call.
    pub fn spelling(mut self, ids: &[CallId]) -> Self {
        self.spelled = ids.to_vec();
        self
    }

    /// Empties the encoding for reuse, keeping its grain and its allocation.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.ids.clear();
    }

    /// The grain this encoding keeps.
    pub fn grain(&self) -> Grain {
        self.grain
    }

    /// The bytes so far.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Appends one byte.
    pub fn tag(&mut self, tag: u8) {
        self.bytes.push(tag);
    }

    /// Appends a number, fixed width.
    pub fn num(&mut self, n: u64) {
        self.bytes.extend_from_slice(&n.to_le_bytes());
    }

    /// Appends a signed number, fixed width.
    pub fn int(&mut self, n: i64) {
        self.bytes.extend_from_slice(&n.to_le_bytes());
    }

    /// Appends a flag.
    pub fn bool(&mut self, b: bool) {
        self.bytes.push(u8::from(b));
    }

    /// Appends a string, length first, so no two sequences of strings meet.
    pub fn str(&mut self, s: &str) {
        self.num(s.len() as u64);
        self.bytes.extend_from_slice(s.as_bytes());
    }

    /// Appends a call id: spelled at the exact grain, at the coarse grain its order of first
    /// appearance in this encoding.
    pub fn id(&mut self, id: &CallId) {
        match self.grain {
            Grain::Exact => self.str(id.as_str()),
            Grain::Coarse | Grain::Abstract if self.spelled.contains(id) => {
                self.str(id.as_str());
            }
            Grain::Coarse | Grain::Abstract => {
                let name = match self.ids.iter().position(|known| known == id) {
                    Some(name) => name,
                    None => {
                        self.ids.push(id.clone());
                        self.ids.len() - 1
                    }
                };
                self.tag(0xC1);
                self.num(name as u64);
            }
        }
    }

    /// Appends a set of call ids, in the order of their encodings, so that the encoding does
    /// not depend on how the set orders their spellings.
    pub fn id_set<'a>(&mut self, ids: impl Iterator<Item = &'a CallId>) {
        let mut names: Vec<Vec<u8>> = ids
            .map(|id| {
                let start = self.bytes.len();
                self.id(id);
                self.bytes.split_off(start)
            })
            .collect();
        names.sort();
        self.num(names.len() as u64);
        for name in names {
            self.bytes.extend_from_slice(&name);
        }
    }
}

impl Machine {
    /// Appends the machine's canonical encoding to `out` at its grain (see the module docs for
    /// what each grain keeps and why dropping the rest is sound).
    pub(crate) fn fingerprint(&self, e: &mut Canon) {
        let coarse = e.grain() != Grain::Exact;
        let abstract_ = e.grain() == Grain::Abstract;
        let state = self.sm.state();
        match state {
            State::Done {} => {
                e.tag(0xD0);
                return;
            }
            State::Idle {} => e.tag(1),
            State::Prompting {} => e.tag(2),
            State::Objected {} => e.tag(3),
            State::Summarizing { resume } => {
                e.tag(4);
                resume_of(e, *resume);
            }
            State::RunningTools { batch } => {
                e.tag(5);
                batch_of(e, batch);
            }
            State::Hooking { round, then } => {
                e.tag(6);
                round_of(e, round);
                then_of(e, then);
            }
            State::AwaitingPermission { batch, at } => {
                e.tag(7);
                batch_of(e, batch);
                e.num(*at as u64);
            }
        }
        let core = self.sm.inner();
        // The policy's part a fact changes (`PermissionSettingChanged`). The rest of the policy
        // is fixed for a session, so every state of one exploration shares it; a setting that
        // a fact comes to change must join the encoding here.
        e.bool(core.policy.ask_permission);
        e.num(core.counters.objections.into());
        if !coarse {
            e.num(core.counters.compactions.into());
        }
        e.num(core.counters.consecutive_timeouts.len() as u64);
        for (server, count) in &core.counters.consecutive_timeouts {
            e.str(server.as_str());
            e.num((*count).into());
        }
        if !coarse || core.policy.max_rounds != 0 {
            e.num(core.turn.rounds.into());
        }
        if abstract_ {
            e.bool(self.is_long(core.turn.text.len()));
        } else {
            e.num(core.turn.text.len() as u64);
        }
        e.bool(core.turn.compacted);
        // What hook details carry is what effects differ by, when the policy sends them; the
        // encoding of a session without them is as it was.
        if core.policy.hook_details {
            e.bool(core.turn.objected);
            if abstract_ {
                e.bool(self.is_long(core.turn.last_text.len()));
            } else {
                e.num(core.turn.last_text.len() as u64);
            }
        }
        e.bool(core.post_compact_owed);
        e.bool(core.session_started);
        e.bool(core.session_ended);
        e.num(core.summary_instruction.len() as u64);
        // The machine spells its fresh ids from the counter (`call_hl9`, `call_hl10`), and an
        // id's length counts in its message's size, which the coarse grain keeps to the byte.
        if !abstract_ {
            e.num(core.next_id);
        }
        // The id the next `agent` call gets, and who this machine is when it is a subagent.
        e.num(core.agents_started.into());
        e.num(core.agents_run.into());
        match &core.child {
            None => e.tag(0),
            Some(child) => {
                e.tag(1);
                child_of(e, child, |bytes| self.is_long(bytes));
            }
        }
        let mut names: Vec<&String> = core.tools.names.iter().collect();
        names.sort();
        e.num(names.len() as u64);
        for name in names {
            e.str(name);
        }
        let mut destructive: Vec<&String> = core.tools.destructive.iter().collect();
        destructive.sort();
        e.num(destructive.len() as u64);
        for name in destructive {
            e.str(name);
        }
        e.num(core.standing.len() as u64);
        for (name, allows) in &core.standing {
            e.str(name);
            e.bool(*allows);
        }
        e.num(core.tools.bytes as u64);
        // Every hook, the subagent ones too: a child inherits the servers of its `_SubagentStart`
        // and `_SubagentStop` rounds from this catalog, so two catalogs that differ only there
        // lead to different futures.
        for hook in Hook::EVERY {
            let servers = core.tools.servers(hook);
            e.num(servers.len() as u64);
            for server in servers {
                e.str(server.as_str());
            }
        }
        let (bytes, anchor, request_bytes) = core.history.accounting();
        let media = &core.policy.media;
        let messages = core.history.messages();
        if !coarse {
            e.num(bytes as u64);
            match anchor {
                Some((tokens, at)) => {
                    e.tag(1);
                    e.num(tokens);
                    e.num(at as u64);
                }
                None => e.tag(0),
            }
            e.num(request_bytes as u64);
            e.num(core.turn.pinned as u64);
            e.num(messages.len() as u64);
            for message in messages {
                message_of(e, message, media);
            }
            return;
        }
        if abstract_ {
            self.abstract_history(e);
            return;
        }
        // The estimate reads the byte total only until usage is known; from then on, the bytes
        // appended since the reported request.
        match anchor {
            Some((tokens, at)) => {
                e.tag(1);
                e.num(tokens);
                e.num(bytes.saturating_sub(at) as u64);
            }
            None => {
                e.tag(0);
                e.num(bytes as u64);
            }
        }
        e.num(bytes.saturating_sub(request_bytes) as u64);
        // Folded: everything before the newest assistant message, or before the prompt if it
        // is newer.
        let newest = messages
            .iter()
            .rposition(|m| matches!(m, Message::Assistant { .. }))
            .unwrap_or(0);
        let fold = newest.max(core.turn.pinned).min(messages.len());
        fold_of(
            e,
            &messages[..fold],
            &messages[fold..],
            core.turn.pinned,
            media,
        );
        e.num(core.turn.pinned.saturating_sub(fold) as u64);
        e.num((messages.len() - fold) as u64);
        for message in &messages[fold..] {
            message_of(e, message, media);
        }
    }
}

/// One message of the history: its size, kind, call ids and names, and error flag.
fn message_of(e: &mut Canon, message: &Message, media: &Media) {
    e.num(message.size_bytes(media) as u64);
    message_shape(e, message);
}

/// A message's kind, call ids and names, and error flag.
fn message_shape(e: &mut Canon, message: &Message) {
    match message {
        Message::User { .. } => e.tag(1),
        Message::Assistant { tool_calls, .. } => {
            e.tag(2);
            e.num(tool_calls.len() as u64);
            for call in tool_calls {
                e.id(&call.id);
                e.str(&call.name);
            }
        }
        Message::ToolResult { call_id, output } => {
            e.tag(3);
            e.id(call_id);
            e.bool(output.is_error);
        }
    }
}
/// The coarse encoding of the history's older part (`old`; `rest` is the newer part): per
/// unit, its tokens, whether it starts a turn and whether it is the prompt's (at `pinned`);
/// whether `old` is validly paired with no call open and shares no id with `rest`; and the
/// spelled ids it holds.
fn fold_of(e: &mut Canon, old: &[Message], rest: &[Message], pinned: usize, media: &Media) {
    e.tag(0xF0);
    let mut units: Vec<(u64, bool)> = Vec::new();
    let mut pinned_unit = None;
    for (i, message) in old.iter().enumerate() {
        if i == pinned {
            pinned_unit = Some(units.len());
        }
        let tokens = (message.size_bytes(media) as u64).div_ceil(BYTES_PER_TOKEN);
        match (message, units.last_mut()) {
            (Message::ToolResult { .. }, Some(unit)) => unit.0 += tokens,
            (Message::User { .. }, _) => units.push((tokens, true)),
            (Message::ToolResult { .. } | Message::Assistant { .. }, _) => {
                units.push((tokens, false));
            }
        }
    }
    e.num(pinned_unit.map_or(u64::MAX, |unit| unit as u64));
    e.num(units.len() as u64);
    for (tokens, turn) in units {
        e.num(tokens);
        e.bool(turn);
    }
    let old_ids = call_ids(old);
    let valid = check_pairing(old).is_ok() && !shares_an_id(&old_ids, rest);
    e.bool(valid);
    let mut spelled: Vec<&CallId> = e
        .spelled
        .iter()
        .filter(|id| old_ids.contains(id))
        .collect::<Vec<_>>();
    spelled.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    let spelled: Vec<CallId> = spelled.into_iter().cloned().collect();
    e.num(spelled.len() as u64);
    for id in &spelled {
        e.str(id.as_str());
    }
}

/// What a subagent knows of itself: its id and its parent's (they name its future calls' ids
/// and are told to its hooks), its depth, the sizes of its task, its last text (its answer,
/// told to `_SubagentStop` and made its call's result) and its result once it finished. At the
/// abstract grain a size is kept as long or small, as everywhere else.
fn child_of(e: &mut Canon, child: &Child, is_long: impl Fn(usize) -> bool) {
    let size = |e: &mut Canon, bytes: usize| match e.grain() {
        Grain::Abstract => e.bool(is_long(bytes)),
        Grain::Exact | Grain::Coarse => e.num(bytes as u64),
    };
    e.str(&child.me.id.0);
    match &child.me.parent {
        None => e.tag(0),
        Some(parent) => {
            e.tag(1);
            e.str(&parent.0);
        }
    }
    e.num(child.depth.into());
    size(e, child.description.len());
    size(e, child.prompt.len());
    size(e, child.last_text.len());
    match &child.result {
        None => e.tag(0),
        Some(output) => {
            e.tag(1);
            e.bool(output.is_error);
            size(e, output.joined_text().len());
        }
    }
}

fn resume_of(e: &mut Canon, resume: Resume) {
    e.tag(match resume {
        Resume::Prompting => 0,
        Resume::Objected => 1,
    });
}

fn batch_of(e: &mut Canon, batch: &ToolBatch) {
    e.num(batch.ids.len() as u64);
    for (id, result) in batch.ids.iter().zip(&batch.results) {
        e.id(id);
        match result {
            None => e.tag(0),
            Some(output) => {
                e.tag(1);
                e.bool(output.is_error);
                e.num(output.joined_text().len() as u64);
            }
        }
    }
    e.num(batch.ran.len() as u64);
    for call in &batch.ran {
        e.id(&call.id);
        e.str(&call.name);
    }
}

fn round_of(e: &mut Canon, round: &HookRound) {
    e.num(round.hook.index() as u64);
    e.num(round.servers.len() as u64);
    for server in &round.servers {
        e.str(server.as_str());
    }
    e.num(round.answers.len() as u64);
    for answer in &round.answers {
        match answer {
            Answer::Waiting => e.tag(0),
            Answer::Quiet => e.tag(1),
            Answer::Said(text) => {
                e.tag(2);
                e.num(text.len() as u64);
            }
        }
    }
}

fn then_of(e: &mut Canon, then: &Then) {
    match then {
        Then::SessionStart => e.tag(0),
        Then::UserPromptSubmit => e.tag(1),
        Then::PreToolUse { batch } => {
            e.tag(2);
            batch_of(e, batch);
        }
        Then::PostToolUse => e.tag(3),
        Then::Stop => e.tag(4),
        Then::PreCompact { resume } => {
            e.tag(5);
            resume_of(e, *resume);
        }
        Then::PostCompact { resume } => {
            e.tag(6);
            resume_of(e, *resume);
        }
        Then::SessionEnd => e.tag(7),
    }
}

/// Where the abstract grain is sound, in tokens: what the history's small messages, the
/// system prompt and tools, and a usage figure within the budget add up to (`used`), and the
/// bound it must stay under (`limit`, half the context budget).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeRegion {
    /// Tokens of the history's small messages (those not alone over the budget).
    pub small: u64,
    /// Tokens of the fixed part of a request: the system prompt, the tools, the summary
    /// instruction.
    pub fixed: u64,
    /// The reported usage the estimate anchors on, when it is within the budget.
    pub usage: u64,
    /// Half the context budget.
    pub limit: u64,
}

impl SizeRegion {
    /// The tokens the region's condition counts.
    pub fn used(&self) -> u64 {
        self.small + self.fixed + self.usage
    }

    /// Whether the abstract grain's argument applies: what it counts is below `limit`.
    pub fn holds(&self) -> bool {
        self.used() < self.limit
    }
}

impl Machine {
    /// The figures the abstract grain's soundness rests on (see the module docs).
    pub fn size_region(&self) -> SizeRegion {
        let core = self.sm.inner();
        let media = &core.policy.media;
        let budget = core.policy.context_budget();
        let tokens = |bytes: usize| (bytes as u64).div_ceil(BYTES_PER_TOKEN);
        let small: u64 = core
            .history
            .messages()
            .iter()
            .map(|m| m.size_bytes(media))
            .filter(|bytes| !self.is_long(*bytes))
            .map(tokens)
            .sum();
        let fixed = core.system_prompt.as_ref().map_or(0, String::len)
            + core.tools.bytes
            + core.summary_instruction.len();
        let (_, anchor, _) = core.history.accounting();
        let usage = anchor.map_or(0, |(t, _)| t);
        let usage = if usage > budget { 0 } else { usage };
        SizeRegion {
            small,
            fixed: tokens(fixed),
            usage,
            limit: budget / 2,
        }
    }

    /// Whether a message (or text) of `bytes` is long: alone over the context budget.
    fn is_long(&self, bytes: usize) -> bool {
        (bytes as u64).div_ceil(BYTES_PER_TOKEN) > self.sm.inner().policy.context_budget()
    }

    /// The abstract encoding of the history and its accounting (see the module docs): the
    /// estimate's inputs as comparisons, the part before the newest exchange as five segments,
    /// the newest exchange message by message with sizes as long or small.
    fn abstract_history(&self, e: &mut Canon) {
        let core = self.sm.inner();
        let media = &core.policy.media;
        let budget = core.policy.context_budget();
        let (bytes, anchor, request_bytes) = core.history.accounting();
        // Small messages add up to less than half the budget (the region), a long one alone
        // to more than the budget: more than half the budget since a point means a long one.
        let long_since =
            |at: usize| (bytes.saturating_sub(at) as u64).div_ceil(BYTES_PER_TOKEN) > budget / 2;
        let messages = core.history.messages();
        let long = |m: &Message| self.is_long(m.size_bytes(media));
        e.tag(0xA0);
        e.bool(messages.iter().any(long));
        match anchor {
            Some((tokens, at)) => {
                e.tag(1);
                e.bool(tokens > budget);
                e.bool(long_since(at));
            }
            None => e.tag(0),
        }
        e.bool(long_since(request_bytes));
        let newest = messages
            .iter()
            .rposition(|m| matches!(m, Message::Assistant { .. }))
            .unwrap_or(0);
        let pinned = core.turn.pinned.min(messages.len());
        let fold = newest.max(pinned).min(messages.len());
        // u: just after the newest long message before the prompt; t: the first turn at or
        // after u. Every cut a compaction makes is at one of these bounds (module docs).
        let u = messages[..pinned]
            .iter()
            .rposition(long)
            .map_or(0, |i| i + 1);
        let t = messages[u..pinned]
            .iter()
            .position(|m| matches!(m, Message::User { .. }))
            .map_or(pinned, |i| u + i);
        let mut bounds = vec![0, u, t, pinned];
        if pinned < fold {
            bounds.push(pinned + 1);
            bounds.push(fold);
        }
        e.bool(pinned < fold);
        for pair in bounds.windows(2) {
            let (start, end) = (pair[0], pair[1]);
            segment_of(e, &messages[start..end], &messages[end..]);
            if start == pinned && end == pinned + 1 {
                e.bool(long(&messages[pinned]));
            }
        }
        e.num((messages.len() - fold) as u64);
        for message in &messages[fold..] {
            e.bool(long(message));
            message_shape(e, message);
        }
    }
}

/// One segment of the older history at the abstract grain: whether it is empty; whether it is
/// validly paired with no call open and shares no id with what follows it (`later`); the
/// spelled ids it holds.
fn segment_of(e: &mut Canon, segment: &[Message], later: &[Message]) {
    e.tag(0xA1);
    e.bool(segment.is_empty());
    let ids = call_ids(segment);
    e.bool(check_pairing(segment).is_ok() && !shares_an_id(&ids, later));
    let mut spelled: Vec<&CallId> = e.spelled.iter().filter(|id| ids.contains(id)).collect();
    spelled.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    let spelled: Vec<String> = spelled.iter().map(|id| id.as_str().to_owned()).collect();
    e.num(spelled.len() as u64);
    for id in &spelled {
        e.str(id);
    }
}

/// Every call id the messages make or answer, each once. A list, not a set: a state's
/// history holds a handful of ids, and the explorer encodes millions of states.
fn call_ids(messages: &[Message]) -> Vec<&CallId> {
    let mut ids: Vec<&CallId> = Vec::new();
    for id in messages.iter().flat_map(message_ids) {
        if !ids.contains(&id) {
            ids.push(id);
        }
    }
    ids
}

/// Whether any message of `messages` makes or answers one of `ids`.
fn shares_an_id(ids: &[&CallId], messages: &[Message]) -> bool {
    messages
        .iter()
        .flat_map(message_ids)
        .any(|id| ids.contains(&id))
}

/// The call ids one message makes or answers.
fn message_ids(message: &Message) -> impl Iterator<Item = &CallId> {
    let (calls, result) = match message {
        Message::Assistant { tool_calls, .. } => (tool_calls.as_slice(), None),
        Message::ToolResult { call_id, .. } => (&[][..], Some(call_id)),
        Message::User { .. } => (&[][..], None),
    };
    calls.iter().map(|call| &call.id).chain(result)
}
