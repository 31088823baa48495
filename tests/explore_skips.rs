//! Liveness, measured: a machine that skips any one hook round (the round never ordered, the
//! machine going on as if every server had said nothing) is caught by the explorer, for each of
//! the eight hooks, with a shortest counterexample written as a transcript that `hookloop
//! replay` reads and that diverges from the engine where the round was skipped.

use std::collections::VecDeque;
use std::path::PathBuf;

use hookloop::hooks::Hook;
use hookloop::machine::{Canon, Effect, HookReply, Input, Machine, MachineError};
use hookloop::testing::explore::{Allow, Setup, Subject, explore, fingerprint};
use hookloop::testing::liveness;
use hookloop::transcript::replay_str;

/// The machine, except that it never orders a round of `hook`: where it would, it goes on as if
/// every server had answered with nothing to say.
#[derive(Clone)]
struct SkipRound {
    machine: Machine,
    hook: Hook,
    out: VecDeque<Effect>,
}

impl Subject for SkipRound {
    fn machine(&self) -> &Machine {
        &self.machine
    }

    fn handle(&mut self, fact: Input) -> Result<(), MachineError> {
        self.machine.handle(fact)?;
        let mut effects: Vec<Effect> = std::iter::from_fn(|| self.machine.poll_effect()).collect();
        while let Some(at) = effects
            .iter()
            .position(|e| matches!(e, Effect::CallHooks { hook, .. } if *hook == self.hook))
        {
            let Effect::CallHooks {
                hook,
                servers,
                subjects,
                ..
            } = effects.remove(at)
            else {
                unreachable!("found as a round of the skipped hook")
            };
            effects.truncate(at);
            let subjects: Vec<Option<u32>> = if subjects.is_empty() {
                vec![None]
            } else {
                (0..subjects.len() as u32).map(Some).collect()
            };
            for subject in subjects {
                for server in &servers {
                    self.machine.handle(Input::HookAnswered {
                        server: server.clone(),
                        hook,
                        reply: HookReply::Text {
                            text: String::new(),
                        },
                        subject,
                    })?;
                }
            }
            effects.extend(std::iter::from_fn(|| self.machine.poll_effect()));
        }
        self.out.extend(effects);
        Ok(())
    }

    fn poll_effect(&mut self) -> Option<Effect> {
        self.out.pop_front()
    }

    fn fingerprint(&self, out: &mut Canon) {
        fingerprint(&self.machine, out);
    }
}

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
        let planted = SkipRound {
            machine: setup.machine(),
            hook,
            out: VecDeque::new(),
        };
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
