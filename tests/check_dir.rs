//! `transcript::check_dir`: a downstream crate's one-call check of its transcripts, with every
//! divergence listed, and blessing that rewrites effects and keeps facts.

use std::path::{Path, PathBuf};

use hookloop::transcript::{Transcript, check_dir, check_dir_with, replay};

fn goldens() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/transcripts")
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hookloop-check-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Copies these goldens into `dir` and returns the copies' paths.
fn copy(dir: &Path, names: &[&str]) -> Vec<PathBuf> {
    names
        .iter()
        .map(|name| {
            let to = dir.join(format!("{name}.jsonl"));
            std::fs::copy(goldens().join(format!("{name}.jsonl")), &to).unwrap();
            to
        })
        .collect()
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{} lacks {from:?}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

#[test]
fn the_golden_transcripts_pass_the_check_a_downstream_test_makes() {
    let checked = check_dir_with(goldens(), false).expect("the goldens replay");
    assert_eq!(checked.files, 26);
    assert!(checked.blessed.is_empty());
}

#[test]
fn every_diverging_file_is_listed_with_its_diff() {
    let dir = tempdir("listed");
    let files = copy(
        &dir,
        &[
            "stop_objection_is_injected",
            "hook_errors_fail_open",
            "model_failure_ends_the_prompt",
        ],
    );
    // Two recorded effects that the engine does not give.
    edit(&files[0], r#""budget_left":2"#, r#""budget_left":7"#);
    edit(
        &files[2],
        r#""reason":{"reason":"failed","error":"503 overloaded"}"#,
        r#""reason":{"reason":"refusal"}"#,
    );
    let failed = check_dir(&dir).expect_err("two files diverge");
    let listed: Vec<&PathBuf> = failed.failures().iter().map(|(path, _)| path).collect();
    // In name order, as the folder is walked.
    assert_eq!(listed, [&files[2], &files[0]]);
    let report = format!("{failed:?}");
    assert!(report.starts_with("2 of 3 transcript(s) in"), "{report}");
    assert!(report.contains("-     \"budget_left\": 7"), "{report}");
    assert!(report.contains("+     \"budget_left\": 2"), "{report}");
    assert!(report.contains("HOOKLOOP_BLESS=1"), "{report}");
}

#[test]
fn blessing_rewrites_the_effects_and_keeps_the_facts() {
    let dir = tempdir("bless");
    let files = copy(
        &dir,
        &[
            "hook_timeout_fails_open_and_kills_on_the_second",
            "stop_objection_is_injected",
        ],
    );
    let original = std::fs::read_to_string(&files[0]).unwrap();
    // A recorded effect the engine does not give: blessing restores the recording exactly,
    // times included.
    edit(
        &files[0],
        r#""effect":"kill_server","server":"slow""#,
        r#""effect":"kill_server","server":"fast""#,
    );
    // A recorded fact changed: the objection the engine now gives quotes the new answer.
    edit(
        &files[1],
        r#""reply":{"kind":"text","text":"1 open: write tests"}"#,
        r#""reply":{"kind":"text","text":"2 open"}"#,
    );
    let facts_before = facts(&files[1]);

    let checked = check_dir_with(&dir, true).expect("both can be blessed");
    assert_eq!(checked.blessed, files);
    assert_eq!(std::fs::read_to_string(&files[0]).unwrap(), original);
    assert_eq!(facts(&files[1]), facts_before);
    let blessed = std::fs::read_to_string(&files[1]).unwrap();
    assert!(
        blessed.contains(r#""notice":"objection","server":"todo","text":"2 open""#),
        "{blessed}"
    );
    for file in &files {
        replay(file).unwrap_or_else(|e| panic!("{} does not replay: {e}", file.display()));
    }
    check_dir_with(&dir, false).expect("clean after blessing");
}

#[test]
fn a_file_whose_facts_no_longer_fit_is_not_blessed_and_is_listed() {
    let dir = tempdir("unfit");
    let files = copy(&dir, &["stop_objection_is_injected"]);
    // A tool result for a call the model never made: the machine refuses it.
    edit(
        &files[0],
        r#""fact":"tool_finished","id":"c1""#,
        r#""fact":"tool_finished","id":"c9""#,
    );
    let before = std::fs::read_to_string(&files[0]).unwrap();
    let failed = check_dir_with(&dir, true).expect_err("cannot be blessed");
    assert_eq!(failed.failures().len(), 1);
    assert!(
        failed.failures()[0].1.starts_with("cannot bless"),
        "{failed}"
    );
    assert_eq!(
        std::fs::read_to_string(&files[0]).unwrap(),
        before,
        "left untouched"
    );
}

#[test]
fn an_empty_folder_fails_the_check() {
    let dir = tempdir("empty");
    let failed = check_dir_with(&dir, false).expect_err("nothing to check");
    assert!(format!("{failed}").contains("no transcript (*.jsonl) found"));
}

fn facts(path: &Path) -> Vec<String> {
    let transcript = Transcript::read(path).unwrap();
    transcript
        .records
        .iter()
        .filter(|record| matches!(record.event, hookloop::transcript::Event::Fact(_)))
        .map(|record| serde_json::to_string(record).unwrap())
        .collect()
}

#[test]
fn a_record_cut_short_or_ending_mid_prompt_fails_the_check() {
    let dir = tempdir("not-whole");
    let files = copy(
        &dir,
        &["stop_objection_is_injected", "hook_errors_fail_open"],
    );
    let text = std::fs::read_to_string(&files[0]).unwrap();
    // Half a line: what a recorder that died mid-write leaves.
    std::fs::write(
        &files[0],
        &text[..text.len() - text.lines().last().unwrap().len() / 2 - 1],
    )
    .unwrap();
    // Whole lines, but the session stops while the model is asked: the rest was never
    // recorded.
    let text = std::fs::read_to_string(&files[1]).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let asked = lines
        .iter()
        .position(|l| l.contains(r#""effect":"call_llm""#))
        .expect("a model request");
    std::fs::write(&files[1], lines[..=asked].join("\n") + "\n").unwrap();

    let failed = check_dir_with(&dir, false).expect_err("neither record is whole");
    let listed: Vec<&PathBuf> = failed.failures().iter().map(|(path, _)| path).collect();
    assert_eq!(listed, [&files[1], &files[0]]);
    let report = format!("{failed:?}");
    assert!(report.contains("the record is cut short"), "{report}");
    assert!(report.contains("the record ends mid-prompt"), "{report}");
    // Blessing cannot make up what was never recorded.
    assert!(check_dir_with(&dir, true).is_err());
}
