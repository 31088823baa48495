//! Reading a transcript: line by line and bounded (no line over [`MAX_LINE_BYTES`] is held),
//! the header checked for its format and version, unknown fields refused, and a last line cut
//! short told apart from a broken one.

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::transcript::TranscriptError;
use crate::transcript::format::{
    FORMAT, Header, OLDEST_VERSION, Record, Transcript, Truncation, VERSION,
};

impl Transcript {
    /// Reads a transcript file line by line, never holding more than one line of it (at most
    /// [`MAX_LINE_BYTES`]) besides the records. See [`parse`](Self::parse).
    pub fn read(path: impl AsRef<Path>) -> Result<Self, TranscriptError> {
        let path = path.as_ref();
        let read_error = |source| TranscriptError::Read {
            path: path.to_owned(),
            source,
        };
        let file = std::fs::File::open(path).map_err(read_error)?;
        Self::from_reader(std::io::BufReader::new(file)).map_err(|error| match error {
            ReadError::Io(source) => read_error(source),
            ReadError::Transcript(error) => error,
        })
    }

    /// Parses a transcript's bytes; invalid UTF-8 is an error naming its line (or, in a last
    /// line cut short, a truncation).
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self, TranscriptError> {
        Self::from_reader(bytes).map_err(|error| match error {
            ReadError::Transcript(error) => error,
            // Reading from a slice cannot fail.
            ReadError::Io(source) => TranscriptError::Read {
                path: PathBuf::from("<memory>"),
                source,
            },
        })
    }

    /// Parses a transcript. The header must be of this format and version. A last line that
    /// does not end in a newline and does not parse was cut short: it is reported in
    /// [`truncated`](Self::truncated) and the rest is returned. Blank lines are skipped. A line
    /// over [`MAX_LINE_BYTES`] is refused.
    pub fn parse(text: &str) -> Result<Self, TranscriptError> {
        Self::parse_bytes(text.as_bytes())
    }

    fn from_reader(mut reader: impl BufRead) -> Result<Self, ReadError> {
        let mut buffer = Vec::new();
        let mut parser = Parser::default();
        loop {
            buffer.clear();
            // One byte over the cap tells a line at the cap from a longer one.
            let cap = MAX_LINE_BYTES as u64 + 1;
            let read = (&mut reader)
                .take(cap)
                .read_until(b'\n', &mut buffer)
                .map_err(ReadError::Io)?;
            if read == 0 {
                break;
            }
            let terminated = buffer.last() == Some(&b'\n');
            if !terminated && buffer.len() > MAX_LINE_BYTES {
                return Err(TranscriptError::LineTooLong {
                    line: parser.number + 1,
                    limit: MAX_LINE_BYTES,
                }
                .into());
            }
            parser.line(&buffer, terminated)?;
        }
        Ok(parser.finish()?)
    }
}

/// The longest line a transcript may hold, newline included: a record larger than this is
/// refused rather than read into memory whole.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// Why reading a transcript stopped.
enum ReadError {
    Io(std::io::Error),
    Transcript(TranscriptError),
}

impl From<TranscriptError> for ReadError {
    fn from(error: TranscriptError) -> Self {
        Self::Transcript(error)
    }
}

/// Reads a transcript one line at a time.
#[derive(Default)]
struct Parser {
    transcript: Option<Transcript>,
    /// The number of the last line seen (1-based).
    number: usize,
}

impl Parser {
    /// Takes the next line; `terminated` when it ends in a newline. Only the very last line
    /// can be cut short: the recorder ends every line with a newline in the same write.
    fn line(&mut self, raw: &[u8], terminated: bool) -> Result<(), TranscriptError> {
        self.number += 1;
        let number = self.number;
        let Some(transcript) = &mut self.transcript else {
            let text =
                std::str::from_utf8(raw).map_err(|_| TranscriptError::NotUtf8 { line: 1 })?;
            self.transcript = Some(Transcript {
                header: parse_header(text)?,
                records: Vec::new(),
                lines: Vec::new(),
                truncated: None,
            });
            return Ok(());
        };
        let cut_short = |reason: String| Truncation {
            line: number,
            bytes: raw.len(),
            reason,
        };
        let text = match std::str::from_utf8(raw) {
            Ok(text) => text,
            // Invalid bytes in the last, unterminated line are a cut-short write: keep the
            // rest, as for any other truncated line.
            Err(_) if !terminated => {
                transcript.truncated = Some(cut_short("invalid UTF-8".to_owned()));
                return Ok(());
            }
            Err(_) => return Err(TranscriptError::NotUtf8 { line: number }),
        };
        let line = text.trim();
        if line.is_empty() {
            return Ok(());
        }
        match serde_json::from_str::<Record>(line) {
            Ok(record) => {
                check_known_fields(line, &record, number)?;
                transcript.records.push(record);
                transcript.lines.push(number);
            }
            Err(error) if !terminated => {
                tracing::warn!(
                    line = number,
                    %error,
                    "transcript: the last line is cut short; ignoring it"
                );
                transcript.truncated = Some(cut_short(error.to_string()));
            }
            Err(source) => {
                return Err(TranscriptError::Record {
                    line: number,
                    source,
                });
            }
        }
        Ok(())
    }

