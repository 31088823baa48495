//! `tools/list_changed`, merged and paced: a server may say its tools changed as often as it
//! likes, and the host lists them again at most once at a time, at most once per
//! [`MIN_REFRESH_INTERVAL`]. A change said while a listing runs (or waits its turn) leads to
//! exactly one more listing after it; a thousand said then lead to the same one.

use std::future::Future;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

/// The shortest time between the starts of two listings of one server's tools.
pub(crate) const MIN_REFRESH_INTERVAL: Duration = Duration::from_millis(500);

/// Where a server's `list_changed` notifications land: a flag, set until a listing takes it.
/// Setting it costs no memory, however often it is set.
#[derive(Clone)]
pub(super) struct ListChanged(mpsc::Sender<()>);

/// The other end: what the listing task waits on.
pub(super) struct Changes(mpsc::Receiver<()>);

impl ListChanged {
    /// A fresh flag and the end that takes it.
    pub(super) fn new() -> (Self, Changes) {
        // One slot: a full channel is a set flag.
        let (tx, rx) = mpsc::channel(1);
        (Self(tx), Changes(rx))
    }

    /// Notes that the server's tools changed.
    pub(super) fn set(&self) {
        // Full means already set; closed means the life is over. Either way there is nothing
        // more to note.
        let _ = self.0.try_send(());
    }
}

/// Runs `refresh` once per noted change, merging changes noted while one waits or runs into
/// the next, and starting two at least [`MIN_REFRESH_INTERVAL`] apart. Ends when `refresh`
/// returns false (the life it lists for is over) or every [`ListChanged`] is gone.
pub(super) async fn refresh_on_change<F, Fut>(mut changes: Changes, mut refresh: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let mut last: Option<Instant> = None;
    while changes.0.recv().await.is_some() {
        if let Some(last) = last {
            tokio::time::sleep_until(last + MIN_REFRESH_INTERVAL).await;
        }
        // A change noted during the wait is older than the listing about to start: this
        // listing sees it.
        let _ = changes.0.try_recv();
        last = Some(Instant::now());
        if !refresh().await {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_flood_of_changes_during_one_listing_leads_to_exactly_one_more() {
        let (changed, changes) = ListChanged::new();
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&runs);
        let flood = changed.clone();
        let task = tokio::spawn(refresh_on_change(changes, move || {
            let run = counted.fetch_add(1, Ordering::SeqCst);
            let flood = flood.clone();
            async move {
                if run == 0 {
                    // The server says it again and again while the first listing runs.
                    for _ in 0..100_000 {
                        flood.set();
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                true
            }
        }));
        changed.set();
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        // The refresh itself holds a flag, so the task would wait on: end it.
        task.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn listings_start_at_least_the_interval_apart() {
        let (changed, changes) = ListChanged::new();
        let starts = Arc::new(std::sync::Mutex::new(Vec::new()));
        let recorded = Arc::clone(&starts);
        let task = tokio::spawn(refresh_on_change(changes, move || {
            recorded.lock().unwrap().push(Instant::now());
            async { true }
        }));
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until {
            changed.set();
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        drop(changed);
        task.await.unwrap();
        let starts = starts.lock().unwrap();
        // 3 s of changes every millisecond: one listing at once, then one per interval.
        assert!((6..=8).contains(&starts.len()), "{} listings", starts.len());
        for pair in starts.windows(2) {
            assert!(pair[1] - pair[0] >= MIN_REFRESH_INTERVAL);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn refreshing_stops_when_the_life_is_over() {
        let (changed, changes) = ListChanged::new();
        changed.set();
        // Returns although the flag is still held: the refresh said its life ended.
        refresh_on_change(changes, || async { false }).await;
        changed.set();
    }
}
