//! Text helpers every part of the crate shares: shortening text for a limit or a display
//! ([`cut`], [`one_line`]), making untrusted text safe for a terminal ([`for_terminal`]), taking
//! what may be a credential out of the URLs in an error or a log line ([`without_url_secrets`],
//! [`WithoutUrlSecrets`] for a log writer),
//! and taking a lock whatever a panicking holder left behind (`lock`, for the crate's own locks).

use std::borrow::Cow;
use std::sync::{Mutex, MutexGuard};

/// How [`cut`] shortens a text that is over its limit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// At most `max` **bytes**, marker included: head and tail kept, the middle replaced by
    /// `[... N bytes elided ...]` on a line of its own. For text a reader needs both ends of (a
    /// hook's answer, a tool result). A `max` too small for the marker keeps only the head.
    Middle,
    /// At most `max` **bytes**, marker included: the head, then `marker`. A `max` too small for
    /// the marker keeps only the head that fits.
    Head {
        /// Appended to a cut text, within the limit.
        marker: &'static str,
    },
    /// At most `max` **characters** of the head, then `…`, and with `total` the original size
    /// (`… (N bytes in all)`). For quoting untrusted text in a message or a display line.
    Chars {
        /// Whether the marker says how long the text was.
        total: bool,
    },
}

/// `text` within `max` (bytes or characters, per `how`), cut on a character boundary and
/// marked as [`Cut`] says; unchanged when it fits.
pub fn cut(text: &str, max: usize, how: Cut) -> String {
    match how {
        Cut::Middle => cut_middle(text, max),
        Cut::Head { marker } => {
            if text.len() <= max {
                return text.to_owned();
            }
            if max < marker.len() {
                return text[..floor_char_boundary(text, max)].to_owned();
            }
            let end = floor_char_boundary(text, max - marker.len());
            let mut out = String::with_capacity(end + marker.len());
            out.push_str(&text[..end]);
            out.push_str(marker);
            out
        }
        Cut::Chars { total } => match text.char_indices().nth(max) {
            None => text.to_owned(),
            Some((end, _)) if total => format!("{}… ({} bytes in all)", &text[..end], text.len()),
            Some((end, _)) => format!("{}…", &text[..end]),
        },
    }
}

/// `text` on one line (runs of whitespace, newlines included, become one space), cut to `max`
/// characters.
pub fn one_line(text: &str, max: usize) -> String {
    let flat: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
    cut(&flat, max, Cut::Chars { total: false })
}

/// `text` with every control character but newline and tab removed, so that text a model or
/// a tool wrote cannot move the cursor, recolour, retitle or clear a person's terminal (ANSI
/// escape sequences start with ESC, a control character; what follows it is printable and
/// shows as harmless text). Borrowed when there is nothing to remove.
pub fn for_terminal(text: &str) -> Cow<'_, str> {
    let unsafe_char = |c: char| c.is_control() && c != '\n' && c != '\t';
    if text.contains(unsafe_char) {
        Cow::Owned(text.chars().filter(|&c| !unsafe_char(c)).collect())
    } else {
        Cow::Borrowed(text)
    }
}

/// What a secret value is replaced with, wherever the crate takes one out of a text.
pub const REDACTED: &str = "<redacted>";

