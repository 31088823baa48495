//! A hook's `matcher`, read as the host it was written for reads it.
//!
//! - Claude Code and Codex: absent, `""` or `"*"` match everything; a matcher of letters,
//!   digits, `_` and `|` only is an exact name or a `|` list of them; anything else is a regular
//!   expression, searched (not anchored) in the value. Claude Code's expressions are
//!   JavaScript's, Codex's are Rust's `regex`, the dialect used here.
//! - goose (Open Plugins): absent matches everything; anything else is a regular expression,
//!   searched; a bare `*` is no expression at all.
//!
//! Where a Claude Code expression cannot be read by Rust's `regex` (look-around,
//! backreferences), or would be read differently (inline flags, `\A`, `\z`, `\p{…}`, POSIX
//! classes…), loading fails with an error naming it: a matcher never silently matches
//! nothing.

use std::fmt;

/// How a host reads matchers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// Claude Code: exact names, `|` lists, JavaScript expressions.
    ClaudeCode,
    /// Codex: exact names, `|` lists, Rust expressions.
    Codex,
    /// goose: expressions only.
    Goose,
}

/// The longest matcher read, in bytes; a longer one is refused.
pub const MAX_MATCHER_BYTES: usize = 4 * 1024;

/// The most memory one compiled expression may take.
const MAX_COMPILED_BYTES: usize = 1 << 20;

/// A compiled matcher.
#[derive(Clone, Debug)]
pub(crate) enum Matcher {
    /// Every value.
    All,
    /// Exactly one of these values.
    Exact(Vec<String>),
    /// Values the expression is found in.
    Regex(regex::Regex),
}

/// Why a matcher cannot be read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct MatcherError(String);

impl fmt::Display for MatcherError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl Matcher {
    /// Reads `pattern` (absent: every value) as `dialect` does.
    pub(crate) fn parse(pattern: Option<&str>, dialect: Dialect) -> Result<Self, MatcherError> {
        let Some(pattern) = pattern else {
            return Ok(Self::All);
        };
        if pattern.len() > MAX_MATCHER_BYTES {
            return Err(MatcherError(format!(
                "the matcher is {} bytes long, over the limit of {MAX_MATCHER_BYTES}",
                pattern.len()
            )));
        }
        match dialect {
            Dialect::ClaudeCode | Dialect::Codex => {
                if pattern.is_empty() || pattern == "*" {
                    return Ok(Self::All);
                }
                if pattern
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|')
                {
                    return Ok(Self::Exact(pattern.split('|').map(str::to_owned).collect()));
                }
                if dialect == Dialect::ClaudeCode {
                    javascript_only(pattern)?;
                }
                compile(pattern)
            }
            Dialect::Goose if pattern == "*" => Err(MatcherError(
                "`*` is not a regular expression (goose skips such a rule); use `.*`, or leave \
                 the matcher out, to match everything"
                    .into(),
            )),
            Dialect::Goose => compile(pattern),
        }
    }

    /// Whether the matcher takes `value`.
    pub(crate) fn matches(&self, value: &str) -> bool {
        match self {
            Self::All => true,
            Self::Exact(names) => names.iter().any(|name| name == value),
            Self::Regex(regex) => regex.is_match(value),
        }
    }
}

fn compile(pattern: &str) -> Result<Matcher, MatcherError> {
    regex::RegexBuilder::new(pattern)
        .size_limit(MAX_COMPILED_BYTES)
        .build()
        .map(Matcher::Regex)
        .map_err(|e| {
            MatcherError(format!(
                "not a regular expression Rust's regex reads: {}",
                one_line(&e.to_string())
            ))
        })
}

