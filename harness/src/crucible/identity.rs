//! What a frozen contract pins about GEODE itself: the grader, the scaffolds and the evaluator
//! binary (a pack's hash is `TaskPack::hash`, already the crucible's type). `geode crucible
//! freeze`, the search and every campaign compute these the same way, so a campaign can tell
//! that it runs what the contract was frozen for.

use geode_crucible::{EvaluatorIdentity, GraderHash, ScaffoldHash};
use geode_runtime::scaffold::Scaffold;

use super::CrucibleRunError;

/// The grader every campaign uses today: the task's own test script and reward file. Its hash
/// is what contracts pin as `grader_config_hash`.
pub const TESTS_GRADER: &str = "geode.grader.tests.v1";

/// With a reward key, the grader scores that key of `reward.json` rather than each task's
/// headline reward: another grader, so another hash. Without one the hash is the one every
/// contract before reward keys pinned.
pub fn tests_grader_hash(reward_key: Option<&str>) -> GraderHash {
    match reward_key {
        None => GraderHash::of_bytes(TESTS_GRADER.as_bytes()),
        Some(key) => GraderHash::of_bytes(format!("{TESTS_GRADER}\0reward_key={key}").as_bytes()),
    }
}

/// The hash of a scaffold as a contract pins it; `Invalid` if it is not a well-formed hash.
pub fn scaffold_hash(s: &Scaffold) -> Result<ScaffoldHash, CrucibleRunError> {
    ScaffoldHash::parse(&s.hash())
        .map_err(|e| CrucibleRunError::Invalid(format!("scaffold hash: {}", e.0)))
}

/// The evaluator identity pinned by contracts: this binary's version and source revision.
pub fn evaluator() -> EvaluatorIdentity {
    EvaluatorIdentity {
        binary_version: env!("CARGO_PKG_VERSION").into(),
        source_revision: option_env!("GEODE_SOURCE_REVISION")
            .unwrap_or("unknown")
            .into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grader_hash_covers_the_reward_key_and_keeps_the_old_one_without() {
        assert_eq!(
            tests_grader_hash(None),
            GraderHash::of_bytes(b"geode.grader.tests.v1")
        );
        let a = tests_grader_hash(Some("correctness"));
        assert_ne!(a, tests_grader_hash(None));
        assert_ne!(a, tests_grader_hash(Some("performance")));
        assert_eq!(a, tests_grader_hash(Some("correctness")));
    }
}
