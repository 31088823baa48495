//! Newline-delimited frames with a size cap, read before the protocol crate sees them.
//!
//! The protocol crate reads lines without a bound, so one oversized frame would make the agent
//! buffer it whole (or die on it) and take every other session down with it. This reader refuses
//! a frame past the cap while it streams by, keeping only its first bytes so the request id can
//! be answered with an error.

use serde_json::Value;
use tokio::io::{AsyncBufRead, AsyncBufReadExt};

// The caps on what an ACP client sends (this frame cap, the session limit in `AgentOptions`,
// the outgoing queue in `lines`) are listed, with what happens at each and the test behind it,
// in the README's "Resource limits" table; a new cap goes there too.

/// The default cap on one incoming frame: 4 MiB.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 4 * 1024 * 1024;

/// How much of an oversized frame is kept to find its id.
const SNIFF_BYTES: usize = 4096;

/// One incoming frame.
#[derive(Debug, PartialEq)]
pub enum Frame {
    /// A complete line of UTF-8, newline removed. Not necessarily valid JSON (the protocol
    /// crate answers that with a parse error).
    Line(String),
    /// A line longer than the cap, dropped. `id` is the request id found in its first bytes.
    Oversized {
        /// The request's id, when its first bytes show one.
        id: Option<Value>,
        /// The frame's length so far, in bytes.
        len: usize,
    },
    /// A line that is not UTF-8, dropped whole: replacing its bad bytes would alter the message
    /// (a prompt's text, say) rather than refuse it. `id` as for `Oversized`; `valid_up_to` is
    /// the offset of the first bad byte.
    NotUtf8 {
        /// The request's id, when its first bytes show one.
        id: Option<Value>,
        /// Where the invalid bytes start.
        valid_up_to: usize,
    },
}

/// Reads frames of at most `max` bytes from `reader`.
pub struct FrameReader<R> {
    reader: R,
    max: usize,
}

impl<R: AsyncBufRead + Unpin> FrameReader<R> {
    /// A reader refusing frames over `max` bytes.
    pub fn new(reader: R, max: usize) -> Self {
        Self { reader, max }
    }

    /// The cap, in bytes.
    pub fn max(&self) -> usize {
        self.max
    }

    /// The next non-blank frame, or `None` at end of input. A final line without a newline
    /// counts as a frame.
    pub async fn next_frame(&mut self) -> std::io::Result<Option<Frame>> {
        loop {
            let mut line = Vec::new();
            let mut len = 0usize;
            let mut over = false;
            let mut eof = false;
            loop {
                let buf = self.reader.fill_buf().await?;
                if buf.is_empty() {
                    eof = true;
                    break;
                }
                let (chunk, done) = match memchr(b'\n', buf) {
                    Some(i) => (&buf[..i], i + 1),
                    None => (buf, buf.len()),
                };
                len += chunk.len();
                if !over && len > self.max {
                    over = true;
                }
                let keep = if over { SNIFF_BYTES } else { self.max };
                let room = keep.saturating_sub(line.len());
                line.extend_from_slice(&chunk[..chunk.len().min(room)]);
                let ended = done > chunk.len();
                self.reader.consume(done);
                if ended {
                    break;
                }
            }
            if eof && len == 0 {
                return Ok(None);
            }
            if over {
                return Ok(Some(Frame::Oversized {
                    id: sniff_id(&line),
                    len,
                }));
            }
            if line.iter().all(u8::is_ascii_whitespace) {
                if eof {
                    return Ok(None);
                }
                continue;
            }
            return Ok(Some(match String::from_utf8(line) {
                Ok(text) => Frame::Line(text),
                Err(e) => Frame::NotUtf8 {
                    valid_up_to: e.utf8_error().valid_up_to(),
                    id: sniff_id(e.as_bytes()),
                },
            }));
        }
    }
}

fn memchr(needle: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == needle)
}

/// Finds the top-level `"id"` of a JSON-RPC object from its first bytes: a number or a short
/// string. Anything else (not found, nested, cut off) is `None`.
pub fn sniff_id(prefix: &[u8]) -> Option<Value> {
    let end = find_top_level_key(prefix, |name| name == b"id")?;
    let colon = end + 1 + prefix[end + 1..].iter().position(|&b| b == b':')?;
    id_value(&prefix[colon + 1..])
}

/// Which of `keys` comes first among the top-level keys of the JSON object `bytes` begins,
/// if any does; the scan stops there.
pub fn first_top_level_key<'k>(bytes: &[u8], keys: &[&'k [u8]]) -> Option<&'k [u8]> {
    let mut found = None;
    find_top_level_key(bytes, |name| {
        found = keys.iter().find(|k| **k == name).copied();
        found.is_some()
    })?;
    found
}

