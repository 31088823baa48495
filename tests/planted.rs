//! Planted bugs, measured: each of the machine's planted mutations (`machine::planted`, one
//! guard beside the rule it breaks) switched on in turn, the planted machine explored with a
//! family of the CI exploration at that family's depth, and the bug required to be found, with
//! a shortest counterexample written as a transcript under `target/tmp/planted/<bug>.jsonl` on
//! which `hookloop replay` (the true machine) diverges, while the same facts answered by the
//! true machine replay whole.
//!
//! Each bug is explored on the first setup of its family in which the rule it breaks can act
//! (a `_Stop` bug needs a server with `_Stop` and a budget, a permission bug a family that asks
//! permission); the table the test prints says which.

use std::path::PathBuf;

use hookloop::hooks::Hook;
use hookloop::machine::Input;
use hookloop::machine::planted::{Bug, plant};
use hookloop::testing::explore::{Allow, Counterexample, Setup, transcript_of};
use hookloop::transcript::replay_str;

/// A family of the CI exploration: the setups it explores, in order, and its depth.
struct Family {
    name: &'static str,
    setups: fn() -> Box<dyn Iterator<Item = Setup>>,
    depth: usize,
}

fn has(setup: &Setup, server: usize, hooks: &[Hook]) -> bool {
    setup
        .servers
        .get(server)
        .is_some_and(|bits| hooks.iter().all(|hook| bits & (1 << hook.index()) != 0))
}

fn allowed(setup: &Setup) -> bool {
    setup.allow != Allow::Off
}

