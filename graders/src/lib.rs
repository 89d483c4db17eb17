//! Verifiers, rubric graders, LLM judges and validity rules.
//!
//! Empty until the graders issue lands; the crate exists so the workspace has its final shape.
