//! What a server asks of the client, against real test-server processes on both protocol
//! generations (server requests before 2026-07-28, `input_required` rounds from it on):
//! elicitation reaches the person (never for a hook), roots list the session's directory, and
//! app-only tools stay out of the catalog.

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hookloop::machine::{HookContext, HookReply, ToolCall};
use hookloop::mcp::{McpHost, ServerConfig};
use hookloop::ports::{
    Answer, ElicitAnswer, Elicitation, ElicitationMode, HookCall, Person, ToolHost,
};
use hookloop::{Hook, ServerName};
use serde_json::{Value, json};

use common::{HttpServer, Scratch, connect, eventually, fast_options, lines, test_server};

/// A person who gives one answer to every question and remembers the questions.
#[derive(Clone)]
struct Scripted {
    answer: ElicitAnswer,
    asked: Arc<Mutex<Vec<Elicitation>>>,
}

impl Scripted {
    fn new(answer: ElicitAnswer) -> Self {
        Self {
            answer,
            asked: Arc::default(),
        }
    }

    fn asked(&self) -> Vec<Elicitation> {
        self.asked.lock().unwrap().clone()
    }
}

impl Person for Scripted {
    fn elicit(&self, question: Elicitation) -> Answer<'_> {
        self.asked.lock().unwrap().push(question);
        Box::pin(std::future::ready(self.answer.clone()))
    }
}

fn accept(content: Value) -> ElicitAnswer {
    let Value::Object(content) = content else {
        panic!("content must be an object")
    };
    ElicitAnswer::Accept(content)
}

fn call(name: &str) -> ToolCall {
    ToolCall {
        id: "c1".into(),
        name: name.into(),
        arguments: json!({}),
    }
}

fn stop_hook(server: &str) -> HookCall {
    HookCall {
        server: ServerName::new(server).unwrap(),
        hook: Hook::Stop,
        timeout: Duration::from_secs(10),
        context: HookContext::default(),
        arguments: serde_json::Map::new(),
    }
}

/// The test server's variables for one protocol generation.
fn generation(legacy: bool) -> Vec<(&'static str, &'static str)> {
    if legacy {
        vec![("TS_LEGACY", "1")]
    } else {
        Vec::new()
    }
}

async fn host_with(vars: &[(&str, &str)], person: Option<Scripted>) -> McpHost {
    let host = connect(vec![("srv", test_server(vars))], fast_options()).await;
    if let Some(person) = person {
        host.set_person(Arc::new(person));
    }
    host
}

async fn form_question_reaches_the_person(legacy: bool) {
    let person = Scripted::new(accept(json!({"name": "Grace"})));
    let host = host_with(&generation(legacy), Some(person.clone())).await;
    let output = host.call_tool(&call("srv__ask")).await;
    assert_eq!(output.joined_text(), r#"accept {"name":"Grace"}"#);
    let asked = person.asked();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0].server.as_str(), "srv");
    assert_eq!(asked[0].message, "What is your name?");
    let ElicitationMode::Form { schema } = &asked[0].mode else {
        panic!("a form question, got {:?}", asked[0].mode)
    };
    assert_eq!(schema["properties"]["name"]["default"], "Ada");
}

#[tokio::test]
async fn a_tools_form_question_reaches_the_person_in_an_input_required_round() {
    form_question_reaches_the_person(false).await;
}

#[tokio::test]
async fn a_tools_form_question_reaches_the_person_as_a_server_request() {
    form_question_reaches_the_person(true).await;
}

#[tokio::test]
async fn a_form_question_over_streamable_http_reaches_the_person() {
    for legacy in [true, false] {
        let server = HttpServer::start(&generation(legacy));
        let person = Scripted::new(accept(json!({"name": "Lin"})));
        let host = connect(
            vec![("web", ServerConfig::http(&server.url))],
            fast_options(),
        )
        .await;
        host.set_person(Arc::new(person.clone()));
        let output = host.call_tool(&call("web__ask")).await;
        assert_eq!(
            output.joined_text(),
            r#"accept {"name":"Lin"}"#,
            "legacy: {legacy}"
        );
        assert_eq!(person.asked().len(), 1);
    }
}

