//! `hookloop replay PATH...`: folders of transcripts replayed in parallel, a line per file and a
//! summary, and a JUnit report that names a diverging file with its diff.

mod binary;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use quick_xml::escape::resolve_xml_entity;
use quick_xml::events::{BytesStart, Event};
use quick_xml::{Reader, XmlVersion};

fn goldens() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/transcripts")
}

fn replay(args: &[&str]) -> Output {
    Command::new(binary::hookloop())
        .arg("replay")
        .args(args)
        .env_remove("HOOKLOOP_LOG")
        .output()
        .expect("run hookloop")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn tempdir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("hookloop-suite-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

/// Copies every golden transcript into `dir`, every other one into a subfolder, and returns
/// the copies.
fn copy_goldens(dir: &Path) -> Vec<PathBuf> {
    let nested = dir.join("nested");
    std::fs::create_dir_all(&nested).unwrap();
    let mut copies = Vec::new();
    for entry in std::fs::read_dir(goldens()).unwrap() {
        let path = entry.unwrap().path();
        let target = if copies.len() % 2 == 0 { dir } else { &nested };
        let copy = target.join(path.file_name().unwrap());
        std::fs::copy(&path, &copy).unwrap();
        copies.push(copy);
    }
    // Not a transcript by its name: left out of the suite.
    std::fs::write(dir.join("notes.txt"), "not a transcript").unwrap();
    copies
}

/// Every `testcase` of a JUnit report: its name and, if it failed, its failure's message and
/// text.
fn junit_cases(xml: &str) -> Vec<(String, Option<(String, String)>)> {
    let attribute = |e: &BytesStart, name: &str| {
        e.try_get_attribute(name)
            .expect("attributes")
            .unwrap_or_else(|| panic!("no {name} attribute"))
            .normalized_value(XmlVersion::Implicit1_0)
            .expect("an attribute value")
            .into_owned()
    };
    let mut reader = Reader::from_str(xml);
    let mut cases = Vec::new();
    let mut failure: Option<(String, String)> = None;
    loop {
        match reader.read_event().expect("well-formed XML") {
            Event::Start(e) | Event::Empty(e) if e.name().as_ref() == "testcase" => {
                cases.push((attribute(&e, "name"), None));
            }
            Event::Start(e) if e.name().as_ref() == "failure" => {
                failure = Some((attribute(&e, "message"), String::new()));
            }
            Event::Text(t) => {
                if let Some((_, body)) = &mut failure {
                    body.push_str(&t.xml10_content());
                }
            }
            Event::GeneralRef(r) => {
                if let Some((_, body)) = &mut failure {
                    let name: &str = r.as_ref();
                    body.push_str(resolve_xml_entity(name).expect("a predefined entity"));
                }
            }
            Event::End(e) if e.name().as_ref() == "failure" => {
                cases.last_mut().expect("a case").1 = failure.take();
            }
            Event::Eof => break,
            _ => {}
        }
    }
    cases
}

#[test]
fn a_folder_replays_every_transcript_beneath_it_with_one_line_each_and_a_summary() {
    let dir = tempdir("clean");
    let count = copy_goldens(&dir).len();
    let out = replay(&[dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = text(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), count + 1, "{stdout}");
    assert!(
        lines[..count].iter().all(|l| l.starts_with("ok ")),
        "{stdout}"
    );
    assert!(stdout.contains("/nested/"), "{stdout}");
    assert!(
        lines[count].starts_with(&format!(
            "{count} transcript(s): {count} passed, 0 not whole, 0 diverged, 0 unreadable"
        )),
        "{stdout}"
    );
}

#[test]
fn a_tampered_file_fails_the_suite_and_the_junit_report_names_it_with_its_diff() {
    let dir = tempdir("tampered");
    let copies = copy_goldens(&dir);
    let count = copies.len();
    let tampered = copies
        .iter()
        .find(|p| p.ends_with("stop_objection_is_injected.jsonl"))
        .expect("the golden");
    let original = std::fs::read_to_string(tampered).unwrap();
    std::fs::write(tampered, original.replacen("1 open", "9 open", 1)).unwrap();
    let junit = dir.join("out.xml");
    let out = replay(&["--junit", junit.to_str().unwrap(), dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!("DIVERGED {}: at record 6", tampered.display())),
        "{stdout}"
    );
    assert!(stdout.contains("1 diverged"), "{stdout}");

    let xml = std::fs::read_to_string(&junit).unwrap();
    let cases = junit_cases(&xml);
    assert_eq!(cases.len(), count);
    let failed: Vec<_> = cases.iter().filter(|(_, f)| f.is_some()).collect();
    assert_eq!(failed.len(), 1, "{xml}");
    let (name, failure) = failed[0];
    assert_eq!(name, &tampered.display().to_string());
    let (message, body) = failure.as_ref().unwrap();
    assert!(
        message.starts_with("replay diverged at record 6"),
        "{message}"
    );
    // The first divergence's diff: the recorded objection against the replayed one.
    assert!(
        body.contains("-     \"text\": \"1 open: write tests\","),
        "{body}"
    );
    assert!(
        body.contains("+     \"text\": \"9 open: write tests\","),
        "{body}"
    );
}

#[test]
fn a_missing_file_is_an_error_case_beside_the_others() {
    let dir = tempdir("missing");
    let junit = dir.join("out.xml");
    let golden = goldens().join("hook_errors_fail_open.jsonl");
    let out = replay(&[
        "--junit",
        junit.to_str().unwrap(),
        golden.to_str().unwrap(),
        "/nonexistent.jsonl",
    ]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("ok       "), "{stdout}");
    assert!(stdout.contains("ERROR    /nonexistent.jsonl"), "{stdout}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("<error type=\"unreadable\""), "{xml}");
}

#[test]
fn a_record_cut_short_is_a_junit_failure_unless_truncation_is_allowed() {
    let dir = tempdir("cut");
    let cut = dir.join("cut.jsonl");
    let golden =
        std::fs::read_to_string(goldens().join("stop_objection_is_injected.jsonl")).unwrap();
    // Half of the sixth line: the record of a session whose recorder died mid-write.
    let end = golden.match_indices('\n').nth(5).map(|(i, _)| i).unwrap();
    let start = golden[..end].rfind('\n').unwrap() + 1;
    std::fs::write(&cut, &golden[..start + (end - start) / 2]).unwrap();
    let junit = dir.join("out.xml");
    let out = replay(&["--junit", junit.to_str().unwrap(), cut.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!("PARTIAL  {}", cut.display())),
        "{stdout}"
    );
    assert!(stdout.contains("0 passed, 1 not whole"), "{stdout}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    let cases = junit_cases(&xml);
    assert_eq!(cases.len(), 1, "{xml}");
    let (message, _) = cases[0].1.as_ref().expect("a failure case");
    assert!(
        message.contains("the record is cut short: line 6"),
        "{message}"
    );
    assert!(xml.contains("failures=\"1\""), "{xml}");

    let out = replay(&[
        "--allow-truncated",
        "--junit",
        junit.to_str().unwrap(),
        cut.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let stdout = text(&out.stdout);
    assert!(stdout.contains("1 passed, 0 not whole"), "{stdout}");
    assert!(
        stdout.contains("not whole: the record is cut short"),
        "{stdout}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        junit_cases(&xml)
            .iter()
            .all(|(_, failure)| failure.is_none()),
        "{xml}"
    );
}
