//! Streamed replies, for embedders, tests and fuzzing: the [`Delta`]s people see as a reply is
//! written, and [`parse_stream`], which reads a whole streamed answer of either dialect as a
//! client would. Each dialect's decoder lives beside its other wire code ([`openai`],
//! [`anthropic`]), over the shared assembler.

use crate::llm::assemble::Assembler;
use crate::llm::limits::ReplyLimits;
use crate::llm::{Provider, anthropic, openai};
use crate::machine::LlmReply;
use crate::ports::{LlmError, ResponseFault};

pub use crate::ports::{Delta, OnDelta};

/// Parses a whole streamed answer of `provider`'s dialect, arriving in `chunks`, as a client
/// would, with the default [`ReplyLimits`]: for tests and fuzzing. The same code reads streams
/// off the network.
pub fn parse_stream<'a>(
    provider: Provider,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<LlmReply, LlmError> {
    parse_stream_with(provider, ReplyLimits::default(), chunks)
}

/// [`parse_stream`] with these limits.
pub fn parse_stream_with<'a>(
    provider: Provider,
    limits: ReplyLimits,
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<LlmReply, LlmError> {
    let decoder = match provider {
        Provider::OpenAi => openai::stream::decoder(limits),
        Provider::Anthropic => anthropic::stream::decoder(limits),
    };
    let mut assembler = Assembler::new(decoder, limits);
    for chunk in chunks {
        if assembler.complete() {
            break;
        }
        assembler.feed(chunk, &mut |_| {})?;
    }
    if !assembler.complete() && !assembler.ended_complete() {
        return Err(LlmError::InvalidResponse(ResponseFault::EndedIncomplete));
    }
    assembler.finish().map(|parsed| parsed.reply)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::machine::StopReason;

    #[test]
    fn the_fuzz_seeds_parse_the_same_at_every_chunk_size() {
        let seeds = [
            (
                Provider::OpenAi,
                &include_bytes!("../../fuzz/seeds/provider_parse/openai_stream")[..],
            ),
            (
                Provider::Anthropic,
                &include_bytes!("../../fuzz/seeds/provider_parse/anthropic_stream")[..],
            ),
        ];
        for (provider, seed) in seeds {
            // The fuzz target's first byte picks the chunk size; the rest is the body.
            let body = &seed[1..];
            let whole = parse_stream(provider, [body]).unwrap();
            assert_eq!(whole.text, "Hé");
            assert_eq!(whole.stop, StopReason::ToolUse);
            assert_eq!(whole.tool_calls[0].arguments, json!({"p": 1}));
            for size in 1..=16 {
                assert_eq!(parse_stream(provider, body.chunks(size)).unwrap(), whole);
            }
            // Cut before the model said it finished, a stream is an error, never a reply.
            let finished = match provider {
                Provider::OpenAi => r#""finish_reason": "tool_calls""#,
                Provider::Anthropic => "event: message_stop",
            };
            let finished = String::from_utf8_lossy(body).find(finished).unwrap();
            for cut in 0..finished {
                assert!(parse_stream(provider, [&body[..cut]]).is_err(), "{cut}");
            }
        }
    }

    /// Found by the fuzzer: a chunk after `[DONE]` (or `message_stop`) that arrived in the same
    /// network read as the end changed the reply's usage, so a reply depended on where the
    /// bytes were cut. Whatever follows the end is not the reply's.
    #[test]
    fn events_after_the_end_of_the_stream_change_nothing_however_the_bytes_arrive() {
        let streams = [
            (
                Provider::OpenAi,
                concat!(
                    "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"hi\"}, ",
                    "\"finish_reason\": \"stop\"}]}\n\n",
                    "data: {\"choices\": [], \"usage\": {\"prompt_tokens\": 6, ",
                    "\"completion_tokens\": 2}}\n\n",
                    "data: [DONE]\n\n",
                ),
                concat!(
                    "data: {\"choices\": [], \"usage\": {\"prompt_tokens\": 3, ",
                    "\"completion_tokens\": 1}}\n\n",
                    "data: not json\n\n",
                ),
            ),
            (
                Provider::Anthropic,
                concat!(
                    "event: message_start\ndata: {\"type\": \"message_start\", \"message\": ",
                    "{\"usage\": {\"input_tokens\": 6, \"output_tokens\": 0}}}\n\n",
                    "event: content_block_start\ndata: {\"type\": \"content_block_start\", ",
                    "\"index\": 0, \"content_block\": {\"type\": \"text\", \"text\": \"\"}}\n\n",
                    "event: content_block_delta\ndata: {\"type\": \"content_block_delta\", ",
                    "\"index\": 0, \"delta\": {\"type\": \"text_delta\", \"text\": \"hi\"}}\n\n",
                    "event: content_block_stop\ndata: {\"type\": \"content_block_stop\", ",
                    "\"index\": 0}\n\n",
                    "event: message_delta\ndata: {\"type\": \"message_delta\", \"delta\": ",
                    "{\"stop_reason\": \"end_turn\"}, \"usage\": {\"output_tokens\": 2}}\n\n",
                    "event: message_stop\ndata: {\"type\": \"message_stop\"}\n\n",
                ),
                concat!(
                    "event: message_delta\ndata: {\"type\": \"message_delta\", \"delta\": ",
                    "{\"stop_reason\": \"tool_use\"}, \"usage\": {\"output_tokens\": 9}}\n\n",
                    "event: error\ndata: not json\n\n",
                ),
            ),
        ];
        // Past the end, a line longer than the parser takes is not the reply's either.
        let endless = format!("data: {}", "x".repeat(crate::net::sse::MAX_LINE_BYTES + 1));
        let streams = streams
            .map(|(provider, stream, after)| (provider, stream, format!("{after}{endless}")));
        for (provider, stream, after) in streams {
            let alone = parse_stream(provider, [stream.as_bytes()]).unwrap();
            assert_eq!(alone.text, "hi");
            assert_eq!(alone.stop, StopReason::EndTurn);
            let bytes = format!("{stream}{after}");
            // In one read, and in reads of every size: the same reply as the stream alone.
            assert_eq!(parse_stream(provider, [bytes.as_bytes()]).unwrap(), alone);
            for size in 1..=32 {
                let chunked = parse_stream(provider, bytes.as_bytes().chunks(size));
                assert_eq!(chunked.unwrap(), alone, "{provider:?} in reads of {size}");
            }
        }
    }
}
