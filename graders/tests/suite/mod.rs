mod graders;
mod integrity;
mod judge;
mod judge_cassette;
mod parsers;
mod validity;

use std::path::PathBuf;

/// A fixture file of this crate.
pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests")
        .join("fixtures")
        .join(name)
}
