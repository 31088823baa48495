//! The agent over an in-memory pipe, spoken to in raw JSON lines. The model and tools are the
//! scripted fakes; the binary's end-to-end tests use the real ones.

use agent_client_protocol::v1::schema::{ContentBlock, SessionUpdate};

use super::spec::{prompt_text, session_spec};
use super::translate::Translator;
use super::*;
use crate::hooks::{Hook, ServerName};
use crate::machine::SkipReason;
use crate::ports::Delta;
use crate::progress::Event;

#[test]
fn prompt_blocks_become_text_and_others_are_refused() {
    let blocks: Vec<ContentBlock> = serde_json::from_value(json!([
        {"type": "text", "text": "Read this:"},
        {"type": "resource_link", "name": "a.rs", "uri": "file:///a.rs"}
    ]))
    .unwrap();
    assert_eq!(
        prompt_text(&blocks).unwrap(),
        "Read this:\n\n[a.rs](file:///a.rs)"
    );
    let image: Vec<ContentBlock> =
        serde_json::from_value(json!([{"type": "image", "data": "AA==", "mimeType": "image/png"}]))
            .unwrap();
    assert!(prompt_text(&image).unwrap_err().contains("image"));
    assert!(prompt_text(&[]).is_err());
}

#[test]
fn session_specs_check_names_and_transports() {
    let request: NewSessionRequest = serde_json::from_value(json!({
        "cwd": "/work",
        "mcpServers": [
            {"name": "todo", "command": "/bin/todo", "args": ["-v"], "env": [{"name": "A", "value": "1"}]},
            {"type": "http", "name": "web", "url": "http://127.0.0.1:1/mcp", "headers": [{"name": "X", "value": "y"}]},
            {"type": "sse", "name": "old", "url": "http://127.0.0.1:1/sse", "headers": [{"name": "X", "value": "z"}]}
        ]
    }))
    .unwrap();
    let spec = session_spec(request.cwd, request.mcp_servers, Permissions::Ask).unwrap();
    assert_eq!(spec.servers.len(), 3);
    assert!(
        matches!(&spec.servers[0], ServerSpec::Stdio { env, .. } if env == &[("A".to_owned(), "1".to_owned())])
    );
    assert!(
        matches!(&spec.servers[1], ServerSpec::Http { url, .. } if url == "http://127.0.0.1:1/mcp")
    );
    assert!(
        matches!(&spec.servers[2], ServerSpec::Sse { url, headers, .. }
            if url == "http://127.0.0.1:1/sse" && headers == &[("X".to_owned(), "z".to_owned())])
    );

    for bad in [
        json!({"cwd": "relative", "mcpServers": []}),
        json!({"cwd": "/w", "mcpServers": [{"name": "a__b", "command": "x", "args": [], "env": []}]}),
        json!({"cwd": "/w", "mcpServers": [
            {"name": "a", "command": "x", "args": [], "env": []},
            {"name": "a", "command": "y", "args": [], "env": []}]}),
        json!({"cwd": "/w", "mcpServers": [{"type": "sse", "name": "a__b", "url": "http://x", "headers": []}]}),
    ] {
        let request: NewSessionRequest = serde_json::from_value(bad.clone()).unwrap();
        assert!(
            session_spec(request.cwd, request.mcp_servers, Permissions::Ask).is_err(),
            "{bad}"
        );
    }
}

#[test]
fn a_streamed_reply_is_sent_in_pieces_and_not_again_whole_and_the_next_reply_is_judged_afresh() {
    let mut translator = Translator::new(Arc::default(), None);
    let json = |updates: Vec<SessionUpdate>| serde_json::to_value(updates).unwrap();
    let piece = |translator: &mut Translator, delta: Delta| {
        serde_json::to_value(translator.delta(&delta)).unwrap()
    };

    assert!(
        translator
            .updates(Event::Thinking { summary: false })
            .is_empty()
    );
    let thinking = piece(&mut translator, Delta::Thinking("hmm".into()));
    assert_eq!(thinking["sessionUpdate"], "agent_thought_chunk");
    assert_eq!(thinking["content"]["text"], "hmm");
    assert!(piece(&mut translator, Delta::Text(String::new())).is_null());
    let text = piece(&mut translator, Delta::Text("Hel".into()));
    assert_eq!(text["sessionUpdate"], "agent_message_chunk");
    assert_eq!(text["content"]["text"], "Hel");
    let whole = translator.updates(Event::ModelText {
        text: "Hello".into(),
    });
    assert!(whole.is_empty(), "{:?}", json(whole));

    // The next reply streamed only reasoning: its text is sent whole.
    assert!(
        translator
            .updates(Event::Thinking { summary: false })
            .is_empty()
    );
    piece(&mut translator, Delta::Thinking("more".into()));
    let whole = json(translator.updates(Event::ModelText {
        text: "Done.".into(),
    }));
    assert_eq!(whole[0]["sessionUpdate"], "agent_message_chunk");
    assert_eq!(whole[0]["content"]["text"], "Done.");
}

