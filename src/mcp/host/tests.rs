//! The host over rmcp's in-memory duplex transport: fast checks of the catalog, hook calls,
//! `list_changed`, cancellation and supervision, with a server in this process.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CancelledNotificationParam,
    ContentBlock, ErrorData, InitializeRequestParams, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::{NotificationContext, RequestContext, RoleServer};
use rmcp::{ServerHandler, ServiceExt};
use serde_json::{Value, json};

use super::*;
use crate::machine::HookContext;

/// A server with tools `echo`, `announce` (adds `later` and says `list_changed`), a
/// `bad name` tool, and a `_Stop` that answers from `stop` (`hang` waits for cancellation).
#[derive(Clone, Default)]
struct Probe {
    stop: Arc<Mutex<Vec<&'static str>>>,
    announced: Arc<AtomicBool>,
    cancelled: Arc<AtomicUsize>,
    metas: Arc<Mutex<Vec<Value>>>,
    lives: Arc<AtomicUsize>,
    /// Refuses `initialize`, as a server of the discovery revision only does.
    discovery_only: bool,
}

impl ServerHandler for Probe {
    async fn initialize(
        &self,
        request: InitializeRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<InitializeResult, ErrorData> {
        if self.discovery_only {
            return Err(ErrorData::invalid_request(
                "this server speaks discovery only",
                None,
            ));
        }
        context.peer.set_peer_info(request.clone());
        self.negotiate_initialize(&request)
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        let mut names = vec!["echo", "announce", "bad name", "_Stop"];
        if self.announced.load(Ordering::SeqCst) {
            names.push("later");
        }
        let schema = Arc::new(JsonObject::new());
        Ok(ListToolsResult::with_all_items(
            names
                .into_iter()
                .map(|n| Tool::new(n, "probe tool", Arc::clone(&schema)))
                .collect(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let text = match request.name.as_ref() {
            "_Stop" => {
                let hookloop: serde_json::Map<String, Value> = context
                    .meta
                    .0
                    .0
                    .iter()
                    .filter(|(k, _)| k.starts_with("hookloop/"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                lock(&self.metas).push(Value::Object(hookloop));
                let step = lock(&self.stop).pop().unwrap_or("");
                if step == "hang" {
                    context.ct.cancelled().await;
                    return Err(ErrorData::internal_error("cancelled", None));
                }
                step.to_owned()
            }
            "announce" => {
                self.announced.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                "announced".to_owned()
            }
            _ => Value::Object(request.arguments.unwrap_or_default()).to_string(),
        };
        Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
    }

    async fn on_cancelled(
        &self,
        _notification: CancelledNotificationParam,
        _context: NotificationContext<RoleServer>,
    ) {
        self.cancelled.fetch_add(1, Ordering::SeqCst);
    }
}

fn serve(probe: &Probe) -> MakeDuplex {
    let probe = probe.clone();
    Box::new(move || {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let probe = probe.clone();
        probe.lives.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            if let Ok(running) = probe.serve(server).await {
                let _ = running.waiting().await;
            }
        });
        client
    })
}

/// Like [`serve`], but in the server's first life its first answer (to the discovery) reaches
/// the client only after `delay`: a server slow to start, or an authorization on the way.
fn serve_first_answer_late(probe: &Probe, delay: Duration) -> MakeDuplex {
    let probe = probe.clone();
    let first_life = Arc::new(AtomicBool::new(true));
    Box::new(move || {
        let (client, relay) = tokio::io::duplex(64 * 1024);
        let (relay_server, server) = tokio::io::duplex(64 * 1024);
        let late = first_life.swap(false, Ordering::SeqCst);
        let probe = probe.clone();
        probe.lives.fetch_add(1, Ordering::SeqCst);
        tokio::spawn(async move {
            if let Ok(running) = probe.serve(server).await {
                let _ = running.waiting().await;
            }
        });
        tokio::spawn(async move {
            use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
            let (mut from_client, mut to_client) = tokio::io::split(relay);
            let (from_server, mut to_server) = tokio::io::split(relay_server);
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut from_client, &mut to_server).await;
            });
            let mut lines = tokio::io::BufReader::new(from_server).lines();
            let mut delayed = late;
            while let Ok(Some(line)) = lines.next_line().await {
                if std::mem::take(&mut delayed) {
                    tokio::time::sleep(delay).await;
                }
                if to_client
                    .write_all(format!("{line}\n").as_bytes())
                    .await
                    .is_err()
                {
                    break;
                }
            }
        });
        client
    })
}

fn options() -> HostOptions {
    HostOptions {
        session_id: "sess".into(),
        restart_backoff: Duration::from_millis(1),
        ..HostOptions::default()
    }
}

fn stop_call(timeout_ms: u64) -> HookCall {
    HookCall {
        server: ServerName::new("p").unwrap(),
        hook: Hook::Stop,
        timeout: Duration::from_millis(timeout_ms),
        context: HookContext {
            objections_so_far: 1,
            budget_left: 2,
            compactions: 0,
            agent: None,
        },
        arguments: serde_json::Map::new(),
    }
}

async fn eventually(mut condition: impl FnMut() -> bool) -> bool {
    for _ in 0..250 {
        if condition() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test]
async fn the_catalog_keeps_hooks_and_skips_bad_names() {
    let probe = Probe::default();
    let (host, failures) = McpHost::duplex(vec![("p", serve(&probe))], options())
        .await
        .unwrap();
    assert!(failures.is_empty());
    let catalog = host.catalog();
    let names: Vec<_> = catalog.servers[0]
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(names, ["echo", "announce", "_Stop"]);
}

/// rmcp's probe gives discovery 10 s and then sends `initialize` on the same connection; the
/// late answer to the discovery is a conflict. A server of the discovery revision only (as
/// the conformance suite's 2026-07-28 servers are) refuses a fallback `initialize`: the host
/// asks it again by discovery and the server starts.
#[tokio::test(start_paused = true)]
async fn a_server_that_answers_discovery_late_is_asked_again_by_discovery() {
    let probe = Probe {
        discovery_only: true,
        ..Probe::default()
    };
    let slow = serve_first_answer_late(&probe, Duration::from_secs(11));
    let (host, failures) = McpHost::duplex(vec![("p", slow)], options()).await.unwrap();
    assert!(failures.is_empty(), "{failures:?}");
    assert_eq!(probe.lives.load(Ordering::SeqCst), 2);
    let names: Vec<_> = host.catalog().servers[0]
        .tools
        .iter()
        .map(|t| t.name.clone())
        .collect();
    assert_eq!(names, ["echo", "announce", "_Stop"]);
}

#[tokio::test]
async fn hook_calls_send_meta_and_map_answers() {
    let probe = Probe::default();
    lock(&probe.stop).push("2 open");
    let (host, _) = McpHost::duplex(vec![("p", serve(&probe))], options())
        .await
        .unwrap();
    assert_eq!(
        host.call_hook(&stop_call(2000)).await,
        HookReply::Text {
            text: "2 open".into()
        }
    );
    assert_eq!(
        lock(&probe.metas)[0],
        json!({"hookloop/session": "sess",
               "hookloop/hook": {"name": "_Stop", "objectionsSoFar": 1, "budgetLeft": 2}})
    );
}

#[tokio::test]
async fn a_hook_for_a_server_the_host_lacks_fails_as_no_such_server() {
    let probe = Probe::default();
    let (host, _) = McpHost::duplex(vec![("p", serve(&probe))], options())
        .await
        .unwrap();
    let mut call = stop_call(2000);
    call.server = ServerName::new("q").unwrap();
    match host.call_hook(&call).await {
        HookReply::Failed {
            error: HookFault::NoSuchServer { server },
        } => assert_eq!(server.as_str(), "q"),
        other => panic!("{other:?}"),
    }
    assert!(lock(&probe.metas).is_empty(), "no server was asked");
}

#[tokio::test]
async fn a_timed_out_hook_is_cancelled_on_the_server() {
    let probe = Probe::default();
    lock(&probe.stop).push("hang");
    let (host, _) = McpHost::duplex(vec![("p", serve(&probe))], options())
        .await
        .unwrap();
    // The timeout is the driver's round's: at the deadline it drops the host's call.
    let order = crate::driver::HookOrder {
        hook: Hook::Stop,
        servers: vec![ServerName::new("p").unwrap()],
        timeout: Duration::from_millis(100),
        context: HookContext::default(),
        subjects: Vec::new(),
    };
    let mut timer = crate::driver::HookTimer::default();
    let span = tracing::Span::none();
    let mut round = crate::driver::Round::start(&host, &order, &span, &mut timer);
    assert!(matches!(
        round.next().await,
        Some(crate::machine::Input::HookAnswered {
            reply: HookReply::TimedOut,
            ..
        })
    ));
    assert!(eventually(|| probe.cancelled.load(Ordering::SeqCst) == 1).await);
}

#[tokio::test]
async fn list_changed_refreshes_the_catalog() {
    let probe = Probe::default();
    let (host, _) = McpHost::duplex(vec![("p", serve(&probe))], options())
        .await
        .unwrap();
    let before = host.catalog_generation();
    let output = host
        .call_tool(&ToolCall {
            id: "1".into(),
            name: "p__announce".into(),
            arguments: json!({}),
        })
        .await;
    assert!(!output.is_error, "{output:?}");
    assert!(eventually(|| host.catalog_generation() != before).await);
    assert!(
        host.catalog().servers[0]
            .tools
            .iter()
            .any(|t| t.name == "later")
    );
}

#[tokio::test]
async fn killed_servers_restart_until_the_budget_is_spent() {
    let probe = Probe::default();
    let (host, _) = McpHost::duplex(
        vec![("p", serve(&probe))],
        HostOptions {
            restart_budget: 2,
            ..options()
        },
    )
    .await
    .unwrap();
    let server = ServerName::new("p").unwrap();
    let echo = ToolCall {
        id: "1".into(),
        name: "p__echo".into(),
        arguments: json!({"x": 1}),
    };
    for life in 2..=3 {
        host.kill_server(&server).await;
        assert_eq!(host.call_tool(&echo).await.joined_text(), r#"{"x":1}"#);
        assert_eq!(probe.lives.load(Ordering::SeqCst), life);
    }
    let before = host.catalog_generation();
    host.kill_server(&server).await;
    assert_ne!(host.catalog_generation(), before);
    assert!(host.catalog().servers.is_empty());
    assert!(host.call_tool(&echo).await.is_error);
    assert_eq!(
        host.call_hook(&stop_call(1000)).await,
        HookReply::Skipped {
            reason: "it ran out of restarts".into()
        }
    );
    assert_eq!(probe.lives.load(Ordering::SeqCst), 3);
    // Every decision went through the supervisor, and was recorded.
    let orders: Vec<_> = host
        .take_supervision()
        .into_iter()
        .filter_map(|event| match event {
            supervisor::Event::Order(order) => Some(order),
            supervisor::Event::Fact(_) => None,
        })
        .collect();
    assert!(matches!(
        orders.as_slice(),
        [
            supervisor::Order::StartServer { .. },
            supervisor::Order::StartServer { .. },
            supervisor::Order::RetireServer { bad_ends: 3, .. }
        ]
    ));
}

#[tokio::test]
async fn a_server_between_lives_sits_a_hook_round_out() {
    let probe = Probe::default();
    lock(&probe.stop).push("2 open");
    let (host, _) = McpHost::duplex(
        vec![("p", serve(&probe))],
        HostOptions {
            restart_backoff: Duration::from_secs(2),
            ..options()
        },
    )
    .await
    .unwrap();
    host.kill_server(&ServerName::new("p").unwrap()).await;
    let started = Instant::now();
    assert_eq!(
        host.call_hook(&stop_call(5000)).await,
        HookReply::Skipped {
            reason: "it is restarting".into()
        }
    );
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "no wait for the restart"
    );
    assert_eq!(probe.lives.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn tool_arguments_must_be_an_object() {
    let probe = Probe::default();
    let (host, _) = McpHost::duplex(vec![("p", serve(&probe))], options())
        .await
        .unwrap();
    let call = |arguments: Value| ToolCall {
        id: "1".into(),
        name: "p__echo".into(),
        arguments,
    };
    let output = host.call_tool(&call(json!("{not json"))).await;
    assert!(output.is_error);
    assert!(output.joined_text().contains("must be a JSON object"));
    let output = host.call_tool(&call(json!([1]))).await;
    assert!(output.joined_text().contains("got an array"), "{output:?}");
    assert_eq!(host.call_tool(&call(Value::Null)).await.joined_text(), "{}");
    let unknown = host
        .call_tool(&ToolCall {
            id: "1".into(),
            name: "p__nope".into(),
            arguments: json!({}),
        })
        .await;
    assert!(unknown.is_error && unknown.joined_text().contains("unknown tool"));
}
