//! Streamed answers of both dialects, as untrusted bytes off the network: the decoders must
//! answer a reply or a clear error, never panic, and take time linear in the bytes whatever
//! they hold (thousands of tool-call indexes or content blocks, giant or endless events). CI
//! runs this target with libFuzzer's `-timeout`, so an input slow to decode fails like a crash.
//!
//! The first byte picks the dialect (its low bit), the chunk size (the next four bits, 1..=16)
//! and whether the caps are the defaults or small ones (the top bit), so inputs reach the
//! refusals at the caps as well as whole replies; the rest is the body.

#![no_main]

use hookloop::llm::stream::parse_stream_with;
use hookloop::llm::{Provider, ReplyLimits};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&first, body)) = data.split_first() else {
        return;
    };
    let provider = if first & 1 == 0 {
        Provider::OpenAi
    } else {
        Provider::Anthropic
    };
    let size = usize::from((first >> 1) & 0x0f) + 1;
    let limits = if first & 0x80 == 0 {
        ReplyLimits::default()
    } else {
        ReplyLimits {
            max_tool_calls: 2,
            max_blocks: 3,
            max_events: 8,
            max_text_bytes: 16,
            max_argument_bytes: 16,
        }
    };
    let whole = parse_stream_with(provider, limits, [body]);
    let chunked = parse_stream_with(provider, limits, body.chunks(size));
    // However the bytes arrive, a reply is the same. (Not so an error: fed whole, the bytes
    // after the end of the stream are parsed too, and may be broken.)
    if let (Ok(a), Ok(b)) = (&whole, &chunked) {
        assert_eq!(a, b);
    }
    if let Ok(reply) = whole {
        assert!(reply.tool_calls.len() <= limits.max_tool_calls);
    }
});
