//! Keeping secrets out of transcripts: API keys, `Authorization` and similar headers, and
//! environment values the configuration marks secret.

use std::collections::BTreeSet;

pub use crate::text::REDACTED;

/// Decides which values of a [`ServerEntry`](crate::transcript::ServerEntry) are secrets, and replaces them with [`REDACTED`].
///
/// By default a header or environment variable is secret when its name (case-insensitively)
/// contains one of `auth`, `key`, `token`, `secret`, `password`, `passwd`, `credential`,
/// `cookie`, `session` or `signature`, or is `sig`; so are URL user info, URL query parameters and `--flag=value` /
/// `--flag value` arguments with such names. Over-redacting a harmless value costs a reader a
/// little; under-redacting costs a key. [`mark_secret`](Self::mark_secret) adds exact names
/// the configuration knows to be secret.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Redaction {
    /// Lower-cased names marked secret besides the default patterns.
    marked: BTreeSet<String>,
}

/// Name fragments that make a header, variable, parameter or flag secret.
const SECRET_FRAGMENTS: &[&str] = &[
    "auth",
    "key",
    "token",
    "secret",
    "password",
    "passwd",
    "credential",
    "cookie",
    "session",
    "signature",
];

/// Whole names that make a value secret: a presigned URL's signature in Azure's form (`sig`).
const SECRET_NAMES: &[&str] = &["sig"];

impl Redaction {
    /// The default patterns.
    pub fn new() -> Self {
        Self::default()
    }

    /// Also treats `name` (a header, variable, parameter or flag name; case-insensitive) as
    /// secret.
    #[must_use]
    pub fn mark_secret(mut self, name: impl AsRef<str>) -> Self {
        self.marked.insert(name.as_ref().to_ascii_lowercase());
        self
    }

    /// Whether a value under this name is a secret.
    pub fn is_secret(&self, name: &str) -> bool {
        let lower = name.trim().to_ascii_lowercase();
        self.marked.contains(&lower)
            || SECRET_NAMES.contains(&lower.as_str())
            || SECRET_FRAGMENTS.iter().any(|f| lower.contains(f))
    }

    /// A URL with its user info and secret query values redacted.
    pub fn redact_url(&self, url: &str) -> String {
        let (before_fragment, fragment) = match url.split_once('#') {
            Some((head, fragment)) => (head, Some(fragment)),
            None => (url, None),
        };
        let (base, query) = match before_fragment.split_once('?') {
            Some((base, query)) => (base, Some(query)),
            None => (before_fragment, None),
        };
        let mut out = String::with_capacity(url.len());
        match base.split_once("://") {
            Some((scheme, rest)) => {
                let authority_end = rest.find('/').unwrap_or(rest.len());
                let (authority, path) = rest.split_at(authority_end);
                out.push_str(scheme);
                out.push_str("://");
                match authority.rsplit_once('@') {
                    Some((_, host)) => {
                        out.push_str(REDACTED);
                        out.push('@');
                        out.push_str(host);
                    }
                    None => out.push_str(authority),
                }
                out.push_str(path);
            }
            None => out.push_str(base),
        }
        if let Some(query) = query {
            out.push('?');
            for (i, pair) in query.split('&').enumerate() {
                if i > 0 {
                    out.push('&');
                }
                match pair.split_once('=') {
                    Some((name, _)) if self.is_secret(name) => {
                        out.push_str(name);
                        out.push('=');
                        out.push_str(REDACTED);
                    }
                    _ => out.push_str(pair),
                }
            }
        }
        if let Some(fragment) = fragment {
            out.push('#');
            out.push_str(fragment);
        }
        out
    }

