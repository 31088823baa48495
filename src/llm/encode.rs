//! Encoding each message once: the wire form of a session's settled turns, and of its tool list,
//! kept between requests, so a request body costs what was appended since the last one rather
//! than the whole history.
//!
//! A dialect says how turns and tools are written ([`Dialect`]); this layer decides which turns
//! must be written and which were already. It relies on two promises:
//! - [`Lineage`](crate::machine::Lineage): requests of one history lineage see append-only
//!   messages, and requests of one tools lineage offer the same tools;
//! - the shaping rules of [`turns`]: when calls and results stay native blocks
//!   ([`ToolBlocks::Native`]), a non-empty assistant message that follows a user message or a
//!   tool result always opens a new turn, and the turns before it never change again, whatever
//!   is appended (see [`settled_up_to`]).
//!
//! The settled turns are never the request's last, so the fix-ups a dialect applies to the last
//! message (a trailing-whitespace trim, a cache breakpoint) only ever touch the tail, which is
//! written afresh each time, as is anything a dialect derives from the whole history (the tools
//! a tool-less Messages turn declares). A tail the dialect wrote in its settled form (no fix-up
//! touched it: [`Written::AsSettled`]) is kept, and becomes the prefix's next piece when exactly
//! its messages settle, so in a session of rounds each message is encoded once. A request the
//! layer cannot vouch for (no lineage, a final instruction, a request whose dialect flattens
//! calls into text that names earlier calls) is written whole, exactly as without a cache.

use std::fmt;
use std::ops::Range;
use std::sync::Mutex;

use bytes::Bytes;

use crate::llm::body::BodyWriter;
use crate::llm::turns::{self, ToolBlocks, Turn};
use crate::machine::{LlmRequest, Message, ToolSpec};
use crate::ports::LlmError;

/// How many sessions' encodings a client keeps; the least recently used goes first.
const SLOTS: usize = 16;

/// Which turns a [`Dialect::write_turns`] call writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Part {
    /// Every turn of the request.
    Whole,
    /// Settled turns, which are never the request's last.
    Settled,
    /// The turns after the settled ones, which end the request.
    Tail,
}

/// What a [`Dialect::write_turns`] call wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Written {
    /// Nothing: a [`Part::Tail`] that cannot be written apart from the turns before it.
    Nothing,
    /// The turns, with fix-ups for the end of a request that their settled form lacks.
    FixedUp,
    /// The turns byte for byte as [`Part::Settled`] writes them: once they settle, the next
    /// request takes these bytes rather than writing the same turns again.
    AsSettled,
}

/// One provider's wire form of turns and tools.
pub(crate) trait Dialect {
    /// How this dialect sends `request`'s tool calls and results: a per-dialect decision,
    /// which every encoding of the request (cached or not) follows.
    fn tool_blocks(&self, request: &LlmRequest<'_>) -> ToolBlocks;

    /// Appends the wire messages of `turns`, each followed by a comma, and says whether they
    /// are their settled form. Returns [`Written::Nothing`], having written nothing, when a
    /// [`Part::Tail`] cannot be written apart from the turns before it (its fix-ups would reach
    /// into them); the whole request is then written instead.
    fn write_turns(
        &self,
        turns: Vec<Turn<'_>>,
        part: Part,
        out: &mut Vec<u8>,
    ) -> Result<Written, LlmError>;

    /// Appends the wire form of the tool list (a JSON array).
    fn write_tools(&self, tools: &[ToolSpec], out: &mut Vec<u8>) -> Result<(), LlmError>;
}

/// A client's encodings of recent sessions, keyed by history lineage. Shared by every session
/// of the client; each request takes its session's entry out while it writes, so concurrent
/// sessions never wait on each other's encoding.
#[derive(Default)]
pub(crate) struct EncodeCache {
    /// Most recently used last.
    slots: Mutex<Vec<Slot>>,
}

impl fmt::Debug for EncodeCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sessions = self.slots.lock().map_or(0, |slots| slots.len());
        f.debug_struct("EncodeCache")
            .field("sessions", &sessions)
            .finish()
    }
}

