//! A session as one self-contained HTML page: a timeline picture (model rounds on a time axis,
//! tool and hook rounds with their latencies, objections, compactions and kills marked) above
//! the readable conversation. No script and nothing fetched: styles are inline and the picture
//! is inline SVG, so the page opens anywhere, offline, and can be attached to a CI run.
//!
//! The markup comes from [`maud`] templates, which escape every value from the transcript.

use std::io;
use std::path::Path;

use maud::{DOCTYPE, Markup, PreEscaped, html};

use crate::hooks::Hook;
use crate::transcript::{End, Entry, SessionView};

use self::timeline::timeline;

mod timeline;

const STYLE: &str = "
body { font: 14px/1.45 system-ui, sans-serif; margin: 1.5rem auto; max-width: 70rem; color: #1d232a; padding: 0 1rem; }
h1 { font-size: 1.3rem; margin-bottom: .2rem; }
.meta { color: #5a6470; margin: .1rem 0; }
.end { padding: .5rem .8rem; border-radius: 4px; margin: .8rem 0; }
.end.complete { background: #e7f5ea; }
.end.stopped { background: #fdecea; }
svg { width: 100%; height: auto; border: 1px solid #d8dde3; border-radius: 4px; background: #fbfcfd; }
svg text { font: 11px system-ui, sans-serif; fill: #5a6470; }
svg rect { stroke: #fbfcfd; stroke-width: 1; }
.lane { stroke: #e4e8ec; }
.round { fill: #4a7fd6; }
.summary-round { fill: #8f6ad8; }
.failed-round { fill: #d64a4a; }
.tool-round { fill: #3aa37a; }
.hook-round { fill: #e0a33a; }
.answer { stroke: #8a5a00; stroke-width: 2; }
.timeout { stroke: #d64a4a; stroke-width: 2; }
.prompt { fill: #1d232a; }
.objection { fill: #d64a4a; }
.compaction { stroke: #8f6ad8; stroke-width: 2; stroke-dasharray: 4 3; }
.kill { fill: #fbfcfd; stroke: #1d232a; stroke-width: 2; }
.skipped { stroke: #9aa3ad; stroke-width: 2; stroke-dasharray: 2 2; }
.denial { fill: #b8327a; }
.injection { fill: #e0a33a; }
.started { fill: #3aa37a; }
.exited { fill: #fbfcfd; stroke: #d64a4a; stroke-width: 2; }
.restart { fill: #fbfcfd; stroke: #3aa37a; stroke-width: 2; }
.retired { fill: #1d232a; }
svg .agent text { fill: #5b45a3; font-family: monospace; }
.entry { border-left: 4px solid #d8dde3; margin: .6rem 0; padding: .2rem .8rem; }
.entry h3 { font-size: .95rem; margin: .2rem 0; font-weight: 600; }
.entry .at { color: #5a6470; font-weight: normal; font-variant-numeric: tabular-nums; }
.entry pre { margin: .2rem 0 .4rem; white-space: pre-wrap; word-break: break-word; font-size: 12.5px; }
.entry-prompt { border-color: #1d232a; }
.entry-request { border-color: #4a7fd6; }
.entry-reply { border-color: #4a7fd6; background: #f3f7fd; }
.entry-tools { border-color: #3aa37a; }
.entry-hook_round { border-color: #e0a33a; }
.entry-objection { border-color: #d64a4a; background: #fdf3f2; }
.entry-compaction { border-color: #8f6ad8; }
.entry-tool_denied { border-color: #b8327a; background: #fbf1f6; }
.entry-hook_injected { border-color: #e0a33a; }
.entry-server_exited, .entry-start_failed, .entry-server_retired { border-color: #d64a4a; }
.entry-server_started, .entry-restart_scheduled { border-color: #3aa37a; }
.lane { margin-left: 2em; padding-left: 0.8em; border-left: 2px dashed #8a6fd1; }
.lane h4 { margin: 0.4em 0; color: #5b45a3; font-family: monospace; }
";

/// The session as one HTML page.
pub fn render_html(view: &SessionView, title: &str) -> String {
    page(view, title).into_string()
}

/// Writes [`render_html`]'s page to `path`, created mode 0600 as transcripts are: the page holds
/// everything the session said.
pub fn write_html(view: &SessionView, title: &str, path: &Path) -> io::Result<()> {
    crate::private::write_file(path, render_html(view, title))
}

fn page(view: &SessionView, title: &str) -> Markup {
    let (end_class, end_text) = match &view.end {
        End::Complete { .. } => ("end complete", view.end.to_string()),
        End::Truncated { .. } | End::Diverged { .. } => ("end stopped", view.end.to_string()),
    };
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { "hookloop transcript — " (title) }
                style { (PreEscaped(STYLE)) }
            }
            body {
                h1 { (title) }
                p.meta { "format " (view.version) ", engine " (view.engine) }
                p.meta { (view.policy_line()) }
                @if let Some(system) = &view.system_prompt {
                    p.meta { "system: " (system) }
                }
                p.meta {
                    (view.rounds()) " model round(s), " (view.hook_rounds()) " hook round(s), "
                    (view.objections()) " objection(s), " (view.compactions()) " compaction(s)"
                }
                (timeline(view))
                div class=(end_class) { pre { (end_text) } }
                @for entry in &view.entries {
                    (entry_markup(entry, Hook::Stop))
                }
            }
        }
    }
}

/// An entry of an agent asked `stop` at an end of turn, and the lanes of the subagents it ran.
fn entry_markup(entry: &Entry, stop: Hook) -> Markup {
    let text = entry.kind.to_text_as(stop);
    let mut lines = text.lines();
    let headline = lines.next().unwrap_or_default();
    // Detail lines carry the text view's indent; the page indents with its own styles.
    let details: Vec<&str> = lines.map(|line| line.trim_start()).collect();
    html! {
        div class=(format!("entry entry-{}", entry.kind.name())) id=(format!("r{}", entry.index)) {
            h3 {
                span.at { (entry.at_ms) " ms · #" (entry.index) " · " }
                (headline)
            }
            @if !details.is_empty() {
                pre { (details.join("\n")) }
            }
        }
        @for lane in entry.kind.agent_lanes() {
            div.lane id=(format!("lane-{}", lane.id)) {
                h4 { "subagent " (lane.id) }
                @for entry in &lane.entries {
                    (entry_markup(entry, Hook::SubagentStop))
                }
            }
        }
    }
}
