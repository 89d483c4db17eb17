//! Integration tests of geode-reports, linked into one binary.
//!
//! Fixture helpers outside `#[test]` functions unwrap too: a broken fixture should fail the test
//! loudly, which is what clippy's test allowance grants `#[test]` bodies.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
