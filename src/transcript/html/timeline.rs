//! The page's timeline picture: the session's steps on a lane per kind (prompts, model rounds,
//! tool rounds, hook rounds, events, servers) over a shared time axis, and below them a lane
//! per subagent, labelled with its id, that holds all of that subagent's steps. One lane is
//! enough for a subagent because its machine waits for one thing at a time: its model rounds,
//! tool rounds and hook rounds never overlap. Subagents nested in a subagent get lanes of
//! their own, in the order their calls started.

use maud::{Markup, html};

use crate::machine::{AgentId, HookReply, Purpose};
use crate::transcript::{Entry, EntryKind, SessionView};

/// The picture's width in CSS pixels; it scales with the page.
const WIDTH: f64 = 960.0;
/// Room for the lane names on the left.
const LEFT: f64 = 90.0;
const RIGHT: f64 = 40.0;
/// The narrowest bar drawn, so an instant round still shows.
const MIN_BAR: f64 = 3.0;

/// The session's lanes, top to bottom: name and vertical centre.
const LANES: [(&str, f64); 6] = [
    ("prompts", 30.0),
    ("model", 60.0),
    ("tools", 90.0),
    ("hooks", 120.0),
    ("events", 150.0),
    ("servers", 180.0),
];
/// From one lane's centre to the next.
const LANE_GAP: f64 = 30.0;
/// From the last lane's centre to the axis, and from the axis to the picture's bottom.
const ABOVE_AXIS: f64 = 22.0;
const BELOW_AXIS: f64 = 23.0;
const BAR: f64 = 16.0;
/// The characters of a subagent's id its lane's label shows; the whole id is in its tooltip.
const LABEL_CHARS: usize = 12;

/// The timeline of `view`: the session's lanes, then a lane per subagent.
pub(super) fn timeline(view: &SessionView) -> Markup {
    let axis = Axis::of(view);
    let mut session = Layer::default();
    let mut agents = Vec::new();
    draw(
        &axis,
        &view.entries,
        Rows::Session,
        0,
        &mut session,
        &mut agents,
    );
    let axis_y = last_lane(&agents) + ABOVE_AXIS;
    let view_box = format!("0 0 {WIDTH} {}", axis_y + BELOW_AXIS);
    html! {
        svg xmlns="http://www.w3.org/2000/svg" viewBox=(view_box) role="img"
            aria-label="timeline of the session" {
            @for (name, y) in LANES {
                line.lane x1=(LEFT) x2=(WIDTH - RIGHT) y1=(y) y2=(y) {}
                text x="8" y=(y + 4.0) { (name) }
            }
            @for agent in &agents {
                line.lane x1=(LEFT) x2=(WIDTH - RIGHT) y1=(agent.y) y2=(agent.y) {}
            }
            line.lane x1=(LEFT) x2=(WIDTH - RIGHT) y1=(axis_y) y2=(axis_y) {}
            @for (x, label) in axis.ticks() {
                line.lane x1=(x) x2=(x) y1=(axis_y - 4.0) y2=(axis_y + 4.0) {}
                text x=(x) y=(axis_y + 16.0) text-anchor="middle" { (label) }
            }
            text x=(WIDTH - RIGHT) y="12" text-anchor="end" { (axis.label()) }
            // A session's compaction rules the whole picture: every lane works on after it.
            @for rule in &session.rules {
                line class=(rule.class) x1=(rule.x) x2=(rule.x) y1="14" y2=(axis_y) {
                    title { (rule.title) }
                }
            }
            (layer_markup(&session))
            @for agent in &agents {
                g.agent data-agent=(agent.id) {
                    text x=(8.0 + 6.0 * (agent.depth - 1) as f64) y=(agent.y + 4.0) {
                        title { "subagent " (agent.id) }
                        (label(&agent.id))
                    }
                    (layer_markup(&agent.layer))
                }
            }
        }
    }
}

/// Where one agent's steps are drawn.
#[derive(Clone, Copy)]
enum Rows {
    /// The session's: each kind of step on its lane of [`LANES`].
    Session,
    /// A subagent's: every step on its one lane, centred at this height.
    Agent(f64),
}

impl Rows {
    /// The centre of the lane a step of `lane`'s kind is drawn on.
    fn y(self, lane: &str) -> f64 {
        match self {
            Self::Session => LANES
                .iter()
                .find(|(name, _)| *name == lane)
                .map_or(0.0, |(_, y)| *y),
            Self::Agent(y) => y,
        }
    }
}

/// One bar of the picture: a class, the span, and what its tooltip says.
struct Bar {
    y: f64,
    class: &'static str,
    x: f64,
    end: f64,
    title: String,
}

/// One mark: a point event.
struct Mark {
    y: f64,
    class: &'static str,
    x: f64,
    title: String,
}

/// What one agent's steps draw.
#[derive(Default)]
struct Layer {
    bars: Vec<Bar>,
    /// Points on a lane: prompts, objections, kills, denials, injections, server events.
    marks: Vec<Mark>,
    /// Short lines across a lane: a server's answer in a hook round; a subagent's compaction.
    ticks: Vec<Mark>,
    /// Lines across the whole picture: the session's compactions.
    rules: Vec<Mark>,
}

