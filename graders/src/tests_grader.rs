//! The test-script verifier grader, Harbor semantics: `tests/test.sh` ran (the harness ran it
//! in the sandbox, after the agent, with a cleared `/logs/verifier`); its exit code is ignored
//! and only the reward file counts, read with `reward::read_rewards`'s documented precedence
//! (`reward.json`, then `reward.txt`). The verifier's report becomes named checks.

use async_trait::async_trait;

use crate::grade::CommandRunner;
use crate::grade::{Evidence, Grade, GradeInput, Grader, upstream_grade};
use crate::outcome::TrialOutcome;
use crate::parsers::detect_checks;
use crate::reward::{RewardError, read_rewards};

/// Grades from `<trial>/verifier/`: rewards from the reward file, checks from `ctrf.json`,
/// `junit*.xml` or `test-stdout.txt`.
#[derive(Debug, Clone, Copy, Default)]
pub struct TestScriptGrader;

impl TestScriptGrader {
    pub(crate) const SPEC: &'static str = "tests";

    /// The synchronous core (no runner is ever needed): what the harness calls right after
    /// the verifier wrote `verifier/test-stdout.txt`.
    pub fn grade_dir(&self, input: &GradeInput) -> Grade {
        if let Some(g) = upstream_grade(Self::SPEC, input) {
            return g;
        }
        // A timeout leaves no file that says so; only the harness saw it, so keep its word.
        if input.recorded_outcome == Some(TrialOutcome::VerifierTimeout) {
            return Grade::infra(
                Self::SPEC,
                TrialOutcome::VerifierTimeout,
                "result.json records a verifier timeout",
            );
        }
        let dir = input.verifier_dir();
        let stdout = dir.join("test-stdout.txt");
        let mut grade = match read_rewards(&dir, input.reward_key.as_deref()) {
            Ok(r) => Grade::valid(Self::SPEC, r.clone().into()).with_evidence(Evidence::File {
                label: "reward".into(),
                path: dir.join(&r.source),
            }),
            // No output and no reward: the verifier never ran to the end (the harness writes
            // test-stdout.txt whenever the script returned, even with a failing exit code).
            Err(RewardError::Missing { .. }) if !stdout.is_file() => Grade::infra(
                Self::SPEC,
                TrialOutcome::VerifierCrashed,
                format!("{}: no test-stdout.txt and no reward file", dir.display()),
            ),
            Err(e @ RewardError::Missing { .. }) => {
                Grade::infra(Self::SPEC, TrialOutcome::RewardMissing, e.to_string())
            }
            Err(e @ RewardError::Malformed { .. }) => {
                Grade::infra(Self::SPEC, TrialOutcome::RewardMalformed, e.to_string())
            }
        };
        if stdout.is_file() {
            grade = grade.with_evidence(Evidence::File {
                label: "verifier output".into(),
                path: stdout,
            });
        }
        match detect_checks(&dir) {
            Ok(Some(parsed)) => grade
                .with_evidence(Evidence::File {
                    label: format!("checks ({})", parsed.format.as_str()),
                    path: parsed.source,
                })
                .with_checks(parsed.checks),
            Ok(None) => grade,
            // A broken report does not change the reward (the reward file decides); say so.
            Err(e) => grade.with_note(format!("checks not read: {e}")),
        }
    }
}

#[async_trait]
impl Grader for TestScriptGrader {
    fn spec(&self) -> String {
        Self::SPEC.into()
    }

    async fn grade(&self, input: &GradeInput, _runner: Option<&dyn CommandRunner>) -> Grade {
        self.grade_dir(input)
    }
}