/// Refuses the constructs Rust's `regex` reads and JavaScript reads otherwise, so that a Claude
/// Code matcher either means here what it means there or does not load.
fn javascript_only(pattern: &str) -> Result<(), MatcherError> {
    let refuse = |what: &str| {
        Err(MatcherError(format!(
            "{what} means something else in JavaScript, the dialect of Claude Code's matchers; \
             write the matcher without it"
        )))
    };
    let chars: Vec<char> = pattern.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                let next = chars.get(i + 1).copied();
                match next {
                    Some(c @ ('A' | 'z' | 'a' | 'U' | 'p' | 'P' | '<' | '>')) => {
                        return refuse(&format!("`\\{c}`"));
                    }
                    Some('b') if chars.get(i + 2) == Some(&'{') => return refuse("`\\b{…}`"),
                    _ => {}
                }
                i += 2;
                continue;
            }
            '(' if chars.get(i + 1) == Some(&'?') => match chars.get(i + 2) {
                // Groups both read alike; look-around Rust's regex refuses itself.
                Some(':' | '=' | '!' | '<') | None => {}
                Some(_) => return refuse("an inline flag or `(?P<…>` group"),
            },
            '[' if chars.get(i + 1) == Some(&'[') && chars.get(i + 2) == Some(&':') => {
                return refuse("a POSIX class (`[[:…:]]`)");
            }
            _ => {}
        }
        i += 1;
    }
    Ok(())
}

fn one_line(text: &str) -> String {
    crate::text::one_line(text, 300)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claude(pattern: &str) -> Matcher {
        Matcher::parse(Some(pattern), Dialect::ClaudeCode).unwrap()
    }

    fn refused(pattern: &str, dialect: Dialect) -> String {
        Matcher::parse(Some(pattern), dialect).unwrap_err().0
    }

    #[test]
    fn absent_empty_and_star_match_everything_in_the_nested_hosts() {
        for dialect in [Dialect::ClaudeCode, Dialect::Codex] {
            for pattern in [None, Some(""), Some("*")] {
                let m = Matcher::parse(pattern, dialect).unwrap();
                assert!(
                    m.matches("Bash") && m.matches("mcp__fs__read"),
                    "{pattern:?}"
                );
            }
        }
        assert!(Matcher::parse(None, Dialect::Goose).unwrap().matches("x"));
    }

    #[test]
    fn letters_digits_underscores_and_bars_are_exact_names() {
        let m = claude("Write|Edit");
        assert!(m.matches("Write") && m.matches("Edit"));
        assert!(!m.matches("WriteFile") && !m.matches("Bash"));
        let m = claude("mcp__memory");
        assert!(!m.matches("mcp__memory__store"), "exact, not a prefix");
    }

    #[test]
    fn other_matchers_are_expressions_searched_unanchored() {
        let m = claude("mcp__fs__.*");
        assert!(m.matches("mcp__fs__read") && m.matches("mcp__fs__write"));
        assert!(!m.matches("mcp__git__log") && !m.matches("fs__read"));
        assert!(claude("^Bash").matches("BashOutput"));
        assert!(!claude("^Bash$").matches("BashOutput"));
        // goose has no exact rule: a plain name is searched.
        let m = Matcher::parse(Some("developer__shell"), Dialect::Goose).unwrap();
        assert!(m.matches("developer__shell_foo"));
    }

    #[test]
    fn look_around_and_backreferences_are_config_errors_naming_the_cause() {
        for pattern in ["mcp__(?!fs).*", "(?<=mcp__)fs", "(a)\\1"] {
            let error = refused(pattern, Dialect::ClaudeCode);
            assert!(error.contains("Rust's regex"), "{pattern}: {error}");
        }
        assert!(refused("(?!x)", Dialect::Codex).contains("look-around"));
    }

    #[test]
    fn constructs_javascript_reads_otherwise_are_refused_for_claude_code_only() {
        for pattern in [
            "(?i)bash",
            "\\Abash",
            "bash\\z",
            "\\p{L}+",
            "[[:alpha:]]+",
            "\\bfoo\\b{end}",
        ] {
            let error = refused(pattern, Dialect::ClaudeCode);
            assert!(error.contains("JavaScript"), "{pattern}: {error}");
            Matcher::parse(Some(pattern), Dialect::Codex).unwrap();
        }
        // What both read alike loads.
        for pattern in [
            "(?:mcp__fs__)(read|write)",
            "(?<tool>Bash)",
            "\\d+\\.x",
            "a\\/b",
        ] {
            claude(pattern);
        }
    }

    #[test]
    fn a_bare_star_in_goose_is_an_error_that_says_to_use_dot_star() {
        assert!(refused("*", Dialect::Goose).contains("`.*`"));
    }

    #[test]
    fn an_oversized_matcher_is_refused() {
        let long = "a|".repeat(MAX_MATCHER_BYTES);
        assert!(refused(&long, Dialect::Codex).contains("over the limit"));
    }
}
