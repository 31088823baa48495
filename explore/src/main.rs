//! The explorer's families at the depths they need (`hookloop::testing::families`), in a
//! release build. CI's after-step `.ci/after.d/15-explore-release.sh` runs
//!
//! ```text
//! cargo run --release --manifest-path explore/Cargo.toml [FAMILY ...]
//! ```
//!
//! Each family explores its setups, shared out over the cores, checks what the family is for,
//! and prints its states, transitions and wall time (the README's "Exhaustive exploration"
//! table). With no argument every family runs; `HOOKLOOP_EXPLORE_DEPTH` overrides every depth
//! (for measuring) and `HOOKLOOP_EXPLORE_VERBOSE` prints each setup's report. `cargo test`
//! explores the same families to smaller depths in debug (`tests/explore.rs`).

use std::collections::BTreeSet;
use std::process::ExitCode;

use hookloop::hooks::Hook;
use hookloop::testing::families::{Family, FamilyReport};

/// A family, and what its report must show beyond "no rule broken, depth reached".
struct Run {
    family: fn() -> Family,
    check: fn(&FamilyReport) -> Result<(), String>,
}

const RUNS: &[Run] = &[
    Run {
        family: Family::each_hook_alone,
        check: |report| count(report, Hook::ALL.len()),
    },
    Run {
        family: Family::stop_with_each_hook,
        check: |report| count(report, Hook::ALL.len() - 1),
    },
    Run {
        family: Family::budgets,
        check: budgets_are_spent,
    },
    Run {
        family: Family::every_hook,
        check: |report| at_least(report, 7),
    },
    Run {
        family: Family::two_servers,
        check: |report| at_least(report, 6),
    },
    Run {
        family: Family::single_server_classes,
        check: |report| count(report, 1 + 256 * 4),
    },
    Run {
        family: Family::permission,
        check: |report| match report.reports.iter().find(|r| !r.setup.permission) {
            Some(r) => Err(format!("{r}: asks no permission")),
            None => Ok(()),
        },
    },
    Run {
        family: Family::round_cap,
        check: caps_are_reached,
    },
    Run {
        family: Family::with_child,
        check: child_hooks_are_asked,
    },
];

fn main() -> ExitCode {
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    let depth = std::env::var("HOOKLOOP_EXPLORE_DEPTH")
        .ok()
        .map(|d| d.parse::<usize>());
    let depth = match depth.transpose() {
        Ok(depth) => depth,
        Err(e) => {
            eprintln!("HOOKLOOP_EXPLORE_DEPTH: {e}");
            return ExitCode::from(2);
        }
    };
    let verbose = std::env::var_os("HOOKLOOP_EXPLORE_VERBOSE").is_some();
    let runs: Vec<(Family, &Run)> = RUNS.iter().map(|run| ((run.family)(), run)).collect();
    if let Some(unknown) = wanted
        .iter()
        .find(|w| !runs.iter().any(|(family, _)| family.name == w.as_str()))
    {
        let names: Vec<&str> = runs.iter().map(|(family, _)| family.name).collect();
        eprintln!("no family {unknown:?}; the families: {}", names.join(", "));
        return ExitCode::from(2);
    }
    let mut failed = 0;
    for (family, run) in runs {
        if !wanted.is_empty() && !wanted.iter().any(|w| w == family.name) {
            continue;
        }
        let family = match depth {
            Some(depth) => family.at_depth(depth),
            None => family,
        };
        match explore(&family, run, verbose) {
            Ok(report) => println!("{report}"),
            Err(why) => {
                failed += 1;
                println!("family {}: FAILED: {why}", family.name);
            }
        }
    }
    if failed > 0 {
        eprintln!(
            "{failed} famil{} failed",
            if failed == 1 { "y" } else { "ies" }
        );
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}

/// Explores `family` and checks every setup reached its depth (or exhausted its space) and what
/// `run` asks of the report.
fn explore(family: &Family, run: &Run, verbose: bool) -> Result<FamilyReport, String> {
    let report = family.explore().map_err(|found| found.to_string())?;
    for setup in &report.reports {
        if verbose {
            eprintln!("  {setup}");
        }
        if setup.depth < family.depth && !setup.exhausted {
            return Err(format!("{setup}: stopped short of depth {}", family.depth));
        }
    }
    (run.check)(&report)?;
    Ok(report)
}

fn count(report: &FamilyReport, setups: usize) -> Result<(), String> {
    match report.reports.len() {
        n if n == setups => Ok(()),
        n => Err(format!("{n} setups where the family has {setups}")),
    }
}

fn at_least(report: &FamilyReport, depth: usize) -> Result<(), String> {
    if report.depth >= depth {
        Ok(())
    } else {
        Err(format!("depth {} is under {depth}", report.depth))
    }
}

/// Every budget is spent, the end of turn after it is skipped for it, and budget 3 is among
/// them.
fn budgets_are_spent(report: &FamilyReport) -> Result<(), String> {
    for setup in &report.reports {
        if setup.objections != setup.setup.budget {
            return Err(format!("{setup}: spent {} objections", setup.objections));
        }
        if !setup.orders.contains("Notify StopSkipped BudgetSpent") {
            return Err(format!(
                "{setup}: no end of turn skipped for a spent budget"
            ));
        }
    }
    if report.reports.iter().any(|r| r.setup.budget == 3) {
        Ok(())
    } else {
        Err("no setup with a budget of 3".to_owned())
    }
}

/// The child's own hooks are asked somewhere in the family.
fn child_hooks_are_asked(report: &FamilyReport) -> Result<(), String> {
    let orders: BTreeSet<&String> = report.reports.iter().flat_map(|r| &r.orders).collect();
    for order in ["CallHooks _SubagentStart", "CallHooks _SubagentStop"] {
        if !orders.contains(&order.to_owned()) {
            return Err(format!("never ordered {order}: {orders:?}"));
        }
    }
    Ok(())
}

/// Every setup reaches its round cap: some prompt ends for it.
fn caps_are_reached(report: &FamilyReport) -> Result<(), String> {
    match report
        .reports
        .iter()
        .find(|r| !r.orders.contains("Finish MaxTurnRequests"))
    {
        Some(r) => Err(format!("{r}: never reached the round cap")),
        None => Ok(()),
    }
}
