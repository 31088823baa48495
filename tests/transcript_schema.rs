//! The checked-in JSON Schema (`docs/transcript.schema.json`) accepts every golden transcript
//! line by line, so other tools can read transcripts without this crate, and it is strict
//! enough to refuse what the engine does not write.

use std::path::PathBuf;

use jsonschema::Validator;
use serde_json::{Value, json};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A validator for one of the schema's definitions (`header` or `record`).
fn validator(definition: &str) -> Validator {
    let text = std::fs::read_to_string(root().join("docs/transcript.schema.json")).unwrap();
    let mut schema: Value = serde_json::from_str(&text).expect("the schema is JSON");
    let object = schema.as_object_mut().unwrap();
    object.remove("oneOf");
    object.insert("$ref".into(), json!(format!("#/$defs/{definition}")));
    jsonschema::validator_for(&schema).expect("a valid schema")
}

fn errors(validator: &Validator, line: &Value) -> Vec<String> {
    validator
        .iter_errors(line)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect()
}

#[test]
fn every_golden_transcript_line_validates_against_the_schema() {
    let (header, record) = (validator("header"), validator("record"));
    let mut files = 0;
    let mut kinds = std::collections::BTreeSet::new();
    let mut agents = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(root().join("tests/transcripts")).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            let value: Value = serde_json::from_str(line).unwrap();
            let schema = if i == 0 { &header } else { &record };
            let errors = errors(schema, &value);
            assert!(
                errors.is_empty(),
                "{}:{}: {errors:#?}\n{line}",
                path.display(),
                i + 1
            );
            if let Some(agent) = value["agent"].as_str() {
                agents.insert(agent.to_owned());
            }
            for key in ["effect", "fact"] {
                if let Some(kind) = value[key][key].as_str() {
                    kinds.insert(kind.to_owned());
                }
            }
        }
        files += 1;
    }
    assert_eq!(files, 26);
    // The goldens exercise every kind of record, so each part of the schema is used.
    for kind in [
        "call_llm",
        "call_tools",
        "call_hooks",
        "kill_server",
        "notify",
        "finish",
        "prompted",
        "catalog_changed",
        "llm_replied",
        "llm_failed",
        "tool_finished",
        "hook_answered",
        "cancelled",
        "closed",
    ] {
        assert!(kinds.contains(kind), "no golden has a {kind} record");
    }
    // Subagents' lanes are among them, so the `agent` field is checked too.
    assert!(agents.contains("agent-2"), "{agents:?}");
}

#[test]
fn the_schema_refuses_what_the_engine_does_not_write() {
    let record = validator("record");
    for good in [
        json!({"at_ms": 5, "fact": {"fact": "prompted", "text": "hi"}}),
        // Supervision: a fact and an order.
        json!({"at_ms": 812, "supervision": {"fact": "server_exited", "server": "todo", "at_ms": 790, "answered": true, "reason": "connection closed", "jitter": 500}}),
        json!({"at_ms": 812, "supervision": {"order": "start_server", "server": "todo", "after_ms": 143}}),
        json!({"at_ms": 900, "supervision": {"order": "retire_server", "server": "todo", "bad_ends": 4}}),
        // A server sat a round out.
        json!({"at_ms": 9, "fact": {"fact": "hook_answered", "server": "todo", "hook": "_PreToolUse", "subject": 1, "reply": {"kind": "skipped", "reason": "restarting"}}}),
        // A permission asked, decided, and a rejection noticed.
        json!({"at_ms": 10, "effect": {"effect": "ask_permission", "call": {"id": "c1", "name": "fs__rm", "arguments": {"path": "/"}}}}),
        json!({"at_ms": 11, "fact": {"fact": "permission_decided", "id": "c1", "decision": "reject_always"}}),
        json!({"at_ms": 11, "effect": {"effect": "notify", "notice": {"notice": "permission_rejected", "id": "c1", "tool": "fs__rm", "standing": true}}}),
        // Asking turned off for a loaded session.
        json!({"at_ms": 12, "fact": {"fact": "permission_setting_changed", "ask": false}}),
        // A subagent's order and fact, on its lane.
        json!({"at_ms": 13, "agent": "agent-1", "fact": {"fact": "prompted", "text": "Write the tests."}}),
        json!({"at_ms": 13, "agent": "agent-1.2", "effect": {"effect": "finish", "reason": {"reason": "end_turn"}}}),
    ] {
        assert!(
            errors(&record, &good).is_empty(),
            "refused {good}: {:#?}",
            errors(&record, &good)
        );
    }
    for bad in [
        // Both an effect and a fact.
        json!({"at_ms": 5, "fact": {"fact": "closed"}, "effect": {"effect": "finish", "reason": {"reason": "end_turn"}}}),
        // A field no record has.
        json!({"at_ms": 5, "fact": {"fact": "prompted", "text": "hi", "extra": 1}}),
        // A fact kind that does not exist.
        json!({"at_ms": 5, "fact": {"fact": "guessed"}}),
        // A negative time.
        json!({"at_ms": -1, "fact": {"fact": "closed"}}),
        // A hook that does not exist.
        json!({"at_ms": 0, "effect": {"effect": "call_hooks", "hook": "_Start", "servers": [], "timeout_ms": 1, "context": {"objections_so_far": 0, "budget_left": 3, "compactions": 0}}}),
        // A version 1 digest: one number instead of five hex strings.
        json!({"at_ms": 0, "effect": {"effect": "call_llm", "purpose": {"kind": "turn"}, "messages": 1, "digest": 12}}),
        // A digest part that is not 16 hex digits.
        json!({"at_ms": 0, "effect": {"effect": "call_llm", "purpose": {"kind": "turn"}, "messages": 1, "digest": {"system": "af63", "messages": "6894beb5b7c888a8", "tools": "e7f34d3ebfc5c5eb", "instruction": "af63e34c8601f871", "limits": "53304a3c5511da50"}}}),
        // A supervision event that is neither a fact nor an order.
        json!({"at_ms": 0, "supervision": {"event": "server_started", "server": "todo"}}),
        // A server name the engine never accepts.
        json!({"at_ms": 0, "effect": {"effect": "kill_server", "server": "a__b"}}),
        // A decision the engine does not know.
        json!({"at_ms": 0, "fact": {"fact": "permission_decided", "id": "c1", "decision": "maybe"}}),
        // A setting that is not a yes or no.
        json!({"at_ms": 0, "fact": {"fact": "permission_setting_changed", "ask": "never"}}),
        // An agent id the engine never makes.
        json!({"at_ms": 0, "agent": "helper", "fact": {"fact": "closed"}}),
        // Supervision belongs to the host, never to an agent.
        json!({"at_ms": 0, "agent": "agent-1", "supervision": {"order": "start_server", "server": "todo", "after_ms": 1}}),
    ] {
        assert!(!errors(&record, &bad).is_empty(), "accepted {bad}");
    }
    let header = validator("header");
    let text =
        std::fs::read_to_string(root().join("tests/transcripts/hook_errors_fail_open.jsonl"))
            .unwrap();
    let mut first: Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    first["version"] = json!(99);
    assert!(
        !errors(&header, &first).is_empty(),
        "accepted another version"
    );
}