/// The index of the quote closing the first top-level key of the object `bytes` begins that
/// `wanted` takes; the scan stops there.
fn find_top_level_key(bytes: &[u8], mut wanted: impl FnMut(&[u8]) -> bool) -> Option<usize> {
    let mut depth = 0u32;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'{' | b'[' => depth += 1,
            b'}' | b']' => depth = depth.saturating_sub(1),
            b'"' => {
                let end = string_end(bytes, i)?;
                let is_key = depth == 1
                    && bytes[end + 1..].iter().find(|b| !b.is_ascii_whitespace()) == Some(&b':');
                if is_key && wanted(&bytes[i + 1..end]) {
                    return Some(end);
                }
                i = end;
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The index of the quote closing the string that opens at `start`.
fn string_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 2,
            b'"' => return Some(i),
            _ => i += 1,
        }
    }
    None
}

fn id_value(rest: &[u8]) -> Option<Value> {
    let start = rest.iter().position(|b| !b.is_ascii_whitespace())?;
    let rest = &rest[start..];
    let end = if rest.first() == Some(&b'"') {
        string_end(rest, 0)? + 1
    } else {
        rest.iter()
            .position(|b| matches!(b, b',' | b'}' | b' ' | b'\n' | b'\r' | b'\t'))?
    };
    let value: Value = serde_json::from_slice(&rest[..end]).ok()?;
    matches!(value, Value::Number(_) | Value::String(_)).then_some(value)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    async fn frames(input: &[u8], max: usize) -> Vec<Frame> {
        let mut reader = FrameReader::new(tokio::io::BufReader::with_capacity(7, input), max);
        let mut out = Vec::new();
        while let Some(frame) = reader.next_frame().await.unwrap() {
            out.push(frame);
        }
        out
    }

    #[tokio::test]
    async fn lines_split_on_newlines_and_blank_lines_are_skipped() {
        let got = frames(b"{\"a\":1}\n\n  \r\n{\"b\":2}\r\n{\"c\":3}", 64).await;
        assert_eq!(
            got,
            [
                Frame::Line("{\"a\":1}".into()),
                Frame::Line("{\"b\":2}\r".into()),
                Frame::Line("{\"c\":3}".into()),
            ]
        );
    }

    #[tokio::test]
    async fn an_oversized_frame_is_refused_with_its_id_and_the_next_is_read() {
        let big = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"x\",\"params\":\"{}\"}}\n{{\"ok\":1}}\n",
            "y".repeat(1000)
        );
        let got = frames(big.as_bytes(), 100).await;
        assert_eq!(got.len(), 2);
        assert!(
            matches!(&got[0], Frame::Oversized { id: Some(id), len } if *id == json!(42) && *len > 1000)
        );
        assert_eq!(got[1], Frame::Line("{\"ok\":1}".into()));
    }

    #[tokio::test]
    async fn a_frame_exactly_at_the_cap_passes() {
        let line = "x".repeat(100);
        let got = frames(format!("{line}\n").as_bytes(), 100).await;
        assert_eq!(got, [Frame::Line(line)]);
    }

    #[tokio::test]
    async fn invalid_utf8_is_refused_with_its_id_and_the_next_frame_is_read() {
        let got = frames(b"{\"id\":3,\"x\":\"a\xff\"}\n{}\n", 64).await;
        assert_eq!(
            got,
            [
                Frame::NotUtf8 {
                    id: Some(json!(3)),
                    valid_up_to: 14
                },
                Frame::Line("{}".into())
            ]
        );
    }

    #[test]
    fn ids_are_found_at_the_top_level_only() {
        assert_eq!(sniff_id(br#"{"jsonrpc":"2.0","id":7,"#), Some(json!(7)));
        assert_eq!(sniff_id(br#"{ "id" : "a\"b" , "x":1"#), Some(json!("a\"b")));
        assert_eq!(
            sniff_id(br#"{"params":{"id":1},"method":"m","id":"top","#),
            Some(json!("top"))
        );
        assert_eq!(sniff_id(br#"{"method":"m","params":{"id":1,"#), None);
        assert_eq!(sniff_id(br#"{"note":"id","params":"#), None);
        assert_eq!(sniff_id(br#"{"id":{"x":1}}"#), None);
        assert_eq!(sniff_id(br#"{"id":12"#), None);
        assert_eq!(sniff_id(b""), None);
    }
}
