//! The curation pipeline and its checkpoints.
//!
//! Config (`geode.curate.v1`, TOML; paths relative to the config file):
//! ```toml
//! schema = "geode.curate.v1"
//! out = "curation"                 # output folder
//! seed = 7
//! seed_packs = ["../tasks/geode-core"]   # existing tasks that join the candidates
//! [synthesis]
//! generator = "scripted:gen.json"  # any route; the reply is a geode.synth.v1 object
//! topics = ["csv cleanup", "git history"]
//! per_topic = 1
//! [dedup]
//! threshold = 0.6                  # estimated Jaccard (MinHash LSH) for near-duplicates
//! [pilot]
//! enabled = false                  # oracle must pass every trial, nop must fail every trial
//! trials = 2
//! [tournament]
//! judges = ["scripted:judge.json"] # voter v asks judges[v % len]
//! voters = 3
//! max_position_bias = 0.2          # a judge whose first-shown rate is further from 0.5 (and
//! on_position_bias = "discount"    #   significant, p < 0.01) is flagged: "discount" drops
//!                                  #   its votes, "fail" stops the phase
//! [meta]
//! min_per_category = 1
//! [selection]
//! top_k = 10
//! by = "rating"                    # rating | difficulty | blend
//! blend = 0.5
//! ```
//! Checkpoints: `OUT/state/NN-PHASE.json` (`geode.curate.state.v1`: phase, key, output,
//! output_hash). The key hashes the phase's config section, the seed and the previous output
//! hash; a checkpoint with the same key is reused, so changing one section re-runs that phase
//! and everything after it. A checkpoint whose candidate folders are gone or changed is not
//! reused. Inside the pilot and the tournament, each finished task and each vote is appended to
//! `OUT/state/NN-PHASE.partial.jsonl`, so a phase killed midway redoes only what it had not
//! finished. Every path is taken relative to the config file's folder, from wherever `geode
//! curate` runs. The frozen pool: `OUT/pool/pool.json` (`geode.pool.v1`) and
//! `OUT/pool/tasks/ID/`, never overwritten.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::CurateError;
use crate::pack::TaskHash;

pub use super::phases::{parse_vote, run};

/// The config file's `schema` value.
pub(crate) const CONFIG_SCHEMA: &str = "geode.curate.v1";
/// A checkpoint's `schema` value.
pub(crate) const STATE_SCHEMA: &str = "geode.curate.state.v1";
/// The frozen pool's `schema` value.
pub(crate) const POOL_SCHEMA: &str = "geode.pool.v1";

