//! LaneQueue: how many turns may run at once. One lane per session key with capacity 1 keeps
//! each session serial (two prompts of one session never interleave their messages); one global
//! lane with capacity N bounds the daemon's total load.
//!
//! A turn acquires its session lane first, then the global lane, and releases them in reverse.
//! Session-first ordering means a session waiting for its own earlier turn holds no global
//! permit, so it cannot starve other sessions. Acquisition is cancellation-safe: the permits are
//! owned values, so dropping an `acquire` future half-way releases whatever it already held.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::sync::{Mutex, OwnedSemaphorePermit, Semaphore};

/// Why a lane could not be acquired.
#[derive(Debug, thiserror::Error)]
pub enum LaneError {
    /// The daemon is draining; no new turn starts.
    #[error("the lane queue is closed (the daemon is draining)")]
    Closed,
}

/// Lanes shared by every connection of one daemon.
#[derive(Debug)]
pub struct LaneQueue {
    global: Arc<Semaphore>,
    global_capacity: usize,
    /// One semaphore (capacity 1) per session key, created on first use.
    sessions: Mutex<HashMap<String, Arc<Semaphore>>>,
}

/// Both permits of one running turn. Field order is drop order: the global permit is released
/// before the session permit, the reverse of acquisition.
#[derive(Debug)]
pub struct LaneGuard {
    _global: OwnedSemaphorePermit,
    _session: OwnedSemaphorePermit,
}

impl LaneQueue {
    /// `global_capacity` turns at once across sessions (at least 1).
    pub fn new(global_capacity: usize) -> Self {
        let n = global_capacity.max(1);
        LaneQueue {
            global: Arc::new(Semaphore::new(n)),
            global_capacity: n,
            sessions: Mutex::new(HashMap::new()),
        }
    }

    /// Turns that may run at once across sessions (at least 1).
    pub fn global_capacity(&self) -> usize {
        self.global_capacity
    }

    /// Turns running now, across sessions.
    pub fn running(&self) -> usize {
        self.global_capacity - self.global.available_permits()
    }

    /// Wait for the session's lane, then for a global slot.
    pub async fn acquire(&self, session_key: &str) -> Result<LaneGuard, LaneError> {
        let lane = {
            let mut map = self.sessions.lock().await;
            map.entry(session_key.to_string())
                .or_insert_with(|| Arc::new(Semaphore::new(1)))
                .clone()
        };
        let session = lane.acquire_owned().await.map_err(|_| LaneError::Closed)?;
        let global = self
            .global
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| LaneError::Closed)?;
        Ok(LaneGuard {
            _global: global,
            _session: session,
        })
    }

    /// Forget an idle session's lane (its connection closed). A lane still held is kept.
    pub async fn forget(&self, session_key: &str) {
        let mut map = self.sessions.lock().await;
        if map
            .get(session_key)
            .is_some_and(|s| s.available_permits() == 1 && Arc::strong_count(s) == 1)
        {
            map.remove(session_key);
        }
    }

    /// Refuse new turns (drain): waiting and future acquisitions fail, held guards stay valid.
    pub fn close(&self) {
        self.global.close();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn a_session_lane_is_serial_and_the_global_lane_bounds_all() {
        let q = Arc::new(LaneQueue::new(2));
        let a1 = q.acquire("a").await.unwrap();
        // The same session waits even though a global slot is free.
        let waiting = tokio::time::timeout(Duration::from_millis(50), q.acquire("a")).await;
        assert!(waiting.is_err());
        let b = q.acquire("b").await.unwrap();
        assert_eq!(q.running(), 2);
        // Global lane full: a third session waits.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), q.acquire("c"))
                .await
                .is_err()
        );
        drop(a1);
        let c = q.acquire("c").await.unwrap();
        drop((b, c));
        assert_eq!(q.running(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_acquire_releases_its_session_permit() {
        let q = LaneQueue::new(1);
        let held = q.acquire("x").await.unwrap();
        // "y" gets its session permit, then waits on the global lane and is cancelled.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), q.acquire("y"))
                .await
                .is_err()
        );
        drop(held);
        // Had the cancelled acquire leaked its session permit, this would hang.
        let again = tokio::time::timeout(Duration::from_millis(500), q.acquire("y")).await;
        assert!(again.is_ok());
    }

    #[tokio::test]
    async fn closing_refuses_new_turns() {
        let q = LaneQueue::new(1);
        q.close();
        assert!(matches!(q.acquire("a").await, Err(LaneError::Closed)));
    }
}
