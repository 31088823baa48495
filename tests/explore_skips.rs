//! Liveness, measured: a machine that skips any one hook round (the round never ordered, the
//! machine going on as if every server had said nothing) is caught by the explorer, for each of
//! the eight hooks, with a shortest counterexample written as a transcript that `hookloop
//! replay` reads and that diverges from the engine where the round was skipped.

use std::path::PathBuf;

use hookloop::hooks::Hook;
use hookloop::testing::explore::{Allow, Setup, explore};
use hookloop::testing::liveness;
use hookloop::transcript::replay_str;

#[path = "support/skip_round.rs"]
mod skip_round;

use skip_round::SkipRound;

/// Where the counterexamples are written: under the target directory.
fn out_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("planted");
    std::fs::create_dir_all(&dir).expect("the target directory is writable");
    dir
}

#[test]
fn a_machine_that_skips_any_one_hook_round_is_caught() {
    let mut found = Vec::new();
    for hook in Hook::ALL {
        // The hook alone, on one allowed server, with a `_Stop` budget.
        let setup = Setup {
            servers: vec![1 << hook.index()],
            allow: Allow::All,
            budget: 1,
            permission: false,
        };
        let planted = SkipRound::new(setup.machine(), hook);
        let counterexample =
            explore(&setup, planted, 6).expect_err("the skipped round is found within six facts");
        let expected = match hook {
            Hook::Stop => "_Stop is asked at a genuine end of turn exactly when the rules allow",
            _ => liveness::RULE,
        };
        assert_eq!(counterexample.violation.rule, expected, "{counterexample}");
        let text = counterexample.transcript.to_jsonl();
        let path = out_dir().join(format!("skip{hook}.jsonl"));
        std::fs::write(&path, &text).expect("written");
        // The engine, replaying the record, orders the round the planted machine skipped.
        let divergence = replay_str(&text)
            .expect_err("the planted orders are not the engine's")
            .to_string();
        assert!(
            divergence.contains(&hook.to_string()),
            "{hook}: {divergence}"
        );
        found.push(format!(
            "{hook}: {} facts, {}",
            counterexample.facts.len(),
            path.display()
        ));
    }
    eprintln!("{}", found.join("\n"));
    assert_eq!(found.len(), 8);
}
