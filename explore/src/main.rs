//! The explorer's families at the depths they need (`hookloop::testing::families`), in a
//! release build. CI's after-step `.ci/after.d/15-explore-release.sh` runs
//!
//! ```text
//! cargo run --release --manifest-path explore/Cargo.toml [FAMILY ...]
//! ```
//!
//! Each family explores its setups, shared out over the cores, checks what the family is for,
//! and prints its states, transitions and wall time; with `--rows`, each family's row of the
//! README's "Exhaustive exploration" table too, which `scripts/explore_table.sh` writes into the
//! README. Each family must be configured with the depth written here. With no argument every
//! family runs; `HOOKLOOP_EXPLORE_DEPTH` overrides every depth
//! (for measuring) and `HOOKLOOP_EXPLORE_VERBOSE` prints each setup's report. `cargo test`
//! explores the same families to smaller depths in debug (`tests/explore.rs`).

use std::collections::BTreeSet;
use std::process::ExitCode;

use hookloop::hooks::Hook;
use hookloop::testing::explore::Allow;
use hookloop::testing::families::{Family, FamilyReport};

/// A family, the depth it is configured with, what its report must show beyond "no rule
/// broken, depth reached", and its row of the README's table.
struct Run {
    family: fn() -> Family,
    /// The depth the family must be configured with: a family explored shallower than the
    /// README says fails here, not only in the table.
    depth: usize,
    check: fn(&FamilyReport) -> Result<(), String>,
    /// The README's "setups" column.
    setups: &'static str,
    /// The README's "what needs the depth" column.
    needs: &'static str,
}

const RUNS: &[Run] = &[
    Run {
        family: Family::each_hook_alone,
        depth: 12,
        check: |report| count(report, Hook::ALL.len()),
        setups: "each of the eight hooks alone (`_Stop` budget 3)",
        needs: "a hook's rule across prompts, compactions and closes",
    },
    Run {
        family: Family::stop_with_each_hook,
        depth: 10,
        check: |report| count(report, Hook::ALL.len() - 1),
        setups: "`_Stop` with each other hook, budget 2",
        needs: "a `_Stop` rule after another hook's round (a `_PostToolUse` injection, then \
`_Stop`: 7 facts)",
    },
    Run {
        family: Family::budgets,
        depth: 14,
        check: budgets_are_spent,
        setups: "`_Stop` alone, budgets 1, 2, 3",
        needs: "every budget spent and the end of turn it skips (4 facts an objection, 2 for the \
skip); the step requires both",
    },
    Run {
        family: Family::every_hook,
        depth: 12,
        check: |report| count(report, 2),
        setups: "all eight hooks on one server, budgets 1 and 3",
        needs: "every round in one prompt",
    },
    Run {
        family: Family::two_servers,
        depth: 8,
        check: two_servers_each,
        setups: "each hook on both servers, every hook on both, every hook on one; every \
allowlist and budget (classes)",
        needs: "rounds answered by two servers in configuration order",
    },
    Run {
        family: Family::single_server_classes,
        depth: 6,
        check: |report| count(report, 1 + 256 * 4),
        setups: "the 1,025 one-server classes",
        needs: "every hook subset",
    },
    Run {
        family: Family::permission,
        depth: 8,
        check: |report| match report.reports.iter().find(|r| !r.setup.permission) {
            Some(r) => Err(format!("{r}: asks no permission")),
            None => Ok(()),
        },
        setups: "asking permission: no hook, each hook alone, every hook",
        needs: "decisions that stand across calls",
    },
    Run {
        family: Family::round_cap,
        depth: 10,
        check: caps_are_reached,
        setups: "a round cap of 2: no hook, `_Stop` alone (budget 2), every hook (budget 1)",
        needs: "the cap reached by tool calls and by an objection's continuation, and the prompt \
after it; the step requires every setup to reach the cap",
    },
    Run {
        family: Family::with_child,
        depth: 10,
        check: child_hooks_are_asked,
        setups: "a subagent alone: `_SubagentStart`, `_SubagentStop`, `_PreToolUse` (budget 2); \
every hook (budget 1)",
        needs: "the child's start round, an objection that continues it, a call gated inside it",
    },
    Run {
        family: Family::parent_and_child,
        depth: 9,
        check: parent_and_child_meet,
        setups: "a parent offered `agent` and its child together, asking permission: no hook; \
`_SubagentStart`, `_SubagentStop`, `_PreToolUse` beside `_SessionStart`, `_Stop` (budget 1)",
        needs: "an \"always\" decision of the parent, then its `agent` call and the child's \
question about the same tool; a cancel or close in the middle of the child's hook round or \
question; the step requires the child's rounds and question",
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
    // `--rows`: each family's row of the README's table too (`scripts/explore_table.sh`
    // writes them into the README).
    let rows = wanted.iter().any(|w| w == "--rows");
    let wanted: Vec<String> = wanted.into_iter().filter(|w| w != "--rows").collect();
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
    for (index, (family, run)) in runs.into_iter().enumerate() {
        if !wanted.is_empty() && !wanted.iter().any(|w| w == family.name) {
            continue;
        }
        if family.depth != run.depth {
            failed += 1;
            println!(
                "family {}: FAILED: configured to depth {}, where it must be explored to {}",
                family.name, family.depth, run.depth
            );
            continue;
        }
        let family = match depth {
            Some(depth) => family.at_depth(depth),
            None => family,
        };
        match explore(&family, run, verbose) {
            Ok(report) => {
                println!("{report}");
                if rows {
                    println!("row {index} {}", row(run, &report));
                }
            }
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
        // Each setup reached the family's depth exactly, or ran out of states before it.
        if setup.depth != family.depth && !setup.exhausted {
            return Err(format!("{setup}: stopped at depth {}, not {}", setup.depth, family.depth));
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

/// The family's row of the README's table.
fn row(run: &Run, report: &FamilyReport) -> String {
    format!(
        "| `{}` | {} | {} | {} | {} | {} | {:.1} s |",
        report.name,
        run.setups,
        report.depth,
        run.needs,
        thousands(report.states),
        thousands(report.transitions),
        report.elapsed.as_secs_f64()
    )
}

/// `n` with a comma every three digits, as the README writes figures.
fn thousands(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// Every setup has two servers, and both allowlists that call hooks are among them.
fn two_servers_each(report: &FamilyReport) -> Result<(), String> {
    if let Some(r) = report.reports.iter().find(|r| r.setup.servers.len() != 2) {
        return Err(format!("{r}: not two servers"));
    }
    for allow in [Allow::One, Allow::All] {
        if !report.reports.iter().any(|r| r.setup.allow == allow) {
            return Err(format!("no setup with the allowlist {allow:?}"));
        }
    }
    Ok(())
}

/// The parent and its child met: the child's start and stop rounds, its gated call and its
/// permission question were all asked, and a child's prompt was cancelled.
fn parent_and_child_meet(report: &FamilyReport) -> Result<(), String> {
    count(report, 2)?;
    let orders: BTreeSet<&String> = report.reports.iter().flat_map(|r| &r.orders).collect();
    for order in [
        "CallHooks _SubagentStart",
        "CallHooks _SubagentStop",
        "CallHooks _PreToolUse",
        "AskPermission",
        "Finish Cancelled",
    ] {
        if !orders.contains(&order.to_owned()) {
            return Err(format!("never ordered {order}: {orders:?}"));
        }
    }
    Ok(())
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
