//! Running one hook command as the hosts do — `sh -c <command>` in the session's directory,
//! the event on its stdin — under hookloop's bounds: a process group of its own killed whole at
//! the deadline, its output kept up to a cap, and no wait on what it left running.
//!
//! - The event is written while the output is read, so a command that never reads its stdin
//!   cannot stall the round on a full pipe: it is killed at the deadline like any that hangs.
//! - Output past a stream's cap is read and dropped, so the command never blocks on a full
//!   pipe; a command that writes [`MAX_STREAM_BYTES`] on one stream is flooding, and is killed.
//! - Once the command exits, its output is read for [`EXIT_DRAIN`] more: a background process
//!   it started (a daemon) may hold the pipes open forever. That process is left running, as
//!   the hosts leave it, and loses the pipes.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::mcp::child::{ChildGroup, clean_command};

/// The most of a command's stdout kept, in bytes: far more than any answer needs.
pub const MAX_STDOUT_BYTES: usize = 1 << 20;
/// The most of a command's stderr kept, in bytes (a block's reason).
pub const MAX_STDERR_BYTES: usize = 64 << 10;
/// A command that writes this many bytes on one stream is flooding: its group is killed.
pub const MAX_STREAM_BYTES: u64 = 16 << 20;
/// How long a command's output is still read after it exited.
pub const EXIT_DRAIN: Duration = Duration::from_millis(100);

/// The shell the hosts run commands with.
const SHELL: &str = "/bin/sh";

/// One command to run.
pub(crate) struct Command<'a> {
    /// Shell text.
    pub(crate) text: &'a str,
    /// The session's directory: its working directory and `CLAUDE_PROJECT_DIR`.
    pub(crate) cwd: &'a Path,
    /// What it gets on top of the children's environment.
    pub(crate) env: &'a [(String, String)],
}

/// How a command ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Ran {
    /// It exited (`code` -1: by a signal), with what it wrote.
    Exited {
        code: i32,
        stdout: String,
        stderr: String,
        /// Its stdout passed [`MAX_STDOUT_BYTES`] and was cut.
        cut: bool,
    },
    /// It was still running at the deadline; its group was killed.
    TimedOut,
    /// It could not be run, flooded, or was killed on the engine's order.
    Failed(String),
}

/// Runs `command` with `stdin` until it exits or `deadline` passes, or until `kill` changes.
pub(crate) async fn run(
    command: &Command<'_>,
    stdin: &[u8],
    deadline: Instant,
    kill: &mut watch::Receiver<u64>,
) -> Ran {
    let mut process = clean_command(SHELL);
    process
        .arg("-c")
        .arg(command.text)
        .current_dir(command.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    process.envs(command.env.iter().map(|(k, v)| (k, v)));
    process.env("CLAUDE_PROJECT_DIR", command.cwd);
    // Its own group, so that a kill reaches whatever the command started.
    #[cfg(unix)]
    process.process_group(0);
    let mut child = match process.spawn() {
        Ok(child) => child,
        Err(e) => return Ran::Failed(format!("cannot start {SHELL}: {e}")),
    };
    let (Some(mut input), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Ran::Failed("the command's stdio was not piped".into());
    };
    // Dropping the group (a deadline, a flood, a dropped round) kills it.
    let mut group = ChildGroup::adopt(child);
    let mut out = Capture::new(MAX_STDOUT_BYTES);
    let mut err = Capture::new(MAX_STDERR_BYTES);
    let code = {
        let write = async {
            // A command that exits without reading breaks the pipe: nothing to do about it.
            let _ = input.write_all(stdin).await;
            drop(input);
        };
        let read_out = drain(stdout, &mut out);
        let read_err = drain(stderr, &mut err);
        tokio::pin!(write, read_out, read_err);
        let (mut wrote, mut out_done, mut err_done) = (false, false, false);
        let mut exited: Option<(i32, Instant)> = None;
        loop {
            if let Some((code, _)) = exited
                && out_done
                && err_done
            {
                break code;
            }
            let drained = exited.map_or(deadline, |(_, at)| at + EXIT_DRAIN);
            let step = tokio::select! {
                () = tokio::time::sleep_until(deadline), if exited.is_none() => Step::Deadline,
                () = killed(kill) => Step::Killed,
                status = group.wait(), if exited.is_none() => Step::Exited(status),
                flooded = &mut read_out, if !out_done => Step::Read { stdout: true, flooded },
                flooded = &mut read_err, if !err_done => Step::Read { stdout: false, flooded },
                () = &mut write, if !wrote => Step::Wrote,
                () = tokio::time::sleep_until(drained), if exited.is_some() => Step::Drained,
            };
            match step {
                Step::Deadline => return Ran::TimedOut,
                Step::Killed => return Ran::Failed("killed on the engine's order".into()),
                Step::Exited(Ok(status)) => {
                    group.release();
                    exited = Some((status.code().unwrap_or(-1), Instant::now()));
                }
                Step::Exited(Err(e)) => return Ran::Failed(format!("cannot wait for it: {e}")),
                Step::Read {
                    flooded: true,
                    stdout,
                } => {
                    let stream = if stdout { "stdout" } else { "stderr" };
                    return Ran::Failed(format!(
                        "it wrote more than {MAX_STREAM_BYTES} bytes on its {stream}; killed"
                    ));
                }
                Step::Read { stdout: true, .. } => out_done = true,
                Step::Read { stdout: false, .. } => err_done = true,
                Step::Wrote => wrote = true,
                Step::Drained => break exited.map_or(-1, |(code, _)| code),
            }
        }
    };
    Ran::Exited {
        code,
        cut: out.dropped > 0,
        stdout: out.text(),
        stderr: err.text(),
    }
}

enum Step {
    Deadline,
    Killed,
    Exited(std::io::Result<std::process::ExitStatus>),
    Read { stdout: bool, flooded: bool },
    Wrote,
    Drained,
}

/// Resolves when `kill` changes; never, once its sender is gone.
async fn killed(kill: &mut watch::Receiver<u64>) {
    if kill.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// The head of a stream, up to a cap, and a count of what passed it.
struct Capture {
    bytes: Vec<u8>,
    cap: usize,
    dropped: u64,
}

impl Capture {
    fn new(cap: usize) -> Self {
        Self {
            bytes: Vec::new(),
            cap,
            dropped: 0,
        }
    }

    fn push(&mut self, chunk: &[u8]) {
        let keep = chunk.len().min(self.cap - self.bytes.len());
        self.bytes.extend_from_slice(&chunk[..keep]);
        self.dropped += (chunk.len() - keep) as u64;
    }

    fn total(&self) -> u64 {
        self.bytes.len() as u64 + self.dropped
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }
}

/// Reads `pipe` to its end into `keep`; true when it passed [`MAX_STREAM_BYTES`] first.
async fn drain(mut pipe: impl AsyncRead + Unpin, keep: &mut Capture) -> bool {
    let mut buf = vec![0; 16 * 1024];
    loop {
        match pipe.read(&mut buf).await {
            // A read error ends the stream like its end: the pipe is all there is.
            Ok(0) | Err(_) => return false,
            Ok(n) => {
                keep.push(&buf[..n]);
                if keep.total() > MAX_STREAM_BYTES {
                    return true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
