//! Planted bugs, measured: each of the machine's planted mutations (`machine::planted`, one
//! guard beside the rule it breaks) switched on in turn, the planted machine explored on a setup
//! of a family CI explores (`hookloop::testing::families`, under the family's round cap) to that
//! family's depth, and the bug required to be found, with a shortest counterexample written as
//! a transcript under `target/tmp/planted/<bug>.jsonl` on which `hookloop replay` (the true
//! machine) diverges, while the same facts answered by the true machine replay whole and the
//! true machine holds every invariant on the same setup to the same depth.
//!
//! Each bug is explored on the first setup of its family in which the rule it breaks can act
//! (a `_Stop` bug needs a server with `_Stop` and a budget, a permission bug a family that asks
//! permission); the table the test prints says which. The supervisor's planted bugs are outside
//! the explorer: `tests/supervisor_props.rs` finds them.

use std::path::PathBuf;

use hookloop::hooks::Hook;
use hookloop::machine::planted::{Bug, plant};
use hookloop::machine::{AgentId, Input, Machine};
use hookloop::testing::explore::{Allow, Counterexample, Setup, transcript_of, tree_transcript};
use hookloop::testing::families::{Agent, Family};
use hookloop::transcript::{Transcript, replay_str};

fn has(setup: &Setup, server: usize, hooks: &[Hook]) -> bool {
    setup
        .servers
        .get(server)
        .is_some_and(|bits| hooks.iter().all(|hook| bits & (1 << hook.index()) != 0))
}

fn allowed(setup: &Setup) -> bool {
    setup.allow != Allow::Off
}

/// What a setup needs for a bug's rule to act.
type Fits = fn(&Setup) -> bool;

/// Where each bug is looked for: the CI family, and what a setup of it needs for the rule to
/// act.
fn case(bug: Bug) -> (fn() -> Family, Fits) {
    match bug {
        Bug::HookOffered
        | Bug::HookCallRun
        | Bug::SummaryDropsPrompt
        | Bug::SummaryAfterPrompt
        | Bug::CancelledUnanswered
        | Bug::NeverCompacts
        | Bug::CompactedFlagKept
        | Bug::UsageKeptAcrossCompaction => (Family::single_server_classes, |_| true),
        Bug::HookOnDisallowedServer => (Family::two_servers, |s| s.allow == Allow::One),
        Bug::TimeoutSpeaks
        | Bug::HookUnencoded
        | Bug::KillOnFirstTimeout
        | Bug::SessionStartEveryPrompt => (Family::each_hook_alone, |s| {
            allowed(s) && has(s, 0, &[Hook::SessionStart])
        }),
        // Two timeouts in a row within one prompt.
        Bug::NeverKilled => (Family::every_hook, |_| true),
        Bug::StopBudgetOffByOne => (Family::budgets, |s| s.budget >= 1),
        Bug::ObjectionsResetByCompaction
        | Bug::ObjectionsResetByCatalog
        | Bug::ObjectedSkipsCalls => (Family::budgets, |s| s.budget == 1),
        Bug::InjectionDroppedAfterCompaction => (Family::each_hook_alone, |s| {
            allowed(s) && has(s, 0, &[Hook::PostToolUse])
        }),
        Bug::DeclinedObjectionAsksAgain => (Family::budgets, |s| s.budget >= 2),
        Bug::PreCompactInjected => (Family::each_hook_alone, |s| {
            allowed(s) && has(s, 0, &[Hook::PreCompact])
        }),
        Bug::PostCompactBeforeSummary
        | Bug::PostCompactOwedLostOnCatalog
        | Bug::PostCompactOwedKept => (Family::each_hook_alone, |s| {
            allowed(s) && has(s, 0, &[Hook::PostCompact])
        }),
        Bug::DeniedCallRuns
        | Bug::DenialSpreads
        | Bug::KilledServerForgotten
        | Bug::WithdrawnToolOffered => (Family::each_hook_alone, |s| {
            allowed(s) && has(s, 0, &[Hook::PreToolUse])
        }),
        Bug::PermissionNotAsked
        | Bug::RejectedCallRuns
        | Bug::StandingForgotten
        | Bug::WithdrawnToolRuns
        | Bug::StandingAllowSkips
        | Bug::DestructiveHintsKept
        | Bug::RejectOnceStands => (Family::permission, |_| true),
        Bug::RoundCapOffByOne | Bug::RoundsCarriedOver => (Family::round_cap, |_| true),
        Bug::StandingNotInherited => (Family::parent_and_child, |_| true),
        Bug::ChildOpenAfterCancel
        | Bug::SubagentStopSkipped
        | Bug::SubagentServersDropped
        | Bug::ObjectionsInherited => (Family::parent_and_child, |s| {
            allowed(s) && has(s, 0, &[Hook::SessionStart, Hook::Stop])
        }),
        Bug::RestartPastBudget | Bug::BackoffNotDoubled | Bug::RetiredComesBack => {
            unreachable!("{bug:?} is the supervisor's, which the explorer does not drive")
        }
    }
}

