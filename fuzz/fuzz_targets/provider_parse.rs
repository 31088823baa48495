//! Provider answers, as untrusted bytes: both parsers must answer a reply or a clear error,
//! never panic, and a reply they accept must be one the machine can take (every tool call named,
//! with a unique id within the reply once the machine has seen it). The same bytes are also
//! read as a streamed answer of each dialect, cut into chunks at places the first byte picks.

#![no_main]

use hookloop::llm::stream::parse_stream;
use hookloop::llm::{Provider, anthropic, openai};
use hookloop::machine::{Input, Machine, Policy};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // Chunk sizes 1..=16 from the first byte: cuts inside lines, characters and `\r\n`.
    let (size, body) = match data.split_first() {
        Some((first, rest)) => (usize::from(first % 16) + 1, rest),
        None => (1, data),
    };
    let streamed = [
        parse_stream(Provider::OpenAi, body.chunks(size)),
        parse_stream(Provider::Anthropic, body.chunks(size)),
    ];
    let whole = [openai::parse_response(data), anthropic::parse_response(data)];
    for parsed in whole.into_iter().chain(streamed) {
        let Ok(reply) = parsed else { continue };
        // Whatever a provider sent, the machine takes it without refusing or panicking.
        let mut machine = Machine::new(Policy::default(), None);
        machine.handle(Input::Prompted { text: "p".into() }).expect("idle machine takes a prompt");
        while machine.poll_effect().is_some() {}
        machine.handle(Input::LlmReplied { reply }).expect("a prompting machine takes any reply");
        while machine.poll_effect().is_some() {}
    }
});