/// Where each bug is looked for: the family, and what a setup needs for the rule to act.
fn case(bug: Bug) -> (&'static str, fn(&Setup) -> bool) {
    match bug {
        Bug::HookOffered | Bug::HookCallRun => ("one server", |_| true),
        Bug::HookOnDisallowedServer => ("two servers", |s| s.allow == Allow::One),
        Bug::TimeoutSpeaks | Bug::HookUnencoded | Bug::KillOnFirstTimeout => ("one server", |s| {
            allowed(s) && has(s, 0, &[Hook::SessionStart])
        }),
        Bug::NeverKilled => ("one server", |s| {
            allowed(s) && has(s, 0, &[Hook::SessionStart, Hook::UserPromptSubmit])
        }),
        Bug::StopBudgetOffByOne => ("one server", |s| {
            allowed(s) && has(s, 0, &[Hook::Stop]) && s.budget >= 1
        }),
        Bug::DeclinedObjectionAsksAgain => ("one server", |s| {
            allowed(s) && has(s, 0, &[Hook::Stop]) && s.budget >= 2
        }),
        Bug::PreCompactInjected => ("one server", |s| {
            allowed(s) && has(s, 0, &[Hook::PreCompact])
        }),
        Bug::PostCompactBeforeSummary => ("one server", |s| {
            allowed(s) && has(s, 0, &[Hook::PostCompact])
        }),
        Bug::SessionStartEveryPrompt => ("one server", |s| {
            allowed(s) && has(s, 0, &[Hook::SessionStart])
        }),
        Bug::SummaryDropsPrompt | Bug::SummaryAfterPrompt | Bug::CancelledUnanswered => {
            ("one server", |_| true)
        }
        Bug::DeniedCallRuns => ("one server", |s| {
            allowed(s) && has(s, 0, &[Hook::PreToolUse])
        }),
        Bug::PermissionNotAsked | Bug::RejectedCallRuns | Bug::StandingForgotten => {
            ("permission", |_| true)
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
    counterexample: Box<Counterexample>,
    states: usize,
    /// The counterexample's facts, and a prompt after them when the violation is in the
    /// machine's state before any order shows it (the servers a catalog gives a hook): the
    /// prompt makes the machine act on it.
    shown: Vec<Input>,
    record: String,
}

/// Explores `bug` planted in the first setup of `family` that `fits`, at the family's depth.
fn hunt(bug: Bug, family: &Family, fits: fn(&Setup) -> bool) -> Result<Found, String> {
    let setup = (family.setups)()
        .find(fits)
        .ok_or_else(|| format!("{bug:?}: no setup of {} fits", family.name))?;
    let planted = plant(bug);
    let counterexample = match setup.explore(family.depth) {
        Ok(report) => return Err(format!("{bug:?}: not found; {report}")),
        Err(counterexample) => counterexample,
    };
    // The states before the violation's level: the exploration one fact shorter finds nothing.
    let states = setup
        .explore(counterexample.facts.len() - 1)
        .map_or(0, |report| report.states);
    drop(planted);
    let mut shown = counterexample.facts.clone();
    let mut record = counterexample.transcript.to_jsonl();
    if replay_str(&record).is_ok() {
        shown.push(Input::Prompted {
            text: "do it".into(),
        });
        let _planted = plant(bug);
        record = transcript_of(&setup, setup.machine(), &shown).to_jsonl();
    }
    Ok(Found {
        bug,
        family: family.name,
        counterexample,
        states,
        shown,
        record,
    })
}

#[test]
fn every_planted_bug_is_found_by_the_ci_exploration_with_a_replayable_counterexample() {
    let families = families();
    let mut found = Vec::new();
    let mut missed = Vec::new();
    for bug in Bug::ALL {
        let (name, fits) = case(bug);
        let family = families
            .iter()
            .find(|f| f.name == name)
            .expect("a family of the CI exploration");
        match hunt(bug, family, fits) {
            Ok(one) => found.push(one),
            Err(why) => missed.push(why),
        }
    }
    let mut table = String::from("bug | rule broken | family | setup | facts | states\n");
    for one in &found {
        let c = &one.counterexample;
        table.push_str(&format!(
            "{:?} | {} | {} | {} | {}{} | {}\n",
            one.bug,
            c.violation.rule,
            one.family,
            c.setup.name(),
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
        let honest = transcript_of(&c.setup, c.setup.machine(), &one.shown);
        replay_str(&honest.to_jsonl())
            .unwrap_or_else(|e| panic!("{:?}: the true orders diverge: {e}", one.bug));
    }
    assert_eq!(found.len(), Bug::ALL.len());
}

#[test]
fn without_a_plant_the_same_setups_hold_every_invariant() {
    // The counterexamples above are the plants' doing: the setups they were found in hold at
    // the same depth when nothing is planted.
    let families = families();
    for bug in Bug::ALL {
        let (name, fits) = case(bug);
        let family = families.iter().find(|f| f.name == name).expect("a family");
        let setup = (family.setups)().find(fits).expect("a setup");
        setup
            .explore(family.depth)
            .unwrap_or_else(|c| panic!("{bug:?}: {c}"));
    }
}

/// The CI exploration's families, as `tests/explore.rs` runs them on every `cargo test`: the
/// one-server configuration classes to depth 5; two servers, each with the same hooks, or one
/// with every hook or none, to depth 6; one server that asks permission, to depth 6. Each
/// setup is a class representative ([`Setup::canonical`]), in the order of [`Setup::all`].
fn families() -> [Family; 3] {
    fn classes(
        servers: usize,
        permission: bool,
        shape: fn(&[u8]) -> bool,
    ) -> Box<dyn Iterator<Item = Setup>> {
        Box::new(
            Setup::all()
                .filter(move |s| {
                    s.servers.len() == servers && s.permission == permission && shape(&s.servers)
                })
                .map(|s| s.canonical()),
        )
    }
    [
        Family {
            name: "one server",
            setups: || classes(1, false, |_| true),
            depth: 5,
        },
        Family {
            name: "two servers",
            setups: || classes(2, false, |s| s[0] == s[1] || s[0] == 0xFF || s[0] == 0),
            depth: 6,
        },
        Family {
            name: "permission",
            setups: || classes(1, true, |s| s[0].count_ones() <= 1 || s[0] == 0xFF),
            depth: 6,
        },
    ]
}
