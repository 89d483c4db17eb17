//! Tools: the immutable plan, the workspace they act on, the built-ins and the pipeline.

pub mod approval;
pub mod builtin;
pub mod cognitive;
pub mod computer;
pub mod confine;
pub mod executor;
pub mod input;
pub mod locks;
pub mod output;
pub mod plan;
pub mod workspace;
