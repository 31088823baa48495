//! The loopback redirect listener of a login: it waits for the authorization server's answer
//! to this login (the exact path `/callback` with the login's `state`) and screens everything
//! else that reaches the port.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::{AbortHandle, JoinSet};

// The redirect listener's caps. Any local process (or a web page that finds the port) can
// reach the listener, so each of its inputs has a bound, and none of them can end or delay the
// login: only a request with this login's `state` is answered as the redirect. The README's
// "Resource limits" table lists them with the test behind each.

/// The path of the redirect URI; nothing else ends a login.
pub(super) const CALLBACK_PATH: &str = "/callback";
/// The longest request head the redirect listener reads.
const MAX_HEAD: usize = 16 * 1024;
/// How long one connection to the redirect listener has to send its request head. A browser
/// sends it at once; an idle connection is dropped after this.
const HEAD_WAIT: Duration = Duration::from_secs(2);
/// Connections the redirect listener serves at once; a new one past it closes the oldest.
const MAX_CONNECTIONS: usize = 32;

/// Why no redirect was heard.
#[derive(Debug)]
pub(super) enum Unheard {
    /// None came within the wait.
    TimedOut(Duration),
    /// The listener failed.
    Failed(String),
}

/// The redirect that brought the login's state: its URL, and the browser's connection, held
/// open until the flow knows how the login ended.
pub(super) struct Redirect {
    pub(super) url: String,
    browser: TcpStream,
}

impl Redirect {
    /// Tells the browser how the login ended, in words of our own (nothing of the request is
    /// echoed into the page).
    pub(super) async fn answer(mut self, done: bool) {
        let (status, words) = if done {
            ("200 OK", "The login is done; you can close this window.")
        } else {
            (
                "400 Bad Request",
                "The login did not complete; the terminal says why. You can close this window.",
            )
        };
        let body = format!("<!doctype html><title>hookloop</title><p>{words}</p>");
        respond(&mut self.browser, status, &body).await;
    }
}

/// Serves the loopback listener until a request brings the redirect of this login: the exact
/// path `/callback` with `state`. Connections are served at once, each given [`HEAD_WAIT`] for
/// its request head and at most [`MAX_CONNECTIONS`] at a time (a new one closes the oldest), so
/// that idle or slow ones (any local process can connect) cannot delay the browser's. A request to another path gets a
/// 404; one without this login's state, an error response included, a 400, and the listener
/// keeps waiting: nothing but the authorization server's answer to this login ends it.
pub(super) async fn wait_for_redirect(
    listener: &TcpListener,
    port: u16,
    state: &str,
    wait: Duration,
) -> Result<Redirect, Unheard> {
    let state: Arc<str> = Arc::from(state);
    let accept = async {
        let mut serving = JoinSet::new();
        // Oldest first; finished ones are pruned as they are met.
        let mut order: VecDeque<AbortHandle> = VecDeque::new();
        loop {
            tokio::select! {
                accepted = listener.accept() => {
                    let (stream, _) = accepted.map_err(|e| {
                        Unheard::Failed(format!("the redirect listener failed: {e}"))
                    })?;
                    order.retain(|task| !task.is_finished());
                    // At the cap the oldest connection is dropped, not the new one: a browser
                    // sends its request as soon as it connects, so holding connections open
                    // cannot keep its redirect out.
                    if order.len() >= MAX_CONNECTIONS
                        && let Some(oldest) = order.pop_front()
                    {
                        oldest.abort();
                    }
                    order.push_back(serving.spawn(screen(stream, port, state.clone())));
                }
                Some(served) = serving.join_next() => {
                    if let Ok(Some(redirect)) = served {
                        return Ok(redirect);
                    }
                }
            }
        }
    };
    tokio::time::timeout(wait, accept)
        .await
        .unwrap_or(Err(Unheard::TimedOut(wait)))
}

