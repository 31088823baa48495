//! Hook output encoding: the JSON body round-trips exactly through serde_json, and capping
//! keeps within its bound, on character boundaries, keeping the head and tail of the text.

#![no_main]

use arbitrary::Arbitrary;
use hookloop::Hook;
use hookloop::hooks::{HookBody, MAX_HOOK_TEXT_BYTES, encode_hook_body};
use hookloop::text::{Cut, cut};
use libfuzzer_sys::fuzz_target;

#[derive(Arbitrary, Debug)]
struct Input {
    post_compact: bool,
    server: String,
    text: String,
    /// Repeats `text` to reach past the model-facing cap.
    repeat: u8,
    max: u16,
}

fuzz_target!(|input: Input| {
    let hook = if input.post_compact {
        Hook::PostCompact
    } else {
        Hook::Stop
    };
    let text = input.text.repeat(usize::from(input.repeat % 64) + 1);
    let body = encode_hook_body(hook, &input.server, &text);
    let parsed: HookBody = serde_json::from_str(&body).expect("the body is JSON");
    assert_eq!(parsed.hook, hook);
    assert_eq!(parsed.server, input.server);
    if text.len() <= MAX_HOOK_TEXT_BYTES {
        assert_eq!(parsed.text, text, "a short answer reaches the model whole");
    } else {
        assert_eq!(parsed.text, cut(&text, MAX_HOOK_TEXT_BYTES, Cut::Middle));
    }
    assert_eq!(
        serde_json::to_string(&parsed).expect("serialises"),
        body,
        "the body round-trips byte for byte"
    );

    let max = usize::from(input.max);
    let capped = cut(&input.text, max, Cut::Middle);
    if input.text.len() <= max {
        assert_eq!(capped, input.text);
    } else {
        assert!(
            capped.len() <= max,
            "{} bytes capped to {max} gave {}",
            input.text.len(),
            capped.len()
        );
        assert!(
            is_head_marker_tail(&input.text, &capped),
            "{:?} capped to {max}: {capped:?}",
            input.text
        );
    }
});

/// Whether `capped` is a head of `text`, the marker saying how many bytes were left out, and
/// a tail of `text`; or, when `max` leaves no room for the marker, a head alone.
fn is_head_marker_tail(text: &str, capped: &str) -> bool {
    if text.starts_with(capped) {
        return true;
    }
    (0..=capped.len())
        .filter(|&head| capped.is_char_boundary(head) && text.starts_with(&capped[..head]))
        .any(|head| {
            let Some(rest) = capped[head..].strip_prefix("\n[... ") else {
                return false;
            };
            let Some((count, tail)) = rest.split_once(" bytes elided ...]\n") else {
                return false;
            };
            let Ok(elided) = count.parse::<usize>() else {
                return false;
            };
            text.ends_with(tail) && head + elided + tail.len() == text.len()
        })
}
