//! Secrets of the headless grants and where they are read from: an environment variable, a
//! file (a mounted secret, a projected token, a FIFO), or a command's standard output.
//!
//! Each source is someone else's to fill, so each read has a cap on its bytes and its time: at
//! most [`MAX_SECRET_BYTES`] and one byte more are read (a bigger source is refused without
//! being read on), and the read ends by [`READ_TIMEOUT`] (a FIFO no one writes, a command that
//! never exits: the command's whole process group is killed).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::mcp::child::{ChildGroup, clean_command};

/// The longest secret, assertion or token response read: a larger one is refused.
pub(super) const MAX_SECRET_BYTES: usize = 64 * 1024;
/// How long reading one secret may take, a command's run included.
const READ_TIMEOUT: Duration = Duration::from_secs(30);
/// How often a FIFO without a writer is looked at again until one comes or the time is up.
const FIFO_POLL: Duration = Duration::from_millis(20);

/// Why a secret could not be read. Names the source, never a value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SecretError(String);

/// A secret value held in memory; its `Debug` says nothing of it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub(super) String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    /// The value.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Where a secret (a client secret, a private key, an assertion) is read from, each time a
/// token is requested. In `.mcp.json`: `{"env": "NAME"}`, `{"file": "/path"}` or
/// `{"command": ["program", "arg"]}`; never the secret itself.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SecretSource {
    /// An environment variable of the engine.
    Env(String),
    /// A regular file or a FIFO (its surrounding whitespace is dropped): a mounted secret, a
    /// projected service-account token. At most 64 KiB, read within 30 s.
    File(PathBuf),
    /// A command whose standard output is the secret. It runs in a process group of its own
    /// with only the variables of [`CHILD_ENV_PASSTHROUGH`](crate::mcp::CHILD_ENV_PASSTHROUGH);
    /// at most 64 KiB of output, within 30 s, or the group is killed.
    Command(Vec<String>),
    /// A value an embedder holds (not expressible in `.mcp.json`; such a configuration does
    /// not serialise).
    #[serde(skip)]
    Value(Secret),
}

impl<'de> Deserialize<'de> for SecretSource {
    /// One of the three forms; anything else is an error that does not quote what was
    /// written (it may be the secret itself, written where its source belongs).
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let refuse = || {
            serde::de::Error::custom(
                "a secret's source is {\"env\": NAME}, {\"file\": PATH} or \
                 {\"command\": [PROGRAM, ARG...]}; the secret itself is never written here",
            )
        };
        let value = Value::deserialize(deserializer)?;
        let Value::Object(map) = value else {
            return Err(refuse());
        };
        let mut entries = map.into_iter();
        let (Some((key, value)), None) = (entries.next(), entries.next()) else {
            return Err(refuse());
        };
        match (key.as_str(), value) {
            ("env", Value::String(name)) if !name.is_empty() => Ok(Self::Env(name)),
            ("file", Value::String(path)) if !path.is_empty() => Ok(Self::File(path.into())),
            ("command", Value::Array(argv)) if !argv.is_empty() => argv
                .into_iter()
                .map(|arg| match arg {
                    Value::String(arg) => Ok(arg),
                    _ => Err(refuse()),
                })
                .collect::<Result<_, _>>()
                .map(Self::Command),
            _ => Err(refuse()),
        }
    }
}

impl SecretSource {
    /// Reads the secret within 30 s (`READ_TIMEOUT`). The error names the source, never a value.
    pub async fn read(&self) -> Result<Secret, SecretError> {
        self.read_within(READ_TIMEOUT).await
    }

    /// Reads the secret within `wait`.
    async fn read_within(&self, wait: Duration) -> Result<Secret, SecretError> {
        let bytes = match self {
            Self::Env(name) => std::env::var(name)
                .map_err(|_| SecretError(format!("environment variable {name} is not set")))?
                .into_bytes(),
            Self::File(path) => read_file(path, wait).await?,
            Self::Command(argv) => run_command(argv, wait).await?,
            Self::Value(secret) => return Ok(secret.clone()),
        };
        let value = String::from_utf8(bytes)
            .map_err(|_| SecretError(format!("{} is not UTF-8", self.describe())))?;
        let value = value.trim();
        if value.is_empty() {
            return Err(SecretError(format!("{} is empty", self.describe())));
        }
        Ok(Secret(value.to_owned()))
    }

    fn describe(&self) -> String {
        match self {
            Self::Env(name) => format!("environment variable {name}"),
            Self::File(path) => path.display().to_string(),
            Self::Command(argv) => format!("the output of {:?}", argv.first()),
            Self::Value(_) => "the given value".into(),
        }
    }
}

