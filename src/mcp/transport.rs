//! The line transport of the MCP client: newline-delimited JSON-RPC over a byte stream (a stdio
//! server's pipes, or an in-memory duplex in tests), as rmcp's `Transport`.
//!
//! It puts the same bytes on the wire as rmcp's own stream transport and reads what it reads;
//! what it adds is speed on the answers the engine waits for most. rmcp decodes every incoming
//! message into an untagged enum of every message shape and, for an answer, an untagged enum of
//! every result type, trying each in turn (each failed try builds an error string). This
//! transport remembers the method of each request it sends, by id, and decodes the answer to a
//! `tools/call` or `tools/list` straight into its one result type. Anything else (a request or
//! notification of the server's, an error, an `input_required` result, an answer whose id it
//! does not know) goes through rmcp's generic decoding, so the client sees exactly the message
//! rmcp would have made of it.
//!
//! Writes are batched: messages sent while a write is under way go out together in the next.
//! A `tools/call` request is written by [`encode`], in the bytes rmcp would write, without
//! rmcp's detour through a JSON value.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{
    CallToolResult, ClientNotification, ClientRequest, ErrorData, JsonRpcMessage, JsonRpcRequest,
    JsonRpcResponse, JsonRpcVersion2_0, ListToolsResult, RequestId, ServerNotification,
    ServerResult,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use serde::Deserialize;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde_json::value::RawValue;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::text::lock;

/// The longest line (one message) read from a server; a longer one is dropped and logged, and
/// the connection stays open. The same cap as rmcp's stream transport (and its HTTP client's
/// largest event), so what a server may send does not depend on the transport.
pub(crate) const MAX_LINE: usize = 16 * 1024 * 1024;

/// Requests whose method is remembered at once. Past this the oldest are forgotten: their
/// answers are decoded the generic way, which is slower but as correct, so a server that never
/// answers cannot grow this map.
const MAX_EXPECTED: usize = 1024;

/// The server's requests handed to the client and not yet answered, or answered and the answer
/// not yet written, at most. While this many wait, the transport reads nothing more from the
/// server: a server that asks faster than it reads the answers (a `roots/list` flood) would
/// otherwise have the client hold every request, its handler and its answer at once. An answer
/// frees its place once it is written (or its write fails or is dropped), not when it is handed
/// to the transport: a server that stops reading its stdin would otherwise have the client keep
/// every answer, and the task that waits to write it, for as long as it goes on asking. A
/// question that waits on a person is one of few (`MAX_OPEN_QUESTIONS`), so this never waits on
/// anything but the server itself.
const MAX_SERVING: usize = 64;

/// How much is read from the stream at a time.
const READ_CHUNK: usize = 64 * 1024;

/// A read buffer larger than this is given back once it is empty (after a long line).
const KEEP_CAPACITY: usize = 1024 * 1024;

/// The client's end of a newline-delimited JSON-RPC stream.
pub(crate) struct LineTransport<R, W> {
    reader: R,
    /// Bytes read and not yet handled: `buf[start..]`.
    buf: Vec<u8>,
    start: usize,
    /// `buf[start..scanned]` holds no newline.
    scanned: usize,
    /// Dropping the rest of an over-long line, up to its newline.
    discarding: bool,
    max_line: usize,
    /// The result type each unanswered request expects, by id.
    expected: Expected,
    /// The ids of the server's requests handed on and not yet answered (with the answers not
    /// yet written, at most [`MAX_SERVING`]).
    serving: HashSet<RequestId>,
    out: Arc<Outbox<W>>,
}

