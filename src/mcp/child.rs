//! Child processes of stdio servers: a clean environment, an own process group, stderr to the
//! log, and a kill that takes the whole group (grandchildren included).

use std::process::Stdio;

use std::time::Duration;

use tokio::io::{AsyncBufRead, AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::time::Instant;
use tracing::Instrument;

use crate::hooks::ServerName;

/// The only variables of the engine's environment a child process inherits; everything else it
/// gets comes from its [`StdioConfig::env`](crate::mcp::StdioConfig::env). The engine's API keys never reach an MCP server.
pub const CHILD_ENV_PASSTHROUGH: &[&str] =
    &["PATH", "HOME", "LANG", "LC_ALL", "TERM", "TMPDIR", "USER"];

/// A command for `program` that starts with a clean environment (only
/// [`CHILD_ENV_PASSTHROUGH`] of the engine's) and is killed when dropped: how every child the
/// engine starts is started, a server or a token command.
pub(crate) fn clean_command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut command = Command::new(program);
    command.env_clear().kill_on_drop(true);
    for var in CHILD_ENV_PASSTHROUGH {
        if let Some(value) = std::env::var_os(var) {
            command.env(var, value);
        }
    }
    command
}

/// A running child and its process group. Dropping it kills the group.
#[derive(Debug)]
pub(crate) struct ChildGroup {
    child: Child,
    /// The child's pid, which is also its process group id: it leads its own group.
    pgid: Option<i32>,
}

impl ChildGroup {
    /// Starts `command` (a [`clean_command`], with the server's arguments, variables and
    /// directory) in its own process group, its stdio piped. Returns the child and its stdio;
    /// stderr is already being copied to the log under `server`'s span.
    pub(crate) fn spawn(
        server: &ServerName,
        mut command: Command,
    ) -> std::io::Result<(Self, ChildStdout, ChildStdin)> {
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // Its own group, so that a kill reaches whatever the server itself started.
        #[cfg(unix)]
        command.process_group(0);

        let mut child = command.spawn()?;
        let missing = || std::io::Error::other("the child's stdio was not piped");
        let stdout = child.stdout.take().ok_or_else(missing)?;
        let stdin = child.stdin.take().ok_or_else(missing)?;
        if let Some(stderr) = child.stderr.take() {
            let span = tracing::info_span!("mcp_server", server = %server);
            tokio::spawn(
                pump_stderr(BufReader::new(stderr), |line| {
                    tracing::info!(target: "hookloop::mcp::stderr", "{line}");
                })
                .instrument(span),
            );
        }
        Ok((Self::adopt(child), stdout, stdin))
    }

    /// Takes charge of `child`, spawned as the leader of a process group of its own
    /// (`process_group(0)`): a token command, whose stdio its owner keeps.
    pub(crate) fn adopt(child: Child) -> Self {
        let pgid = child.id().and_then(|pid| i32::try_from(pid).ok());
        Self { child, pgid }
    }

    /// Waits for the leader to exit; the group is killed when this is dropped, as ever.
    pub(crate) async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        self.child.wait().await
    }

    /// Lets go of the group once its leader has exited: what the leader started is left
    /// running (as the hosts leave a hook's daemon), and the group's id, which may come to name
    /// another group once its last process is gone, is never signalled.
    #[cfg(feature = "command-hooks")]
    pub(crate) fn release(&mut self) {
        self.pgid = None;
    }

    /// The leader's pid.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.pgid.and_then(|p| u32::try_from(p).ok())
    }

    /// Kills every process of the group at once. Idempotent.
    pub(crate) fn kill(&mut self) {
        #[cfg(unix)]
        if let Some(pgid) = self.pgid.take() {
            // SAFETY: killpg only sends a signal; a group that is already gone yields ESRCH,
            // which is harmless. The group id is the leader's pid, which tokio has not reaped
            // yet (the `Child` is alive), so it cannot name a recycled group.
            unsafe {
                libc::killpg(pgid, libc::SIGKILL);
            }
        }
        // Reaps the leader in the background (tokio's orphan queue) once it has exited.
        let _ = self.child.start_kill();
    }
}

