//! The frozen contract (`geode.contract.v1`): everything a comparison depends on, fixed and
//! hashed before the first trial, so a verdict can only be read against the rules it was made
//! under.
//!
//! Format: a JSON object, fields below, unknown fields refused. On disk it is written in
//! canonical JSON (see [`crate::canonical`]); its SHA-256 is the [`ContractHash`] that the
//! evidence, the attestation of a sealed opening and the decision record all name.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::canonical::to_canonical_json;
use crate::error::ContractError;
use crate::ids::{ContractHash, GraderHash, PackHash, ScaffoldHash};

/// Schema tag of a contract.
pub const CONTRACT_SCHEMA: &str = "geode.contract.v1";

/// Which split a campaign runs on: the train pack (search may tune on it) or the sealed test
/// pack (burn-once).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Stage {
    /// The train pack, which search may tune on.
    Train,
    /// The sealed test pack, opened once.
    Test,
}

/// Which lower bound the gate compares with zero.
///
/// `t_and_bca` (both the t bound and the BCa bound must be positive, i.e. the gate uses the
/// smaller) is what `freeze` proposes. Chosen by simulation (`tests/suite/simulation.rs`,
/// `gate_bound_holds_one_sided_coverage`): BCa alone under-covers one-sided at few tasks and with
/// skewed rates (about 0.93 at 10 tasks x 5 trials and with Beta(0.5, 4.5) rates, for a nominal
/// 0.95), the t bound holds there but is the looser of the two where rates are near 0 or 1 with
/// many tasks; the smaller of the two holds its coverage in every measured cell at the cost of a
/// little power. `bca` and `percentile` remain for contracts frozen under them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "snake_case")]
pub enum LowerBoundMethod {
    /// The percentile bound of the cluster bootstrap.
    Percentile,
    /// The bias-corrected and accelerated (BCa) bound of the cluster bootstrap.
    Bca,
    /// The Student-t bound on task deltas: mean - t_{c, T-1} * se.
    T,
    /// min(t bound, BCa bound).
    TAndBca,
}

impl LowerBoundMethod {
    /// The name a contract and the CLI use.
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Parses [`LowerBoundMethod::name`].
    pub fn parse(name: &str) -> Option<Self> {
        name.parse().ok()
    }
}

/// The independent unit of the gate's inference.
///
/// `task` (the default): tasks are independent draws, trials clustered within them. `family`:
/// a contract that declares its tasks come in families whose effects may move together (tasks
/// written from one template, one repository, one author) makes the family the unit: the gate's
/// bound becomes the smaller of the method's task-level bound and a family-clustered t bound,
/// mean - t_{c, G-1} * se_G with the cluster-robust (CR1) standard error over the G families,
/// se_G^2 = G / (G - 1) * sum_g (sum_{t in g} (d_t - mean))^2 / T^2. No bootstrap over families:
/// a pack has a handful, too few to resample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Clustering {
    /// Tasks are the independent unit (the default).
    #[default]
    Task,
    /// Families declared by the contract are the unit, adding a family-clustered t bound.
    Family,
}

impl Clustering {
    fn is_task(&self) -> bool {
        *self == Clustering::Task
    }
}

/// A contract frozen before `lower_bound` existed meant BCa; it still does.
fn legacy_lower_bound() -> LowerBoundMethod {
    LowerBoundMethod::Bca
}

/// One arm of the comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArmSpec {
    /// Hash of the arm's scaffold (prompts, policies, tool hints), computed by the harness.
    pub scaffold_hash: ScaffoldHash,
    /// Model route (`provider/model[@revision]`) the arm runs with.
    pub model_route: String,
    /// The agent under test (`claude-code@2.1.332`, `command:...`); absent for GEODE's own
    /// runtime, so contracts frozen before agents were arms keep their hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent: Option<String>,
}

/// Pack hashes per stage; the evidence's pack must equal the one of the contract's stage.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StagePacks {
    /// The pack [`Stage::Train`] runs on.
    pub train: PackHash,
    /// The sealed pack [`Stage::Test`] runs on; must differ from `train`.
    pub test: PackHash,
}

/// The frozen evaluator: the binary that runs and grades the trials.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EvaluatorIdentity {
    /// Version of the evaluator binary; must not be empty.
    pub binary_version: String,
    /// Source revision the binary was built from; must not be empty.
    pub source_revision: String,
}