impl<R, W> LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    /// A transport reading messages from `reader` and writing them to `writer`.
    pub(crate) fn new(reader: R, writer: W) -> Self {
        Self {
            reader,
            buf: Vec::new(),
            start: 0,
            scanned: 0,
            discarding: false,
            max_line: MAX_LINE,
            expected: Expected::default(),
            serving: HashSet::new(),
            out: Arc::new(Outbox {
                queue: Mutex::new(Queue::default()),
                answers: AtomicUsize::new(0),
                answer_written: tokio::sync::Notify::new(),
                writer: tokio::sync::Mutex::new(Writer {
                    stream: Some(writer),
                    written: 0,
                    failed: None,
                }),
            }),
        }
    }

    /// The same with another cap on a line's length.
    #[cfg(test)]
    pub(crate) fn with_max_line(mut self, max_line: usize) -> Self {
        self.max_line = max_line;
        self
    }

    /// The next whole line, without its newline, as a range of `buf`; `None` at the end of the
    /// stream (a last line without a newline is incomplete and dropped) or on a read error.
    ///
    /// Cancel-safe: the only await is a read that, when dropped, has read nothing, and every
    /// position is kept in `self`.
    async fn next_line(&mut self) -> Option<std::ops::Range<usize>> {
        loop {
            if let Some(offset) = self.buf[self.scanned..].iter().position(|&b| b == b'\n') {
                let end = self.scanned + offset;
                let line = self.start..end;
                self.start = end + 1;
                self.scanned = self.start;
                if std::mem::take(&mut self.discarding) {
                    continue;
                }
                if line.len() > self.max_line {
                    self.report_oversized();
                    continue;
                }
                return Some(line);
            }
            self.scanned = self.buf.len();
            if self.discarding {
                self.start = self.buf.len();
            } else if self.buf.len() - self.start > self.max_line {
                self.report_oversized();
                self.discarding = true;
                self.start = self.buf.len();
            }
            self.compact();
            self.buf.reserve(READ_CHUNK);
            match self.reader.read_buf(&mut self.buf).await {
                Ok(0) => return None,
                Ok(_) => {}
                Err(error) => {
                    tracing::error!(%error, "reading from the server failed");
                    return None;
                }
            }
        }
    }

    fn report_oversized(&self) {
        tracing::error!(
            max_line = self.max_line,
            "the server sent a message longer than the limit; it is dropped"
        );
    }

    /// Moves the unhandled bytes to the front of the buffer, so it holds at most one line and
    /// one read.
    fn compact(&mut self) {
        if self.start == self.buf.len() {
            self.buf.clear();
            if self.buf.capacity() > KEEP_CAPACITY {
                self.buf.shrink_to(READ_CHUNK);
            }
        } else if self.start > 0 {
            self.buf.drain(..self.start);
        }
        self.scanned -= self.start;
        self.start = 0;
    }

    /// The message on one line, or why there is none.
    fn decode(&self, line: std::ops::Range<usize>) -> Decoded {
        let line = &self.buf[line];
        let line = line.strip_prefix(UTF8_BOM).unwrap_or(line);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            return Decoded::Nothing;
        }
        if let Some(message) = decode_expected(line, &self.expected) {
            return Decoded::Message(message);
        }
        match serde_json::from_slice::<RxJsonRpcMessage<RoleClient>>(line) {
            Ok(message) => Decoded::Message(self.misfit_to_error(line, message)),
            Err(error) => match error.classify() {
                // Not JSON: there is no id to answer, and answering garbage can start an error
                // storm with a peer that echoes it. Other MCP clients ignore it too.
                serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                    tracing::debug!(%error, "ignoring a line from the server that is not JSON");
                    Decoded::Nothing
                }
                serde_json::error::Category::Data | serde_json::error::Category::Io => {
                    if is_foreign_notification(line) {
                        tracing::trace!("ignoring a notification that is not MCP's");
                        return Decoded::Nothing;
                    }
                    tracing::debug!(%error, "the server sent JSON that is no JSON-RPC message");
                    Decoded::Invalid
                }
            },
        }
    }
}

