//! The request digest: what a transcript pins of each model request, over a canonical encoding
//! this crate owns.
//!
//! A digest must not move when a serde attribute, a dependency or an embedder's feature flags
//! (`serde_json/preserve_order`) change, so it is never taken over serde output. Every value is
//! written by hand into a self-delimiting byte stream (a tag byte per kind, lengths before
//! contents, object keys sorted), and the stream is hashed with 64-bit FNV-1a. The encoding is
//! documented in `docs/transcript-format.md` ("Request digest"); a change to it is a change of the
//! transcript format version.
//!
//! Each part of a request has its own digest so that a divergence names the part that differs.
//! A new part is one more field of [`RequestDigest`] and one more `encode_*` call in
//! [`RequestDigest::of`].

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

use crate::machine::message::{Content, Message, ToolCall, ToolOutput, ToolSpec};

/// The digests of the parts of one model request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestDigest {
    /// The system prompt (or its absence).
    pub system: Digest,
    /// The whole history, chained message by message; the request's
    /// [`Purpose`](crate::machine::Purpose) says which suffix of it was sent.
    pub messages: Digest,
    /// The tools offered to the model, in the order offered (none for a summary).
    pub tools: Digest,
    /// The instruction sent after the messages (the summary instruction), or its absence.
    pub instruction: Digest,
    /// The limits sent with the request: the output token limit.
    pub limits: Digest,
}

impl RequestDigest {
    /// The digest of a request whose history digest is `messages` (kept running by
    /// [`History`](crate::machine::History), so a request costs the same at any length) and
    /// whose offered tools digest to `tools` (kept with the catalog).
    pub fn of(
        system: Option<&str>,
        messages: Digest,
        tools: Digest,
        instruction: Option<&str>,
        max_output_tokens: u32,
    ) -> Self {
        Self {
            system: Digest::of(|e| e.option_str(system)),
            messages,
            tools,
            instruction: Digest::of(|e| e.option_str(instruction)),
            limits: Digest::of(|e| e.unsigned(u64::from(max_output_tokens))),
        }
    }

    /// The names of the parts that differ between `self` and `other`, in field order.
    pub fn differing_parts(&self, other: &Self) -> Vec<&'static str> {
        [
            ("system", self.system == other.system),
            ("messages", self.messages == other.messages),
            ("tools", self.tools == other.tools),
            ("instruction", self.instruction == other.instruction),
            ("limits", self.limits == other.limits),
        ]
        .into_iter()
        .filter_map(|(name, same)| (!same).then_some(name))
        .collect()
    }
}

/// A 64-bit FNV-1a hash of a canonical encoding; written in transcripts as 16 lower-case hex
/// digits (a JSON number would lose bits in readers that parse numbers as doubles).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Digest(pub u64);

impl Digest {
    /// The digest of an empty stream: the FNV offset basis.
    pub const EMPTY: Self = Self(FNV_OFFSET);

    /// The digest of what `write` encodes.
    pub fn of(write: impl FnOnce(&mut Encoder)) -> Self {
        let mut encoder = Encoder(FNV_OFFSET);
        write(&mut encoder);
        Self(encoder.0)
    }

    /// The digest of the tools offered, in order.
    pub fn of_tools(tools: &[ToolSpec]) -> Self {
        Self::of(|e| {
            e.len(b'l', tools.len());
            for tool in tools {
                e.tool_spec(tool);
            }
        })
    }

    /// This digest's stream continued with `message`: a history's digest is the digest of the
    /// concatenation of its messages' encodings (the encoding is self-delimiting).
    #[must_use]
    pub fn chain(self, message: &Message) -> Self {
        let mut encoder = Encoder(self.0);
        encoder.message(message);
        Self(encoder.0)
    }
}

impl Default for Digest {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({self})")
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        let valid =
            text.len() == 16 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        let value = valid
            .then(|| u64::from_str_radix(&text, 16).ok())
            .flatten()
            .ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "a digest is 16 lower-case hex digits, not {text:?}"
                ))
            })?;
        Ok(Self(value))
    }
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Writes values in the canonical encoding straight into an FNV-1a state.
pub struct Encoder(u64);

