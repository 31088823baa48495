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
use crate::machine::HookReply;
use crate::transcript::{End, Entry, EntryKind, SessionView};

/// The picture's size in CSS pixels; it scales with the page.
const WIDTH: f64 = 960.0;
/// Room for the lane names on the left.
const LEFT: f64 = 90.0;
const RIGHT: f64 = 40.0;
/// The narrowest bar drawn, so an instant round still shows.
const MIN_BAR: f64 = 3.0;

/// The lanes of the timeline, top to bottom: name and vertical centre.
const LANES: [(&str, f64); 6] = [
    ("prompts", 30.0),
    ("model", 60.0),
    ("tools", 90.0),
    ("hooks", 120.0),
    ("events", 150.0),
    ("servers", 180.0),
];
const AXIS_Y: f64 = 202.0;
const HEIGHT: f64 = 225.0;
const BAR: f64 = 16.0;

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

/// Where things go on the horizontal axis: by time, or by record when no time passed (a
/// session recorded under a paused clock), so the picture still separates its steps.
enum Axis {
    Time { end_ms: u64 },
    Records { count: usize },
}

impl Axis {
    fn of(view: &SessionView) -> Self {
        let end_ms = view.entries.iter().map(entry_end_ms).max().unwrap_or(0);
        if end_ms > 0 {
            Self::Time { end_ms }
        } else {
            let count = view.entries.last().map_or(1, |e| e.index + 1);
            Self::Records { count }
        }
    }

    /// The x of a point at `at_ms`, record `index`.
    fn x(&self, at_ms: u64, index: usize) -> f64 {
        let span = WIDTH - LEFT - RIGHT;
        let fraction = match self {
            Self::Time { end_ms } => at_ms as f64 / *end_ms as f64,
            Self::Records { count } => index as f64 / (*count).max(1) as f64,
        };
        LEFT + fraction * span
    }

    fn label(&self) -> String {
        match self {
            Self::Time { end_ms } => format!("time (0 – {end_ms} ms)"),
            Self::Records { count } => {
                format!("records 0 – {count} (no time passed: by record order)")
            }
        }
    }

    fn ticks(&self) -> Vec<(f64, String)> {
        const TICKS: u64 = 5;
        match self {
            Self::Time { end_ms } => (0..=TICKS)
                .map(|i| {
                    // `end_ms * i` overflows for a time near u64::MAX; this cannot.
                    let at = end_ms / TICKS * i + end_ms % TICKS * i / TICKS;
                    (self.x(at, 0), format!("{at} ms"))
                })
                .collect(),
            Self::Records { count } => (0..=TICKS)
                .map(|i| {
                    let index = *count * i as usize / TICKS as usize;
                    (self.x(0, index), format!("#{index}"))
                })
                .collect(),
        }
    }
}

/// The latest time an entry covers: its answers included.
fn entry_end_ms(entry: &Entry) -> u64 {
    match &entry.kind {
        EntryKind::Tools { calls } => calls
            .iter()
            .filter_map(|run| run.done_ms)
            .max()
            .unwrap_or(entry.at_ms),
        // Times come from the file: an edited or corrupt one may hold any u64.
        EntryKind::HookRound { answers, .. } => entry.at_ms.saturating_add(
            answers
                .iter()
                .filter_map(|a| a.latency_ms)
                .max()
                .unwrap_or(0),
        ),
        EntryKind::Catalog { .. }
        | EntryKind::Prompt { .. }
        | EntryKind::Request { .. }
        | EntryKind::Reply { .. }
        | EntryKind::ModelFailed { .. }
        | EntryKind::Objection { .. }
        | EntryKind::Compaction { .. }
        | EntryKind::PostCompactInjected { .. }
        | EntryKind::HookInjected { .. }
        | EntryKind::ToolDenied { .. }
        | EntryKind::Permission { .. }
        | EntryKind::PermissionRejected { .. }
        | EntryKind::HookSkipped { .. }
        | EntryKind::HookFailedOpen { .. }
        | EntryKind::StopSkipped { .. }
        | EntryKind::UnknownToolRefused { .. }
        | EntryKind::ServerKilled { .. }
        | EntryKind::ServerStarted { .. }
        | EntryKind::StartFailed { .. }
        | EntryKind::ServerExited { .. }
        | EntryKind::RestartScheduled { .. }
        | EntryKind::ServerRetired { .. }
        | EntryKind::Cancelled
        | EntryKind::Finish { .. }
        | EntryKind::Closed => entry.at_ms,
    }
}

fn lane_y(name: &str) -> f64 {
    LANES
        .iter()
        .find(|(lane, _)| *lane == name)
        .map_or(0.0, |(_, y)| *y)
}

