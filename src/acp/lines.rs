//! The connection's lines: frames in for the protocol crate (oversized or non-UTF-8 ones
//! answered here), frames out in batches, and the count that holds sessions back while a client
//! does not read.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures_util::StreamExt as _;
use serde_json::{Value, json};
use tokio::io::{AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use super::code;
use super::frame::{Frame, FrameReader};
use crate::text::lock;

/// Frames handed to the protocol crate and not yet written out: what a client that stops
/// reading makes the agent hold.
///
/// Session updates count one each when sent; every written line counts one off (never below
/// zero). Sessions are stepped only while the count is under the cap, so a client that does not
/// read leaves at most the cap plus one step's updates queued, and nothing is dropped: the
/// sessions wait instead. Other frames written meanwhile (replies) count off too, which only
/// ever lets a client that reads some of its frames get a few more.
pub(super) struct Outflow {
    pub(super) queued: AtomicUsize,
    pub(super) cap: usize,
    /// The writer ended: nothing will make room any more, so nobody waits.
    pub(super) closed: AtomicBool,
    waiters: Mutex<Vec<Waker>>,
}

impl Outflow {
    pub(super) fn new(cap: usize) -> Self {
        Self {
            queued: AtomicUsize::new(0),
            cap: cap.max(1),
            closed: AtomicBool::new(false),
            waiters: Mutex::new(Vec::new()),
        }
    }

    /// A session update was handed to the protocol crate.
    pub(super) fn sent(&self) {
        self.queued.fetch_add(1, Ordering::AcqRel);
    }

    /// A line was written to the client.
    fn wrote(&self) {
        let _ = self
            .queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if !self.full() {
            self.wake_all();
        }
    }

    /// The writer is gone; stop holding sessions back.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake_all();
    }

    pub(super) fn full(&self) -> bool {
        !self.closed.load(Ordering::Acquire) && self.queued.load(Ordering::Acquire) >= self.cap
    }

    /// Ready when a session may take its next step.
    pub(super) fn poll_room(&self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.full() {
            return Poll::Ready(());
        }
        {
            let mut waiters = lock(&self.waiters);
            if !waiters.iter().any(|w| w.will_wake(cx.waker())) {
                waiters.push(cx.waker().clone());
            }
        }
        // Room may have been made between the check and the registration.
        if self.full() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }

    fn wake_all(&self) {
        let waiters = std::mem::take(&mut *lock(&self.waiters));
        for waker in waiters {
            waker.wake();
        }
    }
}

/// The incoming side: frames as lines for the protocol crate, oversized frames answered here.
pub(super) fn incoming_lines<R: tokio::io::AsyncBufRead + Unpin + Send + 'static>(
    reader: FrameReader<R>,
    out: mpsc::Sender<String>,
    eof: oneshot::Sender<std::io::Result<()>>,
) -> impl futures_util::Stream<Item = std::io::Result<String>> + Send + 'static {
    futures_util::stream::unfold(
        (reader, out, Some(eof)),
        async |(mut reader, out, mut eof)| loop {
            match reader.next_frame().await {
                Ok(Some(Frame::Line(line))) => return Some((Ok(line), (reader, out, eof))),
                Ok(Some(Frame::Oversized { id, len })) => {
                    tracing::warn!(len, ?id, "refused an oversized frame");
                    let message = format!(
                        "frame of {len} bytes exceeds the {} byte limit",
                        reader.max()
                    );
                    refuse_frame(&out, id, code::INVALID_REQUEST, message).await;
                }
                Ok(Some(Frame::NotUtf8 { id, valid_up_to })) => {
                    tracing::warn!(?id, valid_up_to, "refused a frame that is not UTF-8");
                    let message = format!(
                        "parse error: the frame is not valid UTF-8 (invalid byte at offset \
                         {valid_up_to})"
                    );
                    refuse_frame(&out, id, code::PARSE_ERROR, message).await;
                }
                // End of input is the end of the connection: tell `serve`, which winds down.
                // The stream itself stays open so the protocol crate does not race it.
                Ok(None) => {
                    if let Some(eof) = eof.take() {
                        let _ = eof.send(Ok(()));
                    }
                    std::future::pending::<()>().await;
                }
                Err(e) => {
                    if let Some(eof) = eof.take() {
                        let _ = eof.send(Err(e));
                    }
                    std::future::pending::<()>().await;
                }
            }
        },
    )
    .boxed()
}

/// An error reply to a frame refused before the protocol crate saw it: the one reply this
/// module writes itself, since the crate never sees the frame. The id is `null` when the
/// frame's first bytes do not show one.
async fn refuse_frame(out: &mpsc::Sender<String>, id: Option<Value>, code: i32, message: String) {
    let reply = json!({
        "jsonrpc": "2.0",
        "id": id,
        "error": {"code": code, "message": message},
    });
    // The writer is gone only when the connection is: nobody is left to tell.
    let _ = out.send(reply.to_string()).await;
}

/// Writes each outgoing frame as one line, flushing after each batch so a client sees it at
/// once. The frames queued when the writer wakes go out in one write: a round's updates often
/// come together, and each write is a system call.
pub(super) async fn write_lines(
    output: impl AsyncWrite + Unpin,
    lines: mpsc::Receiver<String>,
    outflow: Arc<Outflow>,
) -> std::io::Result<()> {
    let written = write_each(output, lines, &outflow).await;
    outflow.close();
    written
}

/// The most frames one write takes.
const FRAMES_PER_WRITE: usize = 64;

async fn write_each(
    mut output: impl AsyncWrite + Unpin,
    mut lines: mpsc::Receiver<String>,
    outflow: &Outflow,
) -> std::io::Result<()> {
    let mut batch = Vec::with_capacity(FRAMES_PER_WRITE);
    let mut bytes = Vec::new();
    while lines.recv_many(&mut batch, FRAMES_PER_WRITE).await > 0 {
        bytes.clear();
        for line in &batch {
            bytes.extend_from_slice(line.as_bytes());
            bytes.push(b'\n');
        }
        output.write_all(&bytes).await?;
        output.flush().await?;
        for _ in batch.drain(..) {
            outflow.wrote();
        }
        if bytes.capacity() > MAX_KEPT_BUFFER {
            // One large frame must not pin its size for the life of the connection.
            bytes = Vec::new();
        }
    }
    Ok(())
}

/// The largest write buffer kept between batches.
const MAX_KEPT_BUFFER: usize = 1 << 20;