/// A subagent's lane: the agent, how deep it is nested (1 for the session's own children),
/// the lane's centre and what its steps draw.
struct AgentRow {
    id: AgentId,
    depth: usize,
    y: f64,
    layer: Layer,
}

/// The centre of the lowest lane drawn so far: the last subagent's, or the session's last.
fn last_lane(agents: &[AgentRow]) -> f64 {
    agents.last().map_or(LANES[LANES.len() - 1].1, |a| a.y)
}

/// The lane label of a subagent: its id, cut to [`LABEL_CHARS`] characters.
fn label(id: &AgentId) -> String {
    let id = id.to_string();
    if id.chars().count() <= LABEL_CHARS {
        id
    } else {
        let cut: String = id.chars().take(LABEL_CHARS - 1).collect();
        format!("{cut}…")
    }
}

fn layer_markup(layer: &Layer) -> Markup {
    html! {
        @for bar in &layer.bars {
            rect class=(bar.class) x=(bar.x) y=(bar.y - BAR / 2.0)
                width=((bar.end - bar.x).max(MIN_BAR)) height=(BAR) rx="2" {
                title { (bar.title) }
            }
        }
        @for tick in &layer.ticks {
            line class=(tick.class) x1=(tick.x) x2=(tick.x)
                y1=(tick.y - BAR / 2.0 - 3.0) y2=(tick.y + BAR / 2.0 + 3.0) {
                title { (tick.title) }
            }
        }
        @for mark in &layer.marks {
            circle class=(mark.class) cx=(mark.x) cy=(mark.y) r="5" {
                title { (mark.title) }
            }
        }
    }
}