#[tokio::test]
async fn a_url_question_reaches_the_person_with_its_url() {
    for legacy in [true, false] {
        let person = Scripted::new(ElicitAnswer::Accept(serde_json::Map::new()));
        let host = host_with(&generation(legacy), Some(person.clone())).await;
        let output = host.call_tool(&call("srv__ask_url")).await;
        assert_eq!(output.joined_text(), "accept", "legacy: {legacy}");
        let asked = person.asked();
        let ElicitationMode::Url { url, .. } = &asked[0].mode else {
            panic!("a URL question, got {:?}", asked[0].mode)
        };
        assert_eq!(url, "https://example.invalid/sign-in");
        assert_eq!(asked[0].message, "Sign in to the test service");
    }
}

#[tokio::test]
async fn a_url_question_a_browser_must_not_open_is_declined_without_reaching_the_person() {
    for url in [
        "file:///etc/passwd",
        "steam://run/1",
        "javascript:alert(1)",
        "http://example.com/sign-in",
    ] {
        for legacy in [true, false] {
            let person = Scripted::new(ElicitAnswer::Accept(serde_json::Map::new()));
            let mut vars = generation(legacy);
            vars.push(("TS_ASK_URL", url));
            let host = host_with(&vars, Some(person.clone())).await;
            let output = host.call_tool(&call("srv__ask_url")).await;
            assert_eq!(output.joined_text(), "decline", "{url}, legacy: {legacy}");
            assert!(person.asked().is_empty(), "{url} reached the person");
        }
    }
    // http to this machine is a page a person may be sent to.
    let person = Scripted::new(ElicitAnswer::Accept(serde_json::Map::new()));
    let host = host_with(
        &[("TS_ASK_URL", "http://127.0.0.1:9/sign-in")],
        Some(person.clone()),
    )
    .await;
    assert_eq!(
        host.call_tool(&call("srv__ask_url")).await.joined_text(),
        "accept"
    );
    assert_eq!(person.asked().len(), 1);
}

#[tokio::test]
async fn the_persons_decline_and_cancel_reach_the_server() {
    for (answer, said) in [
        (ElicitAnswer::Decline, "decline"),
        (ElicitAnswer::Cancel, "cancel"),
    ] {
        let host = host_with(&[], Some(Scripted::new(answer))).await;
        assert_eq!(host.call_tool(&call("srv__ask")).await.joined_text(), said);
    }
}

#[tokio::test]
async fn without_a_person_every_question_is_declined() {
    for legacy in [true, false] {
        let host = host_with(&generation(legacy), None).await;
        let output = host.call_tool(&call("srv__ask")).await;
        assert_eq!(output.joined_text(), "decline", "legacy: {legacy}");
    }
}