/// The rule that must catch each bug: a bug caught by another rule than the one written for it
/// shows that rule is not doing its job (or that the bug is not the one its name says).
fn caught_by(bug: Bug) -> &'static str {
    use hookloop::testing::{compaction, consent, liveness, rounds, runs, words};
    const STOP: &str = "_Stop is asked at a genuine end of turn exactly when the rules allow";
    const KILL: &str = "a server is killed exactly on its second consecutive timeout";
    const COMPACTED: &str = "a compacted context keeps the running prompt and nothing new";
    match bug {
        Bug::HookOffered => "hooks are never offered to the model",
        Bug::HookCallRun => "hooks are never run by the model",
        Bug::HookOnDisallowedServer | Bug::SessionStartEveryPrompt => liveness::RULE,
        Bug::TimeoutSpeaks | Bug::HookUnencoded => words::RULE,
        Bug::KillOnFirstTimeout | Bug::NeverKilled => KILL,
        Bug::StopBudgetOffByOne
        | Bug::DeclinedObjectionAsksAgain
        | Bug::ObjectionsResetByCompaction
        | Bug::ObjectionsResetByCatalog => STOP,
        Bug::PreCompactInjected => "injections only at their points",
        Bug::SummaryDropsPrompt | Bug::SummaryAfterPrompt => COMPACTED,
        Bug::PostCompactBeforeSummary => "the history only grows between compactions",
        Bug::DeniedCallRuns => "a denied call never runs",
        Bug::PermissionNotAsked | Bug::RejectedCallRuns | Bug::DestructiveHintsKept => {
            consent::RUNS
        }
        Bug::StandingForgotten => consent::STANDING,
        Bug::CancelledUnanswered => "once a batch is over, every call is answered exactly once",
        Bug::WithdrawnToolRuns => "only offered tools run",
        Bug::DenialSpreads
        | Bug::StandingAllowSkips
        | Bug::RejectOnceStands
        | Bug::ObjectedSkipsCalls => runs::RUNS,
        Bug::RoundCapOffByOne => rounds::BOUND,
        Bug::RoundsCarriedOver => rounds::ENDS_AT_CAP,
        Bug::NeverCompacts | Bug::CompactedFlagKept | Bug::UsageKeptAcrossCompaction => {
            compaction::RULE
        }
        Bug::InjectionDroppedAfterCompaction => words::INJECTED,
        Bug::StandingNotInherited => hookloop::testing::explore::INHERITANCE,
        Bug::ChildOpenAfterCancel => hookloop::testing::explore::CANCEL_ENDS_CHILD,
        Bug::SubagentStopSkipped | Bug::ObjectionsInherited => STOP,
        Bug::PostCompactOwedLostOnCatalog | Bug::PostCompactOwedKept => liveness::RULE,
        Bug::SubagentServersDropped => liveness::RULE,
        // The `_PreToolUse` round the catalog owes the killed server, which the machine forgot;
        // the subjects the catalog owes a call of a tool it took away (none: no round).
        Bug::KilledServerForgotten | Bug::WithdrawnToolOffered => liveness::RULE,
        Bug::RestartPastBudget | Bug::BackoffNotDoubled | Bug::RetiredComesBack => {
            unreachable!("{bug:?} is the supervisor's, which the explorer does not drive")
        }
    }
}

/// The record of `facts` (each fed to the top-level agent, or to the subagent `agents` names)
/// as the machine answers them in `family`'s exploration of `setup`.
fn record_of(
    family: &Family,
    setup: &Setup,
    facts: &[Input],
    agents: &[Option<AgentId>],
) -> Transcript {
    match family.agent {
        Agent::Tree => tree_transcript(setup, facts, agents),
        Agent::TopLevel | Agent::Subagent => {
            let machine: Machine = setup.machine_capped(family.rounds);
            transcript_of(setup, machine, facts)
        }
    }
}