impl<R, W> LineTransport<R, W> {
    /// An answer whose result is not of the type its request expects, as an error that says
    /// so: rmcp's client would only say "unexpected response". Any other message as it is.
    fn misfit_to_error(
        &self,
        line: &[u8],
        message: RxJsonRpcMessage<RoleClient>,
    ) -> RxJsonRpcMessage<RoleClient> {
        let JsonRpcMessage::Response(response) = &message else {
            return message;
        };
        let Some(expect) = self.expected.get(&response.id) else {
            return message;
        };
        if expect.fits(&response.result) {
            return message;
        }
        // Decoded again only on this rare path, for serde's account of what is wrong.
        let why = match expect {
            Expect::CallTool => serde_json::from_slice::<JsonRpcResponse<CallToolResult>>(line)
                .err()
                .map(|e| e.to_string()),
            Expect::ListTools => serde_json::from_slice::<JsonRpcResponse<ListToolsResult>>(line)
                .err()
                .map(|e| e.to_string()),
        }
        .unwrap_or_else(|| "it is of another result type".to_owned());
        let text = format!(
            "the server's answer to {} is not a {} result: {why}",
            expect.method(),
            expect.method()
        );
        tracing::debug!(id = %response.id, "{text}");
        JsonRpcMessage::error(
            ErrorData::parse_error(text, None),
            Some(response.id.clone()),
        )
    }
}

/// What one line held.
// Lives for one line on the stack; boxing the message would cost an allocation per message.
#[allow(clippy::large_enum_variant)]
enum Decoded {
    Message(RxJsonRpcMessage<RoleClient>),
    /// Blank, not JSON, or a notification outside MCP: skipped.
    Nothing,
    /// JSON that is not a message: the server is told its request was invalid.
    Invalid,
}

impl<R, W> Transport<RoleClient> for LineTransport<R, W>
where
    R: AsyncRead + Send + Unpin,
    W: AsyncWrite + Send + Unpin + 'static,
{
    type Error = io::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleClient>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        // Noted before the request can reach the server, so that its answer finds it.
        match &item {
            JsonRpcMessage::Request(request) => self.expected.insert(&request.id, &request.request),
            JsonRpcMessage::Notification(notification) => {
                if let ClientNotification::CancelledNotification(cancelled) =
                    &notification.notification
                    && let Some(id) = &cancelled.params.request_id
                {
                    self.expected.remove(id);
                }
            }
            JsonRpcMessage::Response(JsonRpcResponse { id, .. }) => {
                self.serving.remove(id);
            }
            JsonRpcMessage::Error(error) => {
                if let Some(id) = &error.id {
                    self.serving.remove(id);
                }
            }
        }
        // An answer keeps a place until it is written.
        let place = matches!(item, JsonRpcMessage::Response(_) | JsonRpcMessage::Error(_))
            .then(|| Unwritten::new(&self.out));
        let queued = self.out.push(&item);
        let out = Arc::clone(&self.out);
        async move {
            let _place = place;
            out.flush(queued?).await
        }
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleClient>> {
        loop {
            // Every place is taken: wait for an answer's write to end. (An answer handed to
            // `send` frees a place too, but the service drops this future to send it and calls
            // again.) Cancel-safe: nothing is read while waiting.
            loop {
                let written = self.out.answer_written.notified();
                if self.serving.len() + self.out.answers.load(Ordering::Acquire) < MAX_SERVING {
                    break;
                }
                written.await;
            }
            let line = self.next_line().await?;
            match self.decode(line) {
                Decoded::Message(message) => {
                    match &message {
                        JsonRpcMessage::Response(JsonRpcResponse { id, .. }) => {
                            self.expected.remove(id);
                        }
                        JsonRpcMessage::Error(error) => {
                            if let Some(id) = &error.id {
                                self.expected.remove(id);
                            }
                        }
                        JsonRpcMessage::Request(request) => {
                            self.serving.insert(request.id.clone());
                        }
                        JsonRpcMessage::Notification(notification) => {
                            // A request the server cancels is never answered.
                            if let ServerNotification::CancelledNotification(cancelled) =
                                &notification.notification
                                && let Some(id) = &cancelled.params.request_id
                            {
                                self.serving.remove(id);
                            }
                        }
                    }
                    return Some(message);
                }
                Decoded::Nothing => {}
                Decoded::Invalid => {
                    let reply = TxJsonRpcMessage::<RoleClient>::error(
                        ErrorData::invalid_request("Invalid request", None),
                        None,
                    );
                    // Written by a task of its own: a write inside `receive` could be cut
                    // short when the service drops this future for another event. It keeps a
                    // place until written, so a flood of them waits as answers do.
                    let place = Unwritten::new(&self.out);
                    if let Ok(queued) = self.out.push(&reply) {
                        let out = Arc::clone(&self.out);
                        tokio::spawn(async move {
                            let _place = place;
                            if let Err(error) = out.flush(queued).await {
                                tracing::debug!(%error, "could not tell the server its message was invalid");
                            }
                        });
                    }
                }
            }
        }
    }

    async fn close(&mut self) -> Result<(), Self::Error> {
        let mut writer = self.out.writer.lock().await;
        if let Some(mut stream) = writer.stream.take() {
            // Closing the server's stdin is how it learns the client is gone.
            stream.shutdown().await?;
        }
        Ok(())
    }
}

