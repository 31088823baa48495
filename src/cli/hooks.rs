//! `hookloop hooks install | uninstall <host>`: a host's configuration files changed so that
//! its MCP servers run behind `hookloop mcp proxy` and `hookloop hook <host>` runs at its
//! events (`hookloop::bridge::install`).

use std::io::Write;
use std::process::ExitCode;

use hookloop::bridge::hosts::Host;
use hookloop::bridge::install::{self, Action, Places, Request, Scope};

use super::{Failure, exit};

/// Runs one install or uninstall; `dry_run` prints the change and writes nothing.
pub fn run(action: Action, host: &str, user: bool, dry_run: bool) -> ExitCode {
    let Some(host) = Host::from_name(host) else {
        let known: Vec<&str> = Host::ALL.iter().map(|h| h.name()).collect();
        return Failure::usage(format!(
            "`{host}` is not a host hookloop knows ({})",
            known.join(", ")
        ))
        .report();
    };
    let hookloop = match std::env::current_exe() {
        Ok(path) => path.display().to_string(),
        Err(e) => return Failure::failed(format!("the path of this hookloop: {e}")).report(),
    };
    let places = match Places::from_env() {
        Ok(places) => places,
        Err(e) => return Failure::failed(e).report(),
    };
    let request = Request {
        host,
        action,
        scope: if user { Scope::User } else { Scope::Project },
        hookloop,
    };
    let outcome = if dry_run {
        install::plan(&request, &places)
    } else {
        install::apply(&request, &places)
    };
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => return Failure::failed(e).report(),
    };
    let mut stderr = std::io::stderr().lock();
    for note in &outcome.notes {
        let _ = writeln!(stderr, "hookloop hooks: {note}");
    }
    let mut stdout = std::io::stdout().lock();
    for change in &outcome.changes {
        let path = change.path.display();
        let line = match (change.changes(), dry_run, &change.after) {
            (false, _, _) => format!("{path}: nothing to change"),
            (true, true, _) => change.diff(),
            (true, false, None) => format!("{path}: removed"),
            (true, false, Some(_)) => format!("{path}: written"),
        };
        let _ = writeln!(stdout, "{}", line.trim_end());
    }
    ExitCode::from(exit::OK)
}