#[tokio::test]
async fn a_hook_that_asks_is_declined_without_asking_the_person() {
    for legacy in [true, false] {
        let person = Scripted::new(accept(json!({"name": "Grace"})));
        let mut vars = generation(legacy);
        vars.extend([("TS_HOOKS", "_Stop"), ("TS_STOP", "ask")]);
        let host = host_with(&vars, Some(person.clone())).await;
        let reply = host.call_hook(&stop_hook("srv")).await;
        assert_eq!(
            reply,
            HookReply::Text {
                text: "decline".into()
            },
            "legacy: {legacy}"
        );
        assert!(person.asked().is_empty(), "legacy: {legacy}");
        // The same server's tool still reaches the person once the hook is over.
        let output = host.call_tool(&call("srv__ask")).await;
        assert_eq!(output.joined_text(), r#"accept {"name":"Grace"}"#);
    }
}

#[tokio::test]
async fn roots_list_the_sessions_directory_and_a_change_is_announced() {
    for legacy in [true, false] {
        let dir = Scratch::new("roots");
        let log = dir.file("log");
        let first = dir.path().join("my project");
        let mut vars = generation(legacy);
        vars.push(("TS_LOG", &log));
        let options = fast_options().with_roots([first.clone()]);
        let host = connect(vec![("srv", test_server(&vars))], options).await;
        let listed = host.call_tool(&call("srv__roots")).await.joined_text();
        assert_eq!(listed, file_uri(&first), "legacy: {legacy}");

        let second = dir.path().join("other");
        host.set_roots(vec![second.clone()]).await;
        assert!(
            eventually(Duration::from_secs(5), || lines(&log)
                .contains(&"roots_changed".to_owned()))
            .await,
            "legacy: {legacy}: {:?}",
            lines(&log)
        );
        let listed = host.call_tool(&call("srv__roots")).await.joined_text();
        assert_eq!(listed, file_uri(&second), "legacy: {legacy}");
    }
}

/// The URI a root at `path` (ASCII, spaces at most) is listed under.
fn file_uri(path: &std::path::Path) -> String {
    format!("file://{}", path.display()).replace(' ', "%20")
}

#[tokio::test]
async fn setting_the_same_roots_again_announces_nothing() {
    let dir = Scratch::new("roots-same");
    let log = dir.file("log");
    let root = PathBuf::from("/work/here");
    let options = fast_options().with_roots([root.clone()]);
    let host = connect(
        vec![("srv", test_server(&[("TS_LEGACY", "1"), ("TS_LOG", &log)]))],
        options,
    )
    .await;
    host.set_roots(vec![root]).await;
    // A call after the (absent) notification: the server has read everything sent before it.
    host.call_tool(&call("srv__echo")).await;
    assert!(!lines(&log).contains(&"roots_changed".to_owned()));
}

#[tokio::test]
async fn an_app_only_tool_is_kept_from_the_catalog_and_refused() {
    let host = host_with(&[], None).await;
    let catalog = host.catalog();
    let names: Vec<&str> = catalog.servers[0]
        .tools
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert!(names.contains(&"ask"), "{names:?}");
    assert!(!names.contains(&"app_only"), "{names:?}");
    let output = host.call_tool(&call("srv__app_only")).await;
    assert!(output.is_error, "{output:?}");
}

#[tokio::test]
async fn a_tools_question_reaches_the_person_while_a_hook_of_its_server_runs() {
    // In an `input_required` round the host knows which call asked, so a hook in flight on
    // the same server does not take the tool's question from the person.
    let person = Scripted::new(accept(json!({"name": "Grace"})));
    let dir = Scratch::new("elicit-during-hook");
    let log = dir.file("log");
    let vars = [
        ("TS_HOOKS", "_Stop"),
        ("TS_STOP", "slow:1500:done"),
        ("TS_LOG", &log),
    ];
    let host = host_with(&vars, Some(person.clone())).await;
    let hook = stop_hook("srv");
    let (reply, output) = tokio::join!(host.call_hook(&hook), async {
        // The tool is called once the server has the hook call in hand, not after a guess.
        let hooked = eventually(Duration::from_secs(10), || {
            lines(&log).contains(&"call _Stop".to_owned())
        });
        assert!(hooked.await, "{:?}", lines(&log));
        host.call_tool(&call("srv__ask")).await
    });
    assert_eq!(
        reply,
        HookReply::Text {
            text: "done".into()
        }
    );
    assert_eq!(output.joined_text(), r#"accept {"name":"Grace"}"#);
    assert_eq!(person.asked().len(), 1);
}

#[tokio::test]
async fn an_accepted_form_left_empty_carries_the_forms_defaults() {
    let host = host_with(
        &[("TS_LEGACY", "1")],
        Some(Scripted::new(accept(json!({})))),
    )
    .await;
    let output = host.call_tool(&call("srv__ask")).await;
    assert_eq!(output.joined_text(), r#"accept {"name":"Ada"}"#);
}
