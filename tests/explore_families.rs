//! The explorer's families at the depths they need (`hookloop::testing::families`), run in a
//! release build by CI's after-step `.ci/after.d/15-explore-release.sh`:
//!
//! ```text
//! cargo test --release --test explore_families -- --ignored --test-threads 1 --nocapture
//! ```
//!
//! Each test explores one family, its setups shared out over the cores, and prints the family's
//! states, transitions and wall time (the README's "Exhaustive exploration" table). They are
//! ignored because a debug build takes about eight times as long; `tests/explore.rs` explores
//! the same families to smaller depths on every `cargo test`.

use hookloop::hooks::Hook;
use hookloop::testing::families::{Family, FamilyReport};

/// Explores `family`, checks every setup reached the family's depth or exhausted its space, and
/// prints the totals; `HOOKLOOP_EXPLORE_DEPTH` overrides the depth (for measuring).
fn run(family: Family) -> FamilyReport {
    let family = match std::env::var("HOOKLOOP_EXPLORE_DEPTH")
        .ok()
        .and_then(|d| d.parse().ok())
    {
        Some(depth) => family.at_depth(depth),
        None => family,
    };
    let report = family.explore().unwrap_or_else(|found| panic!("{found}"));
    for setup in &report.reports {
        assert!(
            setup.depth >= family.depth || setup.exhausted,
            "{setup}: stopped short of depth {}",
            family.depth
        );
        if std::env::var_os("HOOKLOOP_EXPLORE_VERBOSE").is_some() {
            eprintln!("  {setup}");
        }
    }
    eprintln!("{report}");
    report
}

#[test]
#[ignore]
fn each_hook_alone() {
    let report = run(Family::each_hook_alone());
    assert_eq!(report.reports.len(), Hook::ALL.len());
}

#[test]
#[ignore]
fn stop_with_each_hook() {
    let report = run(Family::stop_with_each_hook());
    assert_eq!(report.reports.len(), Hook::ALL.len() - 1);
}

#[test]
#[ignore]
fn budgets() {
    // Every budget is spent, and the end of turn after it is skipped for it.
    let report = run(Family::budgets());
    for setup in &report.reports {
        assert_eq!(setup.objections, setup.setup.budget, "{setup}");
        assert!(
            setup.orders.contains("Notify StopSkipped BudgetSpent"),
            "{setup}: {:?}",
            setup.orders
        );
    }
    assert!(report.reports.iter().any(|r| r.setup.budget == 3));
}

#[test]
#[ignore]
fn every_hook() {
    let report = run(Family::every_hook());
    assert!(report.depth >= 7);
}

#[test]
#[ignore]
fn two_servers() {
    let report = run(Family::two_servers());
    assert!(report.depth >= 6);
}

#[test]
#[ignore]
fn single_server_classes() {
    let report = run(Family::single_server_classes());
    assert_eq!(report.reports.len(), 1 + 256 * 4);
}

#[test]
#[ignore]
fn permission() {
    let report = run(Family::permission());
    assert!(report.reports.iter().all(|r| r.setup.permission));
}

#[test]
#[ignore]
fn with_child() {
    let report = run(Family::with_child());
    let orders: std::collections::BTreeSet<&String> =
        report.reports.iter().flat_map(|r| &r.orders).collect();
    for order in ["CallHooks _SubagentStart", "CallHooks _SubagentStop"] {
        assert!(orders.contains(&order.to_owned()), "{orders:?}");
    }
}
