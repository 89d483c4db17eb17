mod common;
mod contract;
mod gate;
mod golden;
mod replication;
mod safety_veto;
mod sealed;
mod simulation;