/// `text` (an error message, a log line) with every URL in it stripped of what may carry a
/// credential: its user info (`user:password@`), its query (a presigned URL's `sig=`,
/// `X-Amz-Signature=`, an API key) and its fragment. A URL is found by its `scheme://`, and runs
/// to the first space, quote or angle bracket; closing punctuation after its query (the `)` of
/// `(https://…?sig=…)`) is kept. Borrowed when no URL has anything to strip. One pass: each
/// byte is looked at a bounded number of times, whatever the text.
///
/// This is for text whose URLs a reader needs only to recognise. A configuration shown whole
/// (a transcript's header) keeps its harmless query parameters: `transcript::Redaction`.
pub fn without_url_secrets(text: &str) -> Cow<'_, str> {
    let bytes = text.as_bytes();
    let mut out: Option<String> = None;
    // Everything before `copied` is in `out` (or unchanged, while `out` is `None`).
    let mut copied = 0;
    let mut from = 0;
    while let Some(found) = text[from..].find("://") {
        let sep = from + found;
        let body = sep + 3;
        let scheme_start = bytes[..sep]
            .iter()
            .rposition(|b| !(b.is_ascii_alphanumeric() || matches!(b, b'+' | b'-' | b'.')))
            .map_or(0, |at| at + 1);
        let end = bytes[body..]
            .iter()
            .position(|&b| is_url_end(b))
            .map_or(bytes.len(), |at| body + at);
        from = end.max(body);
        if scheme_start == sep || !bytes[scheme_start].is_ascii_alphabetic() {
            continue;
        }
        let authority_end = bytes[body..end]
            .iter()
            .position(|b| matches!(b, b'/' | b'?' | b'#'))
            .map_or(end, |at| body + at);
        let userinfo_end = bytes[body..authority_end]
            .iter()
            .rposition(|&b| b == b'@')
            .map(|at| body + at + 1);
        let query = bytes[authority_end..end]
            .iter()
            .position(|b| matches!(b, b'?' | b'#'))
            .map(|at| authority_end + at);
        if userinfo_end.is_none() && query.is_none() {
            continue;
        }
        let out = out.get_or_insert_with(|| String::with_capacity(text.len()));
        out.push_str(&text[copied..body]);
        out.push_str(&text[userinfo_end.unwrap_or(body)..query.unwrap_or(end)]);
        if let Some(query) = query {
            // Closing punctuation that ends the sentence around the URL, not the URL.
            let kept = bytes[query..end]
                .iter()
                .rposition(|b| !matches!(b, b')' | b']' | b'}' | b'.' | b',' | b';' | b':' | b'!'))
                .map_or(query, |at| query + at + 1);
            out.push_str(&text[kept..end]);
        }
        copied = end;
    }
    match out {
        None => Cow::Borrowed(text),
        Some(mut out) => {
            out.push_str(&text[copied..]);
            Cow::Owned(out)
        }
    }
}

/// A writer that takes the credentials out of the URLs in what it writes, as
/// [`without_url_secrets`] does: for the log writer of an embedder, whose subscriber also gets
/// the dependencies' own events (an HTTP client's, the MCP SDK's), which name URLs as they were
/// given. One write is read as one text, as `tracing-subscriber`'s `fmt` layer writes one
/// formatted event per write; bytes that are not UTF-8 pass unchanged.
///
/// ```
/// use std::io::Write;
/// let mut log = hookloop::text::WithoutUrlSecrets(Vec::new());
/// log.write_all(b"GET https://bucket.example/o?X-Amz-Signature=abc failed\n").unwrap();
/// assert_eq!(log.0, b"GET https://bucket.example/o failed\n");
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct WithoutUrlSecrets<W>(pub W);

impl<W: std::io::Write> std::io::Write for WithoutUrlSecrets<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        match std::str::from_utf8(buf) {
            Ok(text) => {
                self.0.write_all(without_url_secrets(text).as_bytes())?;
                Ok(buf.len())
            }
            Err(_) => self.0.write(buf),
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

/// Whether `b` ends a URL found in running text: what no URL holds unescaped.
fn is_url_end(b: u8) -> bool {
    b.is_ascii_whitespace()
        || b.is_ascii_control()
        || matches!(
            b,
            b'"' | b'\'' | b'<' | b'>' | b'`' | b'\\' | b'{' | b'}' | b'|' | b'^'
        )
}

/// Locks `mutex`, taking the data even if a holder panicked. Callers hold a lock only to move
/// values in or out, so a panic inside cannot leave the data half-updated.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn cut_middle(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    // The marker's length depends on the count it prints; reserve room for the widest.
    let reserve = elision_marker(usize::MAX).len();
    if max < reserve {
        return text[..floor_char_boundary(text, max)].to_owned();
    }
    let keep = max - reserve;
    let head_end = floor_char_boundary(text, keep / 2);
    let tail_start = ceil_char_boundary(text, text.len() - (keep - keep / 2));
    let elided = tail_start - head_end;
    let mut out = String::with_capacity(max);
    out.push_str(&text[..head_end]);
    out.push_str(&elision_marker(elided));
    out.push_str(&text[tail_start..]);
    out
}