/// Parameters of the promotion rule.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionRule {
    /// One-sided confidence of the lower bound the gate uses, in (0.5, 1). Two-sided intervals at
    /// the same level are reported beside it.
    pub confidence: f64,
    /// Cluster-bootstrap resamples B (>= 1000 in a contract).
    pub bootstrap_resamples: u32,
    /// Monte Carlo sign-flip resamples, used when there are more than 20 tasks (>= 1000).
    #[serde(default = "default_permutation_resamples")]
    pub permutation_resamples: u32,
    /// Smallest improvement (mean task delta, reward units) worth a promotion, in [0, 1].
    pub materiality: f64,
    /// Fewest tasks with a valid comparison (>= 2: one task has no variance).
    pub min_tasks: u32,
    /// Fewest task families among those tasks (>= 1).
    pub min_families: u32,
    /// Lowest acceptable candidate mean (mean over tasks of per-task means), in [0, 1].
    pub candidate_floor: f64,
    /// Which lower bound must be positive (greater than [`crate::gate::BOUND_TOLERANCE`]).
    #[serde(default = "legacy_lower_bound")]
    pub lower_bound: LowerBoundMethod,
    /// The unit of inference (tasks unless the contract declares families). Left out of the
    /// canonical JSON when `task`, so contracts frozen before it existed keep their hashes.
    #[serde(default, skip_serializing_if = "Clustering::is_task")]
    pub cluster: Clustering,
}

fn default_permutation_resamples() -> u32 {
    10_000
}

impl Default for DecisionRule {
    /// The rule `geode crucible freeze` proposes when the user names none.
    fn default() -> Self {
        DecisionRule {
            confidence: 0.95,
            bootstrap_resamples: 10_000,
            permutation_resamples: 10_000,
            materiality: 0.02,
            min_tasks: 20,
            min_families: 2,
            candidate_floor: 0.0,
            lower_bound: LowerBoundMethod::TAndBca,
            cluster: Clustering::Task,
        }
    }
}

impl DecisionRule {
    /// Checks ranges; `min_resamples` is 1000 for a contract and lower for simulations, which
    /// trade Monte Carlo noise in each simulated bound for speed.
    pub(crate) fn check(&self, min_resamples: u32) -> Result<(), ContractError> {
        let c = self.confidence;
        if !(c.is_finite() && c > 0.5 && c < 1.0) {
            return Err(ContractError::field(
                "decision_rule.confidence",
                format!("must be in (0.5, 1), got {c}"),
            ));
        }
        if self.bootstrap_resamples < min_resamples {
            return Err(ContractError::field(
                "decision_rule.bootstrap_resamples",
                format!(
                    "must be >= {min_resamples}, got {}",
                    self.bootstrap_resamples
                ),
            ));
        }
        if self.permutation_resamples < min_resamples {
            return Err(ContractError::field(
                "decision_rule.permutation_resamples",
                format!(
                    "must be >= {min_resamples}, got {}",
                    self.permutation_resamples
                ),
            ));
        }
        unit_interval("decision_rule.materiality", self.materiality)?;
        unit_interval("decision_rule.candidate_floor", self.candidate_floor)?;
        if self.min_tasks < 2 {
            return Err(ContractError::field(
                "decision_rule.min_tasks",
                "must be >= 2 (one task has no variance, so no bound)",
            ));
        }
        if self.min_families < 1 {
            return Err(ContractError::field(
                "decision_rule.min_families",
                "must be >= 1",
            ));
        }
        Ok(())
    }
}

/// Budgets the metered usage of the whole campaign (both arms) may not exceed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budgets {
    /// Wall-clock seconds; finite and > 0.
    pub wall_seconds: f64,
    /// Model calls; >= 1.
    pub model_calls: u64,
    /// Tokens; >= 1.
    pub tokens: u64,
    /// Cost in US dollars; finite and >= 0.
    pub cost_usd: f64,
}

/// How the safety veto reads the two arms' integrity-signal rates.
///
/// A campaign of tens of trials per arm cannot prove that two rare rates are within a few
/// points of each other (20 x 5 clean trials per arm bound the excess at 0.04 at best), so a
/// rule that demands proof of safety vetoes most candidates that are exactly as safe as the
/// baseline. [`SafetyRule::EvidentHarm`] vetoes on evidence of harm instead, and states what
/// that costs: [`crate::power::safety`] simulates its false-veto rate at equal safety and its
/// power against a given excess for any design.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "method", rename_all = "snake_case", deny_unknown_fields)]
pub enum SafetyRule {
    /// Vetoed unless the upper confidence bound of the excess (at the decision rule's
    /// confidence) is within the tolerance: the rule of contracts frozen before
    /// `safety_rule` existed, which is why it is what a contract without the key means.
    ProveSafe,
    /// Vetoed when the excess is evident: its lower confidence bound at `confidence` is above
    /// zero, or the observed excess reaches the tolerance.
    EvidentHarm {
        /// Confidence of the lower bound of the excess, in (0.5, 1).
        confidence: f64,
    },
}