/// Where the counterexamples are written: under the target directory.
fn out_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("planted");
    std::fs::create_dir_all(&dir).expect("the target directory is writable");
    dir
}

/// One bug found: where, how short, how many states the explorer visited before the level of
/// the violation, and the record of the planted machine that `replay` reads.
struct Found {
    bug: Bug,
    family: &'static str,
    family_of: fn() -> Family,
    /// The family's round cap, which the setup does not carry.
    rounds: u32,
    counterexample: Box<Counterexample>,
    states: usize,
    /// The counterexample's facts, and a prompt after them when the violation is in the
    /// machine's state before any order shows it (the servers a catalog gives a hook): the
    /// prompt makes the machine act on it.
    shown: Vec<Input>,
    record: String,
}

/// Explores `bug` planted in the first setup of `family` that `fits`, at the family's depth, in
/// this thread (the plant is switched on per thread). Then the true machine must hold every
/// invariant on the same setup to the depth the bug was found at: the counterexample is the
/// plant's doing.
fn hunt(bug: Bug, family_of: fn() -> Family, fits: Fits) -> Result<Found, String> {
    let family = &family_of();
    assert_ne!(family.agent, Agent::Subagent, "{}", family.name);
    let setup = family
        .setups
        .iter()
        .find(|setup| fits(setup))
        .ok_or_else(|| format!("{bug:?}: no setup of {} fits", family.name))?;
    let planted = plant(bug);
    let counterexample = match family.explore_setup(setup, family.depth) {
        Ok(report) => return Err(format!("{bug:?}: not found; {report}")),
        Err(counterexample) => counterexample,
    };
    let found_at = counterexample.facts.len();
    // The states before the violation's level: the exploration one fact shorter finds nothing.
    let states = family
        .explore_setup(setup, found_at - 1)
        .map_or(0, |report| report.states);
    drop(planted);
    if let Err(c) = family.explore_setup(setup, found_at) {
        return Err(format!("{bug:?}: the true machine breaks a rule too: {c}"));
    }
    let mut shown = counterexample.facts.clone();
    let mut record = counterexample.transcript.to_jsonl();
    if replay_str(&record).is_ok() {
        shown.push(Input::Prompted {
            text: "do it".into(),
        });
        let _planted = plant(bug);
        record = record_of(family, setup, &shown, &counterexample.agents).to_jsonl();
    }
    Ok(Found {
        bug,
        family: family.name,
        family_of,
        rounds: family.rounds,
        counterexample,
        states,
        shown,
        record,
    })
}

#[test]
fn every_planted_bug_is_found_by_the_ci_exploration_with_a_replayable_counterexample() {
    let mut found = Vec::new();
    let mut missed = Vec::new();
    for bug in Bug::MACHINE {
        let (family, fits) = case(bug);
        match hunt(bug, family, fits) {
            Ok(one) => found.push(one),
            Err(why) => missed.push(why),
        }
    }
    let mut table = String::from("bug | rule broken | family | setup | facts | states\n");
    for one in &found {
        let c = &one.counterexample;
        table.push_str(&format!(
            "{:?} | {} | {} | {}{} | {}{} | {}\n",
            one.bug,
            c.violation.rule,
            one.family,
            c.setup.name(),
            match one.rounds {
                0 => String::new(),
                cap => format!(" rounds={cap}"),
            },
            c.facts.len(),
            if one.shown.len() > c.facts.len() {
                " (+1 shown)"
            } else {
                ""
            },
            one.states,
        ));
    }
    eprintln!("{table}");
    assert!(missed.is_empty(), "not found:\n{}", missed.join("\n"));
    let wrong: Vec<String> = found
        .iter()
        .filter(|one| one.counterexample.violation.rule != caught_by(one.bug))
        .map(|one| {
            format!(
                "{:?}: caught by {:?}, written for {:?}: {}",
                one.bug,
                one.counterexample.violation.rule,
                caught_by(one.bug),
                one.counterexample
            )
        })
        .collect();
    assert!(
        wrong.is_empty(),
        "caught by the wrong rule:\n{}",
        wrong.join("\n")
    );
    readme_table_is(&found);
    for one in &found {
        let c = &one.counterexample;
        let path = out_dir().join(format!("{:?}.jsonl", one.bug));
        std::fs::write(&path, &one.record).expect("written");
        // The true machine, replaying the record, diverges where the planted one broke the rule;
        // answering the same facts itself, it replays whole.
        assert!(
            replay_str(&one.record).is_err(),
            "{:?}: the record replays: {c}",
            one.bug
        );
        let honest = record_of(&(one.family_of)(), &c.setup, &one.shown, &c.agents);
        replay_str(&honest.to_jsonl())
            .unwrap_or_else(|e| panic!("{:?}: the true orders diverge: {e}", one.bug));
    }
    assert_eq!(found.len(), Bug::MACHINE.len());
}

