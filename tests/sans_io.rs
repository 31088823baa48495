//! The core stays sans-IO: `src/machine/` and `src/supervisor/` never reach tokio, rmcp,
//! reqwest, a clock, the environment or randomness. A reach-out there would break exact replay.

use std::fs;
use std::path::Path;

const FORBIDDEN: &[&str] = &[
    "tokio",
    "rmcp",
    "reqwest",
    "hyper",
    "Instant::now",
    "SystemTime",
    "std::env",
    "std::fs",
    "std::net",
    "std::process",
    "std::thread",
    "rand::",
    "fastrand",
    "getrandom",
];

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn the_machine_does_not_reach_out() {
    assert_sans_io("src/machine", 5);
}

#[test]
fn the_supervisor_does_not_reach_out() {
    assert_sans_io("src/supervisor", 1);
}

/// Fails naming every line of the files under `dir` (at least `min_files` of them) that uses a
/// forbidden path.
fn assert_sans_io(dir: &str, min_files: usize) {
    let mut files = Vec::new();
    rust_files(&Path::new(env!("CARGO_MANIFEST_DIR")).join(dir), &mut files);
    assert!(
        files.len() >= min_files,
        "expected the files of {dir}, found {files:?}"
    );
    let mut offences = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            for word in FORBIDDEN {
                if code.contains(word) {
                    offences.push(format!(
                        "{}:{}: {word}: {}",
                        file.display(),
                        n + 1,
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(
        offences.is_empty(),
        "{dir} must stay sans-IO:\n{}",
        offences.join("\n")
    );
}
