//! The connection's lines: frames in for the protocol crate (oversized or non-UTF-8 ones
//! answered here), frames out in batches, the session updates the agent encodes itself, and the
//! counts that hold sessions, and the reading of frames, back while a client does not read.
//!
//! # Replies a client does not read
//!
//! The protocol crate queues its replies without a bound before they reach the writer, and
//! answers every request it is handed (a malformed one with an error). So the reader counts the
//! frames it hands the crate that the crate answers, and the writer's side counts the replies
//! that reach it; while the difference is at its cap, no further frame is read. A client that
//! sends requests and never reads its replies then fills the pipe to the agent instead of the
//! agent's memory, and one that reads again is served where it stopped.
//!
//! # Session updates
//!
//! The protocol crate turns every notification's parameters into a `serde_json::Value` and
//! serialises that, several times the cost of writing the frame, and a session sends several
//! updates per round. So the agent writes each `session/update` frame itself, in the bytes the
//! crate would have written, and hands the crate a small stand-in notification instead
//! ([`STAND_IN`], whose parameters hold the frame's number). The writer swaps each stand-in for
//! its frame: the crate still orders every frame of the connection, and still refuses a
//! notification it would refuse (before `initialize`), so nothing but the cost changes.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use agent_client_protocol::v1::ConnectionTo;
use agent_client_protocol::v1::schema::SessionNotification;
use agent_client_protocol::{Client, RawJsonRpcMessage, TransportFrame, UntypedMessage};
use futures_util::StreamExt as _;
use serde::{Deserialize, Serialize};
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
    /// Session update frames encoded here, waiting for their stand-ins to reach the writer.
    encoded: Mutex<Encoded>,
    /// Frames handed to the protocol crate that it answers, less the replies that reached the
    /// writer's channel: the replies the crate holds (or will) plus the requests still running.
    owed: AtomicUsize,
    /// The most `owed` may reach before the reader waits.
    owed_cap: usize,
    /// The reader, when it waits for `owed` to fall.
    reader: Mutex<Option<Waker>>,
}

/// Frames whose stand-ins are on their way through the protocol crate, oldest first.
#[derive(Default)]
struct Encoded {
    frames: VecDeque<(u64, String)>,
    /// The number of the next frame.
    next: u64,
}

/// The method of the stand-in notification the protocol crate carries in place of a
/// `session/update` frame the agent encoded. An extension method (ACP's `_` prefix), never
/// written out: the writer replaces it.
pub(super) const STAND_IN: &str = "_hookloop/encoded";

/// A stand-in's parameters.
#[derive(Deserialize)]
struct StandIn {
    method: String,
    params: StandInParams,
}

#[derive(Deserialize)]
struct StandInParams {
    n: u64,
}

/// Longer lines are never stand-ins: a stand-in is a few dozen bytes.
const MAX_STAND_IN: usize = 128;

impl Outflow {
    /// At most `cap` session updates unwritten, and `owed_cap` answers owed before the reader
    /// waits.
    pub(super) fn new(cap: usize, owed_cap: usize) -> Self {
        Self {
            queued: AtomicUsize::new(0),
            cap: cap.max(1),
            closed: AtomicBool::new(false),
            waiters: Mutex::new(Vec::new()),
            encoded: Mutex::new(Encoded::default()),
            owed: AtomicUsize::new(0),
            owed_cap: owed_cap.max(1),
            reader: Mutex::new(None),
        }
    }

