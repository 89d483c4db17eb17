//! The search's resolved configuration: the space, the packs' hashes and the frozen parts
//! checked, and pinned in `<out>/search.json` so a restart names the same search.

use std::path::Path;

use serde::{Deserialize, Serialize};

use super::json_file;
use crate::crucible::evaluator;
use crate::crucible::sealing;
use crate::pack::{PackHash, TaskPack};
use crate::search::SearchError;
use crate::search::config::SearchConfig;
use crate::search::space::SearchSpace;

/// Schema tag of `<out>/search.json`.
pub const RESOLVED_SCHEMA: &str = "geode.search.resolved.v1";

/// The resolved configuration kept in the output folder.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Resolved {
    /// Always [`RESOLVED_SCHEMA`].
    pub schema: String,
    /// The configuration, its paths resolved.
    pub config: SearchConfig,
    /// The search space, as loaded and checked.
    pub space: SearchSpace,
    pub(crate) train_pack_hash: PackHash,
    pub(crate) test_pack_hash: PackHash,
}

/// Resolves and checks the configuration, the space and the frozen parts, and pins them in
/// `<out>/search.json` (a restart with another configuration is refused).
pub fn prepare(config: &SearchConfig) -> Result<Resolved, SearchError> {
    let space = SearchSpace::load(&config.space)?;
    let train = TaskPack::load(&config.train).map_err(SearchError::Pack)?;
    let train_hash = train.hash(config.trials);
    let test_hash = match (&config.test.sealed, &config.test.pack) {
        (Some(state), _) => sealing::load_state(state)?.pack_hash,
        (None, Some(p)) => {
            let pack = TaskPack::load(p).map_err(SearchError::Pack)?;
            pack.hash(config.test.trials)
        }
        (None, None) => return Err(SearchError::Refused("no test pack".into())),
    };
    let frozen = &space.frozen;
    let check = |field: &str, pinned: &Option<String>, actual: &str| match pinned {
        Some(p) if p != actual => Err(SearchError::Field {
            path: config.space.display().to_string(),
            field: format!("frozen.{field}"),
            message: format!("pinned {p:?} but the search uses {actual:?}"),
        }),
        _ => Ok(()),
    };
    check("train_pack", &frozen.train_pack, train_hash.as_str())?;
    check("test_pack", &frozen.test_pack, test_hash.as_str())?;
    check("model", &frozen.model, &config.model.to_string())?;
    check(
        "evaluator_version",
        &frozen.evaluator_version,
        &evaluator().binary_version,
    )?;
    // Fail early on an unreadable baseline rather than after the packs are hashed twice.
    let baseline = config.baseline_scaffold()?;
    space
        .check_interactions(&baseline)
        .map_err(|(field, message)| SearchError::Field {
            path: config.space.display().to_string(),
            field,
            message,
        })?;
    let resolved = Resolved {
        schema: RESOLVED_SCHEMA.into(),
        config: config.clone(),
        space,
        train_pack_hash: train_hash,
        test_pack_hash: test_hash,
    };
    std::fs::create_dir_all(&config.out).map_err(|e| SearchError::file(&config.out, e))?;
    let pinned = config.out.join("search.json");
    if pinned.is_file() {
        let text = std::fs::read_to_string(&pinned).map_err(|e| SearchError::file(&pinned, e))?;
        let old: Resolved = serde_json::from_str(&text).map_err(|e| SearchError::Format {
            path: pinned.display().to_string(),
            message: e.to_string(),
        })?;
        let same = serde_json::to_value(&old.config).ok() == serde_json::to_value(config).ok()
            && old.space == resolved.space
            && old.train_pack_hash == resolved.train_pack_hash
            && old.test_pack_hash == resolved.test_pack_hash;
        if !same {
            return Err(SearchError::Refused(format!(
                "{} holds another search (configuration, space or packs differ)",
                config.out.display()
            )));
        }
    } else {
        json_file(&pinned, &resolved)?;
    }
    Ok(resolved)
}

/// Reads the pinned configuration back from `<out>/search.json`.
pub fn load_resolved(out: &Path) -> Result<Resolved, SearchError> {
    let p = out.join("search.json");
    let text = std::fs::read_to_string(&p).map_err(|e| SearchError::file(&p, e))?;
    serde_json::from_str(&text).map_err(|e| SearchError::Format {
        path: p.display().to_string(),
        message: e.to_string(),
    })
}
