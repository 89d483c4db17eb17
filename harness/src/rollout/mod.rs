//! Seeded rollouts: trials (one task, one attempt, one sandbox) and jobs (a pack times K
//! attempts, N at a time, resumable).

pub mod harbor;
pub mod images;
pub mod job;
pub(crate) mod ledger;
mod local;
pub mod run_spec;
pub mod schedule;
pub mod services;
pub mod slurm;
pub mod stage;
pub(crate) mod task_command;
pub mod trial;
