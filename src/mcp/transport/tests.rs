//! The transport over real pipes: the test plays the server, writing raw bytes to the pipe the
//! transport reads and reading what it writes.

use std::time::Duration;

use rmcp::model::{
    CallToolRequest, CallToolRequestParams, CancelledNotification, CancelledNotificationParam,
    ClientNotification, ClientRequest, ListToolsRequest, RequestId, ServerResult,
};
use rmcp::service::{RoleClient, RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::Transport;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::pipe;

use super::*;

/// The server's ends: where it writes (the transport reads) and where it reads.
struct Server {
    to_client: pipe::Sender,
    from_client: BufReader<pipe::Receiver>,
}

type Pipes = LineTransport<pipe::Receiver, pipe::Sender>;

fn connect() -> (Pipes, Server) {
    let (to_client, client_reads) = pipe::pipe().expect("pipe");
    let (client_writes, from_client) = pipe::pipe().expect("pipe");
    (
        LineTransport::new(client_reads, client_writes),
        Server {
            to_client,
            from_client: BufReader::new(from_client),
        },
    )
}

impl Server {
    async fn write(&mut self, bytes: &[u8]) {
        self.to_client.write_all(bytes).await.expect("write");
    }

    async fn read_line(&mut self) -> String {
        let mut line = String::new();
        tokio::time::timeout(
            Duration::from_secs(5),
            self.from_client.read_line(&mut line),
        )
        .await
        .expect("the client wrote within 5 s")
        .expect("read");
        line
    }
}

fn call_tool(id: i64) -> TxJsonRpcMessage<RoleClient> {
    let params = CallToolRequestParams::new("_PreToolUse");
    TxJsonRpcMessage::<RoleClient>::request(
        ClientRequest::CallToolRequest(CallToolRequest::new(params)),
        RequestId::Number(id),
    )
}

fn list_tools(id: i64) -> TxJsonRpcMessage<RoleClient> {
    TxJsonRpcMessage::<RoleClient>::request(
        ClientRequest::ListToolsRequest(ListToolsRequest::default()),
        RequestId::Number(id),
    )
}

async fn receive(transport: &mut Pipes) -> Option<RxJsonRpcMessage<RoleClient>> {
    tokio::time::timeout(Duration::from_secs(5), transport.receive())
        .await
        .expect("a message or the end within 5 s")
}

/// What rmcp's own decoding makes of `line`, to compare with (its messages are compared as
/// JSON: rmcp's result types do not all implement `PartialEq`).
fn generic(line: &str) -> serde_json::Value {
    let message: RxJsonRpcMessage<RoleClient> =
        serde_json::from_str(line).expect("rmcp decodes it");
    serde_json::to_value(message).expect("encode")
}

fn json(message: &RxJsonRpcMessage<RoleClient>) -> serde_json::Value {
    serde_json::to_value(message).expect("encode")
}

fn result_of(message: RxJsonRpcMessage<RoleClient>) -> ServerResult {
    match message {
        JsonRpcMessage::Response(response) => response.result,
        other => panic!("expected an answer, got {other:?}"),
    }
}

const TOOL_ANSWER: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}],"isError":false}}"#;

#[tokio::test]
async fn answer_to_a_tool_call_is_the_message_rmcp_would_decode() {
    let (mut transport, mut server) = connect();
    transport.send(call_tool(1)).await.expect("send");
    server.read_line().await;
    server.write(format!("{TOOL_ANSWER}\n").as_bytes()).await;
    let message = receive(&mut transport).await.expect("a message");
    assert_eq!(json(&message), generic(TOOL_ANSWER));
    assert!(matches!(
        result_of(message),
        ServerResult::CallToolResult(_)
    ));
}

#[tokio::test]
async fn answer_whose_result_comes_before_its_id_decodes_as_the_expected_result() {
    let (mut transport, mut server) = connect();
    transport.send(list_tools(7)).await.expect("send");
    server.read_line().await;
    let line = r#"{"result":{"tools":[]},"id":7,"jsonrpc":"2.0"}"#;
    server.write(format!("{line}\n").as_bytes()).await;
    let message = receive(&mut transport).await.expect("a message");
    assert_eq!(json(&message), generic(line));
    assert!(matches!(
        result_of(message),
        ServerResult::ListToolsResult(_)
    ));
}

#[tokio::test]
async fn answer_to_an_unknown_id_is_passed_on_as_rmcp_decodes_it() {
    let (mut transport, mut server) = connect();
    transport.send(call_tool(1)).await.expect("send");
    server.read_line().await;
    let line = r#"{"jsonrpc":"2.0","id":99,"result":{"content":[]}}"#;
    server.write(format!("{line}\n").as_bytes()).await;
    let message = receive(&mut transport).await.expect("a message");
    assert_eq!(json(&message), generic(line));
}

