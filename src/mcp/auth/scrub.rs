//! What an authorization server says goes to logs, error messages and a person's terminal,
//! and a careless (or hostile) one quotes back what it was sent: the client secret in the
//! form body (form-encoded), in the `Authorization: Basic` header (base64 of `id:secret`), an
//! assertion, as JSON. [`Scrubber`] knows every form in which each secret was sent and takes
//! all of them out; [`quote`] is how the server's words are then shown.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};

use crate::text::REDACTED;

/// The longest text of an authorization server kept in an error, in characters.
pub(super) const MAX_REFUSAL_CHARS: usize = 300;

/// The secrets of one request, each in every form it may be quoted back in.
#[derive(Clone, Debug, Default)]
pub(super) struct Scrubber {
    /// Longest first, so that a form containing a shorter one is taken out whole.
    forms: Vec<String>,
}

impl Scrubber {
    /// Knows `secret` as sent raw, percent-encoded (either case, `+` or `%20` for a space),
    /// JSON-escaped, and base64-encoded (standard and URL-safe, padded or not).
    pub(super) fn secret(&mut self, secret: &str) {
        if secret.is_empty() {
            return;
        }
        let mut forms = vec![secret.to_owned()];
        forms.extend(encodings(secret));
        forms.extend(base64_forms(secret.as_bytes()));
        self.add(forms);
    }

    /// Knows the pair of HTTP Basic authentication (RFC 6749 §2.3.1): `id:secret`, with both
    /// halves form-encoded or not, raw and base64-encoded; and `secret` itself.
    pub(super) fn basic(&mut self, client_id: &str, secret: &str) {
        self.secret(secret);
        if secret.is_empty() {
            return;
        }
        let mut forms = Vec::new();
        for pair in [
            format!("{client_id}:{secret}"),
            format!("{}:{}", form_encode(client_id), form_encode(secret)),
        ] {
            forms.extend(base64_forms(pair.as_bytes()));
            forms.push(pair);
        }
        self.add(forms);
    }

    fn add(&mut self, forms: Vec<String>) {
        for form in forms {
            if !form.is_empty() && !self.forms.contains(&form) {
                self.forms.push(form);
            }
        }
        self.forms.sort_by_key(|form| std::cmp::Reverse(form.len()));
    }

    /// `text` with every known form of every secret replaced by `<redacted>`.
    pub(super) fn scrub(&self, text: &str) -> String {
        self.forms.iter().fold(text.to_owned(), |text, form| {
            if text.contains(form.as_str()) {
                text.replace(form.as_str(), REDACTED)
            } else {
                text
            }
        })
    }
}

/// The server's words as an error quotes them: scrubbed of the secrets first (a secret across
/// the cut would leave its head), then without control characters, on one line, cut to
/// [`MAX_REFUSAL_CHARS`].
pub(super) fn quote(text: &str, scrubber: &Scrubber) -> String {
    let scrubbed = scrubber.scrub(text);
    crate::text::one_line(&crate::text::for_terminal(&scrubbed), MAX_REFUSAL_CHARS)
}

/// `value` form-encoded as a token request's body carries it (`application/x-www-form-urlencoded`).
pub(super) fn form_encode(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// `value` as the encodings of a URL or a form may carry it: percent-encoded with upper- or
/// lower-case digits, a space as `+` or `%20`; and escaped in a JSON string.
fn encodings(value: &str) -> Vec<String> {
    let form = form_encode(value);
    let percent: String = value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    let mut forms = vec![lower_hex(&form), lower_hex(&percent), form.clone(), percent];
    if let Ok(json) = serde_json::to_string(value) {
        let inner = json[1..json.len() - 1].to_owned();
        forms.push(inner.replace('/', "\\/"));
        forms.push(inner);
    }
    forms
}

/// `text` with the hex digits of each `%XX` escape in lower case.
fn lower_hex(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut escape = 0;
    for c in text.chars() {
        if c == '%' {
            escape = 2;
            out.push(c);
        } else if escape > 0 {
            escape -= 1;
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// `bytes` in base64, standard and URL-safe, padded and not.
fn base64_forms(bytes: &[u8]) -> Vec<String> {
    vec![
        STANDARD.encode(bytes),
        STANDARD_NO_PAD.encode(bytes),
        URL_SAFE.encode(bytes),
        URL_SAFE_NO_PAD.encode(bytes),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "hun ter/2+&é\"";

    #[test]
    fn every_form_the_secret_was_sent_in_is_scrubbed() {
        let mut scrubber = Scrubber::default();
        scrubber.basic("ci runner", SECRET);
        let basic = STANDARD.encode(format!(
            "{}:{}",
            form_encode("ci runner"),
            form_encode(SECRET)
        ));
        let quoted = [
            SECRET.to_owned(),
            form_encode(SECRET),
            "hun%20ter%2F2%2B%26%C3%A9%22".to_owned(),
            "hun%20ter%2f2%2b%26%c3%a9%22".to_owned(),
            serde_json::to_string(SECRET).unwrap(),
            basic.clone(),
            format!("Basic {basic}"),
            STANDARD.encode(SECRET),
            URL_SAFE_NO_PAD.encode(SECRET),
            STANDARD.encode(format!("ci runner:{SECRET}")),
            format!("ci runner:{SECRET}"),
        ];
        for text in quoted {
            let said = format!("invalid_client (you sent {text}, which is wrong)");
            let scrubbed = scrubber.scrub(&said);
            assert!(scrubbed.contains(REDACTED), "{text} -> {scrubbed}");
            for piece in ["hun", "ter", &basic[..8]] {
                assert!(!scrubbed.contains(piece), "{text} -> {scrubbed}");
            }
        }
    }

    #[test]
    fn a_quote_is_scrubbed_before_it_is_cut() {
        let mut scrubber = Scrubber::default();
        scrubber.secret("sk-0123456789abcdef");
        let said = format!(
            "{}sk-0123456789abcdef\u{1b}[31m",
            "x".repeat(MAX_REFUSAL_CHARS - 4)
        );
        let quoted = quote(&said, &scrubber);
        assert!(!quoted.contains("sk-0"), "{quoted}");
        assert!(!quoted.contains('\u{1b}'), "{quoted}");
        assert!(quoted.chars().count() <= MAX_REFUSAL_CHARS + 1, "{quoted}");
    }
}
