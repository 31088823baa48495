//! The agent's memory over one hostile tool call, read from `/proc`: `hookloop run` with a given
//! MCP configuration, the model (a scripted provider on 127.0.0.1) calling `evil__poke` once.
//! The resident size (`VmRSS`) is read when the model is first asked, before the call, and the
//! peak (`VmHWM`) when it is asked again, after the call: the growth is what the call cost.
//!
//! Included by the tests that bound it (`#[path]`); they declare `mod loopback` beside it.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::loopback::{self, FakeProvider, Reply};

/// What one run cost, and how it ended.
pub struct PeakMemory {
    /// `VmRSS` when the model was first asked, before the call.
    pub before_kib: u64,
    /// `VmHWM` when the model was asked after the call.
    pub peak_kib: u64,
    /// The agent's exit status and output.
    pub out: Output,
}

impl PeakMemory {
    /// How much the peak grew over the call.
    pub fn growth_kib(&self) -> u64 {
        self.peak_kib.saturating_sub(self.before_kib)
    }

    /// The agent's standard error, as text.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }

    /// Asserts the run ended well, both readings were taken, and the peak grew by less than
    /// `max_growth_kib`.
    pub fn assert_below(&self, max_growth_kib: u64) {
        assert_eq!(self.out.status.code(), Some(0), "{}", self.stderr());
        assert!(
            self.before_kib > 0 && self.peak_kib > 0,
            "memory was not read"
        );
        assert!(
            self.growth_kib() < max_growth_kib,
            "peak grew by {} KiB",
            self.growth_kib()
        );
    }
}

/// Runs `hookloop run --mcp-config <config> go` in `dir`; the model calls `evil__poke` once and
/// answers the call's result `settle` after it arrived, so what the server does after its
/// answer has that long to cost the agent.
pub fn run_poked(config: &Path, dir: &Path, settle: Duration) -> PeakMemory {
    run_poked_with(config, dir, settle, &[], &[])
}

/// [`run_poked`] with more `args` before the prompt and `env` on top.
pub fn run_poked_with(
    config: &Path,
    dir: &Path,
    settle: Duration,
    args: &[&str],
    env: &[(&str, &str)],
) -> PeakMemory {
    let pid = Arc::new(AtomicU32::new(0));
    let memory = Arc::new(Mutex::new((0u64, 0u64)));
    let turn = AtomicUsize::new(0);
    let (seen_pid, seen_memory) = (Arc::clone(&pid), Arc::clone(&memory));
    let provider = FakeProvider::start(move |_| {
        let pid = seen_pid.load(Ordering::SeqCst);
        match turn.fetch_add(1, Ordering::SeqCst) {
            0 => {
                seen_memory.lock().unwrap().0 = status_kib(pid, "VmRSS:");
                Reply::tool("evil__poke", json!({}))
            }
            _ => {
                std::thread::sleep(settle);
                seen_memory.lock().unwrap().1 = status_kib(pid, "VmHWM:");
                Reply::text("Done.")
            }
        }
    });
    let child = Command::new(loopback::hookloop())
        .arg("run")
        .arg("--mcp-config")
        .arg(config)
        .args(args)
        .arg("go")
        .current_dir(dir)
        .envs(env.iter().copied())
        .env_remove("HOOKLOOP_LOG")
        .env("OPENAI_BASE_URL", &provider.base_url)
        .env("HOOKLOOP_MODEL", "loopback")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    pid.store(child.id(), Ordering::SeqCst);
    let out = child.wait_with_output().unwrap();
    let (before_kib, peak_kib) = *memory.lock().unwrap();
    PeakMemory {
        before_kib,
        peak_kib,
        out,
    }
}

/// A `/proc/<pid>/status` field in KiB; 0 when it cannot be read.
#[allow(dead_code)]
pub fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| {
            l.strip_prefix(field)?
                .trim()
                .strip_suffix("kB")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0)
}