    /// Command arguments with the values of secret flags redacted: `--api-key=X`, and the
    /// argument after a bare `--api-key`.
    pub fn redact_args(&self, args: &[String]) -> Vec<String> {
        let mut out = Vec::with_capacity(args.len());
        let mut next_is_secret = false;
        for arg in args {
            if std::mem::take(&mut next_is_secret) {
                out.push(REDACTED.to_owned());
                continue;
            }
            let Some(flag) = arg.strip_prefix('-') else {
                out.push(arg.clone());
                continue;
            };
            let flag = flag.trim_start_matches('-');
            match flag.split_once('=') {
                Some((name, _)) if self.is_secret(name) => {
                    let prefix_len = arg.len() - flag.len() + name.len() + 1;
                    out.push(format!("{}{REDACTED}", &arg[..prefix_len]));
                }
                Some(_) => out.push(arg.clone()),
                None => {
                    next_is_secret = self.is_secret(flag);
                    out.push(arg.clone());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::transcript::ServerEntry;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn well_known_secret_headers_and_variables_are_redacted() {
        let entry = ServerEntry {
            name: "remote".into(),
            env: map(&[
                ("OPENAI_API_KEY", "sk-1"),
                ("GITHUB_TOKEN", "ghp"),
                ("PATH", "/usr/bin"),
                ("DB_PASSWORD", "pw"),
            ]),
            headers: map(&[
                ("Authorization", "Bearer x"),
                ("X-Api-Key", "k"),
                ("Accept", "application/json"),
            ]),
            ..ServerEntry::default()
        };
        let out = Redaction::new().apply(entry);
        assert_eq!(out.env["OPENAI_API_KEY"], REDACTED);
        assert_eq!(out.env["GITHUB_TOKEN"], REDACTED);
        assert_eq!(out.env["DB_PASSWORD"], REDACTED);
        assert_eq!(out.env["PATH"], "/usr/bin");
        assert_eq!(out.headers["Authorization"], REDACTED);
        assert_eq!(out.headers["X-Api-Key"], REDACTED);
        assert_eq!(out.headers["Accept"], "application/json");
    }

    #[test]
    fn names_the_config_marks_secret_are_redacted() {
        let entry = ServerEntry {
            name: "s".into(),
            env: map(&[("TENANT", "acme"), ("REGION", "eu")]),
            ..ServerEntry::default()
        };
        let out = Redaction::new().mark_secret("tenant").apply(entry);
        assert_eq!(out.env["TENANT"], REDACTED);
        assert_eq!(out.env["REGION"], "eu");
    }

    #[test]
    fn urls_lose_user_info_and_secret_query_values() {
        let r = Redaction::new();
        assert_eq!(
            r.redact_url("https://user:pw@example.com/mcp?api_key=abc&x=1#frag"),
            "https://<redacted>@example.com/mcp?api_key=<redacted>&x=1#frag"
        );
        assert_eq!(
            r.redact_url("http://127.0.0.1:8080/mcp"),
            "http://127.0.0.1:8080/mcp"
        );
        // An `@` in the path is not user info.
        assert_eq!(r.redact_url("http://h/a@b"), "http://h/a@b");
    }

    #[test]
    fn presigned_urls_lose_their_signatures_and_keep_the_rest() {
        let r = Redaction::new();
        assert_eq!(
            r.redact_url(
                "https://acct.blob.example/c/mcp?sv=2024-01-01&se=2030&sig=abc%2B&X-Amz-Signature=def&X-Goog-Signature=ghi&x=1"
            ),
            "https://acct.blob.example/c/mcp?sv=2024-01-01&se=2030&sig=<redacted>&X-Amz-Signature=<redacted>&X-Goog-Signature=<redacted>&x=1"
        );
        assert!(!r.is_secret("design"), "a whole name, not a fragment");
    }

    #[test]
    fn secret_flags_lose_their_values() {
        let args: Vec<String> = ["--token", "t0", "--api-key=k1", "-v", "--name=x", "file"]
            .map(str::to_owned)
            .to_vec();
        assert_eq!(
            Redaction::new().redact_args(&args),
            [
                "--token",
                REDACTED,
                "--api-key=<redacted>",
                "-v",
                "--name=x",
                "file"
            ]
        );
    }

    #[test]
    fn redaction_is_idempotent() {
        let entry = ServerEntry {
            name: "s".into(),
            url: Some("https://a:b@h/?token=x".into()),
            args: vec!["--secret".into(), "v".into()],
            headers: map(&[("Cookie", "c")]),
            ..ServerEntry::default()
        };
        let r = Redaction::new();
        let once = r.apply(entry);
        assert_eq!(r.apply(once.clone()), once);
    }
}