/// The parsed config file (see the module docs for the format).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CurateConfig {
    pub schema: String,
    pub out: PathBuf,
    pub seed: u64,
    #[serde(default)]
    pub seed_packs: Vec<PathBuf>,
    #[serde(default)]
    pub synthesis: SynthesisConfig,
    #[serde(default)]
    pub dedup: DedupConfig,
    #[serde(default)]
    pub pilot: PilotConfig,
    #[serde(default)]
    pub tournament: TournamentSection,
    #[serde(default)]
    pub meta: MetaConfig,
    #[serde(default)]
    pub selection: SelectionConfig,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct SynthesisConfig {
    pub generator: Option<String>,
    pub topics: Vec<String>,
    pub per_topic: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct DedupConfig {
    pub threshold: f64,
}

impl Default for DedupConfig {
    fn default() -> Self {
        DedupConfig { threshold: 0.6 }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct PilotConfig {
    pub enabled: bool,
    pub trials: u32,
}

impl Default for PilotConfig {
    fn default() -> Self {
        PilotConfig {
            enabled: false,
            trials: 2,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct TournamentSection {
    pub judges: Vec<String>,
    pub voters: usize,
    pub pairs: Option<usize>,
    pub bootstrap: usize,
    /// How far from 0.5 a judge's first-position rate may be before it is flagged.
    pub max_position_bias: f64,
    pub on_position_bias: OnPositionBias,
}

/// What a flagged judge's votes do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnPositionBias {
    /// Rate from the other judges' votes (the phase fails when none is left).
    Discount,
    /// Stop the tournament phase with an error.
    Fail,
}

impl Default for TournamentSection {
    fn default() -> Self {
        TournamentSection {
            judges: Vec::new(),
            voters: 3,
            pairs: None,
            bootstrap: 200,
            max_position_bias: 0.2,
            on_position_bias: OnPositionBias::Discount,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct MetaConfig {
    pub min_per_category: usize,
    pub difficulties: Vec<String>,
}

impl Default for MetaConfig {
    fn default() -> Self {
        MetaConfig {
            min_per_category: 1,
            difficulties: vec!["easy".into(), "medium".into(), "hard".into()],
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default)]
pub(crate) struct SelectionConfig {
    pub top_k: usize,
    pub by: String,
    pub blend: f64,
}

impl Default for SelectionConfig {
    fn default() -> Self {
        SelectionConfig {
            top_k: 0,
            by: "rating".into(),
            blend: 0.5,
        }
    }
}

/// The curation phases, in the order they run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "kebab-case")]
pub enum Phase {
    /// Gather the candidates: the seed packs' tasks and the generator's new ones.
    Synthesis,
    /// Drop near-duplicates (MinHash) among the candidates.
    Dedup,
    /// Pilot runs: the `oracle` agent must pass every trial and `nop` fail every one.
    Pilot,
    /// Rate the candidates by judge votes over pairs.
    Tournament,
    /// Coverage by category and difficulty, and the gaps.
    MetaReview,
    /// Pick the survivors.
    Selection,
    /// Write the survivors as the frozen pool, never overwritten.
    Freeze,
}

impl Phase {
    /// Every phase, in order; a phase's index here numbers its checkpoint file.
    pub(crate) const ALL: [Phase; 7] = [
        Phase::Synthesis,
        Phase::Dedup,
        Phase::Pilot,
        Phase::Tournament,
        Phase::MetaReview,
        Phase::Selection,
        Phase::Freeze,
    ];

    /// The phase's kebab-case name (`meta-review`), as in checkpoints and `--until`.
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// The phase named `s` (kebab-case), if any.
    pub fn parse(s: &str) -> Option<Phase> {
        s.parse().ok()
    }
}

/// One candidate task.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Candidate {
    /// The task's id.
    pub id: String,
    /// Absolute, or relative to the output folder (synthesized tasks).
    pub dir: String,
    /// The task folder's content hash.
    pub hash: TaskHash,
    /// `synth:TOPIC` for synthesized tasks, else the seed pack's origin.
    pub origin: String,
    /// The task's category, from its `task.toml`.
    pub category: String,
    /// The task's difficulty, from its `task.toml`.
    pub difficulty: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct State {
    pub schema: String,
    pub phase: Phase,
    pub key: String,
    pub output: Value,
    pub output_hash: String,
}

/// How a phase got its output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PhaseStatus {
    /// Computed in this run.
    Ran,
    /// Taken from a checkpoint with the same key.
    Resumed,
}

/// What one phase did, for the caller to print.
#[derive(Debug, Clone, Serialize)]
pub struct PhaseReport {
    /// The phase.
    pub phase: Phase,
    /// Run or resumed.
    pub status: PhaseStatus,
    /// One line: counts, and why a checkpoint was not reused.
    pub summary: String,
}

/// Runs a task with the `oracle` or `nop` agent; one pass flag per trial.
#[async_trait]
pub trait PilotRunner: Send + Sync {
    /// `trials` trials of the task in `task_dir` with `agent` (`oracle` or `nop`), from `seed`.
    async fn run(
        &self,
        task_dir: &Path,
        agent: &str,
        trials: u32,
        seed: u64,
    ) -> Result<Vec<bool>, String>;
}

/// Asks a model for text (generators and judges).
#[async_trait]
pub trait TextModel: Send + Sync {
    /// The model's text reply to `prompt` under `system`.
    async fn ask(&self, system: &str, prompt: &str) -> Result<String, String>;
}

/// Builds text models from routes.
pub trait ModelFactory {
    /// A model for `route` (a model route such as `scripted:FILE`), or why not.
    fn build(&self, route: &str) -> Result<Box<dyn TextModel>, String>;
}

/// Routes through `geode_runtime::model::judge_for` (text only, no tools). Relative paths of
/// embedded routes (`scripted:FILE`) are taken relative to the config file (`Route::rebased`).
pub struct RouteFactory {
    /// Folder relative `scripted:` routes are taken from (the config file's).
    pub base: PathBuf,
}

struct RouteModel(geode_runtime::model::catalog::JudgeModel);

#[async_trait]
impl TextModel for RouteModel {
    async fn ask(&self, system: &str, prompt: &str) -> Result<String, String> {
        self.0
            .decide(system, prompt)
            .await
            .map(|d| d.text)
            .map_err(|e| e.to_string())
    }
}

impl ModelFactory for RouteFactory {
    fn build(&self, route: &str) -> Result<Box<dyn TextModel>, String> {
        let route: geode_runtime::model::catalog::Route = route
            .parse()
            .map_err(|e: geode_runtime::model::ModelError| e.to_string())?;
        let opts = geode_runtime::model::http::RouteOptions::from_env();
        geode_runtime::model::judge_for(&route.rebased(&self.base), &opts)
            .map(|j| Box::new(RouteModel(j)) as Box<dyn TextModel>)
            .map_err(|e| e.to_string())
    }
}

pub(crate) fn load_config(path: &Path) -> Result<CurateConfig, CurateError> {
    let bad = |message: String| CurateError::Config {
        path: path.display().to_string(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| CurateError::Io {
        path: path.display().to_string(),
        source: e,
    })?;
    let config: CurateConfig = toml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    if config.schema != CONFIG_SCHEMA {
        return Err(bad(format!(
            "schema {:?}: expected {CONFIG_SCHEMA:?}",
            config.schema
        )));
    }
    if config.tournament.voters < 3 || config.tournament.voters.is_multiple_of(2) {
        return Err(bad(
            "tournament.voters: at least 3 and odd, for a majority".into()
        ));
    }
    Ok(config)
}
