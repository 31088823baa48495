//! `hookloop transcript show`: golden transcripts read back as a session, as text and JSON, and
//! transcripts that stop early shown up to their last good record.

mod binary;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use hookloop::Hook;
use hookloop::transcript::{AgentLane, End, Entry, EntryKind, SessionView, Transcript};
use serde_json::Value;

fn golden(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/transcripts")
        .join(format!("{name}.jsonl"))
}

fn show(args: &[&str]) -> Output {
    Command::new(binary::hookloop())
        .arg("transcript")
        .arg("show")
        .args(args)
        .env_remove("HOOKLOOP_LOG")
        .output()
        .expect("run hookloop")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hookloop-show-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn show_rebuilds_every_request_reply_hook_round_and_objection_of_a_golden() {
    let transcript = Transcript::read(golden("stop_objection_is_injected")).expect("golden");
    let view = SessionView::build(&transcript);
    assert_eq!(view.end, End::Complete { records: 17 });
    assert_eq!(view.rounds(), 3);
    assert_eq!(view.hook_rounds(), 2);
    assert_eq!(view.objections(), 1);
    // The second request sends the prompt again: it is folded, the rest is shown as sent.
    let requests: Vec<_> = view
        .entries
        .iter()
        .filter_map(|entry| match &entry.kind {
            EntryKind::Request {
                folded, messages, ..
            } => Some((*folded, messages.len())),
            _ => None,
        })
        .collect();
    assert_eq!(requests, [(0, 1), (1, 3), (4, 2)]);

    let text = view.to_text();
    for expected in [
        "prompt 1\n                   user: Finish the feature.",
        "request 2 (turn): 4 message(s), 1 tool(s) offered\n                   … 1 message(s) \
         as in the request before",
        "tools: todo__list",
        "_Stop round 1: 1 server(s), timeout 2500 ms, 0 objection(s) so far, budget left 3",
        "todo after 0 ms: \"1 open: write tests\"",
        "⚑ _Stop objection from todo (2 left in the budget)\n                   hook: 1 open",
        "c1 todo__list {} — done at 0 ms",
        "_Stop round 2",
        "todo after 0 ms: nothing",
        "prompt ended: end_turn",
        "end: all 17 records replayed",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
}

#[test]
fn show_gives_a_compaction_its_sizes_before_and_after() {
    let transcript = Transcript::read(golden("compaction_with_post_compact")).expect("golden");
    let view = SessionView::build(&transcript);
    let compaction = view
        .entries
        .iter()
        .find_map(|entry| match entry.kind {
            EntryKind::Compaction {
                summarized,
                messages_before,
                messages_after,
                bytes_before,
                bytes_after,
            } => Some((
                summarized,
                messages_before,
                messages_after,
                bytes_before,
                bytes_after,
            )),
            _ => None,
        })
        .expect("a compaction");
    let (summarized, before, after, bytes_before, bytes_after) = compaction;
    assert!(summarized);
    assert_eq!((before, after), (3, 2));
    assert!(bytes_before > 4_000 && bytes_after < 200, "{compaction:?}");
    assert!(
        view.to_text()
            .contains("⟲ history compacted (summarized): 3 → 2 messages, ")
    );
}

#[test]
fn show_json_through_the_command_lists_each_entry_with_its_time() {
    let out = show(&[
        "--json",
        golden("stop_objection_is_injected").to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let view: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let entries = view["entries"].as_array().expect("entries");
    let count = |kind: &str| entries.iter().filter(|e| e["entry"] == kind).count();
    assert_eq!(count("request"), 3);
    assert_eq!(count("reply"), 3);
    assert_eq!(count("hook_round"), 2);
    assert_eq!(count("objection"), 1);
    assert_eq!(count("tools"), 1);
    assert!(
        entries
            .iter()
            .all(|e| e["at_ms"].is_u64() && e["index"].is_u64())
    );
    assert_eq!(view["end"]["end"], "complete");
    let objection = entries.iter().find(|e| e["entry"] == "objection").unwrap();
    assert_eq!(objection["budget_left"], 2);
    assert_eq!(objection["text"], "1 open: write tests");
}

#[test]
fn a_cut_short_transcript_is_shown_up_to_its_last_good_record() {
    let full = std::fs::read_to_string(golden("stop_objection_is_injected")).unwrap();
    // Cut the last line in half, as a crash mid-write leaves it.
    let last_start = full.trim_end().rfind('\n').unwrap() + 1;
    let cut = &full[..last_start + 10];
    let path = tempdir("cut").join("cut.jsonl");
    std::fs::write(&path, cut).unwrap();
    let out = show(&[path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("prompt ended: end_turn"), "{stdout}");
    assert!(!stdout.contains("session closed"), "{stdout}");
    assert!(
        stdout.contains("the transcript stops after 16 records: line 18 was cut short"),
        "{stdout}"
    );
}

#[test]
fn a_diverging_transcript_is_shown_up_to_the_divergence_and_says_where() {
    let full = std::fs::read_to_string(golden("stop_objection_is_injected")).unwrap();
    let path = tempdir("diverged").join("tampered.jsonl");
    std::fs::write(&path, full.replacen("1 open", "9 open", 1)).unwrap();
    let out = show(&[path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = text(&out.stdout);
    // The tampered hook answer is fed; the objection notice that follows it differs.
    assert!(stdout.contains("_Stop round 1"), "{stdout}");
    assert!(!stdout.contains("objection from todo"), "{stdout}");
    assert!(stdout.contains("where the replay diverged"), "{stdout}");
    assert!(stdout.contains("- ") && stdout.contains("+ "), "{stdout}");
}

#[test]
fn an_unreadable_file_is_a_usage_error() {
    let out = show(&["/nonexistent/transcript.jsonl"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(text(&out.stderr).contains("could not read"), "{out:?}");
}

/// How often `needle` occurs in `haystack`.
fn count(haystack: &str, needle: &str) -> usize {
    haystack.matches(needle).count()
}

/// Golden `name` as `hookloop transcript show` builds it, and the page `--html` writes of it
/// into `dir`.
fn html_of_golden(name: &str, dir: &Path) -> (SessionView, String) {
    let path = golden(name);
    let view = SessionView::build(&Transcript::read(&path).unwrap());
    let out_file = dir.join(format!("{name}.html"));
    let out = show(&["--html", out_file.to_str().unwrap(), path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    (view, std::fs::read_to_string(&out_file).unwrap())
}

#[test]
fn the_html_page_shows_every_round_hook_round_and_objection_of_its_transcript() {
    let dir = tempdir("html");
    for name in [
        "stop_budget_spans_prompts",
        "hook_timeout_fails_open_and_kills_on_the_second",
        "compaction_with_post_compact",
        "several_servers_answer_in_config_order",
    ] {
        let (view, page) = html_of_golden(name, &dir);
        let (svg, conversation) = page
            .split_once("</svg>")
            .expect("a timeline above the rest");
        // The picture: a bar per model round and hook round, a mark per objection.
        let rounds =
            count(svg, r#"<rect class="round""#) + count(svg, r#"<rect class="summary-round""#);
        assert_eq!(rounds, view.rounds(), "{name}");
        assert_eq!(
            count(svg, r#"<rect class="hook-round""#),
            view.hook_rounds(),
            "{name}"
        );
        assert_eq!(
            count(svg, r#"<circle class="objection""#),
            view.objections(),
            "{name}"
        );
        assert_eq!(
            count(svg, r#"<line class="compaction""#),
            view.compactions(),
            "{name}"
        );
        // The conversation: an entry per request, hook round and objection.
        assert_eq!(
            count(conversation, "entry entry-request"),
            view.rounds(),
            "{name}"
        );
        assert_eq!(
            count(conversation, "entry entry-hook_round"),
            view.hook_rounds(),
            "{name}"
        );
        assert_eq!(
            count(conversation, "entry entry-objection"),
            view.objections(),
            "{name}"
        );
        // Self-contained: no script, nothing to fetch.
        for banned in ["<script", "src=", "href=", "@import", "url("] {
            assert!(!page.contains(banned), "{name}: the page has {banned}");
        }
    }
    // The goldens above do have something of each to count.
    let view = SessionView::build(&Transcript::read(golden("stop_budget_spans_prompts")).unwrap());
    assert!(view.rounds() > 3 && view.hook_rounds() > 1 && view.objections() > 1);
}

#[test]
fn the_html_page_escapes_what_the_transcript_holds() {
    let full = std::fs::read_to_string(golden("stop_objection_is_injected")).unwrap();
    let path = tempdir("escape").join("markup.jsonl");
    // The prompt is the user's text: it must show as text, never as markup.
    std::fs::write(
        &path,
        full.replace("Finish the feature.", "<script>alert(1)</script>"),
    )
    .unwrap();
    let out_file = path.with_extension("html");
    let out = show(&["--html", out_file.to_str().unwrap(), path.to_str().unwrap()]);
    let page = std::fs::read_to_string(&out_file).unwrap();
    assert!(!page.contains("<script"), "{out:?}");
    assert!(page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"));
}

#[test]
fn show_strips_terminal_escapes_from_recorded_text_as_run_does() {
    let full = std::fs::read_to_string(golden("stop_objection_is_injected")).unwrap();
    let path = tempdir("escapes").join("osc.jsonl");
    // An OSC 52 sequence (it writes the clipboard in many terminals) and a C1 control in the
    // prompt, as JSON escapes in the file.
    std::fs::write(
        &path,
        full.replace(
            "Finish the feature.",
            "\\u001b]52;c;aGVsbG8=\\u0007Finish\\u009b the feature.",
        ),
    )
    .unwrap();
    let out = show(&[path.to_str().unwrap()]);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(
        stdout.contains("]52;c;aGVsbG8=Finish the feature."),
        "{stdout}"
    );
    for shown in [&stdout, &stderr] {
        assert!(!shown.contains(['\u{1b}', '\u{7}', '\u{9b}']), "{shown:?}");
    }
}

#[test]
fn a_divergence_message_names_its_own_record_not_record_zero() {
    let full = std::fs::read_to_string(golden("stop_objection_is_injected")).unwrap();
    let path = tempdir("diverged-where").join("tampered.jsonl");
    std::fs::write(&path, full.replacen("1 open", "9 open", 1)).unwrap();
    let out = show(&[path.to_str().unwrap()]);
    let stdout = text(&out.stdout);
    let Some(End::Diverged { index, line, .. }) = Transcript::read(&path)
        .ok()
        .map(|t| SessionView::build(&t).end)
    else {
        panic!("the tampered transcript diverges");
    };
    assert!(index > 0, "{stdout}");
    assert!(
        stdout.contains(&format!("replay diverged at record {index} (line {line})")),
        "{stdout}"
    );
    assert!(!stdout.contains("record 0 (line 0)"), "{stdout}");
}

/// The lane of subagent `id` under the tool round of its `agent` call, searched through the
/// lanes of `entries` too.
fn lane<'a>(entries: &'a [Entry], id: &str) -> Option<&'a AgentLane> {
    entries.iter().find_map(|entry| {
        entry.kind.agent_lanes().find_map(|lane| {
            if lane.id.0 == id {
                Some(lane)
            } else {
                self::lane(&lane.entries, id)
            }
        })
    })
}

#[test]
fn show_puts_a_subagent_as_its_own_lane_under_its_call_with_its_hook_rounds_and_objection() {
    let transcript = Transcript::read(golden("subagent_stop_objects_once")).expect("golden");
    let view = SessionView::build(&transcript);
    assert!(view.end.is_complete(), "{}", view.end);
    // The lane hangs from the run of the call that started it.
    let tools = view
        .entries
        .iter()
        .find_map(|entry| match &entry.kind {
            EntryKind::Tools { calls } => Some(calls),
            _ => None,
        })
        .expect("a tool round");
    assert_eq!(tools.len(), 1);
    let run = &tools[0];
    assert_eq!(run.call.name, "agent");
    let child = run.agent.as_ref().expect("the call's subagent");
    assert_eq!(child.id.0, "agent-1");
    assert_eq!(child.id.0, run.call.id.0);
    // Its steps are its own: hook rounds, an objection, requests and replies, its finish...
    let kinds: Vec<&str> = child.entries.iter().map(|e| e.kind.name()).collect();
    let hooks: Vec<Hook> = child
        .entries
        .iter()
        .filter_map(|entry| match &entry.kind {
            EntryKind::HookRound { hook, .. } => Some(*hook),
            _ => None,
        })
        .collect();
    assert_eq!(
        hooks,
        [Hook::SubagentStart, Hook::SubagentStop, Hook::SubagentStop],
        "{kinds:?}"
    );
    assert_eq!(kinds.iter().filter(|k| **k == "objection").count(), 1);
    assert_eq!(kinds.iter().filter(|k| **k == "request").count(), 3);
    assert_eq!(kinds.iter().filter(|k| **k == "tools").count(), 1);
    assert!(kinds.contains(&"finish"), "{kinds:?}");
    // ...and none of them is shown at the top level.
    assert_eq!(view.hook_rounds_of(Hook::SubagentStop), 0);
    assert_eq!(view.objections(), 0);
    assert_eq!(view.rounds(), 2);

    let text = view.to_text();
    assert!(text.contains("subagent agent-1:"), "{text}");
    let lane_lines: Vec<&str> = text.lines().filter(|l| l.contains("│ ")).collect();
    assert!(
        lane_lines
            .iter()
            .any(|l| l.contains("_SubagentStop round 2")),
        "{text}"
    );
    // A subagent's objection names the hook it answered, in the text and on the page.
    assert!(
        lane_lines
            .iter()
            .any(|l| l.contains("⚑ _SubagentStop objection from todo (2 left in the budget)")),
        "{text}"
    );
    assert!(!text.contains("⚑ _Stop objection"), "{text}");
    let page = hookloop::transcript::render_html(&view, "subagent");
    assert!(
        page.contains("⚑ _SubagentStop objection from todo (2 left in the budget)"),
        "{page}"
    );
    assert!(!page.contains("⚑ _Stop objection"), "{page}");
    assert!(
        !text
            .lines()
            .any(|l| l.contains("_SubagentStop round") && !l.contains("│ ")),
        "a subagent's hook round shown outside its lane:\n{text}"
    );
}

#[test]
fn show_json_and_html_nest_each_of_two_subagents_under_its_call() {
    let path = golden("two_subagents_run_in_parallel");
    let out = show(&["--json", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let view: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let tools = view["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["entry"] == "tools")
        .expect("a tool round");
    let ids: Vec<&Value> = tools["calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| &run["agent"]["id"])
        .collect();
    assert_eq!(ids, ["agent-1", "agent-2"]);
    for run in tools["calls"].as_array().unwrap() {
        let entries = run["agent"]["entries"]
            .as_array()
            .expect("the lane's steps");
        let count = |kind: &str| entries.iter().filter(|e| e["entry"] == kind).count();
        assert_eq!(count("request"), 2, "{run}");
        assert_eq!(count("tools"), 1, "{run}");
        assert_eq!(count("finish"), 1, "{run}");
    }

    let transcript = Transcript::read(&path).unwrap();
    let built = SessionView::build(&transcript);
    assert!(lane(&built.entries, "agent-2").is_some());
    let out_file = tempdir("lanes").join("lanes.html");
    let out = show(&["--html", out_file.to_str().unwrap(), path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let page = std::fs::read_to_string(&out_file).unwrap();
    for id in ["agent-1", "agent-2"] {
        assert!(
            page.contains(&format!(
                r#"<div class="lane" id="lane-{id}"><h4>subagent {id}</h4>"#
            )),
            "no lane for {id}"
        );
    }
}

/// Every subagent's lane of `entries`, nested ones included, in the order their calls started.
fn all_lanes(entries: &[Entry]) -> Vec<&AgentLane> {
    entries
        .iter()
        .flat_map(|entry| entry.kind.agent_lanes())
        .flat_map(|lane| std::iter::once(lane).chain(all_lanes(&lane.entries)))
        .collect()
}

/// What the timeline draws for one agent's steps: model rounds (turn, summary or failed), tool
/// rounds, hook rounds, objections, denials and compactions, counted in `svg`.
fn drawn(svg: &str) -> [usize; 6] {
    [
        count(svg, r#"<rect class="round""#)
            + count(svg, r#"<rect class="summary-round""#)
            + count(svg, r#"<rect class="failed-round""#),
        count(svg, r#"<rect class="tool-round""#),
        count(svg, r#"<rect class="hook-round""#),
        count(svg, r#"<circle class="objection""#),
        count(svg, r#"<circle class="denial""#),
        count(svg, r#"<line class="compaction""#),
    ]
}

/// The same counts, taken from the steps themselves.
fn steps(entries: &[Entry]) -> [usize; 6] {
    let of = |pick: fn(&EntryKind) -> bool| entries.iter().filter(|e| pick(&e.kind)).count();
    [
        of(|k| matches!(k, EntryKind::Request { .. })),
        of(|k| matches!(k, EntryKind::Tools { .. })),
        of(|k| matches!(k, EntryKind::HookRound { .. })),
        of(|k| matches!(k, EntryKind::Objection { .. })),
        of(|k| {
            matches!(
                k,
                EntryKind::ToolDenied { .. } | EntryKind::PermissionRejected { .. }
            )
        }),
        of(|k| matches!(k, EntryKind::Compaction { .. })),
    ]
}

#[test]
fn the_html_timeline_draws_each_subagents_rounds_on_a_lane_labelled_with_its_id() {
    let dir = tempdir("agent-bars");
    let mut children = [0; 6];
    for name in [
        "subagent_stop_objects_once",
        "two_subagents_run_in_parallel",
        "subagent_cancelled_with_its_parent",
        "subagent_denied_by_pre_tool_use",
        "subagent_compacts",
    ] {
        let (view, page) = html_of_golden(name, &dir);
        let (svg, _) = page
            .split_once("</svg>")
            .expect("a timeline above the rest");
        // The session's own steps come first, on its lanes; each subagent's follow in a group
        // of their own.
        let mut groups = svg.split(r#"<g class="agent" data-agent=""#);
        let session = groups.next().expect("the session's part");
        assert_eq!(drawn(session), steps(&view.entries), "{name}: the session");
        let groups: Vec<&str> = groups.collect();
        let lanes = all_lanes(&view.entries);
        assert!(!lanes.is_empty(), "{name} has no subagent");
        assert_eq!(groups.len(), lanes.len(), "{name}: a group per subagent");
        for (group, lane) in groups.iter().zip(&lanes) {
            let id = &lane.id.0;
            let (named, bars) = group.split_once(r#"">"#).expect("the group's id");
            assert_eq!(named, id, "{name}: lanes in the order their calls started");
            assert!(
                bars.starts_with("<text x="),
                "{name}: {id}'s lane has no label: {bars}"
            );
            assert!(
                bars.contains(&format!("<title>subagent {id}</title>{id}</text>")),
                "{name}: {id}'s label: {bars}"
            );
            let expected = steps(&lane.entries);
            assert_eq!(drawn(bars), expected, "{name}: {id}'s bars");
            for (total, n) in children.iter_mut().zip(expected) {
                *total += n;
            }
        }
    }
    // Between them the goldens give the subagents' lanes something of each kind to draw.
    assert!(children.iter().all(|&n| n > 0), "{children:?}");
}
