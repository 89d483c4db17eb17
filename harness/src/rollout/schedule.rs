//! The one trial scheduler, for benchmark runs and crucible campaigns alike: at most
//! `concurrency` trials at once, in plan order, and none started once the run is cancelled
//! (the trials already running see the same token and end themselves as `cancelled`).

use std::future::Future;
use std::sync::Arc;

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// Runs `work(plan)` for each plan, at most `concurrency` (at least one) at a time, and returns
/// what every started one returned, in the order they finished. A panicking trial is logged and
/// left out: it cannot take the other trials of the run down with it.
pub async fn run_bounded<P, T, F, Fut>(
    plans: Vec<P>,
    concurrency: usize,
    cancel: &CancellationToken,
    work: F,
) -> Vec<T>
where
    F: Fn(P) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let mut running = tokio::task::JoinSet::new();
    for plan in plans {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => p,
            _ = cancel.cancelled() => break,
        };
        // The semaphore is never closed, so this only guards against a future change.
        let Ok(permit) = permit else { break };
        if cancel.is_cancelled() {
            break;
        }
        let trial = work(plan);
        running.spawn(async move {
            let out = trial.await;
            drop(permit);
            out
        });
    }
    let mut finished = Vec::new();
    while let Some(joined) = running.join_next().await {
        match joined {
            Ok(out) => finished.push(out),
            Err(e) => tracing::error!("a trial task panicked: {e}"),
        }
    }
    finished
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    #[tokio::test]
    async fn never_more_than_the_limit_and_nothing_after_cancel() {
        let now = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let cancel = CancellationToken::new();
        let out = run_bounded((0..12).collect(), 3, &cancel, |i: u32| {
            let (now, peak) = (now.clone(), peak.clone());
            async move {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(n, Ordering::SeqCst);
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                i
            }
        })
        .await;
        assert_eq!(out.len(), 12);
        assert_eq!(peak.load(Ordering::SeqCst), 3);

        let started = Arc::new(AtomicUsize::new(0));
        let out = run_bounded((0..12).collect(), 2, &cancel.clone(), |i: u32| {
            let (started, cancel) = (started.clone(), cancel.clone());
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                if i == 1 {
                    cancel.cancel();
                }
                i
            }
        })
        .await;
        assert!(out.len() < 12, "{out:?}");
        assert_eq!(out.len(), started.load(Ordering::SeqCst));
    }
}