impl Drop for ChildGroup {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The most bytes of one stderr line that reach the log; the rest of a longer line is dropped.
/// A child writing megabytes without a newline must not grow the engine's memory.
pub(crate) const MAX_STDERR_LINE: usize = 8 * 1024;

/// Stderr lines logged per second, on average, per server.
const STDERR_LINES_PER_SEC: u32 = 20;

/// Stderr lines logged in a burst before the rate applies.
const STDERR_BURST: u32 = 100;

/// Copies a child's stderr to `log` line by line until EOF (when the last process of the group
/// holding the pipe is gone): each line capped at [`MAX_STDERR_LINE`] bytes, and no more than
/// the rate allows; lines over it are counted and the count logged when logging resumes.
pub(crate) async fn pump_stderr(mut reader: impl AsyncBufRead + Unpin, mut log: impl FnMut(&str)) {
    let mut line = Vec::with_capacity(256);
    let mut limit = RateLimit::new(Instant::now());
    // A read error ends the copy like EOF: the pipe is all there is to read.
    while let Ok(Some(dropped)) = next_capped_line(&mut reader, &mut line).await {
        match limit.admit(Instant::now()) {
            Admit::No => {}
            Admit::Yes { suppressed } => {
                if suppressed > 0 {
                    log(&format!(
                        "[{suppressed} lines of stderr not logged: over {STDERR_LINES_PER_SEC} \
                         lines per second]"
                    ));
                }
                let mut text = String::from_utf8_lossy(&line).into_owned();
                if dropped > 0 {
                    text.push_str(&format!(" [... {dropped} more bytes of this line dropped]"));
                }
                log(&text);
            }
        }
    }
}

/// Reads the next line into `line` (without its newline), keeping at most
/// [`MAX_STDERR_LINE`] bytes of it; returns how many bytes were dropped, or `None` at EOF.
async fn next_capped_line(
    reader: &mut (impl AsyncBufRead + Unpin),
    line: &mut Vec<u8>,
) -> std::io::Result<Option<usize>> {
    line.clear();
    let mut dropped = 0;
    let mut read_any = false;
    loop {
        let buf = reader.fill_buf().await?;
        if buf.is_empty() {
            return Ok(read_any.then_some(dropped));
        }
        read_any = true;
        let newline = buf.iter().position(|&b| b == b'\n');
        let end = newline.unwrap_or(buf.len());
        let keep = end.min(MAX_STDERR_LINE - line.len());
        line.extend_from_slice(&buf[..keep]);
        dropped += end - keep;
        let consumed = newline.map_or(end, |at| at + 1);
        reader.consume(consumed);
        if newline.is_some() {
            return Ok(Some(dropped));
        }
    }
}

/// A token bucket over log lines: [`STDERR_BURST`] at once, then [`STDERR_LINES_PER_SEC`].
struct RateLimit {
    tokens: u32,
    refilled: Instant,
    suppressed: u64,
}

enum Admit {
    /// Log the line, after saying how many were left out before it.
    Yes {
        suppressed: u64,
    },
    No,
}

impl RateLimit {
    fn new(now: Instant) -> Self {
        Self {
            tokens: STDERR_BURST,
            refilled: now,
            suppressed: 0,
        }
    }

    fn admit(&mut self, now: Instant) -> Admit {
        let per_token = Duration::from_secs(1) / STDERR_LINES_PER_SEC;
        let earned = now.saturating_duration_since(self.refilled).as_nanos() / per_token.as_nanos();
        if earned > 0 {
            let earned = u32::try_from(earned).unwrap_or(u32::MAX);
            self.tokens = self.tokens.saturating_add(earned).min(STDERR_BURST);
            self.refilled = now;
        }
        if self.tokens == 0 {
            self.suppressed += 1;
            return Admit::No;
        }
        self.tokens -= 1;
        Admit::Yes {
            suppressed: std::mem::take(&mut self.suppressed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `script` in `sh` and collects what its stderr would log.
    async fn logged(script: &str) -> Vec<String> {
        let mut child = Command::new("sh")
            .args(["-c", script])
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let mut lines = Vec::new();
        pump_stderr(BufReader::new(stderr), |line| lines.push(line.to_owned())).await;
        child.wait().await.unwrap();
        lines
    }

    #[tokio::test]
    async fn a_stderr_line_without_a_newline_is_capped_with_a_marker() {
        // 3 MiB with no newline, the newline, then a normal line.
        let lines =
            logged("head -c 3145728 /dev/zero | tr '\\0' x >&2; echo >&2; echo after >&2").await;
        assert_eq!(
            lines.len(),
            2,
            "{:?}",
            lines.iter().map(String::len).collect::<Vec<_>>()
        );
        let dropped = 3 * 1024 * 1024 - MAX_STDERR_LINE;
        assert!(lines[0].starts_with(&"x".repeat(MAX_STDERR_LINE)));
        assert!(lines[0].len() < MAX_STDERR_LINE + 100);
        assert!(
            lines[0].ends_with(&format!("[... {dropped} more bytes of this line dropped]")),
            "{}",
            &lines[0][MAX_STDERR_LINE..]
        );
        assert_eq!(lines[1], "after");
    }

    #[tokio::test]
    async fn a_last_line_without_a_newline_is_still_logged() {
        assert_eq!(logged("printf 'one\\ntwo' >&2").await, ["one", "two"]);
    }

    #[tokio::test]
    async fn a_stderr_flood_is_rate_limited() {
        let lines =
            logged("i=0; while [ $i -lt 5000 ]; do echo line $i; i=$((i+1)); done >&2").await;
        // The burst, plus what the rate earns while the flood lasts (well under a second).
        assert!(lines.len() < 200, "{}", lines.len());
        assert_eq!(lines[0], "line 0");
        assert_eq!(lines[usize::try_from(STDERR_BURST).unwrap() - 1], "line 99");
    }

    #[test]
    fn the_rate_limit_counts_what_it_left_out_and_refills_with_time() {
        let start = Instant::now();
        let mut limit = RateLimit::new(start);
        for _ in 0..STDERR_BURST {
            assert!(matches!(limit.admit(start), Admit::Yes { suppressed: 0 }));
        }
        assert!(matches!(limit.admit(start), Admit::No));
        assert!(matches!(limit.admit(start), Admit::No));
        let later = start + Duration::from_secs(1);
        assert!(matches!(limit.admit(later), Admit::Yes { suppressed: 2 }));
        assert!(matches!(limit.admit(later), Admit::Yes { suppressed: 0 }));
    }
}