/// One connection to the redirect listener: the redirect of this login, or `None` after
/// answering anything else.
async fn screen(mut stream: TcpStream, port: u16, state: Arc<str>) -> Option<Redirect> {
    let Some(target) = read_request_target(&mut stream).await else {
        respond(&mut stream, "400 Bad Request", "").await;
        return None;
    };
    let path = target.split(['?', '#']).next().unwrap_or_default();
    if path != CALLBACK_PATH {
        respond(&mut stream, "404 Not Found", "").await;
        return None;
    }
    let url = format!("http://127.0.0.1:{port}{target}");
    let theirs = url_query(&url)
        .into_iter()
        .find(|(k, _)| k == "state")
        .map(|(_, v)| v);
    if theirs.as_deref() != Some(&*state) {
        tracing::debug!("the redirect listener refused a request without the login's state");
        respond(
            &mut stream,
            "400 Bad Request",
            "<!doctype html><title>hookloop</title><p>This is not the answer to the login hookloop waits for.</p>",
        )
        .await;
        return None;
    }
    Some(Redirect {
        url,
        browser: stream,
    })
}

/// Writes a whole answer and closes; a peer that does not read loses it after [`HEAD_WAIT`].
async fn respond(stream: &mut TcpStream, status: &str, body: &str) {
    let content_type = if body.is_empty() {
        ""
    } else {
        "content-type: text/html; charset=utf-8\r\n"
    };
    let answer = format!(
        "HTTP/1.1 {status}\r\n{content_type}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let write = async {
        let _ = stream.write_all(answer.as_bytes()).await;
        let _ = stream.shutdown().await;
    };
    let _ = tokio::time::timeout(HEAD_WAIT, write).await;
}

/// The target of a `GET` request, from its head (at most [`MAX_HEAD`] bytes, read within
/// [`HEAD_WAIT`]).
async fn read_request_target(stream: &mut TcpStream) -> Option<String> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 1024];
    let read = async {
        while head.len() < MAX_HEAD {
            let n = stream.read(&mut buf).await.ok()?;
            if n == 0 {
                break;
            }
            // Only the new bytes (and the three before them) can complete the blank line: a
            // head sent a byte at a time costs linear work.
            let from = head.len().saturating_sub(3);
            head.extend_from_slice(&buf[..n]);
            if head[from..].windows(4).any(|w| w == b"\r\n\r\n") {
                break;
            }
        }
        Some(())
    };
    tokio::time::timeout(HEAD_WAIT, read).await.ok()??;
    let line = head.split(|b| *b == b'\n').next()?;
    let line = std::str::from_utf8(line).ok()?.trim_end();
    let mut parts = line.split(' ');
    match (parts.next(), parts.next()) {
        (Some("GET"), Some(target)) if target.starts_with('/') => Some(target.to_owned()),
        _ => None,
    }
}