impl Encoder {
    fn bytes(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0 ^ u64::from(byte)).wrapping_mul(FNV_PRIME);
        }
    }

    /// A tag byte and a length (u64, little-endian).
    fn len(&mut self, tag: u8, len: usize) {
        self.bytes(&[tag]);
        self.bytes(&(len as u64).to_le_bytes());
    }

    /// `s`, length, UTF-8 bytes.
    pub fn str(&mut self, text: &str) {
        self.len(b's', text.len());
        self.bytes(text.as_bytes());
    }

    /// `n` for none, or `o` and the string.
    pub fn option_str(&mut self, text: Option<&str>) {
        match text {
            None => self.bytes(b"n"),
            Some(text) => {
                self.bytes(b"o");
                self.str(text);
            }
        }
    }

    /// `u`, eight bytes little-endian.
    pub fn unsigned(&mut self, value: u64) {
        self.bytes(b"u");
        self.bytes(&value.to_le_bytes());
    }

    /// `t` or `f`.
    pub fn bool(&mut self, value: bool) {
        self.bytes(if value { b"t" } else { b"f" });
    }

    /// A JSON value: `z` null, `t`/`f`, `u`/`i`/`d` numbers (unsigned, signed, or the f64's
    /// bits, whichever holds it, so `1` and `1.0` differ but no build flag matters), `s`
    /// strings, `l` arrays, `m` objects with their entries sorted by key bytes.
    pub fn json(&mut self, value: &Value) {
        match value {
            Value::Null => self.bytes(b"z"),
            Value::Bool(b) => self.bool(*b),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    self.unsigned(u);
                } else if let Some(i) = n.as_i64() {
                    self.bytes(b"i");
                    self.bytes(&i.to_le_bytes());
                } else {
                    self.bytes(b"d");
                    self.bytes(&n.as_f64().unwrap_or(f64::NAN).to_bits().to_le_bytes());
                }
            }
            Value::String(s) => self.str(s),
            Value::Array(items) => {
                self.len(b'l', items.len());
                for item in items {
                    self.json(item);
                }
            }
            Value::Object(map) => {
                // Sorted here, whatever order the map keeps (`preserve_order` keeps insertion).
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                self.len(b'm', entries.len());
                for (key, item) in entries {
                    self.str(key);
                    self.json(item);
                }
            }
        }
    }

    /// `U` text; `A` text and its calls; `R` call id and output.
    pub fn message(&mut self, message: &Message) {
        match message {
            Message::User { text } => {
                self.bytes(b"U");
                self.str(text);
            }
            Message::Assistant { text, tool_calls } => {
                self.bytes(b"A");
                self.str(text);
                self.len(b'l', tool_calls.len());
                for call in tool_calls {
                    self.tool_call(call);
                }
            }
            Message::ToolResult { call_id, output } => {
                self.bytes(b"R");
                self.str(call_id.as_str());
                self.tool_output(output);
            }
        }
    }

    fn tool_call(&mut self, call: &ToolCall) {
        self.str(call.id.as_str());
        self.str(&call.name);
        self.json(&call.arguments);
    }

    fn tool_output(&mut self, output: &ToolOutput) {
        self.bool(output.is_error);
        self.len(b'l', output.content.len());
        for block in &output.content {
            match block {
                Content::Text { text } => {
                    self.bytes(b"T");
                    self.str(text);
                }
                Content::Image { mime_type, data } => {
                    self.bytes(b"I");
                    self.str(mime_type);
                    self.str(data);
                }
                Content::Resource {
                    uri,
                    mime_type,
                    text,
                    blob,
                } => {
                    self.bytes(b"E");
                    self.str(uri);
                    self.option_str(mime_type.as_deref());
                    self.option_str(text.as_deref());
                    self.option_str(blob.as_deref());
                }
            }
        }
    }

    fn tool_spec(&mut self, tool: &ToolSpec) {
        self.str(&tool.name);
        self.str(&tool.description);
        self.json(&tool.input_schema);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Map, json};

    use super::*;

    fn call_with(arguments: Value) -> Message {
        Message::Assistant {
            text: "calling".into(),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "fs__read".into(),
                arguments,
            }],
        }
    }

    /// Keys inserted in reverse order: a `preserve_order` build iterates them so.
    fn reversed_object() -> Value {
        let mut map = Map::new();
        for (key, value) in [
            ("z", json!(1)),
            ("m", json!([true, null])),
            ("a", json!("x")),
        ] {
            map.insert(key.to_owned(), value);
        }
        Value::Object(map)
    }

    #[test]
    fn the_digest_of_a_message_is_this_constant_in_every_build() {
        // This constant is the format: CI runs this test with and without
        // `serde_json/preserve_order`, and it must hold in both.
        let digest = Digest::EMPTY.chain(&call_with(reversed_object()));
        assert_eq!(digest.to_string(), "ed2b98bbcf02c026");
    }

    #[test]
    fn object_keys_are_encoded_sorted_whatever_the_insertion_order() {
        let sorted = json!({"a": "x", "m": [true, null], "z": 1});
        assert_eq!(
            Digest::EMPTY.chain(&call_with(reversed_object())),
            Digest::EMPTY.chain(&call_with(sorted)),
        );
    }

    #[test]
    fn the_encoding_is_unambiguous_across_field_boundaries() {
        let a = Message::User { text: "ab".into() };
        let b = Message::User { text: "a".into() };
        let c = Message::User { text: "b".into() };
        assert_ne!(Digest::EMPTY.chain(&a), Digest::EMPTY.chain(&b).chain(&c));
        assert_ne!(
            Digest::of(|e| e.option_str(None)),
            Digest::of(|e| e.option_str(Some("")))
        );
        assert_ne!(
            Digest::EMPTY.chain(&call_with(json!(1))),
            Digest::EMPTY.chain(&call_with(json!(1.0)))
        );
        assert_ne!(
            Digest::EMPTY.chain(&call_with(json!("1"))),
            Digest::EMPTY.chain(&call_with(json!(1)))
        );
    }

    #[test]
    fn each_part_of_a_request_has_its_own_digest() {
        let tools = [ToolSpec {
            name: "fs__read".into(),
            description: "read".into(),
            input_schema: json!({"type": "object"}),
        }];
        let base = RequestDigest::of(
            Some("sys"),
            Digest::EMPTY,
            Digest::of_tools(&tools),
            None,
            100,
        );
        let summary = RequestDigest::of(
            Some("sys"),
            Digest::EMPTY,
            Digest::of_tools(&[]),
            Some("summarize"),
            100,
        );
        assert_eq!(base.differing_parts(&summary), ["tools", "instruction"]);
        let limits = RequestDigest::of(
            Some("sys"),
            Digest::EMPTY,
            Digest::of_tools(&tools),
            None,
            101,
        );
        assert_eq!(base.differing_parts(&limits), ["limits"]);
        assert!(base.differing_parts(&base).is_empty());
    }

    #[test]
    fn a_tool_catalog_digest_covers_each_tools_name_description_and_schema() {
        let tool = |name: &str, description: &str, schema: Value| ToolSpec {
            name: name.into(),
            description: description.into(),
            input_schema: schema,
        };
        let object = json!({"type": "object"});
        let base = Digest::of_tools(&[tool("fs__read", "read", object.clone())]);
        for changed in [
            tool("fs__write", "read", object.clone()),
            tool("fs__read", "read a file", object.clone()),
            tool(
                "fs__read",
                "read",
                json!({"type": "object", "required": ["path"]}),
            ),
        ] {
            assert_ne!(
                Digest::of_tools(std::slice::from_ref(&changed)),
                base,
                "{changed:?}"
            );
        }
        assert_eq!(
            Digest::of_tools(&[tool("fs__read", "read", object)]),
            base,
            "equal catalogs, equal digests"
        );
    }

    #[test]
    fn digests_are_written_as_sixteen_hex_digits_and_read_back() {
        let digest = Digest(0x00ab_cdef_0123_4567);
        let text = serde_json::to_string(&digest).unwrap();
        assert_eq!(text, r#""00abcdef01234567""#);
        assert_eq!(serde_json::from_str::<Digest>(&text).unwrap(), digest);
        // An assertion that fails shows the same digits.
        assert_eq!(format!("{digest:?}"), "Digest(00abcdef01234567)");
        for bad in [
            r#""ABCDEF0123456789""#,
            r#""123""#,
            "42",
            r#""0x00abcdef012345""#,
        ] {
            assert!(serde_json::from_str::<Digest>(bad).is_err(), "{bad}");
        }
    }
}
