//! An incremental parser of server-sent events (the `text/event-stream` format both dialects
//! stream in), fed whatever byte chunks the network delivers.
//!
//! It follows the WHATWG rules that matter to a client of an API: lines end with `\r\n`, `\n`
//! or `\r` (a `\r` at the end of one chunk and a `\n` at the start of the next are one line
//! end); `data:` lines accumulate, joined by `\n`; `event:` names the event; a blank line
//! dispatches it; lines starting with `:` are comments (keep-alives); one space after the colon
//! is dropped; `id` and `retry` are ignored (a request is never resumed). Bytes are decoded as
//! UTF-8 only once a line is whole, so a character split across chunks arrives intact; invalid
//! UTF-8 becomes U+FFFD.
//!
//! The peer is untrusted: a line longer than [`MAX_LINE_BYTES`] or an event whose data exceeds
//! [`MAX_EVENT_BYTES`] is an error, so a stream without line ends cannot grow memory without
//! bound. Nothing here panics, whatever the bytes.

/// The longest line accepted.
pub const MAX_LINE_BYTES: usize = 1024 * 1024;

/// The most data one event may carry.
pub const MAX_EVENT_BYTES: usize = 4 * 1024 * 1024;

/// One dispatched event.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; empty when the event had none (the default type, `message`).
    pub event: String,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
}

/// Why a stream cannot be parsed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SseError {
    /// A line went past [`MAX_LINE_BYTES`] without ending.
    #[error("an event-stream line is longer than {max} bytes")]
    LineTooLong {
        /// The limit, in bytes.
        max: usize,
    },
    /// An event's data went past [`MAX_EVENT_BYTES`].
    #[error("an event carries more than {max} bytes of data")]
    EventTooLarge {
        /// The limit, in bytes.
        max: usize,
    },
}

/// The parser's state between chunks.
#[derive(Debug)]
pub struct SseParser {
    /// The current, unfinished line.
    line: Vec<u8>,
    /// The previous chunk ended with `\r`: a `\n` first in the next one ends nothing.
    after_cr: bool,
    event: String,
    data: String,
    /// Whether `data` holds at least one `data:` line (an empty one counts).
    has_data: bool,
    max_line: usize,
    max_event: usize,
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

impl SseParser {
    /// A parser with the default limits.
    pub fn new() -> Self {
        Self::with_limits(MAX_LINE_BYTES, MAX_EVENT_BYTES)
    }

    /// A parser with these limits (tests use small ones).
    pub fn with_limits(max_line: usize, max_event: usize) -> Self {
        Self {
            line: Vec::new(),
            after_cr: false,
            event: String::new(),
            data: String::new(),
            has_data: false,
            max_line,
            max_event,
        }
    }

    /// Parses `chunk`, appending every event it completes to `out`.
    pub fn push(&mut self, chunk: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        let mut rest = chunk;
        // An empty chunk says nothing about whether the `\n` comes.
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if let [b'\n', tail @ ..] = rest {
                rest = tail;
            }
        }
        while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.extend_line(&rest[..end])?;
            let cr = rest[end] == b'\r';
            rest = &rest[end + 1..];
            if cr {
                match rest {
                    [b'\n', tail @ ..] => rest = tail,
                    [] => self.after_cr = true,
                    _ => {}
                }
            }
            let line = std::mem::take(&mut self.line);
            self.line_ended(&line, out)?;
            // Keep the allocation for the next line.
            self.line = line;
            self.line.clear();
        }
        self.extend_line(rest)
    }

    /// Whether bytes of an unfinished event are held: at the end of the body, such an event is
    /// dropped, as the format says, and the stream was cut. No reader of the crate asks it yet
    /// (both treat a stream's end without its last event as the peer's), so only the tests do.
    #[cfg(test)]
    pub fn has_partial_event(&self) -> bool {
        !self.line.is_empty() || self.has_data || !self.event.is_empty()
    }

    fn extend_line(&mut self, bytes: &[u8]) -> Result<(), SseError> {
        if self.line.len() + bytes.len() > self.max_line {
            return Err(SseError::LineTooLong { max: self.max_line });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    fn line_ended(&mut self, line: &[u8], out: &mut Vec<SseEvent>) -> Result<(), SseError> {
        if line.is_empty() {
            if self.has_data {
                out.push(SseEvent {
                    event: std::mem::take(&mut self.event),
                    data: std::mem::take(&mut self.data),
                });
            }
            self.event.clear();
            self.data.clear();
            self.has_data = false;
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (name, value) = match line.iter().position(|&b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &[][..]),
        };
        match name {
            b"data" => {
                let value = String::from_utf8_lossy(value);
                let added = value.len() + usize::from(self.has_data);
                if self.data.len() + added > self.max_event {
                    return Err(SseError::EventTooLarge {
                        max: self.max_event,
                    });
                }
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(&value);
                self.has_data = true;
            }
            b"event" => self.event = String::from_utf8_lossy(value).into_owned(),
            // `id`, `retry` and unknown fields: nothing a one-shot request uses.
            _ => {}
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        for chunk in chunks {
            parser.push(chunk, &mut out).unwrap();
        }
        out
    }

    fn event(event: &str, data: &str) -> SseEvent {
        SseEvent {
            event: event.into(),
            data: data.into(),
        }
    }

    #[test]
    fn every_split_of_a_stream_gives_the_same_events() {
        let stream = "event: message_start\r\ndata: {\"a\":\"é😀\"}\r\n\r\n: keep-alive\n\ndata:x\ndata: y\n\nid: 3\rretry: 9\rdata: last\r\r".as_bytes();
        let whole = parse_in(&[stream]);
        assert_eq!(
            whole,
            [
                event("message_start", "{\"a\":\"é😀\"}"),
                event("", "x\ny"),
                event("", "last")
            ]
        );
        // Two cuts anywhere: inside `data:`, inside a UTF-8 character, between `\r` and `\n`.
        for i in 0..=stream.len() {
            for j in i..=stream.len() {
                let got = parse_in(&[&stream[..i], &stream[i..j], &stream[j..]]);
                assert_eq!(got, whole, "cut at {i} and {j}");
            }
        }
        // One byte at a time.
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(parse_in(&bytes), whole);
    }

    #[test]
    fn an_event_without_data_is_not_dispatched_and_an_unfinished_one_is_held() {
        let mut parser = SseParser::new();
        let mut out = Vec::new();
        parser.push(b"event: ping\n\n", &mut out).unwrap();
        assert!(out.is_empty());
        assert!(!parser.has_partial_event());
        parser.push(b"data: {\"cut", &mut out).unwrap();
        assert!(out.is_empty());
        assert!(parser.has_partial_event());
    }

    #[test]
    fn long_lines_and_large_events_are_errors_not_memory() {
        let mut parser = SseParser::with_limits(16, 32);
        let mut out = Vec::new();
        assert_eq!(
            parser.push(&[b'a'; 17], &mut out),
            Err(SseError::LineTooLong { max: 16 })
        );
        let mut parser = SseParser::with_limits(16, 32);
        let err = (0..10)
            .map(|_| parser.push(b"data: 0123456789\n", &mut out))
            .find_map(Result::err);
        assert_eq!(err, Some(SseError::EventTooLarge { max: 32 }));
    }

    #[test]
    fn invalid_utf8_is_replaced_not_a_panic() {
        assert_eq!(
            parse_in(&[b"data: \xff\xfe\n\n"]),
            [event("", "\u{fffd}\u{fffd}")]
        );
    }
}
