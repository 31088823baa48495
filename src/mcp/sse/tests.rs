use super::*;

#[test]
fn an_endpoint_resolves_against_the_stream_url() {
    let url = Url::parse("https://mcp.example.test/v1/sse?x=1").unwrap();
    for (data, expected) in [
        (
            "/messages/?session_id=abc",
            "https://mcp.example.test/messages/?session_id=abc",
        ),
        (
            "message?sessionId=1",
            "https://mcp.example.test/v1/message?sessionId=1",
        ),
        (
            " https://mcp.example.test:443/m \n",
            "https://mcp.example.test/m",
        ),
    ] {
        assert_eq!(endpoint(&url, data).unwrap().as_str(), expected, "{data}");
    }
}

#[test]
fn an_endpoint_on_another_origin_is_refused() {
    let url = Url::parse("http://127.0.0.1:8080/sse").unwrap();
    for data in [
        "http://127.0.0.2:8080/messages",
        "//evil.test/messages",
        "https://127.0.0.1:8080/messages",
        "http://127.0.0.1:8081/messages",
        "http://localhost:8080/messages",
    ] {
        let error = endpoint(&url, data).unwrap_err();
        assert!(
            matches!(error, SseError::CrossOrigin { .. }),
            "{data}: {error}"
        );
        assert!(error.to_string().contains("another origin"), "{error}");
    }
    assert!(matches!(
        endpoint(&url, "http://[::1"),
        Err(SseError::BadEndpoint { .. })
    ));
}

#[test]
fn the_stream_content_type_may_carry_parameters() {
    assert!(is_event_stream("text/event-stream"));
    assert!(is_event_stream("Text/Event-Stream; charset=utf-8"));
    assert!(!is_event_stream("application/json"));
    assert!(!is_event_stream("text/event-streamx"));
}

#[test]
fn a_challenge_scope_is_read_quoted_or_not() {
    assert_eq!(
        challenge_scope(r#"Bearer error="insufficient_scope", scope="files:read files:write""#)
            .as_deref(),
        Some("files:read files:write")
    );
    assert_eq!(
        challenge_scope("Bearer scope=read, realm=x").as_deref(),
        Some("read")
    );
    assert_eq!(challenge_scope(r#"Bearer realm="x""#), None);
    assert_eq!(challenge_scope(r#"Bearer scope=""#), None);
}

#[tokio::test]
async fn posts_keep_the_order_their_messages_were_sent_in_even_when_one_is_dropped() {
    let order = Arc::new(Order::default());
    let (first, dropped, third) = (order.take(), order.take(), order.take());
    let done = Arc::new(Mutex::new(Vec::new()));
    let later = {
        let done = Arc::clone(&done);
        tokio::spawn(async move {
            third.wait().await;
            lock(&done).push(3);
        })
    };
    // The third waits for the first; the second gives up its turn without posting.
    tokio::task::yield_now().await;
    assert!(lock(&done).is_empty());
    drop(dropped);
    tokio::task::yield_now().await;
    assert!(lock(&done).is_empty(), "the third went before the first");
    first.wait().await;
    lock(&done).push(1);
    drop(first);
    later.await.unwrap();
    assert_eq!(*lock(&done), [1, 3]);
}
