//! The todo hook server of `examples/todo_server.rs` steering a full session.

mod common;

use hookloop::machine::Message;
use hookloop::mcp::ServerConfig;
use hookloop::testing::{ScriptedLlm, Step};
use hookloop::{Config, Hook, HookServers, PromptStop, Session};
use serde_json::json;

use common::{connect, example, fast_options};

#[tokio::test]
async fn open_todos_keep_the_agent_working_until_they_are_done() {
    let server = ServerConfig::stdio(
        example("todo_server").to_string_lossy(),
        Vec::<String>::new(),
    );
    let host = connect(vec![("todo", server)], fast_options()).await;
    let llm = ScriptedLlm::new([
        Step::tools(
            1,
            &[
                ("todo__add", json!({"text": "write tests"})),
                ("todo__add", json!({"text": "update docs"})),
            ],
        ),
        Step::text("All done."),
        Step::tools(
            3,
            &[
                ("todo__complete", json!({"id": 1})),
                ("todo__complete", json!({"id": 2})),
            ],
        ),
        Step::text("Now really done."),
    ]);
    let config = Config::builder()
        .hook_servers(HookServers::parse(Some("todo")).unwrap())
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), host);
    assert_eq!(
        session.prompt("Plan and do the work.").await.unwrap(),
        PromptStop::EndTurn
    );

    let requests = llm.requests();
    assert_eq!(requests.len(), 4);
    let tools: Vec<_> = requests[0].tools.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(tools, ["todo__add", "todo__complete", "todo__list"]);
    let objection =
        hookloop::hooks::encode_hook_body(Hook::Stop, "todo", "2 open: write tests; update docs");
    let objected = requests[2].messages.iter().any(
        |m| matches!(m, Message::ToolResult { output, .. } if output.joined_text() == objection),
    );
    assert!(objected, "{:?}", requests[2].messages);
    // The second end of turn found nothing open: no second objection.
    assert_eq!(session.counters().objections, 1);
    assert_eq!(llm.violations(), Vec::<String>::new());
}

#[tokio::test]
async fn completing_an_unknown_todo_is_denied_before_it_runs() {
    let server = ServerConfig::stdio(
        example("todo_server").to_string_lossy(),
        Vec::<String>::new(),
    );
    let host = connect(vec![("todo", server)], fast_options()).await;
    let llm = ScriptedLlm::new([
        Step::tools(1, &[("todo__add", json!({"text": "write tests"}))]),
        Step::tools(
            2,
            &[
                ("todo__complete", json!({"id": 7})),
                ("todo__list", json!({})),
            ],
        ),
        Step::text("Stopping."),
    ]);
    let config = Config::builder()
        .hook_servers(HookServers::parse(Some("todo")).unwrap())
        .stop_max_rejections(0)
        .build()
        .unwrap();
    let mut session = Session::new(config, llm.clone(), host);
    assert_eq!(session.prompt("Work.").await.unwrap(), PromptStop::EndTurn);
    let results: Vec<_> = session
        .history()
        .iter()
        .filter_map(|m| match m {
            Message::ToolResult { call_id, output } => Some((call_id.0.clone(), output.clone())),
            _ => None,
        })
        .collect();
    let (_, denied) = results.iter().find(|(id, _)| id == "c2").unwrap();
    assert!(denied.is_error);
    assert_eq!(
        denied.joined_text(),
        hookloop::hooks::encode_hook_body(
            Hook::PreToolUse,
            "todo",
            "there is no todo #7: call list to see the numbers"
        )
    );
    // The list call ran and shows the todo still open: the denied call never ran.
    let (_, listed) = results.iter().find(|(id, _)| id == "c3").unwrap();
    assert_eq!(listed.joined_text(), "#1 [ ] write tests");
    session.close().await.unwrap();
    assert_eq!(llm.violations(), Vec::<String>::new());
}