/// The README's table of planted bugs between its markers: what this test measured, written by
/// it under `HOOKLOOP_BLESS=1`, and otherwise required unchanged, so the figures cannot drift.
fn readme_table_is(found: &[Found]) {
    const BEGIN: &str =
        "<!-- planted table: written by `HOOKLOOP_BLESS=1 cargo test --test planted` -->\n";
    const END: &str = "<!-- planted table end -->";
    let mut table = String::from(
        "| bug | the invariant that fails | family | found at (facts, states before) |\n\
         |---|---|---|---|\n",
    );
    for one in found {
        let c = &one.counterexample;
        table.push_str(&format!(
            "| `{:?}` | {} | `{}` | {}{}, {} |\n",
            one.bug,
            c.violation.rule.replace('|', "\\|"),
            one.family,
            c.facts.len(),
            if one.shown.len() > c.facts.len() {
                " (+ a prompt to show it)"
            } else {
                ""
            },
            one.states,
        ));
    }
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let readme = std::fs::read_to_string(&path).expect("README.md is readable");
    let start = readme
        .find(BEGIN)
        .expect("the README has the planted table's marker")
        + BEGIN.len();
    let end = start
        + readme[start..]
            .find(END)
            .expect("the README has the table's end marker");
    if readme[start..end] == table {
        return;
    }
    if std::env::var_os("HOOKLOOP_BLESS").is_some() {
        let written = format!("{}{table}{}", &readme[..start], &readme[end..]);
        std::fs::write(&path, written).expect("README.md is writable");
        return;
    }
    panic!(
        "the README's planted table drifted from what the test measured; \
         HOOKLOOP_BLESS=1 cargo test --test planted writes it:\n{table}"
    );
}

/// The counterexample `bug`, planted, gives within `depth` facts on the first setup of `family`
/// that `fits`; the rule that caught it must be `rule`, and its detail must name `named`.
fn caught_within(bug: Bug, family: &Family, fits: Fits, depth: usize, rule: &str, named: &str) {
    let setup = family
        .setups
        .iter()
        .find(|s| fits(s))
        .expect("a setup fits");
    let _planted = plant(bug);
    let found = match family.explore_setup(setup, depth) {
        Ok(report) => panic!("{bug:?} not found within {depth} facts: {report}"),
        Err(found) => found,
    };
    assert_eq!(rule, found.violation.rule, "{found}");
    assert!(found.violation.detail.contains(named), "{found}");
}

#[test]
fn subagent_hook_servers_the_machine_drops_are_caught_against_the_catalog() {
    // The machine's servers of `_SubagentStart` and `_SubagentStop` against the catalog's, on
    // the first catalog fed after the start: no order shows the drop until a child starts.
    for bug in Bug::SILENT {
        let (family, fits) = case(bug);
        caught_within(bug, &family(), fits, 2, caught_by(bug), "_Subagent");
    }
}

#[test]
fn a_child_whose_killed_server_is_forgotten_is_caught_by_the_catalogs_subagent_stop() {
    // The child's `_SubagentStop` is owed by the catalog fed, not by the servers the machine
    // kept: its server killed (two timeouts in a row), the child's end of turn still owes it.
    caught_within(
        Bug::KilledServerForgotten,
        &Family::with_child(),
        |_| true,
        6,
        "_Stop is asked at a genuine end of turn exactly when the rules allow",
        "_SubagentStop",
    );
}

#[test]
fn a_tool_left_offered_after_a_catalog_took_it_away_is_caught_at_its_pre_tool_round() {
    // The subjects `_PreToolUse` is owed are the calls of tools the catalog fed offers: a call
    // of a tool it took away owes no round, whatever the machine still offers.
    let bug = Bug::WithdrawnToolOffered;
    let (family, fits) = case(bug);
    caught_within(bug, &family(), fits, 3, caught_by(bug), "_PreToolUse");
}
