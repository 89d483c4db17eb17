mod common;
mod contract;
mod gate;
mod golden;
mod replication;
mod sealed;
mod simulation;
