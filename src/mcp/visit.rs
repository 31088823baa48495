//! Where a peer's URL may take a person or a credential. An authorization server's metadata
//! and an MCP server's questions name URLs the engine shows a person to visit, hands a browser,
//! or posts secrets to; each is checked here first, by one rule per use:
//!
//! - [`check_visit`]: a URL shown or opened for a person is `https:`, or `http:` to this
//!   machine (127.0.0.0/8, `::1`, `localhost`). Anything else (`file:`, `javascript:`, a custom
//!   scheme that launches a program, plain `http:` across the network) is refused, saying why.
//! - [`check_token_endpoint`]: credentials go to a token endpoint over `https:` only; plain
//!   `http:` only from a server on this machine to an endpoint on this machine (the rule of
//!   rmcp's own client-credentials path).

use std::net::IpAddr;

use reqwest::Url;

/// Why a URL is refused, in words that complete "… is refused: ".
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Refused(String);

/// The URL `text`, when a person may be shown it or a browser opened on it; else why not.
/// What is shown or opened is the parsed URL's own text, never the peer's raw string.
pub(crate) fn check_visit(text: &str) -> Result<Url, Refused> {
    let url = parse(text)?;
    match url.scheme() {
        "https" if url.host_str().is_some() => Ok(url),
        "http" if is_loopback(&url) => Ok(url),
        "http" => Err(Refused(
            "it is plain http to another machine; only https (or http to this machine) is opened"
                .into(),
        )),
        scheme => Err(Refused(format!(
            "its scheme is {:?}; only https (or http to this machine) is opened",
            crate::text::one_line(&crate::text::for_terminal(scheme), 32)
        ))),
    }
}

/// Whether credentials may be sent to the token endpoint `endpoint` of the server at
/// `resource`.
pub(crate) fn check_token_endpoint(resource: &str, endpoint: &str) -> Result<(), Refused> {
    let endpoint = parse(endpoint)?;
    match endpoint.scheme() {
        "https" if endpoint.host_str().is_some() => Ok(()),
        "http" if is_loopback(&endpoint) && Url::parse(resource).is_ok_and(|r| is_loopback(&r)) => {
            Ok(())
        }
        "http" => Err(Refused(
            "it is plain http; credentials go over https only (plain http only from a server \
             on this machine to an endpoint on this machine)"
                .into(),
        )),
        _ => Err(Refused("it is not an https URL".into())),
    }
}

/// Whether the host of `url` is this machine: an address of 127.0.0.0/8, `::1` (also as an
/// IPv4-mapped loopback address), or the name `localhost`. The parser has already put the host
/// in its canonical form (`0x7f.1` is `127.0.0.1`).
pub(crate) fn is_loopback(url: &Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(addr) => addr.to_canonical().is_loopback(),
        Err(_) => host.trim_end_matches('.').eq_ignore_ascii_case("localhost"),
    }
}

fn parse(text: &str) -> Result<Url, Refused> {
    Url::parse(text.trim()).map_err(|e| Refused(format!("it is not a URL ({e})")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_https_and_http_to_this_machine_may_be_visited() {
        for good in [
            "https://auth.example.com/authorize?x=1",
            "http://127.0.0.1:8080/authorize",
            "http://127.9.9.9/a",
            "http://[::1]:9/a",
            "http://localhost/a",
            "http://LOCALHOST./a",
        ] {
            assert!(check_visit(good).is_ok(), "{good}");
        }
        for (bad, why) in [
            ("file:///etc/passwd", "\"file\""),
            ("steam://run/1", "\"steam\""),
            ("javascript:alert(1)", "\"javascript\""),
            ("data:text/html,hi", "\"data\""),
            ("http://example.com/login", "plain http"),
            ("http://127.0.0.1.example.com/", "plain http"),
            ("http://localhost.example.com/", "plain http"),
            ("http://127.0.0.1@example.com/", "plain http"),
            ("not a url", "not a URL"),
        ] {
            let refused = check_visit(bad).unwrap_err().to_string();
            assert!(refused.contains(why), "{bad}: {refused}");
        }
    }

    #[test]
    fn what_is_visited_is_the_parsed_url_not_the_raw_text() {
        let url = check_visit(" https://auth.example.com/a\tb\n").unwrap();
        assert_eq!(url.as_str(), "https://auth.example.com/ab");
    }

    #[test]
    fn token_endpoints_are_https_or_loopback_to_loopback() {
        let ok = [
            (
                "https://mcp.example.com/mcp",
                "https://auth.example.com/token",
            ),
            ("http://127.0.0.1:1/mcp", "https://auth.example.com/token"),
            ("http://127.0.0.1:1/mcp", "http://127.0.0.1:2/token"),
            ("https://localhost:1/mcp", "http://[::1]:2/token"),
        ];
        for (resource, endpoint) in ok {
            assert!(
                check_token_endpoint(resource, endpoint).is_ok(),
                "{resource} -> {endpoint}"
            );
        }
        let refused = [
            ("https://mcp.example.com/mcp", "http://127.0.0.1:2/token"),
            (
                "https://mcp.example.com/mcp",
                "http://auth.example.com/token",
            ),
            ("http://127.0.0.1:1/mcp", "http://auth.example.com/token"),
            ("http://127.0.0.1:1/mcp", "ftp://auth.example.com/token"),
            ("http://127.0.0.1:1/mcp", "token"),
        ];
        for (resource, endpoint) in refused {
            assert!(
                check_token_endpoint(resource, endpoint).is_err(),
                "{resource} -> {endpoint}"
            );
        }
    }
}