/// One bar of the picture: a lane, a class, the span, and what its tooltip says.
struct Bar {
    lane: &'static str,
    class: &'static str,
    x: f64,
    end: f64,
    title: String,
}

/// One mark: a point event.
struct Mark {
    lane: &'static str,
    class: &'static str,
    x: f64,
    title: String,
}

fn timeline(view: &SessionView) -> Markup {
    let axis = Axis::of(view);
    let mut bars = Vec::new();
    let mut marks = Vec::new();
    let mut ticks = Vec::new();
    let mut rules = Vec::new();
    // A request's bar ends at its reply: remember where each round started.
    let mut open_round: Option<(usize, &'static str, f64, usize)> = None;
    for entry in &view.entries {
        let x = axis.x(entry.at_ms, entry.index);
        match &entry.kind {
            EntryKind::Prompt { number, text } => marks.push(Mark {
                lane: "prompts",
                class: "prompt",
                x,
                title: format!("prompt {number}: {text}"),
            }),
            EntryKind::Request { round, purpose, .. } => {
                let class = match purpose {
                    crate::machine::Purpose::Turn => "round",
                    crate::machine::Purpose::Summary { .. } => "summary-round",
                };
                open_round = Some((*round, class, x, entry.index));
            }
            EntryKind::Reply {
                round, latency_ms, ..
            }
            | EntryKind::ModelFailed {
                round, latency_ms, ..
            } => {
                let (class, start) = match open_round.take() {
                    Some((open, class, start, _)) if open == *round => (class, start),
                    _ => ("round", x),
                };
                let failed = matches!(entry.kind, EntryKind::ModelFailed { .. });
                bars.push(Bar {
                    lane: "model",
                    class: if failed { "failed-round" } else { class },
                    x: start,
                    end: x,
                    title: format!("model round {round}: {latency_ms} ms"),
                });
            }
            EntryKind::Tools { calls } => {
                let done = calls.iter().filter_map(|run| run.done_ms).max();
                let end = axis.x(done.unwrap_or(entry.at_ms), entry.index + calls.len());
                let names: Vec<&str> = calls.iter().map(|run| run.call.name.as_str()).collect();
                bars.push(Bar {
                    lane: "tools",
                    class: "tool-round",
                    x,
                    end,
                    title: format!("tools: {}", names.join(", ")),
                });
            }
            EntryKind::HookRound {
                hook,
                number,
                answers,
                ..
            } => {
                let mut latest = entry.at_ms;
                for (i, answer) in answers.iter().enumerate() {
                    let Some(latency) = answer.latency_ms else {
                        continue;
                    };
                    latest = latest.max(entry.at_ms.saturating_add(latency));
                    let (class, note) = match &answer.reply {
                        Some(HookReply::TimedOut) => ("timeout", " (timed out)"),
                        Some(HookReply::Skipped { .. }) => ("skipped", " (skipped)"),
                        Some(HookReply::Failed { .. }) => ("timeout", " (failed)"),
                        Some(HookReply::Text { .. } | HookReply::ErrorResult { .. }) | None => {
                            ("answer", "")
                        }
                    };
                    let on = match answer.subject {
                        Some(subject) => format!(" on subject {subject}"),
                        None => String::new(),
                    };
                    ticks.push(Mark {
                        lane: "hooks",
                        class,
                        x: axis.x(entry.at_ms.saturating_add(latency), entry.index + i + 1),
                        title: format!(
                            "{} answered {hook}{on} after {latency} ms{note}",
                            answer.server,
                        ),
                    });
                }
                bars.push(Bar {
                    lane: "hooks",
                    class: "hook-round",
                    x,
                    end: axis.x(latest, entry.index + answers.len()),
                    title: format!(
                        "{hook} round {number}: {} server(s), {} ms",
                        answers.len(),
                        latest - entry.at_ms
                    ),
                });
            }
            EntryKind::Objection {
                server,
                text,
                budget_left,
            } => marks.push(Mark {
                lane: "events",
                class: "objection",
                x,
                title: format!("objection from {server} (budget left {budget_left}): {text}"),
            }),
            EntryKind::Compaction {
                messages_before,
                messages_after,
                ..
            } => rules.push(Mark {
                lane: "events",
                class: "compaction",
                x,
                title: format!("compaction: {messages_before} → {messages_after} messages"),
            }),
            EntryKind::ServerKilled { server } => marks.push(Mark {
                lane: "events",
                class: "kill",
                x,
                title: format!("server {server} killed"),
            }),
            EntryKind::ToolDenied { server, tool, text } => marks.push(Mark {
                lane: "events",
                class: "denial",
                x,
                title: format!("_PreToolUse on {server} denied {tool}: {text}"),
            }),
            EntryKind::PermissionRejected { tool, standing, .. } => marks.push(Mark {
                lane: "events",
                class: "denial",
                x,
                title: format!(
                    "the user rejected {tool}{}",
                    if *standing { " (always)" } else { "" }
                ),
            }),
            EntryKind::HookInjected { hook, server, text } => marks.push(Mark {
                lane: "events",
                class: "injection",
                x,
                title: format!("{hook} from {server} injected: {text}"),
            }),
            EntryKind::PostCompactInjected { server, text } => marks.push(Mark {
                lane: "events",
                class: "injection",
                x,
                title: format!("_PostCompact from {server} injected: {text}"),
            }),
            EntryKind::ServerStarted { server } => marks.push(Mark {
                lane: "servers",
                class: "started",
                x,
                title: format!("server {server} started"),
            }),
            EntryKind::StartFailed { server, error } => marks.push(Mark {
                lane: "servers",
                class: "exited",
                x,
                title: format!("server {server} failed to start: {error}"),
            }),
            EntryKind::ServerExited { server, reason, .. } => marks.push(Mark {
                lane: "servers",
                class: "exited",
                x,
                title: format!("server {server} exited: {reason}"),
            }),
            EntryKind::RestartScheduled { server, after_ms } => marks.push(Mark {
                lane: "servers",
                class: "restart",
                x,
                title: format!("server {server} restart scheduled in {after_ms} ms"),
            }),
            EntryKind::ServerRetired { server, bad_ends } => marks.push(Mark {
                lane: "servers",
                class: "retired",
                x,
                title: format!("server {server} retired after {bad_ends} bad end(s)"),
            }),
            EntryKind::Catalog { .. }
            | EntryKind::HookSkipped { .. }
            | EntryKind::HookFailedOpen { .. }
            | EntryKind::StopSkipped { .. }
            | EntryKind::UnknownToolRefused { .. }
            | EntryKind::Permission { .. }
            | EntryKind::Cancelled
            | EntryKind::Finish { .. }
            | EntryKind::Closed => {}
        }
    }
    // A request whose reply the transcript does not hold still shows, as an instant.
    if let Some((round, class, start, _)) = open_round {
        bars.push(Bar {
            lane: "model",
            class,
            x: start,
            end: start,
            title: format!("model round {round}: no reply recorded"),
        });
    }
    let view_box = format!("0 0 {WIDTH} {HEIGHT}");
    html! {
        svg xmlns="http://www.w3.org/2000/svg" viewBox=(view_box) role="img"
            aria-label="timeline of the session" {
            @for (name, y) in LANES {
                line.lane x1=(LEFT) x2=(WIDTH - RIGHT) y1=(y) y2=(y) {}
                text x="8" y=(y + 4.0) { (name) }
            }
            line.lane x1=(LEFT) x2=(WIDTH - RIGHT) y1=(AXIS_Y) y2=(AXIS_Y) {}
            @for (x, label) in axis.ticks() {
                line.lane x1=(x) x2=(x) y1=(AXIS_Y - 4.0) y2=(AXIS_Y + 4.0) {}
                text x=(x) y=(AXIS_Y + 16.0) text-anchor="middle" { (label) }
            }
            text x=(WIDTH - RIGHT) y="12" text-anchor="end" { (axis.label()) }
            @for rule in &rules {
                line class=(rule.class) x1=(rule.x) x2=(rule.x) y1="14" y2=(AXIS_Y) {
                    title { (rule.title) }
                }
            }
            @for bar in &bars {
                rect class=(bar.class) x=(bar.x) y=(lane_y(bar.lane) - BAR / 2.0)
                    width=((bar.end - bar.x).max(MIN_BAR)) height=(BAR) rx="2" {
                    title { (bar.title) }
                }
            }
            @for tick in &ticks {
                line class=(tick.class) x1=(tick.x) x2=(tick.x)
                    y1=(lane_y(tick.lane) - BAR / 2.0 - 3.0) y2=(lane_y(tick.lane) + BAR / 2.0 + 3.0) {
                    title { (tick.title) }
                }
            }
            @for mark in &marks {
                circle class=(mark.class) cx=(mark.x) cy=(lane_y(mark.lane)) r="5" {
                    title { (mark.title) }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_near_the_end_of_u64_draw_without_overflow() {
        // The end time comes from the file's `at_ms`, which may hold any u64.
        let axis = Axis::Time { end_ms: u64::MAX };
        let ticks = axis.ticks();
        assert_eq!(ticks.len(), 6);
        assert_eq!(ticks[5].1, format!("{} ms", u64::MAX));
        assert_eq!(ticks[0].1, "0 ms");
    }
}