fn elision_marker(elided: usize) -> String {
    format!("\n[... {elided} bytes elided ...]\n")
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_middle_cut_keeps_both_ends_within_the_byte_limit() {
        let text = format!("{}{}", "a".repeat(20_000), "é".repeat(5_000));
        let capped = cut(&text, 16 * 1024, Cut::Middle);
        assert!(capped.len() <= 16 * 1024);
        assert!(capped.starts_with("aaaa"));
        assert!(capped.ends_with("éé"));
        assert!(capped.contains("bytes elided"));
        assert_eq!(cut("short", 5, Cut::Middle), "short");
    }

    #[test]
    fn a_middle_cut_too_small_for_the_marker_keeps_the_head_within_it() {
        // Found by the `hook_body` fuzz target: the marker alone used to exceed the cap.
        assert_eq!(cut("/", 0, Cut::Middle), "");
        assert_eq!(cut("abcdef", 3, Cut::Middle), "abc");
        assert_eq!(cut("éé", 3, Cut::Middle), "é");
        let text = "x".repeat(100);
        let reserve = elision_marker(usize::MAX).len();
        for max in 0..100 {
            let capped = cut(&text, max, Cut::Middle);
            assert!(capped.len() <= max, "{max}: {capped:?}");
            assert_eq!(
                capped.contains("elided"),
                max >= reserve,
                "{max}: {capped:?}"
            );
        }
    }

    #[test]
    fn a_head_cut_ends_with_its_marker_within_the_byte_limit() {
        let how = Cut::Head { marker: " [cut]" };
        assert_eq!(cut("abcdefghij", 10, how), "abcdefghij");
        assert_eq!(cut("abcdefghijk", 10, how), "abcd [cut]");
        // The cut falls before a character it would split.
        assert_eq!(cut("abé_______", 9, how), "ab [cut]");
        assert_eq!(cut("abcdefghijk", 3, how), "abc");
    }

    #[test]
    fn a_character_cut_counts_characters_and_may_say_the_size() {
        let text = "é".repeat(10);
        assert_eq!(cut(&text, 4, Cut::Chars { total: false }), "éééé…");
        assert_eq!(
            cut(&text, 4, Cut::Chars { total: true }),
            "éééé… (20 bytes in all)"
        );
        assert_eq!(cut(&text, 10, Cut::Chars { total: true }), text);
    }

    #[test]
    fn one_line_flattens_whitespace_and_cuts() {
        assert_eq!(one_line("done:\n  #1", 100), "done: #1");
        assert_eq!(one_line(&"é".repeat(10), 4), "éééé…");
    }

    #[test]
    fn terminal_text_loses_control_characters_but_newlines_and_tabs() {
        assert_eq!(
            for_terminal("\x1b[2J\x1b]0;pwned\x07red\r\n\tok\u{9b}31m\u{7f}"),
            "[2J]0;pwnedred\n\tok31m"
        );
        assert!(matches!(for_terminal("plain\ttext\n"), Cow::Borrowed(_)));
    }

    #[test]
    fn a_log_writer_strips_url_secrets_from_every_line_it_writes() {
        use std::io::Write;
        let mut log = WithoutUrlSecrets(Vec::new());
        log.write_all(b"error sending request for url (https://u:pw@h.example/mcp?sig=abc)\n")
            .unwrap();
        log.write_all(b"no url here\n").unwrap();
        log.write_all(&[0xff, b'\n']).unwrap();
        assert_eq!(
            log.0,
            b"error sending request for url (https://h.example/mcp)\nno url here\n\xff\n"
        );
    }

    #[test]
    fn urls_in_text_lose_user_info_query_and_fragment() {
        let cases = [
            (
                "error sending request for url (https://bucket.s3.amazonaws.com/o?X-Amz-Signature=abc&X-Amz-Credential=k)",
                "error sending request for url (https://bucket.s3.amazonaws.com/o)",
            ),
            (
                "GET http://user:pw@127.0.0.1:9/sse?sig=s3cr3t failed: refused",
                "GET http://127.0.0.1:9/sse failed: refused",
            ),
            (
                "at \"https://h/p#access_token=t\", then wss://a:b@h2/x.",
                "at \"https://h/p\", then wss://h2/x.",
            ),
            (
                "two: https://a/?k=1 and https://b/?k=2!",
                "two: https://a/ and https://b/!",
            ),
            ("https://a@b@host/p", "https://host/p"),
            // A URL inside another's query goes with that query.
            (
                "https://h/cb?next=https://u:p@evil/x?sig=1 end",
                "https://h/cb end",
            ),
        ];
        for (text, stripped) in cases {
            assert_eq!(without_url_secrets(text), stripped, "{text}");
        }
        for unchanged in [
            "no url here",
            "http://127.0.0.1:8080/mcp said no",
            "a@b.c wrote ://x and 1://y",
            "path/a@b?c",
            "",
            "://",
            "é://x?y",
        ] {
            assert!(
                matches!(without_url_secrets(unchanged), Cow::Borrowed(_)),
                "{unchanged}"
            );
        }
    }

    #[test]
    fn a_poisoned_lock_still_gives_its_data() {
        let mutex = Mutex::new(1);
        let _ = std::panic::catch_unwind(|| {
            let _guard = mutex.lock().unwrap();
            panic!("poison");
        });
        assert!(mutex.is_poisoned());
        assert_eq!(*lock(&mutex), 1);
    }
}