/// The bytes of the file at `path`: a regular file, or a FIFO read until its writer closes
/// it. Opened without blocking (a FIFO's open waits for a writer otherwise), then read
/// within `wait` and [`MAX_SECRET_BYTES`].
async fn read_file(path: &Path, wait: Duration) -> Result<Vec<u8>, SecretError> {
    use std::os::unix::fs::FileTypeExt;
    let shown = path.display();
    let cannot = |e: std::io::Error| SecretError(format!("cannot read {shown}: {}", e.kind()));
    let file = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .await
        .map_err(cannot)?;
    let kind = file.metadata().await.map_err(cannot)?.file_type();
    let timed_out = || {
        SecretError(format!(
            "{shown} was not read within {} s",
            wait.as_secs_f64()
        ))
    };
    let over = || SecretError(format!("{shown} is over {MAX_SECRET_BYTES} bytes"));
    let deadline = tokio::time::Instant::now() + wait;
    if kind.is_file() {
        let read = read_capped(file, deadline).await.ok_or_else(timed_out)?;
        return read.map_err(cannot)?.ok_or_else(over);
    }
    if !kind.is_fifo() {
        return Err(SecretError(format!(
            "{shown} is neither a regular file nor a FIFO"
        )));
    }
    let fifo =
        tokio::net::unix::pipe::Receiver::from_file(file.into_std().await).map_err(cannot)?;
    read_fifo(fifo, deadline, timed_out, over, cannot).await
}

/// A FIFO's bytes until its writer closes it. One without a writer reads as ended at once: it
/// is looked at again until a writer has written something, or the time is up.
async fn read_fifo(
    mut fifo: tokio::net::unix::pipe::Receiver,
    deadline: tokio::time::Instant,
    timed_out: impl Fn() -> SecretError,
    over: impl Fn() -> SecretError,
    cannot: impl Fn(std::io::Error) -> SecretError,
) -> Result<Vec<u8>, SecretError> {
    let mut bytes = Vec::new();
    let mut chunk = [0u8; 8 * 1024];
    loop {
        let read = tokio::time::timeout_at(deadline, fifo.read(&mut chunk))
            .await
            .map_err(|_| timed_out())?
            .map_err(&cannot)?;
        match read {
            0 if bytes.is_empty() => {
                if tokio::time::Instant::now() + FIFO_POLL >= deadline {
                    return Err(timed_out());
                }
                tokio::time::sleep(FIFO_POLL).await;
            }
            0 => return Ok(bytes),
            n => {
                bytes.extend_from_slice(&chunk[..n]);
                if bytes.len() > MAX_SECRET_BYTES {
                    return Err(over());
                }
            }
        }
    }
}

/// Reads `from` to its end by `deadline`: `None` when the time ran out, `Ok(None)` when it
/// holds more than [`MAX_SECRET_BYTES`] (one byte past the cap is read, no more).
async fn read_capped(
    from: impl AsyncRead + Unpin,
    deadline: tokio::time::Instant,
) -> Option<std::io::Result<Option<Vec<u8>>>> {
    let mut bytes = Vec::new();
    let cap = u64::try_from(MAX_SECRET_BYTES).unwrap_or(u64::MAX);
    let mut capped = from.take(cap.saturating_add(1));
    let read = tokio::time::timeout_at(deadline, capped.read_to_end(&mut bytes))
        .await
        .ok()?;
    Some(read.map(|_| (bytes.len() <= MAX_SECRET_BYTES).then_some(bytes)))
}

