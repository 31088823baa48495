//! The conversation, with running totals so that appending costs O(1) in the history's length:
//! its size estimate and a digest that pins its content for transcripts.

use std::collections::HashSet;

use crate::machine::digest::Digest;
use crate::machine::fresh_lineage;
use crate::machine::message::{CallId, Message};
use crate::machine::planted::{self, Bug};
// Re-exported for the machine's other rooms, which count tokens as the history does.
pub(super) use crate::machine::policy::BYTES_PER_TOKEN;
use crate::machine::policy::Media;

/// The conversation of one session.
#[derive(Debug)]
pub struct History {
    messages: Vec<Message>,
    /// Names this run of appends: it changes whenever messages are replaced, so two requests
    /// with the same lineage see the same messages up to the shorter one's length.
    lineage: u64,
    bytes: usize,
    digest: Digest,
    /// Ids of every tool call in `messages`, so a new call's id can be checked for uniqueness.
    call_ids: HashSet<CallId>,
    /// Input tokens the provider reported for the last request, and `bytes` when it was sent.
    anchor: Option<(u64, usize)>,
    /// `bytes` when the last request was sent.
    request_bytes: usize,
    /// How the dialect carries binary content: sizes count what is sent.
    media: Media,
}

impl History {
    /// An empty history whose sizes count binary content as `media` says the dialect sends it.
    pub fn new(media: Media) -> Self {
        Self {
            media,
            ..Self::default()
        }
    }

    /// The messages, oldest first.
    pub fn messages(&self) -> &[Message] {
        &self.messages
    }

    /// How many messages.
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// A digest of every message, chained: equal histories give equal digests, and it is stable
    /// across runs, platforms, builds and releases (FNV-1a over the canonical encoding of
    /// [`Digest`](crate::machine::Digest), never over serde output).
    pub fn digest(&self) -> Digest {
        self.digest
    }

    /// Names the current run of appends: equal between two moments only if the history was
    /// appended to, never replaced, in between (a clone gets a lineage of its own).
    pub fn lineage(&self) -> u64 {
        self.lineage
    }

    /// The figures the context estimate is computed from: the bytes held, the last usage anchor,
    /// and the bytes when the last request was sent.
    #[cfg(feature = "testing")]
    pub(crate) fn accounting(&self) -> (usize, Option<(u64, usize)>, usize) {
        (self.bytes, self.anchor, self.request_bytes)
    }

    /// Whether a tool call with this id is in the history.
    pub fn has_call_id(&self, id: &CallId) -> bool {
        self.call_ids.contains(id)
    }

    /// Appends a message in O(its size).
    pub fn push(&mut self, message: Message) {
        self.bytes += message.size_bytes(&self.media);
        self.digest = self.digest.chain(&message);
        if let Message::Assistant { tool_calls, .. } = &message {
            self.call_ids
                .extend(tool_calls.iter().map(|call| call.id.clone()));
        }
        self.messages.push(message);
    }

    /// Replaces the whole history (compaction). Usage reported before no longer applies.
    pub fn replace(&mut self, messages: Vec<Message>) {
        let anchor = self.anchor;
        *self = Self::new(std::mem::take(&mut self.media));
        for message in messages {
            self.push(message);
        }
        if planted::on(Bug::UsageKeptAcrossCompaction) {
            self.anchor = anchor;
        }
    }

    /// Notes that a request is being sent with the history as it is now.
    pub fn mark_request(&mut self) {
        self.request_bytes = self.bytes;
    }

    /// Notes the input tokens the provider reported for the last request.
    pub fn note_usage(&mut self, input_tokens: u64) {
        self.anchor = Some((input_tokens, self.request_bytes));
    }

    /// The context the next request would use, in tokens: the last reported input tokens plus an
    /// estimate of what was appended since, or a byte estimate of everything (`fixed_bytes` being
    /// the system prompt and tool catalog) before any usage is known.
    pub fn estimate_tokens(&self, fixed_bytes: usize) -> u64 {
        match self.anchor {
            Some((tokens, at_bytes)) => {
                tokens + bytes_to_tokens(self.bytes.saturating_sub(at_bytes))
            }
            None => bytes_to_tokens(self.bytes + fixed_bytes),
        }
    }

    /// The start of the newest run of whole units whose estimate stays within `max_tokens`. A
    /// unit is a user message, or an assistant message with the tool results that answer it, so
    /// a slice from a unit's start never holds a result without its call. The newest unit is
    /// always kept, even when it alone is over.
    pub fn fitting_suffix(&self, max_tokens: u64) -> usize {
        suffix_start(&self.messages, &self.media, max_tokens, is_unit_start, true)
    }

