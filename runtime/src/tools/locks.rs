//! Resource-key locks: calls that share a key never run at the same time.
//!
//! A `Workspace` key (shell commands) excludes every path key; path keys exclude each other only
//! when equal. Keys are taken in sorted order, so two calls can never wait on each other.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use tokio::sync::{
    Mutex as AsyncMutex, OwnedMutexGuard, OwnedRwLockReadGuard, OwnedRwLockWriteGuard, RwLock,
};

/// What one call needs locked.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResourceClaim {
    /// The whole workspace, exclusively.
    pub workspace: bool,
    /// Named resources (`file:/abs/path`, fixed names), exclusively.
    pub keys: BTreeSet<String>,
}

/// Held until dropped.
#[derive(Debug)]
pub struct ResourceGuard {
    _workspace_read: Option<OwnedRwLockReadGuard<()>>,
    _workspace_write: Option<OwnedRwLockWriteGuard<()>>,
    _keys: Vec<OwnedMutexGuard<()>>,
}

#[derive(Debug, Default)]
pub(crate) struct ResourceLocks {
    workspace: Arc<RwLock<()>>,
    keys: Mutex<HashMap<String, Arc<AsyncMutex<()>>>>,
}

impl ResourceLocks {
    pub fn new() -> Self {
        ResourceLocks::default()
    }

    fn key_lock(&self, key: &str) -> Arc<AsyncMutex<()>> {
        // The map only grows by inserting fresh mutexes; a poisoned map is still consistent.
        let mut map = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        map.entry(key.to_string()).or_default().clone()
    }

    /// Wait for every lock of the claim. Cancelling the future releases what it took.
    pub async fn acquire(&self, claim: &ResourceClaim) -> ResourceGuard {
        if claim.workspace {
            return ResourceGuard {
                _workspace_read: None,
                _workspace_write: Some(self.workspace.clone().write_owned().await),
                _keys: Vec::new(),
            };
        }
        if claim.keys.is_empty() {
            return ResourceGuard {
                _workspace_read: None,
                _workspace_write: None,
                _keys: Vec::new(),
            };
        }
        let read = self.workspace.clone().read_owned().await;
        let mut keys = Vec::with_capacity(claim.keys.len());
        for key in &claim.keys {
            keys.push(self.key_lock(key).lock_owned().await);
        }
        ResourceGuard {
            _workspace_read: Some(read),
            _workspace_write: None,
            _keys: keys,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn workspace_claim_waits_for_path_claims() {
        let locks = Arc::new(ResourceLocks::new());
        let file = ResourceClaim {
            workspace: false,
            keys: ["file:/a".to_string()].into(),
        };
        let held = locks.acquire(&file).await;
        let whole = ResourceClaim {
            workspace: true,
            keys: BTreeSet::new(),
        };
        let l2 = locks.clone();
        let waiter = tokio::spawn(async move { l2.acquire(&whole).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        drop(held);
        tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .unwrap()
            .unwrap();
    }
}