/// The writing half: encoded messages wait in the queue until a send's future writes them
/// (with any others queued by then).
struct Outbox<W> {
    queue: Mutex<Queue>,
    writer: tokio::sync::Mutex<Writer<W>>,
    /// Answers to the server handed over and not yet written (each an [`Unwritten`]).
    answers: AtomicUsize,
    /// Told when one of them is written, its write fails, or its send is dropped.
    answer_written: tokio::sync::Notify,
}

/// The place an answer to the server holds among [`MAX_SERVING`] until its write ends.
struct Unwritten<W>(Arc<Outbox<W>>);

impl<W> Unwritten<W> {
    fn new(out: &Arc<Outbox<W>>) -> Self {
        out.answers.fetch_add(1, Ordering::AcqRel);
        Self(Arc::clone(out))
    }
}

impl<W> Drop for Unwritten<W> {
    fn drop(&mut self) {
        self.0.answers.fetch_sub(1, Ordering::AcqRel);
        self.0.answer_written.notify_waiters();
    }
}

#[derive(Default)]
struct Queue {
    bytes: Vec<u8>,
    /// The number of messages ever queued; a message's number says whether a write took it.
    queued: u64,
}

struct Writer<W> {
    /// `None` once closed.
    stream: Option<W>,
    /// The number of messages written (or lost to a failed write).
    written: u64,
    /// Why the last write failed: every message it carried fails with it.
    failed: Option<(io::ErrorKind, String)>,
}

impl<W: AsyncWrite + Send + Unpin> Outbox<W> {
    /// Encodes `message` onto the queue; its number.
    fn push(&self, message: &TxJsonRpcMessage<RoleClient>) -> io::Result<u64> {
        let mut queue = lock(&self.queue);
        let before = queue.bytes.len();
        let direct = match message {
            JsonRpcMessage::Request(JsonRpcRequest {
                id,
                request: ClientRequest::CallToolRequest(call),
                ..
            }) => encode::write_call_tool(&mut queue.bytes, id, call),
            _ => false,
        };
        if !direct && let Err(error) = serde_json::to_writer(&mut queue.bytes, message) {
            queue.bytes.truncate(before);
            return Err(error.into());
        }
        queue.bytes.push(b'\n');
        queue.queued += 1;
        Ok(queue.queued)
    }

    /// Writes everything queued, unless a write under way already took message `number`.
    async fn flush(&self, number: u64) -> io::Result<()> {
        let mut writer = self.writer.lock().await;
        if writer.written < number {
            let (bytes, last) = {
                let mut queue = lock(&self.queue);
                (std::mem::take(&mut queue.bytes), queue.queued)
            };
            let result = match writer.stream.as_mut() {
                Some(stream) => write_all(stream, &bytes).await,
                None => Err(io::Error::new(
                    io::ErrorKind::NotConnected,
                    "the transport is closed",
                )),
            };
            writer.written = last;
            writer.failed = result.err().map(|e| (e.kind(), e.to_string()));
            let mut queue = lock(&self.queue);
            if queue.bytes.is_empty() {
                // Keep the allocation for the next batch.
                queue.bytes = bytes;
                queue.bytes.clear();
            }
        }
        match &writer.failed {
            Some((kind, message)) => Err(io::Error::new(*kind, message.clone())),
            None => Ok(()),
        }
    }
}