    /// Drops the oldest messages until the rest fits in `max_tokens`: first whole turns before
    /// the current prompt (at `pinned`), oldest first; then, if the current turn alone is over,
    /// the oldest units after its prompt. The prompt and the newest unit always stay. Returns
    /// how many messages were dropped and where the prompt now is.
    pub fn drop_oldest(&mut self, pinned: usize, max_tokens: u64) -> (usize, usize) {
        let before = self.messages.len();
        if before == 0 {
            return (0, 0);
        }
        let pinned = pinned.min(before - 1);
        let messages = &self.messages;
        let media = &self.media;
        let prompt_tokens = tokens_of(&messages[pinned..=pinned], media);
        let after = &messages[pinned + 1..];
        let after_start = suffix_start(
            after,
            media,
            max_tokens.saturating_sub(prompt_tokens),
            is_unit_start,
            true,
        );
        let older_start = if after_start == 0 {
            let used = prompt_tokens + tokens_of(after, media);
            suffix_start(
                &messages[..pinned],
                media,
                max_tokens.saturating_sub(used),
                is_turn_start,
                false,
            )
        } else {
            pinned
        };
        let mut kept = messages[older_start..=pinned].to_vec();
        kept.extend_from_slice(&after[after_start..]);
        self.replace(kept);
        (before - self.messages.len(), pinned - older_start)
    }
}

impl Default for History {
    fn default() -> Self {
        Self {
            messages: Vec::new(),
            lineage: fresh_lineage(),
            bytes: 0,
            digest: Digest::default(),
            call_ids: HashSet::new(),
            anchor: None,
            request_bytes: 0,
            media: Media::default(),
        }
    }
}

impl Clone for History {
    /// A copy that diverges from the original from here on, so it has a lineage of its own.
    fn clone(&self) -> Self {
        Self {
            messages: self.messages.clone(),
            lineage: fresh_lineage(),
            bytes: self.bytes,
            digest: self.digest,
            call_ids: self.call_ids.clone(),
            anchor: self.anchor,
            request_bytes: self.request_bytes,
            media: self.media.clone(),
        }
    }
}

/// The start of the newest run of `messages`, cut at a `boundary`, whose estimate stays within
/// `max_tokens`; `messages.len()` when none fits. With `keep_one`, the newest run is kept even
/// when it alone is over.
fn suffix_start(
    messages: &[Message],
    media: &Media,
    max_tokens: u64,
    boundary: fn(&Message) -> bool,
    keep_one: bool,
) -> usize {
    let mut start = messages.len();
    let mut tokens = 0;
    let mut pending = 0;
    for (i, message) in messages.iter().enumerate().rev() {
        pending += bytes_to_tokens(message.size_bytes(media));
        if boundary(message) {
            let first = start == messages.len();
            if tokens + pending > max_tokens && !(first && keep_one) {
                break;
            }
            tokens += pending;
            pending = 0;
            start = i;
        }
    }
    start
}

fn tokens_of(messages: &[Message], media: &Media) -> u64 {
    messages
        .iter()
        .map(|m| bytes_to_tokens(m.size_bytes(media)))
        .sum()
}

fn is_turn_start(message: &Message) -> bool {
    matches!(message, Message::User { .. })
}

fn is_unit_start(message: &Message) -> bool {
    !matches!(message, Message::ToolResult { .. })
}

