//! The transcript reader on arbitrary bytes: it never panics; what it accepts, it writes back
//! and reads again unchanged; and replaying whatever it accepted never panics either (the
//! machine refuses facts it does not expect, it does not crash on them).

#![no_main]

use hookloop::transcript::Transcript;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(transcript) = Transcript::parse_bytes(data) else {
        return;
    };
    let text = transcript.to_jsonl();
    let again = match Transcript::parse(&text) {
        Ok(again) => again,
        Err(error) => panic!("a written transcript does not read back: {error}\n{text}"),
    };
    assert_eq!(again.header, transcript.header);
    assert_eq!(again.records, transcript.records);
    assert!(again.truncated.is_none());
    assert_eq!(again.to_jsonl(), text, "writing is deterministic");
    if let Err(divergence) = transcript.replay() {
        // The report renders whatever diverged.
        let _ = divergence.to_string();
    }
});
