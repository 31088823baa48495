//! A criterion measurement in CPU time rather than wall time. These machines are shared: a
//! wall-clock figure includes the time a benchmark waited for a core, a CPU-time figure does not.

// Each bench includes this file and uses the clocks it needs.
#![allow(dead_code)]

use std::time::Duration;

use criterion::measurement::{Measurement, ValueFormatter, WallTime};

/// CPU time read from one `clock_gettime` clock.
pub struct CpuTime {
    clock: libc::clockid_t,
}

static WALL: WallTime = WallTime;

impl CpuTime {
    /// The calling thread's CPU time.
    pub const THREAD: Self = Self {
        clock: libc::CLOCK_THREAD_CPUTIME_ID,
    };
    /// This whole process's CPU time (every thread, no child): the engine's own cost.
    pub const PROCESS: Self = Self {
        clock: libc::CLOCK_PROCESS_CPUTIME_ID,
    };

    /// The clock's reading now.
    pub fn now(&self) -> Duration {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid, writable timespec; the clock id is a constant of the platform.
        let rc = unsafe { libc::clock_gettime(self.clock, &mut ts) };
        assert_eq!(rc, 0, "clock_gettime({})", self.clock);
        Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
    }
}

impl Measurement for CpuTime {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        self.now()
    }

    fn end(&self, start: Duration) -> Duration {
        self.now().saturating_sub(start)
    }

    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }

    fn zero(&self) -> Duration {
        Duration::ZERO
    }

    fn to_f64(&self, value: &Duration) -> f64 {
        value.as_nanos() as f64
    }

    fn formatter(&self) -> &dyn ValueFormatter {
        WALL.formatter()
    }
}