#[tokio::test]
async fn input_required_answer_to_a_tool_call_stays_input_required() {
    let (mut transport, mut server) = connect();
    transport.send(call_tool(1)).await.expect("send");
    server.read_line().await;
    let line =
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","requestState":"s"}}"#;
    server.write(format!("{line}\n").as_bytes()).await;
    let message = receive(&mut transport).await.expect("a message");
    assert!(matches!(
        result_of(message),
        ServerResult::InputRequiredResult(_)
    ));
}

#[tokio::test]
async fn answer_of_the_wrong_result_type_becomes_an_error_naming_the_method() {
    let (mut transport, mut server) = connect();
    transport.send(call_tool(3)).await.expect("send");
    server.read_line().await;
    server
        .write(b"{\"jsonrpc\":\"2.0\",\"id\":3,\"result\":{\"tools\":[]}}\n")
        .await;
    match receive(&mut transport).await.expect("a message") {
        JsonRpcMessage::Error(error) => {
            assert_eq!(error.id, Some(RequestId::Number(3)));
            assert!(
                error
                    .error
                    .message
                    .contains("answer to tools/call is not a tools/call result"),
                "{}",
                error.error.message
            );
        }
        other => panic!("expected an error, got {other:?}"),
    }
}

#[tokio::test]
async fn line_that_is_not_json_is_skipped_and_the_next_one_read() {
    let (mut transport, mut server) = connect();
    transport.send(call_tool(1)).await.expect("send");
    server.read_line().await;
    server
        .write(format!("this is not json\n\r\n\n{TOOL_ANSWER}\n").as_bytes())
        .await;
    let message = receive(&mut transport).await.expect("a message");
    assert_eq!(json(&message), generic(TOOL_ANSWER));
}

#[tokio::test]
async fn two_messages_on_one_line_are_dropped_like_any_line_that_is_not_one_json_value() {
    let (mut transport, mut server) = connect();
    transport.send(call_tool(1)).await.expect("send");
    server.read_line().await;
    let two = r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}"#;
    server
        .write(format!("{two}{two}\n{TOOL_ANSWER}\n").as_bytes())
        .await;
    let message = receive(&mut transport).await.expect("a message");
    assert_eq!(json(&message), generic(TOOL_ANSWER));
}

#[tokio::test]
async fn json_that_is_no_message_is_answered_with_invalid_request() {
    let (mut transport, mut server) = connect();
    server.write(b"{\"hello\":1}\n").await;
    server.write(format!("{TOOL_ANSWER}\n").as_bytes()).await;
    receive(&mut transport).await.expect("the line after it");
    let reply: serde_json::Value =
        serde_json::from_str(&server.read_line().await).expect("the reply is JSON");
    assert_eq!(reply["error"]["code"], -32600, "{reply}");
    assert_eq!(reply["id"], serde_json::Value::Null, "{reply}");
}

#[tokio::test]
async fn two_messages_in_one_write_are_both_received() {
    let (mut transport, mut server) = connect();
    transport.send(call_tool(1)).await.expect("send");
    transport.send(call_tool(2)).await.expect("send");
    let second = TOOL_ANSWER.replace("\"id\":1", "\"id\":2");
    server
        .write(format!("{TOOL_ANSWER}\n{second}\n").as_bytes())
        .await;
    assert_eq!(
        json(&receive(&mut transport).await.expect("first")),
        generic(TOOL_ANSWER)
    );
    assert_eq!(
        json(&receive(&mut transport).await.expect("second")),
        generic(&second)
    );
}

/// A reader that hands over each chunk it is sent as one read of its own, and is pending in
/// between: what a pipe does when the writer's pieces arrive apart, made certain.
struct Chunks {
    chunks: tokio::sync::mpsc::UnboundedReceiver<Vec<u8>>,
    reads: usize,
}