#[test]
fn the_stop_budget_is_shown_as_a_notice_only_to_a_client_that_takes_notices() {
    let server = ServerName::new("todo").unwrap();
    let json = |updates: Vec<SessionUpdate>| serde_json::to_value(updates).unwrap();
    let objection = || Event::Objection {
        server: server.clone(),
        text: "1 open".into(),
        budget_left: 2,
    };
    let spent = || Event::StopSkipped {
        reason: SkipReason::BudgetSpent,
    };

    let mut translator = Translator::new(Arc::default(), Some(3));
    let shown = json(translator.updates(objection()));
    assert_eq!(shown[0]["sessionUpdate"], "tool_call", "{shown}");
    assert_eq!(shown[1]["sessionUpdate"], "notice", "{shown}");
    assert_eq!(shown[1]["severity"], "info");
    assert_eq!(shown[1]["title"], "_Stop objections: 1 of 3 used");
    assert_eq!(shown[1]["_meta"]["hookloop/objections"], 1);
    let shown = json(translator.updates(spent()));
    assert_eq!(shown[0]["sessionUpdate"], "agent_thought_chunk", "{shown}");
    assert_eq!(shown[1]["severity"], "warning", "{shown}");
    assert_eq!(shown[1]["title"], "_Stop objections: 3 of 3 used");
    // A declined objection leaves the budget as it was: no notice.
    let declined = translator.updates(Event::StopSkipped {
        reason: SkipReason::DeclinedObjection,
    });
    assert_eq!(declined.len(), 1);

    let mut translator = Translator::new(Arc::default(), None);
    assert_eq!(translator.updates(objection()).len(), 1);
    assert_eq!(translator.updates(spent()).len(), 1);
}

#[test]
fn hook_and_compaction_events_become_titled_calls_and_thoughts() {
    let server = ServerName::new("todo").unwrap();
    let mut translator = Translator::new(Arc::default(), None);
    let json = |updates: Vec<SessionUpdate>| serde_json::to_value(updates).unwrap();

    let injected = json(translator.updates(Event::PostCompactInjected {
        server: server.clone(),
        text: "#3 open".into(),
    }));
    assert_eq!(injected[0]["sessionUpdate"], "tool_call");
    assert_eq!(injected[0]["title"], "_PostCompact from todo");
    assert_eq!(injected[0]["status"], "completed");
    assert_eq!(injected[0]["toolCallId"], "hookloop-1");
    assert_eq!(injected[0]["rawOutput"]["hook"], "_PostCompact");

    let refused = json(translator.updates(Event::ToolRefused {
        name: "todo___Stop".into(),
    }));
    assert_eq!(refused[0]["toolCallId"], "hookloop-2");
    assert_eq!(refused[0]["status"], "failed");
    assert_eq!(
        refused[0]["content"][0]["content"]["text"],
        "unknown tool: todo___Stop"
    );

    for hook in [
        Hook::SessionStart,
        Hook::UserPromptSubmit,
        Hook::PostToolUse,
        Hook::PreCompact,
    ] {
        let injected = json(translator.updates(Event::HookInjected {
            hook,
            server: server.clone(),
            text: "note".into(),
        }));
        assert_eq!(injected[0]["kind"], "think", "{injected}");
        assert_eq!(injected[0]["status"], "completed");
        assert_eq!(injected[0]["title"], format!("{hook} from todo"));
        assert_eq!(
            injected[0]["rawOutput"],
            json!({"hook": hook, "server": "todo", "text": "note"})
        );
    }

    for (event, needle) in [
        (
            Event::StopSkipped {
                reason: SkipReason::BudgetSpent,
            },
            "budget is spent",
        ),
        (
            Event::Compacted {
                summarized: true,
                messages_before: 9,
                messages_after: 2,
            },
            "9 messages became 2",
        ),
        (Event::Thinking { summary: true }, "summary"),
        (
            Event::HookFailedOpen {
                server: server.clone(),
                hook: Hook::Stop,
                reason: "no answer within 10 ms".into(),
            },
            "_Stop on todo gave no usable answer (no answer within 10 ms)",
        ),
        (
            Event::ServerKilled {
                server: server.clone(),
            },
            "timed out twice",
        ),
    ] {
        let update = json(translator.updates(event));
        assert_eq!(update[0]["sessionUpdate"], "agent_thought_chunk");
        let text = update[0]["content"]["text"].as_str().unwrap();
        assert!(text.contains(needle), "{text}");
    }
    for quiet in [
        Event::Thinking { summary: false },
        Event::HookCalled {
            hook: Hook::Stop,
            servers: vec![server.clone()],
        },
        Event::Finished {
            reason: crate::machine::FinishReason::EndTurn,
        },
    ] {
        assert!(translator.updates(quiet).is_empty());
    }
}

#[cfg(feature = "testing")]
mod wire;
