//! The agent's standard output as the protocol stream, written from the runtime's own thread.
//!
//! `tokio::io::stdout()` hands every write to a thread of tokio's blocking pool and waits for
//! it: two thread hand-offs per frame, and a session sends several frames per round. When the
//! output is a pipe or a socket, as it is whenever a client spawns the agent, it can instead be
//! written without blocking and waited on through the reactor, like any other stream; a client
//! that stops reading then makes the writer wait for readiness, not a thread.
//!
//! The descriptor's `O_NONBLOCK` flag is never changed: it belongs to the open file description,
//! which the agent may share with other processes (a terminal with the shell that started it).
//! A pipe is opened afresh through `/proc/self/fd`, which gives the agent a description of its
//! own; a socket is written with `MSG_DONTWAIT`, which makes the one call nonblocking. Anything
//! else (a terminal, a file) keeps tokio's stdout.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncWrite, Interest};
use tokio::net::unix::pipe;

/// The protocol stream's output: see the module docs for which kind a descriptor gets.
#[derive(Debug)]
pub struct Output {
    kind: Kind,
}

#[derive(Debug)]
enum Kind {
    /// A pipe, through a description of the agent's own, nonblocking.
    Pipe(pipe::Sender),
    /// A socket, written with `MSG_DONTWAIT`.
    Socket(AsyncFd<OwnedFd>),
    /// Anything else, through tokio's blocking pool.
    Stdout(tokio::io::Stdout),
}

impl Output {
    /// The process's standard output. Must be called within a runtime with I/O enabled.
    pub fn stdout() -> Self {
        let stdout = io::stdout();
        match Self::direct(stdout.as_fd()) {
            Ok(Some(kind)) => Self { kind },
            Ok(None) => Self::blocking(),
            Err(e) => {
                tracing::debug!(error = %e, "stdout cannot be written directly; using a thread");
                Self::blocking()
            }
        }
    }

    /// Which of the direct kinds (pipe or socket) `fd` is; `None` when it is neither. Must be
    /// called within a runtime with I/O enabled.
    pub fn from_fd(fd: BorrowedFd<'_>) -> io::Result<Option<Self>> {
        Ok(Self::direct(fd)?.map(|kind| Self { kind }))
    }

    /// Whether writes go straight from the runtime's thread (a pipe or a socket).
    pub fn is_direct(&self) -> bool {
        match self.kind {
            Kind::Pipe(_) | Kind::Socket(_) => true,
            Kind::Stdout(_) => false,
        }
    }

    fn blocking() -> Self {
        Self {
            kind: Kind::Stdout(tokio::io::stdout()),
        }
    }

    fn direct(fd: BorrowedFd<'_>) -> io::Result<Option<Kind>> {
        let file_type = File::from(fd.try_clone_to_owned()?).metadata()?.file_type();
        if file_type.is_fifo() {
            // A path under /proc/self/fd opens the pipe itself anew, with a description whose
            // flags are the agent's alone.
            let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
            return Ok(Some(Kind::Pipe(
                pipe::OpenOptions::new().open_sender(path)?,
            )));
        }
        if file_type.is_socket() {
            let owned = fd.try_clone_to_owned()?;
            // SAFETY: an `OwnedFd` keeps its descriptor open, and names the same one, for as
            // long as it lives, which is as long as the `AsyncFd` that owns it.
            let registered = unsafe { AsyncFd::register_with_interest(owned, Interest::WRITABLE) };
            return Ok(Some(Kind::Socket(registered?)));
        }
        Ok(None)
    }
}