/// Draws `entries`, the steps of an agent nested `depth` deep (0 for the session), on `rows`
/// into `layer`; each subagent an entry started gets the next lane below in `agents`, its
/// steps drawn there in turn.
fn draw(
    axis: &Axis,
    entries: &[Entry],
    rows: Rows,
    depth: usize,
    layer: &mut Layer,
    agents: &mut Vec<AgentRow>,
) {
    // A request's bar ends at its reply: remember where each round started.
    let mut open_round: Option<(usize, &'static str, f64)> = None;
    for entry in entries {
        let x = axis.x(entry.at_ms, entry.index);
        draw_entry(axis, entry, x, rows, layer, &mut open_round);
        for lane in entry.kind.agent_lanes() {
            let y = last_lane(agents) + LANE_GAP;
            agents.push(AgentRow {
                id: lane.id.clone(),
                depth: depth + 1,
                y,
                layer: Layer::default(),
            });
            let at = agents.len() - 1;
            let mut child = Layer::default();
            draw(
                axis,
                &lane.entries,
                Rows::Agent(y),
                depth + 1,
                &mut child,
                agents,
            );
            agents[at].layer = child;
        }
    }
    // A request whose reply the transcript does not hold still shows, as an instant.
    if let Some((round, class, start)) = open_round {
        layer.bars.push(Bar {
            y: rows.y("model"),
            class,
            x: start,
            end: start,
            title: format!("model round {round}: no reply recorded"),
        });
    }
}

/// Draws one step at `x` on `rows`.
fn draw_entry(
    axis: &Axis,
    entry: &Entry,
    x: f64,
    rows: Rows,
    layer: &mut Layer,
    open_round: &mut Option<(usize, &'static str, f64)>,
) {
    let mark = |lane: &str, class, title| Mark {
        y: rows.y(lane),
        class,
        x,
        title,
    };
    match &entry.kind {
        EntryKind::Prompt { number, text } => layer.marks.push(mark(
            "prompts",
            "prompt",
            format!("prompt {number}: {text}"),
        )),
        EntryKind::Request { round, purpose, .. } => {
            let class = match purpose {
                Purpose::Turn => "round",
                Purpose::Summary { .. } => "summary-round",
            };
            *open_round = Some((*round, class, x));
        }
        EntryKind::Reply {
            round, latency_ms, ..
        }
        | EntryKind::ModelFailed {
            round, latency_ms, ..
        } => {
            let (class, start) = match open_round.take() {
                Some((open, class, start)) if open == *round => (class, start),
                _ => ("round", x),
            };
            let failed = matches!(entry.kind, EntryKind::ModelFailed { .. });
            layer.bars.push(Bar {
                y: rows.y("model"),
                class: if failed { "failed-round" } else { class },
                x: start,
                end: x,
                title: format!("model round {round}: {latency_ms} ms"),
            });
        }
        EntryKind::Tools { calls } => {
            let done = calls.iter().filter_map(|run| run.done_ms).max();
            // By record order, an `agent` call lasts until its subagent's last record.
            let last = extent(std::slice::from_ref(entry)).1.unwrap_or(entry.index);
            let end = axis.x(
                done.unwrap_or(entry.at_ms),
                (entry.index + calls.len()).max(last + 1),
            );
            let names: Vec<&str> = calls.iter().map(|run| run.call.name.as_str()).collect();
            layer.bars.push(Bar {
                y: rows.y("tools"),
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
                layer.ticks.push(Mark {
                    y: rows.y("hooks"),
                    class,
                    x: axis.x(entry.at_ms.saturating_add(latency), entry.index + i + 1),
                    title: format!(
                        "{} answered {hook}{on} after {latency} ms{note}",
                        answer.server,
                    ),
                });
            }
            layer.bars.push(Bar {
                y: rows.y("hooks"),
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
        } => layer.marks.push(mark(
            "events",
            "objection",
            format!("objection from {server} (budget left {budget_left}): {text}"),
        )),
        EntryKind::Compaction {
            messages_before,
            messages_after,
            ..
        } => {
            let rule = mark(
                "events",
                "compaction",
                format!("compaction: {messages_before} → {messages_after} messages"),
            );
            match rows {
                Rows::Session => layer.rules.push(rule),
                // A subagent's compaction is its own: it rules its lane only.
                Rows::Agent(_) => layer.ticks.push(rule),
            }
        }
        EntryKind::ServerKilled { server } => {
            layer
                .marks
                .push(mark("events", "kill", format!("server {server} killed")))
        }
        EntryKind::ToolDenied { server, tool, text } => layer.marks.push(mark(
            "events",
            "denial",
            format!("_PreToolUse on {server} denied {tool}: {text}"),
        )),
        EntryKind::PermissionRejected { tool, standing, .. } => layer.marks.push(mark(
            "events",
            "denial",
            format!(
                "the user rejected {tool}{}",
                if *standing { " (always)" } else { "" }
            ),
        )),
        EntryKind::HookInjected { hook, server, text } => layer.marks.push(mark(
            "events",
            "injection",
            format!("{hook} from {server} injected: {text}"),
        )),
        EntryKind::PostCompactInjected { server, text } => layer.marks.push(mark(
            "events",
            "injection",
            format!("_PostCompact from {server} injected: {text}"),
        )),
        EntryKind::ServerStarted { server } => layer.marks.push(mark(
            "servers",
            "started",
            format!("server {server} started"),
        )),
        EntryKind::StartFailed { server, error } => layer.marks.push(mark(
            "servers",
            "exited",
            format!("server {server} failed to start: {error}"),
        )),
        EntryKind::ServerExited { server, reason, .. } => layer.marks.push(mark(
            "servers",
            "exited",
            format!("server {server} exited: {reason}"),
        )),
        EntryKind::RestartScheduled { server, after_ms } => layer.marks.push(mark(
            "servers",
            "restart",
            format!("server {server} restart scheduled in {after_ms} ms"),
        )),
        EntryKind::ServerRetired { server, bad_ends } => layer.marks.push(mark(
            "servers",
            "retired",
            format!("server {server} retired after {bad_ends} bad end(s)"),
        )),
        EntryKind::Catalog { .. }
        | EntryKind::HookSkipped { .. }
        | EntryKind::HookFailedOpen { .. }
        | EntryKind::StopSkipped { .. }
        | EntryKind::UnknownToolRefused { .. }
        | EntryKind::Permission { .. }
        | EntryKind::Cancelled
        | EntryKind::Interrupted
        | EntryKind::Finish { .. }
        | EntryKind::Closed => {}
    }
}

/// Where things go on the horizontal axis: by time, or by record when no time passed (a
/// session recorded under a paused clock), so the picture still separates its steps.
enum Axis {
    Time { end_ms: u64 },
    Records { count: usize },
}

impl Axis {
    /// The axis of `view`, subagents' steps included: a subagent cut short with its session
    /// may be the last thing recorded.
    fn of(view: &SessionView) -> Self {
        let (end_ms, last) = extent(&view.entries);
        if end_ms > 0 {
            Self::Time { end_ms }
        } else {
            let count = last.map_or(1, |index| index + 1);
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

/// The latest time `entries` cover and the last record they start at, their subagents' steps
/// included.
fn extent(entries: &[Entry]) -> (u64, Option<usize>) {
    entries.iter().fold((0, None), |(end, last), entry| {
        let (lanes_end, lanes_last) = entry
            .kind
            .agent_lanes()
            .map(|lane| extent(&lane.entries))
            .fold((0, None), |(e, l), (lane_e, lane_l)| {
                (e.max(lane_e), l.max(lane_l))
            });
        (
            end.max(entry_end_ms(entry)).max(lanes_end),
            last.max(Some(entry.index)).max(lanes_last),
        )
    })
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
        | EntryKind::Interrupted
        | EntryKind::Finish { .. }
        | EntryKind::Closed => entry.at_ms,
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

    #[test]
    fn a_long_subagent_id_is_cut_in_its_label() {
        assert_eq!(label(&AgentId("agent-1".into())), "agent-1");
        let long = label(&AgentId("call_0123456789abcdef".into()));
        assert_eq!(long, "call_012345…");
        assert_eq!(long.chars().count(), LABEL_CHARS);
    }
}