impl EncodeCache {
    /// The encodings `request` may reuse, for the time it is written.
    pub(crate) fn lease(&self, request: &LlmRequest<'_>, dialect: &impl Dialect) -> Lease<'_> {
        let Some(lineage) = request.lineage.filter(|_| reusable(request, dialect)) else {
            return Lease::none();
        };
        let slot = self.take(lineage.history).unwrap_or(Slot {
            history: lineage.history,
            consumed: 0,
            prefix: Vec::new(),
            pending: None,
            tools: None,
        });
        Lease {
            held: Some((self, slot)),
        }
    }

    fn take(&self, history: u64) -> Option<Slot> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        let at = slots.iter().position(|slot| slot.history == history)?;
        Some(slots.remove(at))
    }

    fn put(&self, slot: Slot) {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if slots.len() >= SLOTS {
            slots.remove(0);
        }
        slots.push(slot);
    }
}

/// What one request may reuse; returned to its cache when dropped, unless writing failed.
pub(crate) struct Lease<'c> {
    held: Option<(&'c EncodeCache, Slot)>,
}

impl Lease<'_> {
    /// Nothing to reuse: everything is written afresh.
    pub(crate) fn none() -> Self {
        Self { held: None }
    }

    /// Appends the wire messages of `request`'s conversation, each followed by a comma.
    pub(crate) fn write_messages(
        &mut self,
        request: &LlmRequest<'_>,
        dialect: &impl Dialect,
        out: &mut BodyWriter,
    ) -> Result<(), LlmError> {
        if let Some((_, slot)) = &mut self.held {
            match slot.write(request, dialect, out) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(error) => {
                    // A half-written prefix must not be reused.
                    self.held = None;
                    return Err(error);
                }
            }
        }
        let blocks = dialect.tool_blocks(request);
        let written = dialect.write_turns(turns::turns(request, blocks), Part::Whole, out.buf())?;
        debug_assert_ne!(
            written,
            Written::Nothing,
            "a whole request is always written"
        );
        Ok(())
    }

    /// Appends the wire form of `request`'s tools, reusing it while the tools lineage holds.
    pub(crate) fn write_tools(
        &mut self,
        request: &LlmRequest<'_>,
        dialect: &impl Dialect,
        out: &mut BodyWriter,
    ) -> Result<(), LlmError> {
        let tools_lineage = request.lineage.map_or(0, |lineage| lineage.tools);
        let Some((_, slot)) = self.held.as_mut().filter(|_| tools_lineage != 0) else {
            return dialect.write_tools(request.tools, out.buf());
        };
        match &slot.tools {
            Some((lineage, bytes)) if *lineage == tools_lineage => out.push_shared(bytes.clone()),
            _ => {
                let mut bytes = Vec::new();
                dialect.write_tools(request.tools, &mut bytes)?;
                let bytes = Bytes::from(bytes);
                out.push_shared(bytes.clone());
                slot.tools = Some((tools_lineage, bytes));
            }
        }
        Ok(())
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        if let Some((cache, slot)) = self.held.take() {
            cache.put(slot);
        }
    }
}

/// Appends `value` as compact JSON, exactly as it would appear inside a larger document.
pub(crate) fn write_json(
    out: &mut Vec<u8>,
    value: &(impl serde::Serialize + ?Sized),
) -> Result<(), LlmError> {
    serde_json::to_writer(out, value)
        .map_err(|e| LlmError::Other(format!("cannot encode the request: {e}")))
}