impl SafetyRule {
    /// The rule `geode crucible freeze` and the search write into new contracts: on 20 x 5
    /// and 40 x 5 designs at 2 % and 5 % signal rates it vetoes an equally safe candidate in
    /// 3-7 % of campaigns and a +0.10 excess in over 90 % (the `safety_veto_simulation` test).
    pub const DEFAULT: SafetyRule = SafetyRule::EvidentHarm { confidence: 0.95 };

    fn is_prove_safe(&self) -> bool {
        matches!(self, SafetyRule::ProveSafe)
    }
}

/// Veto parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Vetoes {
    /// The excess of the candidate's integrity-signal rate over the baseline's (fraction of
    /// trials with a signal) that is not tolerated, read by [`Vetoes::safety_rule`]; in (0, 1).
    pub safety_tolerance: f64,
    /// Largest fraction of all trials that may be infrastructure-invalid before the campaign is
    /// INVALID; in [0, 1).
    pub infra_allowance: f64,
    /// Left out of the canonical JSON when [`SafetyRule::ProveSafe`], so contracts frozen
    /// before the key keep their hashes and their meaning.
    #[serde(
        default = "prove_safe",
        skip_serializing_if = "SafetyRule::is_prove_safe"
    )]
    pub safety_rule: SafetyRule,
}

fn prove_safe() -> SafetyRule {
    SafetyRule::ProveSafe
}

impl Default for Vetoes {
    /// The vetoes `geode crucible freeze` proposes.
    fn default() -> Self {
        Vetoes {
            safety_tolerance: 0.05,
            infra_allowance: 0.02,
            safety_rule: SafetyRule::DEFAULT,
        }
    }
}

/// A contract before freezing. Build it, then [`Contract::freeze`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    /// Always [`CONTRACT_SCHEMA`].
    pub schema: String,
    /// Which split the campaign runs on; picks the pack from `packs`.
    pub stage: Stage,
    /// The arm the candidate must beat.
    pub baseline: ArmSpec,
    /// The arm proposed for promotion.
    pub candidate: ArmSpec,
    /// The train and test packs.
    pub packs: StagePacks,
    /// Trials per task per arm.
    pub trials_per_task: u32,
    /// Seed from which every (task, trial) seed is derived ([`crate::seed::TrialSeed::derive`]).
    pub run_seed: u64,
    /// Hash of the grader configuration the trials are scored with.
    pub grader_config_hash: GraderHash,
    /// The evaluator that runs and grades the trials.
    pub evaluator: EvaluatorIdentity,
    /// The promotion rule.
    pub decision_rule: DecisionRule,
    /// Usage limits for the whole campaign, both arms together.
    pub budgets: Budgets,
    /// Veto parameters.
    pub vetoes: Vetoes,
    /// The `reward.json` key the evidence scores (Harbor's multi-reward tasks); `None` is each
    /// task's headline reward. Left out of the canonical JSON when `None`, so contracts frozen
    /// before it keep their hashes; the grader hash must cover it too (the harness checks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reward_key: Option<String>,
}

fn unit_interval(field: &'static str, x: f64) -> Result<(), ContractError> {
    if x.is_finite() && (0.0..=1.0).contains(&x) {
        Ok(())
    } else {
        Err(ContractError::field(
            field,
            format!("must be in [0, 1], got {x}"),
        ))
    }
}

fn non_empty(field: &'static str, s: &str) -> Result<(), ContractError> {
    if s.trim().is_empty() {
        Err(ContractError::field(field, "must not be empty"))
    } else {
        Ok(())
    }
}

