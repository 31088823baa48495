//! Child processes of stdio servers: a clean environment, an own process group, stderr to the
//! log, and a kill that takes the whole group (grandchildren included).

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tracing::Instrument;

use crate::hooks::ServerName;
use crate::mcp::config::{CHILD_ENV_PASSTHROUGH, StdioConfig};

/// A running child and its process group. Dropping it kills the group.
#[derive(Debug)]
pub(crate) struct ChildGroup {
    child: Child,
    /// The child's pid, which is also its process group id: it leads its own group.
    pgid: Option<i32>,
}

impl ChildGroup {
    /// Starts `config` in its own process group with a clean environment. Returns the child
    /// and its stdio; stderr is already being copied to the log under `server`'s span.
    pub(crate) fn spawn(
        server: &ServerName,
        config: &StdioConfig,
    ) -> std::io::Result<(Self, ChildStdout, ChildStdin)> {
        let mut command = Command::new(&config.command);
        command
            .args(&config.args)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for var in CHILD_ENV_PASSTHROUGH {
            if let Some(value) = std::env::var_os(var) {
                command.env(var, value);
            }
        }
        command.envs(&config.env);
        if let Some(cwd) = &config.cwd {
            command.current_dir(cwd);
        }
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
                async move {
                    let mut lines = BufReader::new(stderr).lines();
                    // Ends at EOF: when the last process of the group holding the pipe is gone.
                    while let Ok(Some(line)) = lines.next_line().await {
                        tracing::info!(target: "hookloop::mcp::stderr", "{line}");
                    }
                }
                .instrument(span),
            );
        }
        let pgid = child.id().and_then(|pid| i32::try_from(pid).ok());
        Ok((Self { child, pgid }, stdout, stdin))
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
