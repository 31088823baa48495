//! Provider answers, as untrusted bytes: both parsers must answer a reply or a clear error,
//! never panic, and a reply they accept must be one the machine can take (every tool call named,
//! with a unique id within the reply once the machine has seen it).

#![no_main]

use hookloop::llm::{anthropic, openai};
use hookloop::machine::{Input, Machine, Policy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for parsed in [openai::parse_response(data), anthropic::parse_response(data)] {
        let Ok(reply) = parsed else { continue };
        // Whatever a provider sent, the machine takes it without refusing or panicking.
        let mut machine = Machine::new(Policy::default(), None);
        machine.handle(Input::Prompted { text: "p".into() }).expect("idle machine takes a prompt");
        while machine.poll_effect().is_some() {}
        machine.handle(Input::LlmReplied { reply }).expect("a prompting machine takes any reply");
        while machine.poll_effect().is_some() {}
    }
});
