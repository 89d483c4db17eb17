//! Frozen contracts, paired statistics, the promotion gate and sealed holdouts (pure functions).
//!
//! Empty until the crucible issue lands; the crate exists so the workspace has its final shape.