    fn finish(self) -> Result<Transcript, TranscriptError> {
        self.transcript.ok_or(TranscriptError::Empty)
    }
}

/// Checks the format and version before reading the rest of the header, so that a transcript
/// of another version is refused by its version, not by whatever field it renamed.
fn parse_header(line: &str) -> Result<Header, TranscriptError> {
    #[derive(Deserialize)]
    struct Probe {
        format: Option<String>,
        version: Option<serde_json::Value>,
    }
    let not_a_transcript = |reason: String| TranscriptError::NotATranscript { reason };
    let probe: Probe = serde_json::from_str(line.trim())
        .map_err(|error| not_a_transcript(format!("line 1 is not a JSON object: {error}")))?;
    match probe.format.as_deref() {
        Some(FORMAT) => {}
        Some(other) => return Err(not_a_transcript(format!("its format is {other:?}"))),
        None => return Err(not_a_transcript("line 1 has no `format` field".to_owned())),
    }
    let version = match probe.version {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        _ => None,
    };
    match version {
        Some(v) if (u64::from(OLDEST_VERSION)..=u64::from(VERSION)).contains(&v) => {}
        Some(found) => return Err(TranscriptError::UnsupportedVersion { found }),
        None => {
            return Err(not_a_transcript(
                "its header has no whole-number `version`".to_owned(),
            ));
        }
    }
    let header: Header =
        serde_json::from_str(line.trim()).map_err(|source| TranscriptError::Header { source })?;
    check_known_fields(line.trim(), &header, 1)?;
    Ok(header)
}

/// One rule for every level of a line: a field this engine does not know is refused, in the
/// header, in a record, and inside any payload, so that nothing recorded is silently ignored
/// by a replay that then calls itself a match. A field that holds its default (`null`,
/// `false`, `[]`, `{}`) may be left out or written. The check compares the line with the
/// value as this engine writes it back.
fn check_known_fields(
    line: &str,
    read: &impl Serialize,
    number: usize,
) -> Result<(), TranscriptError> {
    // The line parsed into `read`, so it parses as a `Value`; `read` is plain data.
    let (Ok(original), Ok(written)) = (
        serde_json::from_str::<serde_json::Value>(line),
        serde_json::to_value(read),
    ) else {
        return Ok(());
    };
    let mut path = String::new();
    if has_unknown_field(&original, &written, &mut path) {
        Err(TranscriptError::UnknownField { line: number, path })
    } else {
        Ok(())
    }
}

/// Whether `read` has a field that `written` lacks; if so, `path` is left pointing at the first.
fn has_unknown_field(
    read: &serde_json::Value,
    written: &serde_json::Value,
    path: &mut String,
) -> bool {
    use serde_json::Value;
    match (read, written) {
        (Value::Object(read), Value::Object(written)) => {
            for (key, value) in read {
                let len = path.len();
                path.push('.');
                path.push_str(key);
                let unknown = match written.get(key) {
                    Some(known) => has_unknown_field(value, known, path),
                    None => !is_default(value),
                };
                if unknown {
                    return true;
                }
                path.truncate(len);
            }
            false
        }
        (Value::Array(read), Value::Array(written)) => {
            for (index, (value, known)) in read.iter().zip(written).enumerate() {
                let len = path.len();
                path.push_str(&format!("[{index}]"));
                if has_unknown_field(value, known, path) {
                    return true;
                }
                path.truncate(len);
            }
            false
        }
        _ => false,
    }
}

