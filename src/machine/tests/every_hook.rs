//! Each hook's rule, one test each: `_SessionStart`, `_UserPromptSubmit`, `_PreToolUse`, `_PostToolUse`, `_PreCompact`, `_SessionEnd`.

use super::*;

#[test]
fn session_start_is_asked_once_before_the_first_request_and_injected_after_the_prompt() {
    let mut m = machine_with_every_hook(policy());
    let effects = prompt(&mut m, "first");
    assert_eq!(
        hook_calls(&effects),
        vec![(Hook::SessionStart, vec![server("a"), server("b")])]
    );
    assert_eq!(m.phase(), Phase::AwaitingHook(Hook::SessionStart));
    let effects = both(&mut m, Hook::SessionStart, None, "2 open todos", "");
    // `_UserPromptSubmit` follows, then the request.
    assert_eq!(hook_calls(&effects)[0].0, Hook::UserPromptSubmit);
    let effects = both(&mut m, Hook::UserPromptSubmit, Some(0), "", "");
    assert!(effects.iter().any(is_call_llm));
    assert_eq!(m.history()[0], Message::user("first"));
    assert_eq!(
        result_text(&m.history()[2]),
        hook_body(Hook::SessionStart, "a", "2 open todos")
    );
    assert_eq!(m.history().len(), 3);
    // Never again in this session.
    feed(&mut m, reply("ok", StopReason::MaxTokens));
    let effects = prompt(&mut m, "second");
    assert_eq!(hook_calls(&effects)[0].0, Hook::UserPromptSubmit);
}

#[test]
fn user_prompt_submit_gets_the_prompt_and_its_answer_follows_it() {
    let mut m = machine_with_every_hook(policy());
    prompt(&mut m, "first");
    both(&mut m, Hook::SessionStart, None, "", "");
    let effects = m.handle(Input::Cancelled).map(|()| drain(&mut m)).unwrap();
    assert_eq!(finish(&effects), Some(FinishReason::Cancelled));
    let effects = prompt(&mut m, "fix the bug");
    let Some(Effect::CallHooks {
        hook: Hook::UserPromptSubmit,
        subjects,
        ..
    }) = effects.last()
    else {
        panic!("{effects:?}")
    };
    assert_eq!(subjects, &vec![json!({"prompt": "fix the bug"})]);
    let effects = both(&mut m, Hook::UserPromptSubmit, Some(0), "", "see ISSUE-7");
    assert!(effects.iter().any(is_call_llm));
    let history = m.history();
    assert_eq!(history[history.len() - 3], Message::user("fix the bug"));
    assert_eq!(
        result_text(&history[history.len() - 1]),
        hook_body(Hook::UserPromptSubmit, "b", "see ISSUE-7")
    );
    assert!(effects.contains(&Effect::Notify {
        notice: Notice::HookInjected {
            hook: Hook::UserPromptSubmit,
            server: server("b"),
            text: "see ISSUE-7".into()
        }
    }));
}

#[test]
fn pre_tool_use_gates_every_call_of_a_reply_in_one_round_and_a_denied_call_never_runs() {
    let mut m = prompted_with_every_hook(policy());
    let effects = feed(
        &mut m,
        calls(&[
            ("t1", "a__run", json!({"x": 1})),
            ("t2", "c__run", json!({})),
            ("t3", "nowhere__run", json!({})),
        ]),
    );
    // One round: each server once per call that would run (the unknown one is refused first).
    let Some(Effect::CallHooks {
        hook: Hook::PreToolUse,
        servers,
        subjects,
        ..
    }) = effects.last()
    else {
        panic!("{effects:?}")
    };
    assert_eq!(servers, &vec![server("a"), server("b")]);
    assert_eq!(
        subjects,
        &vec![
            json!({"tool": "a__run", "arguments": {"x": 1}}),
            json!({"tool": "c__run", "arguments": {}}),
        ]
    );
    // Both servers deny the first call; nobody denies the second.
    feed(&mut m, answer("b", Hook::PreToolUse, Some(0), "no x"));
    feed(&mut m, answer("a", Hook::PreToolUse, Some(1), ""));
    feed(&mut m, answer("a", Hook::PreToolUse, Some(0), "never"));
    let effects = feed(&mut m, answer("b", Hook::PreToolUse, Some(1), " "));
    let Some(Effect::CallTools { calls }) = effects.last() else {
        panic!("{effects:?}")
    };
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].id, CallId::from("t2"));
    let denied = effects
        .iter()
        .filter(|e| {
            matches!(
                e,
                Effect::Notify {
                    notice: Notice::ToolDenied { .. }
                }
            )
        })
        .count();
    assert_eq!(denied, 2);
    let effects = feed(
        &mut m,
        Input::ToolFinished {
            id: "t2".into(),
            output: ToolOutput::text("ran"),
        },
    );
    assert_eq!(hook_calls(&effects)[0].0, Hook::PostToolUse);
    // The denied call is answered exactly once, with every denial, as an error.
    let results: Vec<&Message> = m
        .history()
        .iter()
        .filter(|msg| matches!(msg, Message::ToolResult { call_id, .. } if call_id.0 == "t1"))
        .collect();
    assert_eq!(results.len(), 1);
    let Message::ToolResult { output, .. } = results[0] else {
        unreachable!()
    };
    assert!(output.is_error);
    assert_eq!(
        output.content,
        vec![
            Content::Text {
                text: hook_body(Hook::PreToolUse, "a", "never")
            },
            Content::Text {
                text: hook_body(Hook::PreToolUse, "b", "no x")
            },
        ]
    );
}