/// The query pairs of a URL, decoded; empty when it does not parse.
pub(super) fn url_query(url: &str) -> Vec<(String, String)> {
    reqwest::Url::parse(url)
        .map(|u| u.query_pairs().into_owned().collect())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};

    use super::*;

    /// A raw GET of `target` from a local process; the status line of the answer.
    fn get(port: u16, target: &str) -> String {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        write!(stream, "GET {target} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n").unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer.lines().next().unwrap_or_default().to_owned()
    }

    #[tokio::test]
    async fn the_listener_ignores_other_paths_and_returns_the_callback() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = tokio::task::spawn_blocking(move || {
            assert!(get(port, "/favicon.ico").contains("404"));
            get(port, "/callback?code=c&state=s")
        });
        let redirect = wait_for_redirect(&listener, port, "s", Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(
            redirect.url,
            format!("http://127.0.0.1:{port}/callback?code=c&state=s")
        );
        redirect.answer(true).await;
        assert!(client.await.unwrap().contains("200"));
    }

    #[tokio::test]
    async fn a_request_without_the_logins_state_or_path_is_refused_and_the_wait_goes_on() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = tokio::task::spawn_blocking(move || {
            let refused = [
                // An error response of another (or no) login: it used to end this one.
                get(
                    port,
                    "/callback?error=access_denied&error_description=%1b%5d52%3bc%3bAA%07",
                ),
                get(port, "/callback?error=access_denied&state=wrong"),
                get(port, "/callback?code=bogus&state=wrong"),
                get(port, "/callback?code=bogus"),
            ];
            // A path that only starts like the callback's, with the right state.
            let elsewhere = [
                get(port, "/callbackx?code=c&state=s"),
                get(port, "/callback/x?code=c&state=s"),
            ];
            let real = get(port, "/callback?code=c&state=s");
            (refused, elsewhere, real)
        });
        let redirect = wait_for_redirect(&listener, port, "s", Duration::from_secs(10))
            .await
            .unwrap();
        assert!(redirect.url.ends_with("/callback?code=c&state=s"));
        redirect.answer(true).await;
        let (refused, elsewhere, real) = client.await.unwrap();
        for status in refused {
            assert!(status.contains("400"), "{status}");
        }
        for status in elsewhere {
            assert!(status.contains("404"), "{status}");
        }
        assert!(real.contains("200"), "{real}");
    }

    #[tokio::test]
    async fn idle_connections_do_not_delay_the_redirect() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // Fewer than the cap: every one is still waiting for its head when the browser comes.
        let idle: Vec<_> = (0..MAX_CONNECTIONS - 1)
            .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
            .collect();
        let started = std::time::Instant::now();
        let client = tokio::task::spawn_blocking(move || get(port, "/callback?code=c&state=s"));
        let redirect = wait_for_redirect(&listener, port, "s", Duration::from_secs(60))
            .await
            .unwrap();
        // Served one at a time, the first idle connection alone held it for its head wait.
        assert!(started.elapsed() < HEAD_WAIT, "{:?}", started.elapsed());
        redirect.answer(true).await;
        assert!(client.await.unwrap().contains("200"));
        drop(idle);
    }

    #[tokio::test]
    async fn connections_past_the_cap_close_the_oldest_not_the_browsers() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = tokio::task::spawn_blocking(move || {
            let idle: Vec<_> = (0..3 * MAX_CONNECTIONS)
                .map(|_| std::net::TcpStream::connect(("127.0.0.1", port)).unwrap())
                .collect();
            let status = get(port, "/callback?code=c&state=s");
            drop(idle);
            status
        });
        let redirect = wait_for_redirect(&listener, port, "s", Duration::from_secs(30))
            .await
            .unwrap();
        redirect.answer(true).await;
        assert!(client.await.unwrap().contains("200"));
    }

    #[tokio::test]
    async fn the_page_says_the_login_is_done_only_when_it_is() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = tokio::task::spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            write!(
                stream,
                "GET /callback?error=denied&state=s HTTP/1.1\r\n\r\n"
            )
            .unwrap();
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            answer
        });
        let redirect = wait_for_redirect(&listener, port, "s", Duration::from_secs(5))
            .await
            .unwrap();
        redirect.answer(false).await;
        let page = client.await.unwrap();
        assert!(page.starts_with("HTTP/1.1 400"), "{page}");
        assert!(!page.contains("done"), "{page}");
    }

    #[tokio::test]
    async fn a_byte_at_a_time_head_is_read_within_its_cap() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = tokio::task::spawn_blocking(move || {
            let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream.set_nodelay(true).unwrap();
            for byte in b"GET /callback?code=c&state=s HTTP/1.1\r\n\r\n" {
                stream.write_all(&[*byte]).unwrap();
            }
            let mut answer = String::new();
            stream.read_to_string(&mut answer).unwrap();
            answer
        });
        let redirect = wait_for_redirect(&listener, port, "s", Duration::from_secs(5))
            .await
            .unwrap();
        redirect.answer(true).await;
        assert!(client.await.unwrap().starts_with("HTTP/1.1 200"));
    }

    #[tokio::test]
    async fn a_redirect_that_never_comes_times_out() {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let error = wait_for_redirect(&listener, port, "s", Duration::from_millis(50))
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(matches!(error, Unheard::TimedOut(_)), "{error:?}");
    }
}