impl AsyncWrite for Output {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().kind {
            Kind::Pipe(sender) => Pin::new(sender).poll_write(cx, buf),
            Kind::Socket(fd) => poll_send(fd, cx, buf),
            Kind::Stdout(stdout) => Pin::new(stdout).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().kind {
            Kind::Pipe(sender) => Pin::new(sender).poll_flush(cx),
            // Nothing is held back: each write went to the kernel.
            Kind::Socket(_) => Poll::Ready(Ok(())),
            Kind::Stdout(stdout) => Pin::new(stdout).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().kind {
            Kind::Pipe(sender) => Pin::new(sender).poll_shutdown(cx),
            // The descriptor is a copy of stdout's; closing it when dropped ends nothing.
            Kind::Socket(_) => Poll::Ready(Ok(())),
            Kind::Stdout(stdout) => Pin::new(stdout).poll_shutdown(cx),
        }
    }
}

/// Sends what the socket takes of `buf` now, or waits until it is writable.
fn poll_send(fd: &AsyncFd<OwnedFd>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
    loop {
        let mut guard = ready!(fd.poll_write_ready(cx))?;
        let sent = guard.try_io(|fd| {
            // SAFETY: `buf` is valid for reads of `buf.len()` bytes for the whole call, and the
            // descriptor is open for as long as `fd` lives. MSG_NOSIGNAL: a closed peer is an
            // EPIPE error, never a signal.
            let n = unsafe {
                libc::send(
                    fd.get_ref().as_raw_fd(),
                    buf.as_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
                )
            };
            // A negative count is an error, whose code is in errno.
            usize::try_from(n).map_err(|_| io::Error::last_os_error())
        });
        match sent {
            Ok(result) => return Poll::Ready(result),
            // Not writable after all: readiness was cleared; wait again.
            Err(_would_block) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;
    use std::os::unix::net::UnixStream;
    use std::time::Duration;

    use tokio::io::AsyncWriteExt;

    use super::*;

    fn nonblocking(fd: BorrowedFd<'_>) -> bool {
        // SAFETY: F_GETFL reads the flags of a descriptor that `fd` keeps open.
        let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
        assert!(flags >= 0, "fcntl: {}", io::Error::last_os_error());
        flags & libc::O_NONBLOCK != 0
    }

    /// Writes more than the stream buffers while nobody reads, then reads it all: the writer
    /// must wait for room without holding the runtime's only thread, so the reader task on
    /// the same thread runs.
    async fn check_round_trip(output: Output, mut reader: impl Read + Send + 'static) {
        assert!(output.is_direct());
        let payload: Vec<u8> = (0..1_000_000_u32).map(|i| (i % 251) as u8).collect();
        let expected = payload.clone();
        let mut output = output;
        let write = tokio::spawn(async move {
            output.write_all(&payload).await.unwrap();
            output.flush().await.unwrap();
        });
        // Let the writer fill the buffer and wait; the runtime must still run this task.
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !write.is_finished(),
            "a million bytes fit in no stream buffer"
        );
        let read = tokio::task::spawn_blocking(move || {
            let mut got = vec![0; expected.len()];
            reader.read_exact(&mut got).unwrap();
            assert!(got == expected, "the bytes read are not the bytes written");
        });
        tokio::time::timeout(Duration::from_secs(10), write)
            .await
            .expect("the writer finishes once the reader reads")
            .unwrap();
        read.await.unwrap();
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_pipe_is_written_without_blocking_and_its_flags_stay_as_they_were() {
        let (reader, writer) = io::pipe().unwrap();
        assert!(!nonblocking(writer.as_fd()));
        let output = Output::from_fd(writer.as_fd()).unwrap().expect("a pipe");
        assert!(matches!(output.kind, Kind::Pipe(_)));
        assert!(
            !nonblocking(writer.as_fd()),
            "the shared description must stay blocking"
        );
        drop(writer);
        check_round_trip(output, reader).await;
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_socket_is_written_without_blocking_and_its_flags_stay_as_they_were() {
        let (reader, writer) = UnixStream::pair().unwrap();
        let output = Output::from_fd(writer.as_fd()).unwrap().expect("a socket");
        assert!(matches!(output.kind, Kind::Socket(_)));
        assert!(
            !nonblocking(writer.as_fd()),
            "the shared description must stay blocking"
        );
        check_round_trip(output, reader).await;
        drop(writer);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_file_is_not_written_directly() {
        let file = tempfile_in_target();
        assert!(Output::from_fd(file.as_fd()).unwrap().is_none());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_closed_reader_is_an_error_not_a_signal() {
        let (reader, writer) = io::pipe().unwrap();
        let mut output = Output::from_fd(writer.as_fd()).unwrap().expect("a pipe");
        drop((reader, writer));
        let err = output.write_all(b"x\n").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);

        let (reader, writer) = UnixStream::pair().unwrap();
        let mut output = Output::from_fd(writer.as_fd()).unwrap().expect("a socket");
        drop(reader);
        let err = output.write_all(b"x\n").await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
    }

    fn tempfile_in_target() -> File {
        let path = std::env::temp_dir().join(format!("hookloop-output-{}", std::process::id()));
        let file = File::create(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        file
    }
}
