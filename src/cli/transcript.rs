//! `hookloop transcript show`: a transcript as a person reads it, as JSON for tools, or as one
//! self-contained HTML page.

use std::path::Path;
use std::process::ExitCode;

use hookloop::Config;
use hookloop::machine::Message;
use hookloop::text::for_terminal;
use hookloop::transcript::{ForkPoint, Recorder, SessionView, Transcript, write_html};

use crate::cli::{Failure, exit, run, wire};

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
        // Recorded text is a model's, a tool's or a server's: the same rule as `run`'s output.
        ShowFormat::Text => print!("{}", for_terminal(&view.to_text())),
        ShowFormat::Json => match serde_json::to_string_pretty(&view) {
            Ok(json) => println!("{json}"),
            Err(e) => return Failure::failed(format!("cannot write JSON: {e}")).report(),
        },
        ShowFormat::Html(out) => {
            let title = file.file_name().map_or_else(
                || file.display().to_string(),
                |name| name.to_string_lossy().into_owned(),
            );
            if let Err(e) = write_html(&view, &title, &out) {
                return Failure::failed(format!("cannot write {}: {e}", out.display())).report();
            }
            println!("{}: {}", out.display(), for_terminal(&view.end.to_string()));
        }
    }
    if view.end.is_complete() {
        ExitCode::from(exit::OK)
    } else {
        eprintln!(
            "{}: {}",
            file.display(),
            for_terminal(&view.end.to_string())
        );
        ExitCode::from(exit::FAILED)
    }
}

/// `hookloop replay FILE --until POINT --live`: replays the record up to POINT, then goes on
/// with the configured provider and live MCP servers (as `hookloop run` would), and prints the
/// model's last answer. The exit status is `run`'s.
pub async fn fork(
    file: &Path,
    point: &str,
    objection: Option<&str>,
    record: Option<&Path>,
    mcp_config: Option<&Path>,
) -> ExitCode {
    match run_fork(file, point, objection, record, mcp_config).await {
        Ok(code) => code,
        Err(failure) => failure.report(),
    }
}

async fn run_fork(
    file: &Path,
    point: &str,
    objection: Option<&str>,
    record: Option<&Path>,
    mcp_config: Option<&Path>,
) -> Result<ExitCode, Failure> {
    let point: ForkPoint = point
        .parse()
        .map_err(|e| Failure::usage(format!("--until {e}")))?;
    let transcript =
        Transcript::read(file).map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?;
    let fork = hookloop::transcript::fork(&transcript, point, objection)
        .map_err(|e| Failure::usage(format!("{}: {e}", file.display())))?;
    let config = Config::from_env()?;
    let llm = wire::model_from_env()?;
    let host = super::live_host(mcp_config, &transcript.header.config.policy).await?;
    let recorder = record
        .map(|path| {
            Recorder::create(path, &fork.header)
                .map_err(|e| Failure::usage(format!("--record {}: {e}", path.display())))
        })
        .transpose()?;
    let mut run = fork
        .run(config, llm, host, recorder.clone())
        .await
        .map_err(Failure::failed)?;
    run.session.close().await.map_err(Failure::failed)?;
    if let Some(recorder) = recorder {
        recorder.check().map_err(Failure::failed)?;
    }
    let answer = run
        .session
        .history()
        .iter()
        .rev()
        .find_map(|message| match message {
            Message::Assistant { text, .. } if !text.is_empty() => Some(text.as_str()),
            _ => None,
        });
    if let Some(answer) = answer {
        println!("{}", for_terminal(answer));
    }
    Ok(ExitCode::from(run::stop_code(run.stop)))
}