/// Opens a request body's JSON object in `head`: the stream fields first when the request
/// streams (both dialects put them there), then `"model"`. The caller writes on after it.
pub(crate) fn open_body(
    head: &mut Vec<u8>,
    stream_fields: Option<&str>,
    model: &str,
) -> Result<(), LlmError> {
    head.push(b'{');
    if let Some(fields) = stream_fields {
        head.extend_from_slice(fields.as_bytes());
        head.push(b',');
    }
    head.extend_from_slice(br#""model":"#);
    write_json(head, model)
}

/// One session's reusable encodings.
struct Slot {
    history: u64,
    /// How many messages `prefix` holds the turns of.
    consumed: usize,
    /// The settled turns' wire messages, each followed by a comma, in pieces a request shares
    /// rather than copies; see [`append_piece`].
    prefix: Vec<Bytes>,
    /// The last tail's messages and its bytes, when the dialect wrote them in their settled
    /// form: the piece to append when exactly those messages settle.
    pending: Option<(Range<usize>, Vec<u8>)>,
    /// The tools lineage and the tool list's wire form.
    tools: Option<(u64, Bytes)>,
}

impl Slot {
    /// Settles what became settled, then writes the prefix and the tail. `false`: the tail
    /// could not be written apart, and nothing was written.
    fn write(
        &mut self,
        request: &LlmRequest<'_>,
        dialect: &impl Dialect,
        out: &mut BodyWriter,
    ) -> Result<bool, LlmError> {
        let messages = request.messages;
        if self.consumed > messages.len() {
            // The lineage promise says this cannot be; start over rather than trust it.
            self.consumed = 0;
            self.prefix.clear();
            self.pending = None;
        }
        let settled = settled_up_to(messages, self.consumed);
        let pending = self.pending.take();
        if settled > self.consumed {
            // The lineage promise keeps the messages of the last tail as they were, and a range
            // is shaped the same whichever part it is written as.
            let piece = match pending {
                Some((range, bytes)) if range == (self.consumed..settled) => bytes,
                _ => {
                    let turns = turns_in(request, dialect, self.consumed..settled);
                    let mut piece = Vec::new();
                    dialect.write_turns(turns, Part::Settled, &mut piece)?;
                    piece
                }
            };
            append_piece(&mut self.prefix, piece);
            self.consumed = settled;
        }
        let mark = out.mark();
        for piece in &self.prefix {
            out.push_shared(piece.clone());
        }
        let part = if self.consumed == 0 {
            Part::Whole
        } else {
            Part::Tail
        };
        let range = self.consumed..messages.len();
        let tail = turns_in(request, dialect, range.clone());
        let start = out.buf().len();
        match dialect.write_turns(tail, part, out.buf())? {
            Written::AsSettled => {
                self.pending = Some((range, out.buf()[start..].to_vec()));
                Ok(true)
            }
            Written::FixedUp => Ok(true),
            Written::Nothing => {
                out.truncate(mark);
                Ok(false)
            }
        }
    }
}

/// Appends `piece` to a prefix kept in pieces, merging the newest pieces while the older is not
/// much larger than the newer: sizes then fall geometrically from the first piece to the last,
/// so a prefix of `n` bytes has O(log n) pieces (a request sends them in one vectored write),
/// and each byte is copied O(log n) times over the session rather than once per request.
fn append_piece(prefix: &mut Vec<Bytes>, piece: Vec<u8>) {
    /// How many times larger than the newer piece the older one must be to stay apart.
    const RATIO: usize = 4;
    if piece.is_empty() {
        return;
    }
    prefix.push(Bytes::from(piece));
    while let [.., older, newer] = prefix.as_slice()
        && older.len() <= RATIO * newer.len()
    {
        let mut merged = Vec::with_capacity(older.len() + newer.len());
        merged.extend_from_slice(older);
        merged.extend_from_slice(newer);
        prefix.truncate(prefix.len() - 2);
        prefix.push(Bytes::from(merged));
    }
}

/// Whether this layer can vouch for `request`'s settled turns: only without a final
/// instruction, and when the dialect keeps calls as calls (a flattened result names its call,
/// which may lie in settled turns).
fn reusable(request: &LlmRequest<'_>, dialect: &impl Dialect) -> bool {
    request.instruction.is_none() && dialect.tool_blocks(request) == ToolBlocks::Native
}

/// The newest index after `from` where settled turns end: a non-empty assistant message right
/// after a user message or a tool result. The turns before it end with that user turn, and it
/// opens an assistant turn, which nothing appended can merge into what came before. `from`
/// when there is none. Scans back from the end, so it costs what was appended since.
fn settled_up_to(messages: &[Message], from: usize) -> usize {
    (from.max(1)..messages.len())
        .rev()
        .find(|&i| {
            let opens = matches!(
                &messages[i],
                Message::Assistant { text, tool_calls } if !text.is_empty() || !tool_calls.is_empty()
            );
            opens && !matches!(messages[i - 1], Message::Assistant { .. })
        })
        .unwrap_or(from)
}

/// The turns of `range` of the request's messages, as they are within the whole conversation.
fn turns_in<'a>(
    request: &LlmRequest<'a>,
    dialect: &impl Dialect,
    range: Range<usize>,
) -> Vec<Turn<'a>> {
    let start = range.start;
    // Decided on the whole request, so that a part is shaped as it is within the whole.
    let blocks = dialect.tool_blocks(request);
    let part = LlmRequest {
        messages: &request.messages[range],
        ..*request
    };
    let mut turns = turns::turns(&part, blocks);
    if start > 0 {
        // A range after the first starts at a settled boundary, with an assistant turn, so the
        // shaping put the history-cut note first; that note belongs only at the very start.
        debug_assert!(matches!(turns.first(), Some(Turn::User(parts)) if parts.len() == 1));
        turns.remove(0);
    }
    turns
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::llm::{Anthropic, Endpoint, OpenAi, anthropic, openai};
    use crate::machine::{CallId, Lineage, Purpose, ToolCall, ToolOutput};

    /// One step of a session's history, as the tests grow it.
    #[derive(Clone, Debug)]
    enum Step {
        Push(Message),
        /// Keep the messages from this index on (modulo the length), in a new lineage.
        Compact(usize),
        /// Offer this catalog from now on: 0 none, else one of two tool lists.
        Catalog(u8),
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(String::new()),
            Just("  ".to_owned()),
            Just("done \n".to_owned()),
            Just("say \"hi\"\tnow".to_owned()),
            "[a-z ]{1,12}",
        ]
    }

    fn message() -> impl Strategy<Value = Message> {
        let call = (0..6_u8, prop::bool::ANY).prop_map(|(id, raw)| ToolCall {
            id: CallId(format!("c{id}")),
            name: "todo__list".into(),
            arguments: if raw {
                serde_json::Value::String("{oops".into())
            } else {
                json!({"n": id})
            },
        });
        prop_oneof![
            text().prop_map(|text| Message::User { text }),
            (text(), prop::collection::vec(call, 0..3))
                .prop_map(|(text, tool_calls)| Message::Assistant { text, tool_calls }),
            (0..6_u8, text(), prop::bool::ANY).prop_map(|(id, text, error)| {
                Message::ToolResult {
                    call_id: CallId(format!("c{id}")),
                    output: if error {
                        ToolOutput::error(text)
                    } else {
                        ToolOutput::text(text)
                    },
                }
            }),
        ]
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            8 => message().prop_map(Step::Push),
            1 => (0..20_usize).prop_map(Step::Compact),
            1 => (0..3_u8).prop_map(Step::Catalog),
        ]
    }

    fn catalog(which: u8) -> Vec<ToolSpec> {
        (0..which)
            .map(|i| ToolSpec {
                name: format!("todo__tool_{i}"),
                description: "Does \"one\" thing.".into(),
                input_schema: json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
            })
            .collect()
    }

    fn clients() -> (OpenAi, Anthropic, Anthropic) {
        let endpoint = Endpoint::parse("http://127.0.0.1:9/v1").unwrap();
        (
            OpenAi::new("m\u{e9}", &endpoint).unwrap(),
            Anthropic::new("m", &endpoint).unwrap(),
            Anthropic::new("m", &endpoint)
                .unwrap()
                .with_prompt_caching(false),
        )
    }

    #[test]
    fn reused_encodings_give_the_bodies_encoding_from_scratch_gives() {
        // A case is a whole session (up to 60 requests, each encoded six ways), so this property
        // runs a tenth of PROPTEST_CASES (CI: 10,000): the same depth per case, a minute of CI.
        let cases = std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|cases| cases.parse::<u32>().ok())
            .unwrap_or(256);
        let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
            cases: (cases / 10).max(64),
            failure_persistence: None,
            ..ProptestConfig::default()
        });
        let sessions = prop::collection::vec(step(), 1..60);
        let outcome = runner.run(&sessions, |steps| {
            let (chat, messages_api, uncached_api) = clients();
            let mut history: Vec<Message> = Vec::new();
            let mut lineage = Lineage {
                history: 1,
                tools: 0,
            };
            let mut tools = Vec::new();
            for step in steps {
                match step {
                    Step::Push(message) => history.push(message),
                    Step::Compact(from) => {
                        let from = from % (history.len() + 1);
                        history.drain(..from);
                        lineage.history += 1;
                    }
                    Step::Catalog(which) => {
                        tools = catalog(which);
                        lineage.tools = if which == 0 {
                            0
                        } else {
                            100 + u64::from(which)
                        };
                    }
                }
                let request = LlmRequest {
                    purpose: Purpose::Turn,
                    system: Some("be brief"),
                    messages: &history,
                    tools: &tools,
                    instruction: None,
                    max_output_tokens: 64,
                    lineage: Some(lineage),
                };
                let scratch = String::from_utf8(
                    openai::request_body(chat.model(), Default::default(), &request).unwrap(),
                )
                .unwrap();
                prop_assert_eq!(
                    String::from_utf8(chat.request_body(&request).unwrap()).unwrap(),
                    scratch.clone()
                );
                let streamed = chat
                    .encoded(&request, Some(crate::llm::openai::stream::STREAM_FIELDS))
                    .unwrap();
                prop_assert_eq!(
                    String::from_utf8(streamed.to_vec()).unwrap(),
                    with_fields(crate::llm::openai::stream::STREAM_FIELDS, &scratch)
                );
                for (client, caching) in [(&messages_api, true), (&uncached_api, false)] {
                    let scratch =
                        String::from_utf8(anthropic::request_body("m", caching, &request).unwrap())
                            .unwrap();
                    prop_assert_eq!(
                        String::from_utf8(client.request_body(&request).unwrap()).unwrap(),
                        scratch.clone()
                    );
                    let streamed = client
                        .encoded(&request, Some(crate::llm::anthropic::stream::STREAM_FIELDS))
                        .unwrap();
                    prop_assert_eq!(
                        String::from_utf8(streamed.to_vec()).unwrap(),
                        with_fields(crate::llm::anthropic::stream::STREAM_FIELDS, &scratch)
                    );
                }
            }
            Ok(())
        });
        if let Err(failure) = outcome {
            panic!("{failure}");
        }
    }

    /// A body as a streamed request sends it: the stream fields first.
    fn with_fields(fields: &str, body: &str) -> String {
        let rest = body.strip_prefix('{').expect("a JSON object");
        format!("{{{fields},{rest}")
    }

    /// A dialect that writes each turn as its debug text and counts its writes of settled
    /// turns; its tails say they are in settled form when `tails_settle` holds.
    struct Counting {
        tails_settle: bool,
        settled_writes: std::cell::Cell<usize>,
    }

    impl Dialect for Counting {
        fn tool_blocks(&self, _request: &LlmRequest<'_>) -> ToolBlocks {
            ToolBlocks::Native
        }

        fn write_turns(
            &self,
            turns: Vec<Turn<'_>>,
            part: Part,
            out: &mut Vec<u8>,
        ) -> Result<Written, LlmError> {
            for turn in &turns {
                write_json(out, &format!("{turn:?}"))?;
                out.push(b',');
            }
            if part == Part::Settled {
                self.settled_writes.set(self.settled_writes.get() + 1);
                return Ok(Written::AsSettled);
            }
            Ok(if self.tails_settle {
                Written::AsSettled
            } else {
                Written::FixedUp
            })
        }

        fn write_tools(&self, _tools: &[ToolSpec], out: &mut Vec<u8>) -> Result<(), LlmError> {
            out.extend_from_slice(b"[]");
            Ok(())
        }
    }

    /// The histories each request of a session of `rounds` rounds sees: a user message, then
    /// one call and its result a round.
    fn histories(rounds: usize) -> Vec<Vec<Message>> {
        let mut history = vec![Message::user("go")];
        let mut each = Vec::new();
        for round in 0..rounds {
            let id = CallId(format!("c{round}"));
            history.push(Message::Assistant {
                text: String::new(),
                tool_calls: vec![ToolCall {
                    id: id.clone(),
                    name: "todo__list".into(),
                    arguments: json!({}),
                }],
            });
            history.push(Message::ToolResult {
                call_id: id,
                output: ToolOutput::text(format!("{round} open")),
            });
            each.push(history.clone());
        }
        each
    }

    #[test]
    fn a_tail_in_settled_form_is_not_written_again_when_it_settles() {
        let rounds = 20;
        for tails_settle in [true, false] {
            let dialect = Counting {
                tails_settle,
                settled_writes: std::cell::Cell::new(0),
            };
            let cache = EncodeCache::default();
            for (round, history) in histories(rounds).iter().enumerate() {
                let request = LlmRequest {
                    purpose: Purpose::Turn,
                    system: None,
                    messages: history,
                    tools: &[],
                    instruction: None,
                    max_output_tokens: 64,
                    lineage: Some(Lineage {
                        history: 7,
                        tools: 0,
                    }),
                };
                let mut scratch = BodyWriter::default();
                Lease::none()
                    .write_messages(&request, &dialect, &mut scratch)
                    .unwrap();
                let mut out = BodyWriter::default();
                cache
                    .lease(&request, &dialect)
                    .write_messages(&request, &dialect, &mut out)
                    .unwrap();
                assert_eq!(
                    out.finish().to_string(),
                    scratch.finish().to_string(),
                    "round {round}"
                );
            }
            // The first request settles the user message, which no tail wrote before; each one
            // after it settles the turns of the previous request's tail.
            let expected = if tails_settle { 1 } else { rounds };
            assert_eq!(
                dialect.settled_writes.get(),
                expected,
                "tails in settled form: {tails_settle}"
            );
        }
    }

    #[test]
    fn a_prefix_in_pieces_keeps_its_bytes_and_few_pieces() {
        let mut prefix = Vec::new();
        let mut expected = Vec::new();
        for i in 0..5_000_u32 {
            let piece = format!("{{\"n\":{i}}},").into_bytes();
            expected.extend_from_slice(&piece);
            append_piece(&mut prefix, piece);
            let pieces = prefix.len();
            assert!(pieces <= 12, "{pieces} pieces after {i} appends");
        }
        assert_eq!(prefix.concat(), expected);
    }

    #[test]
    fn settled_turns_end_at_the_newest_assistant_after_a_user_turn() {
        let call = ToolCall {
            id: "a".into(),
            name: "t".into(),
            arguments: json!({}),
        };
        let messages = vec![
            Message::user("go"),
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![call],
            },
            Message::ToolResult {
                call_id: "a".into(),
                output: ToolOutput::text("1"),
            },
            Message::Assistant {
                text: String::new(),
                tool_calls: vec![],
            },
            Message::Assistant {
                text: "x".into(),
                tool_calls: vec![],
            },
        ];
        // The empty assistant message at 3 opens nothing, and 4 follows an assistant message.
        assert_eq!(settled_up_to(&messages, 0), 1);
        assert_eq!(settled_up_to(&messages, 1), 1);
        assert_eq!(settled_up_to(&messages[..1], 0), 0);
    }
}