async fn write_all<W: AsyncWrite + Unpin>(stream: &mut W, bytes: &[u8]) -> io::Result<()> {
    stream.write_all(bytes).await?;
    stream.flush().await
}

/// What the answer to each unanswered request should be, by request id.
#[derive(Default)]
struct Expected(HashMap<RequestId, Expect>);

/// The result types decoded directly.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Expect {
    CallTool,
    ListTools,
}

impl Expect {
    fn method(self) -> &'static str {
        match self {
            Self::CallTool => "tools/call",
            Self::ListTools => "tools/list",
        }
    }

    /// Whether rmcp's client takes `result` as an answer of this kind: for `tools/call`, a
    /// tool result, a question first (`input_required`), a task, or a result without content.
    fn fits(self, result: &ServerResult) -> bool {
        match (self, result) {
            (Self::ListTools, ServerResult::ListToolsResult(_))
            | (
                Self::CallTool,
                ServerResult::CallToolResult(_)
                | ServerResult::InputRequiredResult(_)
                | ServerResult::CreateTaskResult(_)
                | ServerResult::EmptyResult(_)
                | ServerResult::TaskAckResult(_),
            ) => true,
            (Self::CallTool, ServerResult::CustomResult(custom)) => {
                matches!(&custom.0, serde_json::Value::Object(o)
                    if o.len() == 1 && o.get("_meta").is_some_and(serde_json::Value::is_object))
            }
            _ => false,
        }
    }
}

impl Expected {
    fn insert(&mut self, id: &RequestId, request: &ClientRequest) {
        let expect = match request {
            ClientRequest::CallToolRequest(_) => Expect::CallTool,
            ClientRequest::ListToolsRequest(_) => Expect::ListTools,
            // Every other answer is rare: rmcp's decoding is the reference for it.
            _ => return,
        };
        if self.0.len() >= MAX_EXPECTED {
            // Requests that were never answered nor cancelled; their answers, should they come,
            // take the generic way.
            self.0.clear();
        }
        self.0.insert(id.clone(), expect);
    }

    fn remove(&mut self, id: &RequestId) {
        self.0.remove(id);
    }

    fn get(&self, id: &RequestId) -> Option<Expect> {
        self.0.get(id).copied()
    }
}

/// The answer on `line` decoded as the result its request expects, if it is one: a whole
/// `{"jsonrpc":"2.0","id":…,"result":…}` whose id is expected and whose result is of the
/// expected type. `None` sends the line the generic way.
fn decode_expected(line: &[u8], expected: &Expected) -> Option<RxJsonRpcMessage<RoleClient>> {
    if expected.0.is_empty() {
        return None;
    }
    let mut deserializer = serde_json::Deserializer::from_slice(line);
    let answer = ExpectedAnswer { expected }
        .deserialize(&mut deserializer)
        .ok()??;
    deserializer.end().ok()?;
    Some(answer)
}

/// Decodes one answer with the map of expected results at hand.
struct ExpectedAnswer<'a> {
    expected: &'a Expected,
}

/// The keys of a JSON-RPC message that decide its shape.
#[derive(Deserialize)]
#[serde(field_identifier, rename_all = "lowercase")]
enum Key {
    Jsonrpc,
    Id,
    Result,
    Method,
    Error,
    #[serde(other)]
    Other,
}

/// The result of an answer while its keys are read: a result read before the id that says its
/// type stays raw.
// Lives for one message on the stack; boxing the result would cost an allocation per answer.
#[allow(clippy::large_enum_variant)]
enum Pending<'de> {
    Absent,
    Decoded(ServerResult),
    Raw(&'de RawValue),
}