    /// A frame went to the protocol crate; counts it when the crate will answer it.
    fn handed(&self, line: &str) {
        if crate_answers(line) {
            self.owed.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// A reply from the protocol crate reached the writer's channel: one answer fewer owed
    /// (never below zero).
    pub(super) fn answered(&self) {
        let _ = self
            .owed
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
        if !self.owing_too_much()
            && let Some(reader) = lock(&self.reader).take()
        {
            reader.wake();
        }
    }

    fn owing_too_much(&self) -> bool {
        !self.closed.load(Ordering::Acquire) && self.owed.load(Ordering::Acquire) >= self.owed_cap
    }

    /// Ready when the reader may read the next frame.
    fn poll_read_room(&self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.owing_too_much() {
            return Poll::Ready(());
        }
        *lock(&self.reader) = Some(cx.waker().clone());
        // A reply may have passed between the check and the registration.
        if self.owing_too_much() {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    }

    /// Sends a session update: encoded here, its stand-in through the protocol crate.
    ///
    /// Fails when the connection is gone.
    pub(super) fn send_update(
        &self,
        cx: &ConnectionTo<Client>,
        notification: SessionNotification,
    ) -> Result<(), agent_client_protocol::Error> {
        self.queued.fetch_add(1, Ordering::AcqRel);
        let Some(frame) = encode_update(&notification) else {
            // Not encodable here (it cannot happen with the schema's types): the crate's own
            // path says what is wrong with it.
            return cx.send_notification(notification);
        };
        self.enqueue(frame, |n| {
            cx.send_notification(UntypedMessage::new(STAND_IN, json!({ "n": n }))?)
        })
    }

    /// Queues `frame` under the next number and has `send` hand its stand-in to the crate.
    fn enqueue<E>(&self, frame: String, send: impl FnOnce(u64) -> Result<(), E>) -> Result<(), E> {
        // Numbered and handed to the crate under one lock, so that the numbers follow the
        // order of the crate's queue even when sessions on several threads send at once.
        let mut encoded = lock(&self.encoded);
        let n = encoded.next;
        send(n)?;
        encoded.next += 1;
        encoded.frames.push_back((n, frame));
        Ok(())
    }

    /// The frame that `line` stands in for, if it is a stand-in; `Some(None)` for a stand-in
    /// whose frame is gone (which does not happen: each is queued with its stand-in).
    fn swap(&self, line: &str) -> Option<Option<String>> {
        let n = stand_in_number(line)?;
        let mut encoded = lock(&self.encoded);
        // Stand-ins reach the writer in the order they were numbered; an older frame still
        // queued is one whose stand-in the crate dropped (a notification it refused).
        while encoded.frames.front().is_some_and(|(m, _)| *m < n) {
            encoded.frames.pop_front();
            tracing::debug!("a session update the protocol crate refused was dropped");
        }
        match encoded.frames.front() {
            Some((m, _)) if *m == n => Some(encoded.frames.pop_front().map(|(_, frame)| frame)),
            Some(_) | None => {
                tracing::error!(n, "a session update's frame was lost");
                Some(None)
            }
        }
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

    /// The writer is gone; stop holding sessions and the reader back.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake_all();
        if let Some(reader) = lock(&self.reader).take() {
            reader.wake();
        }
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

/// The `session/update` frame of `notification`, as the protocol crate writes it: the same
/// keys in the same order (its JSON values keep the order of insertion), without a newline.
pub(super) fn encode_update(notification: &SessionNotification) -> Option<String> {
    #[derive(Serialize)]
    struct Frame<'a> {
        jsonrpc: &'static str,
        method: &'static str,
        params: &'a SessionNotification,
    }
    serde_json::to_string(&Frame {
        jsonrpc: "2.0",
        method: "session/update",
        params: notification,
    })
    .ok()
}

/// The number of the stand-in on `line`, if it is one.
fn stand_in_number(line: &str) -> Option<u64> {
    if line.len() > MAX_STAND_IN || !line.contains(STAND_IN) {
        return None;
    }
    let stand_in: StandIn = serde_json::from_str(line).ok()?;
    (stand_in.method == STAND_IN).then_some(stand_in.params.n)
}

/// Whether the protocol crate answers `line`: a request does, and so does a malformed frame
/// unless it is shaped as a response (the crate's own rules, from its own parser).
fn crate_answers(line: &str) -> bool {
    match TransportFrame::parse_json(line) {
        TransportFrame::Single(RawJsonRpcMessage::Request(_)) => true,
        TransportFrame::Single(
            RawJsonRpcMessage::Notification(_) | RawJsonRpcMessage::Response(_),
        ) => false,
        TransportFrame::Malformed { raw, .. } => {
            !serde_json::from_str::<Value>(&raw).is_ok_and(|value| {
                value.as_object().is_some_and(|object| {
                    !object.contains_key("method")
                        && (object.contains_key("result") || object.contains_key("error"))
                })
            })
        }
        // A kind of frame this version does not know: counted, so it cannot be a way past the
        // cap.
        _ => true,
    }
}

/// Whether a frame the protocol crate writes is a reply: it has no top-level `method` (a
/// request or a notification has one). Found from the keys before its `result` or `error`,
/// so a long reply costs no more than a short one.
pub(super) fn is_reply(line: &str) -> bool {
    const KEYS: [&[u8]; 3] = [b"method", b"result", b"error"];
    super::frame::first_top_level_key(line.as_bytes(), &KEYS).is_some_and(|key| key != KEYS[0])
}

/// The incoming side: frames as lines for the protocol crate, oversized frames answered here.
/// No frame is read while the crate owes the cap of answers (see the module docs).
pub(super) fn incoming_lines<R: tokio::io::AsyncBufRead + Unpin + Send + 'static>(
    reader: FrameReader<R>,
    out: mpsc::Sender<String>,
    eof: oneshot::Sender<std::io::Result<()>>,
    outflow: Arc<Outflow>,
) -> impl futures_util::Stream<Item = std::io::Result<String>> + Send + 'static {
    futures_util::stream::unfold(
        (reader, out, Some(eof), outflow),
        async |(mut reader, out, mut eof, outflow)| loop {
            std::future::poll_fn(|cx| outflow.poll_read_room(cx)).await;
            match reader.next_frame().await {
                Ok(Some(Frame::Line(line))) => {
                    outflow.handed(&line);
                    return Some((Ok(line), (reader, out, eof, outflow)));
                }
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
            match outflow.swap(line) {
                None => bytes.extend_from_slice(line.as_bytes()),
                Some(Some(frame)) => bytes.extend_from_slice(frame.as_bytes()),
                Some(None) => continue,
            }
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

#[cfg(test)]
mod tests {
    use agent_client_protocol::v1::schema::{
        ContentBlock, ContentChunk, SessionId, SessionUpdate, ToolCall, ToolCallStatus, ToolKind,
    };

    use super::*;

    fn stand_in(n: u64) -> String {
        // The frame the protocol crate writes for a stand-in.
        json!({"jsonrpc": "2.0", "method": STAND_IN, "params": {"n": n}}).to_string()
    }

    async fn written(outflow: &Arc<Outflow>, lines: Vec<String>) -> String {
        let (tx, rx) = mpsc::channel(lines.len().max(1));
        for line in lines {
            tx.send(line).await.unwrap();
        }
        drop(tx);
        let mut out = Vec::new();
        write_lines(&mut out, rx, Arc::clone(outflow))
            .await
            .unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn an_update_is_encoded_in_the_bytes_the_protocol_crate_writes() {
        let updates = [
            SessionUpdate::ToolCall(
                ToolCall::new("call_1", "todo__list")
                    .kind(ToolKind::Read)
                    .status(ToolCallStatus::Pending)
                    .raw_input(json!({"b": 1, "a": [true, null], "q": "\"é\n"})),
            ),
            SessionUpdate::AgentMessageChunk(ContentChunk::new(ContentBlock::from(
                "some \u{1F600} text".to_owned(),
            ))),
        ];
        for update in updates {
            let notification = SessionNotification::new(SessionId::new("hl-1"), update);
            // The crate's way: the parameters as a JSON value (its values keep their keys'
            // order), in a JSON-RPC notification.
            let theirs = json!({
                "jsonrpc": "2.0",
                "method": "session/update",
                "params": serde_json::to_value(&notification).unwrap(),
            })
            .to_string();
            assert_eq!(encode_update(&notification).unwrap(), theirs);
        }
    }

    #[tokio::test]
    async fn each_stand_in_is_written_as_its_frame_in_the_order_of_the_lines() {
        let outflow = Arc::new(Outflow::new(8, 8));
        for frame in ["first", "second"] {
            outflow
                .enqueue(frame.to_owned(), |_| Ok::<_, ()>(()))
                .unwrap();
        }
        let out = written(
            &outflow,
            vec![
                r#"{"id":1}"#.to_owned(),
                stand_in(0),
                r#"{"id":2}"#.to_owned(),
                stand_in(1),
            ],
        )
        .await;
        assert_eq!(out, "{\"id\":1}\nfirst\n{\"id\":2}\nsecond\n");
        assert!(lock(&outflow.encoded).frames.is_empty());
    }

    #[tokio::test]
    async fn a_frame_whose_stand_in_the_crate_dropped_is_not_written() {
        let outflow = Arc::new(Outflow::new(8, 8));
        for frame in ["refused", "kept"] {
            outflow
                .enqueue(frame.to_owned(), |_| Ok::<_, ()>(()))
                .unwrap();
        }
        let out = written(&outflow, vec![stand_in(1)]).await;
        assert_eq!(out, "kept\n");
        assert!(lock(&outflow.encoded).frames.is_empty());
    }

    #[tokio::test]
    async fn a_failed_hand_off_queues_no_frame_and_takes_no_number() {
        let outflow = Arc::new(Outflow::new(8, 8));
        assert!(outflow.enqueue("lost".to_owned(), |_| Err(())).is_err());
        outflow
            .enqueue("sent".to_owned(), |n| {
                assert_eq!(n, 0);
                Ok::<_, ()>(())
            })
            .unwrap();
        assert_eq!(written(&outflow, vec![stand_in(0)]).await, "sent\n");
    }

    #[tokio::test]
    async fn a_frame_that_only_mentions_the_stand_in_method_is_written_as_it_is() {
        let outflow = Arc::new(Outflow::new(8, 8));
        let reply = json!({"jsonrpc": "2.0", "id": 3, "result": {"text": stand_in(0)}}).to_string();
        let other =
            json!({"jsonrpc": "2.0", "method": "_other", "params": {"m": STAND_IN}}).to_string();
        let out = written(&outflow, vec![reply.clone(), other.clone()]).await;
        assert_eq!(out, format!("{reply}\n{other}\n"));
    }
}