fn bytes_to_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(BYTES_PER_TOKEN)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::machine::message::{ToolCall, ToolOutput};

    fn assistant_with_call(id: &str) -> Message {
        Message::Assistant {
            text: String::new(),
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "s__t".into(),
                arguments: json!({}),
            }],
        }
    }

    fn result(id: &str, text: &str) -> Message {
        Message::ToolResult {
            call_id: id.into(),
            output: ToolOutput::text(text),
        }
    }

    #[test]
    fn totals_follow_appends_and_replace() {
        let mut h = History::default();
        assert!(h.is_empty());
        h.push(Message::user("hello"));
        assert!(!h.is_empty());
        assert_eq!(h.len(), 1);
        h.push(assistant_with_call("c1"));
        h.push(result("c1", "ok"));
        let expected: usize = h
            .messages()
            .iter()
            .map(|m| m.size_bytes(&Media::default()))
            .sum();
        assert_eq!(h.bytes, expected);
        assert!(h.has_call_id(&"c1".into()));
        let digest = h.digest();
        let copy = h.messages().to_vec();
        h.replace(copy);
        assert_eq!(h.digest(), digest, "the digest depends on content only");
        h.push(Message::user("more"));
        assert_ne!(h.digest(), digest);
    }

    #[test]
    fn the_lineage_survives_appends_and_changes_on_replace_and_clone() {
        let mut h = History::default();
        let lineage = h.lineage();
        h.push(Message::user("hello"));
        h.push(assistant_with_call("c1"));
        assert_eq!(h.lineage(), lineage);
        assert_ne!(h.clone().lineage(), lineage);
        assert_ne!(History::default().lineage(), lineage);
        h.replace(vec![Message::user("hello")]);
        assert_ne!(h.lineage(), lineage);
        let replaced = h.lineage();
        h.drop_oldest(0, 0);
        assert_ne!(h.lineage(), replaced);
    }

    #[test]
    fn estimate_uses_usage_plus_appended_bytes() {
        let mut h = History::default();
        h.push(Message::user("x".repeat(400)));
        assert_eq!(h.estimate_tokens(0), 104);
        h.mark_request();
        h.note_usage(1000);
        assert_eq!(h.estimate_tokens(0), 1000);
        h.push(Message::user("y".repeat(84)));
        assert_eq!(h.estimate_tokens(0), 1025);
    }

    // The explorer's fingerprint reads these figures, and only through this accessor.
    #[cfg(feature = "testing")]
    #[test]
    fn the_accounting_is_the_bytes_held_the_usage_anchor_and_the_bytes_at_the_last_request() {
        let mut h = History::default();
        h.push(Message::user("x".repeat(400)));
        let sent = h.bytes;
        assert_eq!(h.accounting(), (sent, None, 0));
        h.mark_request();
        h.note_usage(1000);
        h.push(Message::user("y".repeat(84)));
        assert!(h.bytes > sent);
        assert_eq!(h.accounting(), (h.bytes, Some((1000, sent)), sent));
    }

    #[test]
    fn fitting_suffix_starts_at_a_unit() {
        let mut h = History::default();
        h.push(Message::user("a".repeat(400)));
        h.push(assistant_with_call("c1"));
        h.push(result("c1", &"r".repeat(400)));
        h.push(Message::user("b".repeat(40)));
        assert_eq!(h.fitting_suffix(u64::MAX), 0);
        // Room for the last user message and the call with its result, not the first prompt.
        assert_eq!(h.fitting_suffix(150), 1);
        // The newest unit is kept even when it alone is over.
        assert_eq!(h.fitting_suffix(1), 3);
    }

    #[test]
    fn drop_oldest_keeps_the_pinned_unit_and_the_newest() {
        let mut h = History::default();
        h.push(Message::user("old".repeat(100)));
        h.push(Message::user("prompt"));
        for i in 0..5 {
            let id = format!("c{i}");
            h.push(assistant_with_call(&id));
            h.push(result(&id, &"r".repeat(400)));
        }
        let (dropped, pinned) = h.drop_oldest(1, 250);
        assert!(dropped > 0);
        assert_eq!(pinned, 0);
        let msgs = h.messages();
        assert_eq!(msgs[0], Message::user("prompt"));
        assert!(matches!(msgs[1], Message::Assistant { .. }));
        assert_eq!(msgs.last(), Some(&result("c4", &"r".repeat(400))));
    }

    #[test]
    fn drop_oldest_gives_older_turns_the_room_the_current_turn_leaves() {
        let mut h = History::default();
        h.push(Message::user("old".repeat(100)));
        h.push(Message::Assistant {
            text: "a".repeat(200),
            tool_calls: Vec::new(),
        });
        h.push(Message::user("p".repeat(40)));
        h.push(assistant_with_call("c1"));
        h.push(result("c1", &"r".repeat(200)));
        let media = Media::default();
        let older = tokens_of(&h.messages()[..2], &media);
        let current = tokens_of(&h.messages()[2..], &media);
        // Room for the current turn (the prompt and what came after it) and the older turn.
        assert_eq!(h.clone().drop_oldest(2, current + older), (0, 2));
        // A token less: the older turn goes whole, the current one stays whole.
        assert_eq!(h.drop_oldest(2, current + older - 1), (2, 0));
    }

    #[test]
    fn drop_oldest_with_a_pin_past_the_end_keeps_the_last_message_as_the_prompt() {
        let mut h = History::default();
        h.push(Message::user("old".repeat(100)));
        h.push(Message::user("now"));
        // A pin past the end is read as the last message: it stays, the older turn goes.
        assert_eq!(h.drop_oldest(7, 10), (1, 0));
        assert_eq!(h.messages(), [Message::user("now")]);
    }

    #[test]
    fn drop_oldest_drops_whole_older_turns_first() {
        let mut h = History::default();
        for turn in ["one", "two", "three"] {
            h.push(Message::user(turn.repeat(100)));
            h.push(Message::Assistant {
                text: "a".repeat(200),
                tool_calls: Vec::new(),
            });
        }
        h.push(Message::user("now"));
        // Room for the current prompt and the newest older turn, not the two before it.
        let (dropped, pinned) = h.drop_oldest(6, 250);
        assert_eq!(dropped, 4);
        assert_eq!(pinned, 2);
        assert_eq!(h.messages()[0], Message::user("three".repeat(100)));
        assert_eq!(h.messages()[2], Message::user("now"));
    }
}