#[test]
fn pre_tool_use_failing_open_denies_nothing() {
    let mut m = prompted_with_every_hook(policy());
    feed(&mut m, calls(&[("t1", "a__run", json!({}))]));
    feed(
        &mut m,
        Input::HookAnswered {
            server: server("a"),
            hook: Hook::PreToolUse,
            reply: HookReply::TimedOut,
            subject: Some(0),
        },
    );
    let effects = feed(
        &mut m,
        Input::HookAnswered {
            server: server("b"),
            hook: Hook::PreToolUse,
            reply: HookReply::ErrorResult {
                text: "boom".into(),
            },
            subject: Some(0),
        },
    );
    assert!(matches!(effects.last(), Some(Effect::CallTools { calls }) if calls.len() == 1));
}

#[test]
fn post_tool_use_sees_each_output_and_its_answers_follow_the_results() {
    let mut m = prompted_with_every_hook(policy());
    feed(
        &mut m,
        calls(&[("t1", "a__run", json!({})), ("t2", "b__run", json!({}))]),
    );
    both(&mut m, Hook::PreToolUse, Some(0), "", "");
    both(&mut m, Hook::PreToolUse, Some(1), "", "");
    feed(
        &mut m,
        Input::ToolFinished {
            id: "t2".into(),
            output: ToolOutput::error("bad"),
        },
    );
    let effects = feed(
        &mut m,
        Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput::text("good"),
        },
    );
    let Some(Effect::CallHooks {
        hook: Hook::PostToolUse,
        subjects,
        ..
    }) = effects.last()
    else {
        panic!("{effects:?}")
    };
    assert_eq!(
        subjects,
        &vec![
            json!({"tool": "a__run", "arguments": {}, "isError": false, "output": "good"}),
            json!({"tool": "b__run", "arguments": {}, "isError": true, "output": "bad"}),
        ]
    );
    feed(&mut m, answer("a", Hook::PostToolUse, Some(1), "retry b"));
    feed(&mut m, answer("b", Hook::PostToolUse, Some(0), ""));
    feed(&mut m, answer("a", Hook::PostToolUse, Some(0), ""));
    let effects = feed(&mut m, answer("b", Hook::PostToolUse, Some(1), ""));
    assert!(effects.iter().any(is_call_llm));
    let history = m.history();
    assert_eq!(result_text(&history[history.len() - 3]), "bad");
    assert_eq!(
        result_text(&history[history.len() - 1]),
        hook_body(Hook::PostToolUse, "a", "retry b")
    );
}

#[test]
fn pre_compact_guidance_reaches_only_the_summary_request() {
    let mut m = prompted_with_every_hook(Policy {
        max_context_tokens: 2_000,
        max_output_tokens: 500,
        ..policy()
    });
    feed(&mut m, calls(&[("t1", "c__run", json!({}))]));
    both(&mut m, Hook::PreToolUse, Some(0), "", "");
    feed(
        &mut m,
        Input::ToolFinished {
            id: "t1".into(),
            output: ToolOutput::text("x".repeat(8_000)),
        },
    );
    let effects = both(&mut m, Hook::PostToolUse, Some(0), "", "");
    assert_eq!(
        hook_calls(&effects),
        vec![(Hook::PreCompact, vec![server("a"), server("b")])]
    );
    let before = m.history().len();
    let effects = both(&mut m, Hook::PreCompact, None, "keep the todo ids", "");
    let Some(Effect::CallLlm {
        purpose: purpose @ Purpose::Summary { .. },
        ..
    }) = effects.last()
    else {
        panic!("{effects:?}")
    };
    let instruction = m.request(*purpose).instruction.unwrap().to_owned();
    assert!(instruction.starts_with(SUMMARY_INSTRUCTION));
    assert!(instruction.contains("keep the todo ids"));
    assert_eq!(
        m.history().len(),
        before,
        "guidance never enters the history"
    );
    assert!(
        m.request(Purpose::Turn)
            .messages
            .iter()
            .all(|msg| !format!("{msg:?}").contains("keep the todo ids"))
    );
}

#[test]
fn session_end_is_called_once_at_close_and_its_answers_are_ignored() {
    let mut m = prompted_with_every_hook(policy());
    feed(&mut m, calls(&[("t1", "a__run", json!({}))]));
    // Closing mid-prompt: the gated call is answered, the prompt finishes, then `_SessionEnd`.
    let effects = feed(&mut m, Input::Closed);
    assert_eq!(finish(&effects), Some(FinishReason::Cancelled));
    assert_eq!(
        hook_calls(&effects),
        vec![(Hook::SessionEnd, vec![server("a"), server("b")])]
    );
    assert!(matches!(
        m.history().last(),
        Some(Message::ToolResult { output, .. }) if output.joined_text() == "cancelled"
    ));
    assert!(feed(&mut m, Input::Closed).is_empty());
    let effects = both(&mut m, Hook::SessionEnd, None, "bye", "objection!");
    assert!(effects.is_empty(), "{effects:?}");
    assert_eq!(m.phase(), Phase::Done);
    assert!(feed(&mut m, Input::Closed).is_empty());
}

#[test]
fn closing_an_idle_session_calls_session_end_and_a_cancel_stops_waiting() {
    let mut m = machine_with_every_hook(policy());
    let effects = feed(&mut m, Input::Closed);
    assert_eq!(hook_calls(&effects)[0].0, Hook::SessionEnd);
    assert!(finish(&effects).is_none());
    feed(&mut m, Input::Cancelled);
    assert_eq!(m.phase(), Phase::Done);
}