impl<'de> DeserializeSeed<'de> for ExpectedAnswer<'_> {
    type Value = Option<RxJsonRpcMessage<RoleClient>>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for ExpectedAnswer<'_> {
    type Value = Option<RxJsonRpcMessage<RoleClient>>;

    fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
        formatter.write_str("a JSON-RPC answer")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut version = false;
        let mut id: Option<RequestId> = None;
        let mut result = Pending::Absent;
        // Another shape (a request, a notification, an error) or a repeated key: rmcp's own
        // decoding decides what it is.
        let mut generic = false;
        while let Some(key) = map.next_key::<Key>()? {
            match key {
                Key::Jsonrpc if !version => {
                    map.next_value::<JsonRpcVersion2_0>()?;
                    version = true;
                }
                Key::Id if id.is_none() => id = Some(map.next_value()?),
                Key::Result if matches!(result, Pending::Absent) && !generic => {
                    result = match id.as_ref().and_then(|id| self.expected.get(id)) {
                        Some(Expect::CallTool) => {
                            Pending::Decoded(ServerResult::CallToolResult(map.next_value()?))
                        }
                        Some(Expect::ListTools) => {
                            Pending::Decoded(ServerResult::ListToolsResult(map.next_value()?))
                        }
                        None if id.is_some() => {
                            generic = true;
                            map.next_value::<IgnoredAny>()?;
                            Pending::Absent
                        }
                        None => Pending::Raw(map.next_value()?),
                    };
                }
                Key::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
                Key::Jsonrpc | Key::Id | Key::Result | Key::Method | Key::Error => {
                    generic = true;
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let (Some(id), true, false) = (id, version, generic) else {
            return Ok(None);
        };
        let result = match result {
            Pending::Absent => return Ok(None),
            Pending::Decoded(result) => result,
            Pending::Raw(raw) => match self.expected.get(&id) {
                Some(expect) => match decode_result(expect, raw) {
                    Some(result) => result,
                    None => return Ok(None),
                },
                None => return Ok(None),
            },
        };
        Ok(Some(JsonRpcMessage::response(result, id)))
    }
}

/// A result read ahead of its id, decoded as `expect` says.
fn decode_result(expect: Expect, raw: &RawValue) -> Option<ServerResult> {
    let json = raw.get();
    match expect {
        Expect::CallTool => serde_json::from_str::<CallToolResult>(json)
            .ok()
            .map(ServerResult::CallToolResult),
        Expect::ListTools => serde_json::from_str::<ListToolsResult>(json)
            .ok()
            .map(ServerResult::ListToolsResult),
    }
}

/// UTF-8's byte order mark, which JSON readers may ignore (RFC 8259 §8.1).
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Whether `line` is a notification MCP does not define (a server that also speaks another
/// protocol on its stdout): ignored, as rmcp's transport ignores it, rather than answered.
fn is_foreign_notification(line: &[u8]) -> bool {
    let Ok(serde_json::Value::Object(object)) = serde_json::from_slice(line) else {
        return false;
    };
    let Some(method) = object.get("method").and_then(serde_json::Value::as_str) else {
        return false;
    };
    let notification = !object.contains_key("id");
    (notification && !is_mcp_method(method))
        || (method.starts_with("notifications/") && !is_mcp_notification(method))
}

/// The methods MCP defines (2026-07-28 and the versions before it).
fn is_mcp_method(method: &str) -> bool {
    matches!(
        method,
        "initialize"
            | "ping"
            | "server/discover"
            | "prompts/get"
            | "prompts/list"
            | "resources/list"
            | "resources/read"
            | "resources/subscribe"
            | "resources/unsubscribe"
            | "resources/templates/list"
            | "subscriptions/listen"
            | "tools/call"
            | "tools/list"
            | "completion/complete"
            | "elicitation/create"
            | "logging/setLevel"
            | "roots/list"
            | "sampling/createMessage"
    ) || is_mcp_notification(method)
}

/// The notifications MCP defines.
fn is_mcp_notification(method: &str) -> bool {
    matches!(
        method,
        "notifications/cancelled"
            | "notifications/initialized"
            | "notifications/message"
            | "notifications/progress"
            | "notifications/prompts/list_changed"
            | "notifications/resources/list_changed"
            | "notifications/resources/updated"
            | "notifications/roots/list_changed"
            | "notifications/subscriptions/acknowledged"
            | "notifications/tools/list_changed"
    )
}

mod encode;
#[cfg(test)]
mod tests;
