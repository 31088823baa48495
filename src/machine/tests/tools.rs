//! What the model is offered and may call, and how its calls are answered.

use super::*;

#[test]
fn hooks_are_never_offered_to_the_model() {
    for allow in [
        HookServers::All,
        HookServers::Off,
        HookServers::Named(vec![server("a")]),
    ] {
        let m = machine_with(Policy {
            hook_servers: allow,
            ..Policy::default()
        });
        let names: Vec<&str> = m.model_tools().iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a__run", "b__run", "c__run"]);
    }
}

#[test]
fn a_model_call_to_a_hook_is_refused_as_unknown_and_not_run() {
    let mut m = machine();
    prompt(&mut m, "go");
    let effects = feed(
        &mut m,
        calls(&[("1", "a___Stop", json!({})), ("2", "_Stop", json!({}))]),
    );
    assert!(
        !effects
            .iter()
            .any(|e| matches!(e, Effect::CallTools { .. } | Effect::CallHooks { .. }))
    );
    assert!(
        effects.iter().any(is_call_llm),
        "the model is asked again at once"
    );
    let results: Vec<_> = m
        .history()
        .iter()
        .filter_map(|msg| match msg {
            Message::ToolResult { output, .. } => Some(output.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        results,
        [
            ToolOutput::error("unknown tool: a___Stop"),
            ToolOutput::error("unknown tool: _Stop")
        ]
    );
}

#[test]
fn unknown_tools_and_non_object_arguments_are_answered_with_errors() {
    let mut m = machine();
    prompt(&mut m, "go");
    let effects = feed(
        &mut m,
        calls(&[
            ("1", "nope__run", json!({})),
            ("2", "a__run", json!("{broken")),
            ("3", "a__run", json!([1])),
            ("4", "b__run", json!({"x": 1})),
        ]),
    );
    let Some(Effect::CallTools { calls }) = effects
        .iter()
        .find(|e| matches!(e, Effect::CallTools { .. }))
    else {
        panic!("expected CallTools in {effects:?}");
    };
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].name, "b__run");
    feed(
        &mut m,
        Input::ToolFinished {
            id: "4".into(),
            output: ToolOutput::text("ok"),
        },
    );
    let texts: Vec<String> = m
        .history()
        .iter()
        .filter_map(|msg| match msg {
            Message::ToolResult { output, .. } => Some(output.joined_text()),
            _ => None,
        })
        .collect();
    assert_eq!(texts[0], "unknown tool: nope__run");
    assert!(
        texts[1].contains("not a JSON object") && texts[1].contains("{broken"),
        "{}",
        texts[1]
    );
    assert!(texts[2].contains("got an array"), "{}", texts[2]);
    assert_eq!(texts[3], "ok");
}