impl tokio::io::AsyncRead for Chunks {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.chunks.poll_recv(cx) {
            std::task::Poll::Ready(Some(chunk)) => {
                assert!(chunk.len() <= buf.remaining(), "the reader asks for more");
                buf.put_slice(&chunk);
                self.reads += 1;
                std::task::Poll::Ready(Ok(()))
            }
            // The end of the stream.
            std::task::Poll::Ready(None) => std::task::Poll::Ready(Ok(())),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

#[tokio::test]
async fn message_split_across_writes_is_received_whole() {
    use futures_util::FutureExt;

    let (send, chunks) = tokio::sync::mpsc::unbounded_channel();
    let mut transport = LineTransport::new(Chunks { chunks, reads: 0 }, tokio::io::sink());
    transport.send(call_tool(1)).await.expect("send");
    let (head, tail) = TOOL_ANSWER.split_at(30);
    send.send(head.as_bytes().to_vec()).expect("send");
    // The head is read and kept; no message comes of it alone.
    assert!(transport.receive().now_or_never().is_none());
    assert_eq!(transport.reader.reads, 1, "the head was read");
    send.send(format!("{tail}\n").into_bytes()).expect("send");
    let message = tokio::time::timeout(Duration::from_secs(5), transport.receive())
        .await
        .expect("a message within 5 s");
    assert_eq!(transport.reader.reads, 2, "the tail was read apart");
    assert_eq!(json(&message.expect("a message")), generic(TOOL_ANSWER));
}

#[tokio::test]
async fn over_long_line_is_dropped_without_being_buffered_and_the_next_one_read() {
    let max = 1024;
    let (transport, mut server) = connect();
    let mut transport = transport.with_max_line(max);
    transport.send(call_tool(1)).await.expect("send");
    let reading = tokio::spawn(async move {
        let message = receive(&mut transport).await;
        (transport, message)
    });
    // Far past the cap, in many writes, before its newline.
    let chunk = vec![b'x'; 4096];
    for _ in 0..64 {
        server.write(&chunk).await;
    }
    server.write(format!("\n{TOOL_ANSWER}\n").as_bytes()).await;
    let (transport, message) = reading.await.expect("join");
    assert_eq!(json(&message.expect("a message")), generic(TOOL_ANSWER));
    assert!(
        transport.buf.capacity() <= max + 2 * READ_CHUNK,
        "the buffer grew to {} bytes",
        transport.buf.capacity()
    );
}

#[tokio::test]
async fn end_of_stream_ends_receiving_and_drops_an_unterminated_last_line() {
    let (mut transport, mut server) = connect();
    server.write(TOOL_ANSWER.as_bytes()).await;
    drop(server);
    assert!(receive(&mut transport).await.is_none());
}

#[tokio::test]
async fn messages_go_out_as_rmcp_encodes_them_one_per_line() {
    let (mut transport, mut server) = connect();
    // Queued together, written in one batch.
    let first = transport.send(call_tool(1));
    let second = transport.send(list_tools(2));
    let (a, b) = tokio::join!(first, second);
    a.expect("first");
    b.expect("second");
    for expected in [call_tool(1), list_tools(2)] {
        let mut encoded = serde_json::to_string(&expected).expect("encode");
        encoded.push('\n');
        assert_eq!(server.read_line().await, encoded);
    }
}

#[tokio::test]
async fn sending_after_close_fails() {
    let (mut transport, _server) = connect();
    transport.close().await.expect("close");
    assert!(transport.send(call_tool(1)).await.is_err());
}

#[test]
fn cancelled_and_answered_requests_are_forgotten_and_the_map_is_bounded() {
    let mut expected = Expected::default();
    let request =
        ClientRequest::CallToolRequest(CallToolRequest::new(CallToolRequestParams::new("t")));
    for id in 0..(MAX_EXPECTED as i64 * 3) {
        expected.insert(&RequestId::Number(id), &request);
    }
    assert!(expected.0.len() <= MAX_EXPECTED);
    expected.remove(&RequestId::Number(MAX_EXPECTED as i64 * 3 - 1));
    assert_eq!(
        expected.get(&RequestId::Number(MAX_EXPECTED as i64 * 3 - 1)),
        None
    );
}

#[tokio::test]
async fn a_cancelled_request_is_no_longer_expected() {
    let (mut transport, mut server) = connect();
    transport.send(call_tool(5)).await.expect("send");
    let cancel = TxJsonRpcMessage::<RoleClient>::notification(
        ClientNotification::CancelledNotification(CancelledNotification::new(
            CancelledNotificationParam::new(Some(RequestId::Number(5)), None),
        )),
    );
    transport.send(cancel).await.expect("send");
    server.read_line().await;
    server.read_line().await;
    assert_eq!(transport.expected.get(&RequestId::Number(5)), None);
}

fn roots_request(id: u64) -> String {
    format!("{{\"jsonrpc\":\"2.0\",\"id\":\"h{id}\",\"method\":\"roots/list\"}}\n")
}

/// The id of the `n`th request of a [`roots_request`] flood.
fn roots_id(n: usize) -> RequestId {
    RequestId::String(format!("h{n}").into())
}

/// The id of the next message, which must be a request of the server's.
async fn next_request_id(transport: &mut Pipes) -> RequestId {
    let message = receive(transport).await.expect("a request");
    let JsonRpcMessage::Request(request) = message else {
        panic!("not a request: {message:?}");
    };
    request.id
}

/// The client's empty answer to the server's request `id`.
fn empty_answer(id: RequestId) -> TxJsonRpcMessage<RoleClient> {
    TxJsonRpcMessage::<RoleClient>::response(rmcp::model::ClientResult::empty(()), id)
}

#[tokio::test]
async fn a_server_that_asks_faster_than_it_is_answered_is_read_no_further_until_answers_go_out() {
    let (mut transport, mut server) = connect();
    let flood: String = (0..MAX_SERVING as u64 + 8).map(roots_request).collect();
    server.write(flood.as_bytes()).await;
    for _ in 0..MAX_SERVING {
        let message = receive(&mut transport).await.expect("a request");
        assert!(matches!(message, JsonRpcMessage::Request(_)), "{message:?}");
    }
    // Every place is taken: nothing more is read, however much the server has written.
    let held = tokio::time::timeout(Duration::from_millis(200), transport.receive()).await;
    assert!(held.is_err(), "read past {MAX_SERVING} unanswered requests");

    // One answer frees one place.
    transport
        .send(empty_answer(roots_id(0)))
        .await
        .expect("answer");
    assert_eq!(next_request_id(&mut transport).await, roots_id(MAX_SERVING));
    let held = tokio::time::timeout(Duration::from_millis(200), transport.receive()).await;
    assert!(held.is_err(), "read past the freed place");

    drop(transport);
}

#[tokio::test]
async fn a_request_the_server_cancels_frees_its_place() {
    let (mut transport, mut server) = connect();
    let cancel = "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/cancelled\",\"params\":{\"requestId\":\"h1\"}}\n";
    let flood: String = (0..MAX_SERVING as u64 - 1)
        .map(roots_request)
        .chain(std::iter::once(cancel.to_owned()))
        .chain((1000..1003).map(roots_request))
        .collect();
    server.write(flood.as_bytes()).await;
    for _ in 0..MAX_SERVING - 1 {
        let message = receive(&mut transport).await.expect("a request");
        assert!(matches!(message, JsonRpcMessage::Request(_)), "{message:?}");
    }
    let cancelled = receive(&mut transport).await.expect("the cancel");
    assert!(
        matches!(cancelled, JsonRpcMessage::Notification(_)),
        "{cancelled:?}"
    );
    // The cancelled request will never be answered: its place and the last free one.
    for _ in 0..2 {
        let message = receive(&mut transport).await.expect("a request");
        assert!(matches!(message, JsonRpcMessage::Request(_)), "{message:?}");
    }
    let held = tokio::time::timeout(Duration::from_millis(200), transport.receive()).await;
    assert!(held.is_err(), "read past {MAX_SERVING} unanswered requests");
}

#[tokio::test]
async fn answers_a_server_does_not_read_keep_their_places_until_written() {
    let (mut transport, mut server) = connect();
    // A request larger than the pipe holds: its write waits until the server reads, and every
    // answer queued after it waits with it.
    let mut arguments = serde_json::Map::new();
    arguments.insert("pad".into(), "p".repeat(1024 * 1024).into());
    let params = CallToolRequestParams::new("big").with_arguments(arguments);
    let big = TxJsonRpcMessage::<RoleClient>::request(
        ClientRequest::CallToolRequest(CallToolRequest::new(params)),
        RequestId::Number(1),
    );
    let mut writes = tokio::task::JoinSet::new();
    writes.spawn(transport.send(big));
    let flood: String = (0..MAX_SERVING as u64 + 8).map(roots_request).collect();
    server.write(flood.as_bytes()).await;
    // Each request is answered at once, as rmcp's client does, by a task that writes it.
    for n in 0..MAX_SERVING {
        let id = next_request_id(&mut transport).await;
        assert_eq!(id, roots_id(n));
        writes.spawn(transport.send(empty_answer(id)));
    }
    // Answered, but none written: the places are still taken.
    let held = tokio::time::timeout(Duration::from_millis(200), transport.receive()).await;
    assert!(
        held.is_err(),
        "read past {MAX_SERVING} answers that were not written"
    );

    // The server reads: the writes end, and the next request is read.
    let reader = tokio::spawn(async move {
        for _ in 0..=MAX_SERVING {
            server.read_line().await;
        }
        server
    });
    while let Some(written) = writes.join_next().await {
        written.expect("join").expect("written");
    }
    assert_eq!(next_request_id(&mut transport).await, roots_id(MAX_SERVING));
    drop(reader.await.expect("reader"));
}