fn is_default(value: &serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Null | Value::Bool(false) => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        Value::Bool(true) | Value::Number(_) | Value::String(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::machine::{Digest, FinishReason, HookReply, LlmReply, Purpose, RequestDigest};
    use crate::machine::{Effect, Input, Policy};
    use crate::{Hook, ServerName};

    fn sample() -> Transcript {
        let header = Header::from_parts(Policy::default(), Some("be brief".into()));
        Transcript::new(
            header,
            vec![
                Record::fact(0, Input::Prompted { text: "hi".into() }),
                Record::effect(
                    0,
                    Effect::CallLlm {
                        purpose: Purpose::Turn,
                        messages: 1,
                        digest: RequestDigest {
                            system: Digest(1),
                            messages: Digest(2),
                            tools: Digest(3),
                            instruction: Digest(4),
                            limits: Digest(5),
                        },
                    },
                ),
                Record::fact(
                    3,
                    Input::LlmReplied {
                        reply: LlmReply {
                            text: "done".into(),
                            ..LlmReply::default()
                        },
                    },
                ),
                Record::fact(
                    2500,
                    Input::HookAnswered {
                        server: ServerName::new("todo").unwrap(),
                        hook: Hook::Stop,
                        reply: HookReply::TimedOut,
                        subject: None,
                    },
                ),
                Record::effect(
                    2500,
                    Effect::Finish {
                        reason: FinishReason::EndTurn,
                    },
                ),
            ],
        )
    }

    #[test]
    fn transcripts_round_trip_through_jsonl() {
        let transcript = sample();
        let text = transcript.to_jsonl();
        assert_eq!(Transcript::parse(&text).unwrap(), transcript);
        assert_eq!(text.lines().count(), 6);
    }

    #[test]
    fn lines_have_a_stable_field_order() {
        let text = sample().to_jsonl();
        let mut lines = text.lines();
        assert!(
            lines
                .next()
                .unwrap()
                .starts_with(r#"{"format":"hookloop-transcript","version":3,"engine":""#)
        );
        assert_eq!(
            lines.next().unwrap(),
            r#"{"at_ms":0,"fact":{"fact":"prompted","text":"hi"}}"#
        );
        assert_eq!(
            lines.next().unwrap(),
            concat!(
                r#"{"at_ms":0,"effect":{"effect":"call_llm","purpose":{"kind":"turn"},"messages":1,"#,
                r#""digest":{"system":"0000000000000001","messages":"0000000000000002","#,
                r#""tools":"0000000000000003","instruction":"0000000000000004","#,
                r#""limits":"0000000000000005"}}}"#
            )
        );
    }

    #[test]
    fn a_cut_short_last_line_is_reported_and_the_rest_kept() {
        let text = sample().to_jsonl();
        let cut = &text[..text.len() - 10];
        let transcript = Transcript::parse(cut).unwrap();
        assert_eq!(transcript.records.len(), 4);
        let truncation = transcript.truncated.unwrap();
        assert_eq!(truncation.line, 6);
        assert!(truncation.bytes > 0);
    }

    #[test]
    fn a_broken_line_before_the_last_is_an_error_naming_it() {
        let text = sample()
            .to_jsonl()
            .replacen(r#""at_ms":3"#, r#""at_ms":"x""#, 1);
        let error = Transcript::parse(&text).unwrap_err();
        assert!(
            matches!(error, TranscriptError::Record { line: 4, .. }),
            "{error}"
        );
        assert!(error.to_string().starts_with("line 4: "), "{error}");
    }

    #[test]
    fn a_record_with_both_or_neither_event_is_refused() {
        let header = serde_json::to_string(&sample().header).unwrap();
        for bad in [
            r#"{"at_ms":0}"#,
            r#"{"at_ms":0,"fact":{"fact":"cancelled"},"effect":{"effect":"notify"}}"#,
            r#"{"at_ms":0,"fact":{"fact":"cancelled"},"extra":1}"#,
        ] {
            let text = format!("{header}\n{bad}\n");
            assert!(Transcript::parse(&text).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_newer_version_is_refused_with_its_number() {
        let mut header = serde_json::to_value(&sample().header).unwrap();
        header["version"] = json!(4);
        header["renamed_field"] = json!(true);
        let text = format!("{header}\n");
        let error = Transcript::parse(&text).unwrap_err();
        assert!(matches!(
            error,
            TranscriptError::UnsupportedVersion { found: 4 }
        ));
        assert_eq!(
            error.to_string(),
            "transcript format version 4 is not supported: this engine reads versions 2 to 3 \
             (it was written by a newer engine)"
        );
    }

    #[test]
    fn a_version_2_transcript_reads_as_version_3_without_its_new_fact() {
        let mut header = serde_json::to_value(&sample().header).unwrap();
        header["version"] = json!(2);
        let text = format!(
            "{header}\n{}",
            sample().to_jsonl().split_once('\n').unwrap().1
        );
        let transcript = Transcript::parse(&text).unwrap();
        assert_eq!(transcript.header.version, 2);
        assert_eq!(transcript.records, sample().records);
    }

    #[test]
    fn a_version_1_transcript_is_refused_naming_both_versions() {
        // Version 1 pinned a model request by its history alone: it cannot say whether the
        // tools, instruction or limits were the same, so it is refused rather than replayed.
        let v1 = concat!(
            r#"{"format":"hookloop-transcript","version":1,"engine":"0.1.0","config":{"policy":{}},"catalog":{"servers":[]}}"#,
            "\n",
            r#"{"at_ms":0,"effect":{"effect":"call_llm","purpose":{"kind":"turn"},"messages":1,"digest":42}}"#,
            "\n"
        );
        let error = Transcript::parse(v1).unwrap_err();
        assert!(matches!(
            error,
            TranscriptError::UnsupportedVersion { found: 1 }
        ));
        assert_eq!(
            error.to_string(),
            "transcript format version 1 is not supported: this engine reads versions 2 to 3 \
             (older transcripts do not pin every part of a model request; record the session again)"
        );
    }

    #[test]
    fn other_files_are_not_transcripts() {
        for text in ["", "hello\n", "{}\n", r#"{"format":"other","version":1}"#] {
            assert!(Transcript::parse(text).is_err(), "{text:?}");
        }
        let error = Transcript::parse(r#"{"format":"hookloop-transcript"}"#).unwrap_err();
        assert!(error.to_string().contains("version"), "{error}");
    }

    #[test]
    fn invalid_utf8_in_the_last_line_is_a_truncation() {
        let mut bytes = sample().to_jsonl().into_bytes();
        bytes.extend_from_slice(b"{\"at_ms\":1,\"fact\xff");
        let transcript = Transcript::parse_bytes(&bytes).unwrap();
        assert_eq!(transcript.records.len(), 5);
        assert_eq!(transcript.truncated.unwrap().line, 7);
        let mut bytes = sample().to_jsonl().into_bytes();
        bytes.insert(bytes.len() - 3, 0xff);
        let error = Transcript::parse_bytes(&bytes).unwrap_err();
        assert!(
            matches!(error, TranscriptError::NotUtf8 { line: 6 }),
            "{error}"
        );
    }

    #[test]
    fn an_unknown_field_inside_a_payload_is_refused_naming_its_path() {
        let text = sample().to_jsonl().replacen(
            r#""reply":{"text":"done""#,
            r#""reply":{"text":"done","mood":"happy""#,
            1,
        );
        let error = Transcript::parse(&text).unwrap_err();
        assert!(
            matches!(&error, TranscriptError::UnknownField { line: 4, path } if path == ".fact.reply.mood"),
            "{error}"
        );
        assert_eq!(
            error.to_string(),
            "line 4: unknown field `.fact.reply.mood`: this engine would ignore it, so it refuses it"
        );
    }

    #[test]
    fn an_unknown_field_inside_the_header_policy_is_refused() {
        let text = sample()
            .to_jsonl()
            .replacen(r#""policy":{"#, r#""policy":{"turbo":true,"#, 1);
        let error = Transcript::parse(&text).unwrap_err();
        assert!(
            matches!(&error, TranscriptError::UnknownField { line: 1, path } if path == ".config.policy.turbo"),
            "{error}"
        );
    }

    #[test]
    fn a_field_written_with_its_default_value_is_accepted() {
        let text = sample().to_jsonl().replacen(
            r#""reply":{"text":"done""#,
            r#""reply":{"text":"done","tool_calls":[]"#,
            1,
        );
        assert_eq!(Transcript::parse(&text).unwrap(), sample());
    }

    #[test]
    fn an_endless_line_is_refused_at_the_cap_without_reading_on() {
        // An infinite reader: a parser that read a whole line before checking it would never
        // return.
        let header = sample().to_jsonl();
        let header = header.lines().next().unwrap().to_owned() + "\n";
        let endless = header.as_bytes().chain(std::io::repeat(b'x'));
        let error = match Transcript::from_reader(std::io::BufReader::new(endless)) {
            Err(ReadError::Transcript(error)) => error,
            Err(ReadError::Io(error)) => panic!("{error}"),
            Ok(_) => panic!("an endless line was accepted"),
        };
        assert!(
            matches!(
                error,
                TranscriptError::LineTooLong {
                    line: 2,
                    limit: MAX_LINE_BYTES
                }
            ),
            "{error}"
        );
    }

    #[test]
    fn a_line_at_the_cap_is_read() {
        let mut text = sample().to_jsonl();
        let padding =
            MAX_LINE_BYTES - r#"{"at_ms":0,"fact":{"fact":"prompted","text":""}}"#.len() - 1;
        text.push_str(&format!(
            "{{\"at_ms\":0,\"fact\":{{\"fact\":\"prompted\",\"text\":\"{}\"}}}}\n",
            "y".repeat(padding)
        ));
        let transcript = Transcript::parse(&text).unwrap();
        assert_eq!(transcript.records.len(), 6);
    }
}
