//! A timer kept pending a little ahead of now while a prompt runs: a floor under the runtime's
//! deadlines.
//!
//! Tokio's timer driver plans each sleep of its thread on the earliest deadline it holds; a
//! timer armed with an earlier deadline than that plan wakes the driver with a write to its
//! eventfd, even from the runtime's own thread. A round arms several timeouts after a sleep in
//! which none was pending (the hook call and its bound, the tool call, the model's first byte),
//! and each cost that system call, three per round. With the floor pending, a timeout of at
//! least the floor's lead is never the earliest deadline, and arming it costs no system call.
//! The floor changes no deadline: it only wakes the prompt's task, which re-arms it, when a wait
//! outlasts half its lead.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use tokio::time::Instant;

/// The shortest lead: a shorter one would wake a waiting prompt too often.
const MIN_LEAD: Duration = Duration::from_millis(50);

/// Runs `run` with a floor timer `lead` ahead of now (at least [`MIN_LEAD`]); timers of at
/// least `lead` armed meanwhile cost no wake-up of the runtime's driver.
pub(super) async fn with_timer_floor<F: Future>(lead: Duration, run: F) -> F::Output {
    let lead = lead.max(MIN_LEAD);
    let mut run = pin!(run);
    let mut floor = pin!(tokio::time::sleep(lead));
    std::future::poll_fn(|cx| {
        // Pushed ahead once half its lead is gone, so it stays between half its lead and its
        // lead ahead: never later than a timeout of `lead` armed now, rarely re-armed.
        let now = Instant::now();
        if floor.deadline() <= now + lead / 2 {
            floor.as_mut().reset(now + lead);
        }
        // Registers the floor; when it fires, this task is woken and the next poll re-arms it.
        let _ = floor.as_mut().poll(cx);
        run.as_mut().poll(cx)
    })
    .await
}

#[cfg(test)]
mod tests {
    use std::task::Poll;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_floor_moves_no_deadline_of_the_prompt_it_runs() {
        let start = Instant::now();
        let lead = Duration::from_millis(200);
        // Waits longer than the lead, shorter than it, and between: each ends on its deadline.
        let ends = with_timer_floor(lead, async {
            let mut ends = Vec::new();
            for wait in [1_000, 30, 150, 0, 450] {
                tokio::time::sleep(Duration::from_millis(wait)).await;
                ends.push(start.elapsed().as_millis());
            }
            ends
        })
        .await;
        assert_eq!(ends, [1_000, 1_030, 1_180, 1_180, 1_630]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_lead_of_zero_is_raised_so_the_floor_never_spins() {
        let start = Instant::now();
        let polls = std::cell::Cell::new(0_u32);
        // Registers no waker of its own: it is polled again only when the floor wakes its task.
        let run = std::future::poll_fn(|_| {
            polls.set(polls.get() + 1);
            if start.elapsed() >= Duration::from_millis(500) {
                return Poll::Ready(());
            }
            Poll::Pending
        });
        let timeout = tokio::time::timeout(
            Duration::from_millis(500),
            with_timer_floor(Duration::ZERO, run),
        );
        let _ = timeout.await;
        // One poll at the start, then one per re-arm: at most one per half of the shortest lead.
        assert!(
            polls.get() <= 1 + 500 / (MIN_LEAD.as_millis() as u32 / 2),
            "{}",
            polls.get()
        );
    }
}
