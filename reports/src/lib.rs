//! Tables, reports and exports of run stores.
//!
//! Empty until the reports issue lands. polars will live only here, behind the separate
//! `geode-report` binary, so the main `geode` binary never waits for it to compile.
