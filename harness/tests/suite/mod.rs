mod curate;
mod datasets;
mod gateway;
mod pack;
#[path = "../../../tests/support/registry.rs"]
mod registry;
mod sandbox;
mod search;