/// The standard output of the command `argv`, which runs in a process group of its own. The
/// group is killed when the output passes the cap, when the command outlives `wait`, and when
/// the read is dropped.
async fn run_command(argv: &[String], wait: Duration) -> Result<Vec<u8>, SecretError> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| SecretError("the token command is empty".into()))?;
    let mut command = clean_command(program);
    command
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .process_group(0);
    let mut child = command
        .spawn()
        .map_err(|e| SecretError(format!("cannot run the token command {program}: {e}")))?;
    let mut stdout = child
        .stdout
        .take()
        .ok_or_else(|| SecretError(format!("the token command {program} has no output")))?;
    // Declared after the output, so dropped before it: the group is killed while its pipe is
    // still open, and nothing of it runs on after a refused read (a closed pipe would let the
    // command go on to its next step first). Dropped after a success too: nothing the command
    // left behind in its group outlives the read.
    let mut group = ChildGroup::adopt(child);
    let timed_out = || {
        SecretError(format!(
            "the token command {program} did not finish within {} s",
            wait.as_secs_f64()
        ))
    };
    let deadline = tokio::time::Instant::now() + wait;
    let output = read_capped(&mut stdout, deadline)
        .await
        .ok_or_else(timed_out)?
        .map_err(|e| SecretError(format!("cannot read the token command {program}: {e}")))?
        .ok_or_else(|| {
            SecretError(format!(
                "the token command {program} printed over {MAX_SECRET_BYTES} bytes"
            ))
        })?;
    let status = tokio::time::timeout_at(deadline, group.wait())
        .await
        .map_err(|_| timed_out())?
        .map_err(|e| SecretError(format!("cannot run the token command {program}: {e}")))?;
    drop(group);
    if !status.success() {
        return Err(SecretError(format!(
            "the token command {program} failed ({status})"
        )));
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::time::Instant;

    use super::*;

    fn scratch() -> PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "hookloop-secret-{}-{:x}",
            std::process::id(),
            fastrand::u64(..)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn mkfifo(path: &Path) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path; mkfifo only creates a file.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    fn sh(script: &str) -> SecretSource {
        SecretSource::Command(vec!["/bin/sh".into(), "-c".into(), script.into()])
    }

    #[tokio::test]
    async fn sources_are_read_and_their_errors_name_no_value() {
        let dir = scratch();
        let file = dir.join("s");
        std::fs::write(&file, "  from-file\n").unwrap();
        let read = SecretSource::File(file).read().await.unwrap();
        assert_eq!(read.expose(), "from-file");
        let read = sh("echo from-command").read().await.unwrap();
        assert_eq!(read.expose(), "from-command");
        let error = sh("echo leaked; exit 3").read().await.unwrap_err();
        assert!(!error.to_string().contains("leaked"), "{error}");
        let error = SecretSource::File(dir.join("missing"))
            .read()
            .await
            .unwrap_err();
        assert!(error.to_string().contains("cannot read"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_fifo_with_no_writer_fails_at_the_deadline_and_holds_no_thread() {
        let dir = scratch();
        let fifo = dir.join("fifo");
        mkfifo(&fifo);
        let started = Instant::now();
        let read = tokio::time::timeout(
            Duration::from_secs(10),
            SecretSource::File(fifo.clone()).read_within(Duration::from_millis(300)),
        )
        .await
        .expect("the read ends by its own deadline");
        let error = read.unwrap_err().to_string();
        assert!(error.contains("not read within"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_fifo_whose_writer_comes_later_is_read() {
        let dir = scratch();
        let fifo = dir.join("fifo");
        mkfifo(&fifo);
        let path = fifo.clone();
        let writer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let mut out = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            out.write_all(b"from-fifo\n").unwrap();
        });
        let read = SecretSource::File(fifo)
            .read_within(Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(read.expose(), "from-fifo");
        writer.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn an_endless_fifo_is_read_to_the_cap_and_no_further() {
        let dir = scratch();
        let fifo = dir.join("fifo");
        mkfifo(&fifo);
        let path = fifo.clone();
        // The writer offers 16 MiB; it counts what the reader took before it closed the FIFO.
        let writer = std::thread::spawn(move || {
            let mut out = std::fs::OpenOptions::new().write(true).open(path).unwrap();
            let block = [b'x'; 64 * 1024];
            let mut written = 0usize;
            while written < 16 * 1024 * 1024 {
                match out.write(&block) {
                    Ok(n) => written += n,
                    Err(_) => break,
                }
            }
            written
        });
        let error = SecretSource::File(fifo)
            .read()
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("is over 65536 bytes"), "{error}");
        let written = writer.join().unwrap();
        // The cap, a chunk, and what the pipe buffers: not the 16 MiB offered.
        assert!(written < 2 * 1024 * 1024, "{written} bytes were taken");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_file_over_the_cap_is_refused() {
        let dir = scratch();
        let file = dir.join("big");
        // Sparse: 400 MB that cost no disk; a whole read would cost 400 MB of memory.
        std::fs::File::create(&file)
            .unwrap()
            .set_len(400_000_000)
            .unwrap();
        let error = SecretSource::File(file)
            .read()
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("is over 65536 bytes"), "{error}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_command_that_prints_without_end_is_stopped_at_the_cap() {
        let dir = scratch();
        let marker = dir.join("finished");
        // 10 MB, then a mark that it was all taken.
        let script = format!(
            "head -c 10000000 /dev/zero; echo done > '{}'",
            marker.display()
        );
        let error = sh(&script).read().await.unwrap_err().to_string();
        assert!(error.contains("printed over 65536 bytes"), "{error}");
        std::thread::sleep(Duration::from_millis(200));
        assert!(!marker.exists(), "the command's whole output was read");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn a_command_that_never_exits_is_killed_with_its_group_at_the_deadline() {
        let dir = scratch();
        let pid_file = dir.join("grandchild");
        // A grandchild that holds no output, and a leader that waits for it.
        let script = format!(
            "sleep 1000 >/dev/null & echo $! > '{}'; wait",
            pid_file.display()
        );
        let started = Instant::now();
        let error = sh(&script)
            .read_within(Duration::from_millis(500))
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("did not finish within"), "{error}");
        assert!(started.elapsed() < Duration::from_secs(5));
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let gone = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(20));
            // SAFETY: signal 0 only checks that the process exists.
            let alive = unsafe { libc::kill(pid, 0) };
            alive != 0
        });
        assert!(gone, "the grandchild {pid} outlived the read");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
