//! Tools: the immutable plan, the workspace they act on, the built-ins and the pipeline.

pub mod builtin;
pub mod plan;
pub mod workspace;