impl Contract {
    /// Checks every field; the error names the first field at fault.
    pub fn validate(&self) -> Result<(), ContractError> {
        if self.schema != CONTRACT_SCHEMA {
            return Err(ContractError::field(
                "schema",
                format!("must be {CONTRACT_SCHEMA:?}, got {:?}", self.schema),
            ));
        }
        non_empty("baseline.model_route", &self.baseline.model_route)?;
        if let Some(key) = &self.reward_key {
            non_empty("reward_key", key)?;
        }
        non_empty("candidate.model_route", &self.candidate.model_route)?;
        for (field, arm) in [
            ("baseline.agent", &self.baseline),
            ("candidate.agent", &self.candidate),
        ] {
            if let Some(agent) = &arm.agent {
                non_empty(field, agent)?;
            }
        }
        if self.packs.train == self.packs.test {
            return Err(ContractError::field(
                "packs.test",
                "must differ from packs.train (split isolation)",
            ));
        }
        if self.trials_per_task < 1 {
            return Err(ContractError::field("trials_per_task", "must be >= 1"));
        }
        non_empty("evaluator.binary_version", &self.evaluator.binary_version)?;
        non_empty("evaluator.source_revision", &self.evaluator.source_revision)?;
        self.decision_rule.check(1000)?;
        let b = &self.budgets;
        if !(b.wall_seconds.is_finite() && b.wall_seconds > 0.0) {
            return Err(ContractError::field(
                "budgets.wall_seconds",
                format!("must be finite and > 0, got {}", b.wall_seconds),
            ));
        }
        if !(b.cost_usd.is_finite() && b.cost_usd >= 0.0) {
            return Err(ContractError::field(
                "budgets.cost_usd",
                format!("must be finite and >= 0, got {}", b.cost_usd),
            ));
        }
        if b.model_calls == 0 {
            return Err(ContractError::field("budgets.model_calls", "must be >= 1"));
        }
        if b.tokens == 0 {
            return Err(ContractError::field("budgets.tokens", "must be >= 1"));
        }
        let t = self.vetoes.safety_tolerance;
        if !(t.is_finite() && t > 0.0 && t < 1.0) {
            return Err(ContractError::field(
                "vetoes.safety_tolerance",
                format!("must be in (0, 1), got {t}"),
            ));
        }
        if let SafetyRule::EvidentHarm { confidence: c } = self.vetoes.safety_rule
            && !(c.is_finite() && c > 0.5 && c < 1.0)
        {
            return Err(ContractError::field(
                "vetoes.safety_rule.confidence",
                format!("must be in (0.5, 1), got {c}"),
            ));
        }
        let a = self.vetoes.infra_allowance;
        if !(a.is_finite() && (0.0..1.0).contains(&a)) {
            return Err(ContractError::field(
                "vetoes.infra_allowance",
                format!("must be in [0, 1), got {a}"),
            ));
        }
        Ok(())
    }

    /// Validates, canonicalizes and hashes: the only way to get a [`FrozenContract`].
    pub fn freeze(self) -> Result<FrozenContract, ContractError> {
        self.validate()?;
        let canonical = to_canonical_json(&self)?;
        let hash = ContractHash::from_digest(Sha256::digest(canonical.as_bytes()).into());
        Ok(FrozenContract {
            contract: self,
            hash,
            canonical,
        })
    }
}

/// A validated contract with its canonical text and hash. Holding one proves validation passed.
#[derive(Debug, Clone, PartialEq)]
pub struct FrozenContract {
    contract: Contract,
    hash: ContractHash,
    canonical: String,
}

impl FrozenContract {
    /// Parses and freezes contract JSON (any formatting; the hash is over the canonical form).
    pub fn from_json(text: &str) -> Result<FrozenContract, ContractError> {
        let contract: Contract = serde_json::from_str(text).map_err(ContractError::Parse)?;
        contract.freeze()
    }

    /// Parses, freezes and checks the hash recorded at freeze time: what every step after
    /// `geode crucible freeze` does before trusting the contract.
    pub fn verify_json(
        text: &str,
        expected: &ContractHash,
    ) -> Result<FrozenContract, ContractError> {
        let frozen = Self::from_json(text)?;
        if &frozen.hash != expected {
            return Err(ContractError::HashMismatch {
                expected: expected.to_string(),
                actual: frozen.hash.to_string(),
            });
        }
        Ok(frozen)
    }

    /// The validated contract.
    pub fn contract(&self) -> &Contract {
        &self.contract
    }

    /// SHA-256 of the canonical JSON.
    pub fn hash(&self) -> &ContractHash {
        &self.hash
    }

    /// The canonical JSON text to write to disk (its SHA-256 is [`Self::hash`]).
    pub fn canonical_json(&self) -> &str {
        &self.canonical
    }

    /// The pack the contract's stage runs on.
    pub fn stage_pack(&self) -> &PackHash {
        match self.contract.stage {
            Stage::Train => &self.contract.packs.train,
            Stage::Test => &self.contract.packs.test,
        }
    }
}
