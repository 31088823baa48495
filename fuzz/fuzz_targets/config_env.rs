//! Configuration from the environment: arbitrary values (or none) for every variable the
//! engine reads, and arbitrary `MCP_HOOK_SERVERS` lists. Never a panic; an accepted
//! configuration holds the builder's invariants; a refusal names the variable.

#![no_main]

use std::cell::RefCell;

use arbitrary::Arbitrary;
use hookloop::{Config, HookServers};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    /// The answer to each variable, in the order the engine asks for them; past the end,
    /// unset. So a variable added later is fuzzed too without touching this target.
    values: Vec<Option<String>>,
    hook_servers: String,
}

fuzz_target!(|input: Input| {
    let asked = RefCell::new(Vec::<(String, Option<String>)>::new());
    let result = Config::from_lookup(|var| {
        let mut asked = asked.borrow_mut();
        // A `*_FILE` variable names a file to read: fuzzing it would read arbitrary paths
        // (`/dev/zero`) rather than parse anything. It stays unset.
        let value = if var.ends_with("_FILE") {
            None
        } else {
            input.values.get(asked.len()).cloned().flatten()
        };
        asked.push((var.to_owned(), value.clone()));
        Ok(value)
    });
    let asked = asked.into_inner();
    match result {
        Ok(config) => {
            let policy = config.policy();
            assert!(policy.hook_timeout_ms >= 1);
            assert!(config.tool_concurrency() >= 1);
            assert!(policy.max_context_tokens > u64::from(policy.max_output_tokens));
            let hook_servers = asked
                .iter()
                .find(|(var, _)| var == "MCP_HOOK_SERVERS")
                .and_then(|(_, value)| value.as_deref());
            assert_eq!(Ok(policy.hook_servers.clone()), HookServers::parse(hook_servers));
            for (var, value) in &asked {
                let Some(value) = value else { continue };
                let number = value.trim().parse::<u64>().ok();
                let field = match var.as_str() {
                    "SPROUT_AGENT_HOOK_TIMEOUT_MS" => policy.hook_timeout_ms,
                    "SPROUT_AGENT_STOP_MAX_REJECTIONS" => u64::from(policy.stop_max_rejections),
                    "HOOKLOOP_MAX_ROUNDS" => u64::from(policy.max_rounds),
                    "HOOKLOOP_MAX_CONTEXT_TOKENS" => policy.max_context_tokens,
                    "HOOKLOOP_MAX_OUTPUT_TOKENS" => u64::from(policy.max_output_tokens),
                    _ => continue,
                };
                assert_eq!(
                    Some(field),
                    number,
                    "{var}={value:?} was accepted as {field}"
                );
            }
        }
        Err(error) => {
            let text = error.to_string();
            assert!(
                asked.iter().any(|(var, _)| text.contains(var.as_str())),
                "the error names no variable: {text}"
            );
        }
    }

    // A list that parses is exactly what it says; one that does not names the culprit entry.
    match HookServers::parse(Some(&input.hook_servers)) {
        Ok(HookServers::Off) => {
            assert!(input.hook_servers.split(',').all(|e| e.trim().is_empty()))
        }
        Ok(HookServers::All) => assert!(
            input
                .hook_servers
                .split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .eq(["*"])
        ),
        Ok(HookServers::Named(names)) => {
            assert!(!names.is_empty());
            let allow = HookServers::Named(names.clone());
            for name in &names {
                let name = name.as_str();
                assert!(!name.is_empty() && name.trim() == name && !name.contains(','));
                assert!(allow.allows(name));
            }
        }
        Err(error) => assert!(!error.to_string().is_empty()),
    }
});
