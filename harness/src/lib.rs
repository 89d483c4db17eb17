//! The GEODE harness: task packs, environments, seeded rollouts and the run store. The `geode`
//! binary (src/main.rs, src/cli/) only parses arguments and calls into this library.

pub mod atif;
pub mod crucible;
pub mod curate;
pub mod datasets;
pub mod env;
pub mod home;
pub mod pack;
pub mod rollout;
pub mod search;
pub mod store;
pub mod summary;
pub mod tb1;
