//! The `hookloop` binary the end-to-end tests run.
//!
//! `cargo test` builds the binary with the features of the crate's own dev-dependency
//! (`testing`, `planted`, `mcp-servers`, `otel`), which the binary people install does not
//! have. `HOOKLOOP_TEST_BIN` names another binary to run instead: CI's
//! `.ci/after.d/12-shipped-binary.sh` runs the end-to-end tests again against the binary a plain
//! `cargo build --release` makes, the one `cargo install hookloop` ships.

use std::sync::OnceLock;

/// The variable that names the binary under test.
pub const VARIABLE: &str = "HOOKLOOP_TEST_BIN";

/// The path of the binary under test: `HOOKLOOP_TEST_BIN` if set, else the one cargo built
/// for these tests.
pub fn hookloop() -> &'static str {
    static PATH: OnceLock<String> = OnceLock::new();
    PATH.get_or_init(|| match std::env::var(VARIABLE) {
        Ok(path) if !path.is_empty() => {
            assert!(
                std::path::Path::new(&path).is_file(),
                "{VARIABLE}={path}: no such file"
            );
            path
        }
        _ => env!("CARGO_BIN_EXE_hookloop").to_owned(),
    })
}
