//! `hookloop transcript show`: a transcript as a person reads it, as JSON for tools, or as one
//! self-contained HTML page.

use std::path::Path;
use std::process::ExitCode;

use hookloop::transcript::{SessionView, Transcript, render_html};

use crate::cli::{Failure, exit};

/// How `show` prints the session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ShowFormat {
    Text,
    Json,
    /// One self-contained page written to this file.
    Html(std::path::PathBuf),
}

/// `hookloop transcript show FILE`: prints the session; exit 1 when it stops early (cut short
/// or diverged), after showing everything up to there.
pub fn show(file: &Path, format: ShowFormat) -> ExitCode {
    let transcript = match Transcript::read(file) {
        Ok(transcript) => transcript,
        Err(e) => return Failure::usage(format!("{}: {e}", file.display())).report(),
    };
    let view = SessionView::build(&transcript);
    match format {
        ShowFormat::Text => print!("{}", view.to_text()),
        ShowFormat::Json => match serde_json::to_string_pretty(&view) {
            Ok(json) => println!("{json}"),
            Err(e) => return Failure::failed(format!("cannot write JSON: {e}")).report(),
        },
        ShowFormat::Html(out) => {
            let title = file.file_name().map_or_else(
                || file.display().to_string(),
                |name| name.to_string_lossy().into_owned(),
            );
            if let Err(e) = std::fs::write(&out, render_html(&view, &title)) {
                return Failure::failed(format!("cannot write {}: {e}", out.display())).report();
            }
            println!("{}: {}", out.display(), view.end);
        }
    }
    if view.end.is_complete() {
        ExitCode::from(exit::OK)
    } else {
        eprintln!("{}: {}", file.display(), view.end);
        ExitCode::from(exit::FAILED)
    }
}
