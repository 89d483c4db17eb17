//! Reading the reward a verifier wrote, with Harbor's semantics: the test script's exit code is
//! ignored, only the reward file counts.
//!
//! Precedence (documented, fixed): `reward.json` first, a flat object of finite numbers, every
//! key kept; otherwise `reward.txt`, one finite number. Neither present:
//! `RewardError::Missing`. Present but unreadable: `Malformed`, naming the file and what is
//! wrong.
//!
//! The headline (what scores and pass/fail use) of a `reward.json`, in order: its `reward`
//! key; the key the task declares (`[metadata] reward_key` in task.toml), which must then be
//! there; its only key; with several keys and no declaration, the lowest of them, so a trial
//! passes only when every one of its rewards does (Harbor's multi-reward tasks write
//! `{"correctness": 1, "performance": 1}`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Named rewards of one trial; `primary` is what scores use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rewards {
    /// The headline reward, chosen by the module's rule.
    pub primary: f64,
    /// Where `primary` comes from: a key of `all`, or `min(a, b, ...)` for the lowest.
    pub primary_key: String,
    /// Every reward of the file by key (`reward` for a `reward.txt`).
    pub all: BTreeMap<String, f64>,
    /// `reward.json` or `reward.txt`.
    pub source: String,
}

/// Why a verifier folder yields no rewards.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RewardError {
    /// Neither reward file exists.
    #[error("no reward.json or reward.txt in {dir}")]
    Missing {
        /// The verifier folder looked in.
        dir: String,
    },
    /// A reward file exists but is not a valid reward.
    #[error("{file}: {why}")]
    Malformed {
        /// The reward file's path.
        file: String,
        /// What is wrong with it.
        why: String,
    },
}

fn malformed(file: &Path, why: impl Into<String>) -> RewardError {
    RewardError::Malformed {
        file: file.display().to_string(),
        why: why.into(),
    }
}

/// Read the rewards from a verifier log folder; `declared` is the task's `reward_key`.
pub fn read_rewards(verifier_dir: &Path, declared: Option<&str>) -> Result<Rewards, RewardError> {
    let json_path = verifier_dir.join("reward.json");
    if crate::safe_fs::is_file(&json_path) {
        return read_json(&json_path, declared);
    }
    let txt_path = verifier_dir.join("reward.txt");
    if crate::safe_fs::is_file(&txt_path) {
        let text = crate::safe_fs::read_to_string(&txt_path)
            .map_err(|e| malformed(&txt_path, e.to_string()))?;
        let value: f64 = text.trim().parse().map_err(|_| {
            malformed(
                &txt_path,
                format!("not a number: {:?}", truncate(text.trim())),
            )
        })?;
        if !value.is_finite() {
            return Err(malformed(&txt_path, "the reward is not finite"));
        }
        return Ok(Rewards {
            primary: value,
            primary_key: "reward".into(),
            all: BTreeMap::from([("reward".to_string(), value)]),
            source: "reward.txt".into(),
        });
    }
    Err(RewardError::Missing {
        dir: verifier_dir.display().to_string(),
    })
}

fn truncate(s: &str) -> String {
    s.chars().take(40).collect()
}

/// The headline of named rewards and where it comes from (the module's rule): `reward`, else
/// the declared key (which must be there), else the only key, else the lowest, as
/// `min(a, b, ...)`. `Err` says why there is none.
pub fn headline(
    all: &BTreeMap<String, f64>,
    declared: Option<&str>,
) -> Result<(f64, String), String> {
    let keyed = |key: &str| all.get(key).map(|v| (*v, key.to_string()));
    if let Some(found) = keyed("reward") {
        return Ok(found);
    }
    if let Some(key) = declared {
        return keyed(key)
            .ok_or_else(|| format!("no {key:?} key, which task.toml's metadata.reward_key names"));
    }
    let mut values = all.iter();
    match (values.next(), values.next()) {
        (None, _) => Err("the object is empty".into()),
        (Some((key, value)), None) => Ok((*value, key.clone())),
        _ => {
            let lowest = all.values().copied().fold(f64::INFINITY, f64::min);
            let keys: Vec<&str> = all.keys().map(String::as_str).collect();
            Ok((lowest, format!("min({})", keys.join(", "))))
        }
    }
}

fn read_json(path: &Path, declared: Option<&str>) -> Result<Rewards, RewardError> {
    let text = crate::safe_fs::read_to_string(path).map_err(|e| malformed(path, e.to_string()))?;
    let value: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| malformed(path, format!("not JSON: {e}")))?;
    let obj = value
        .as_object()
        .ok_or_else(|| malformed(path, "expected a flat object of numbers"))?;
    let mut all = BTreeMap::new();
    for (k, v) in obj {
        let n = v
            .as_f64()
            .filter(|n| n.is_finite())
            .ok_or_else(|| malformed(path, format!("field {k:?} is not a finite number")))?;
        all.insert(k.clone(), n);
    }
    let (primary, primary_key) = headline(&all, declared).map_err(|why| malformed(path, why))?;
    Ok(Rewards {
        primary,
        primary_key,
        all,
        source: "reward.json".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_and_errors() {
        let d = tempfile::tempdir().unwrap();
        let read_rewards = |dir: &Path| super::read_rewards(dir, None);
        assert!(matches!(
            read_rewards(d.path()),
            Err(RewardError::Missing { .. })
        ));
        std::fs::write(d.path().join("reward.txt"), "0.5\n").unwrap();
        assert_eq!(read_rewards(d.path()).unwrap().primary, 0.5);
        std::fs::write(
            d.path().join("reward.json"),
            r#"{"reward": 1, "runtime_sec": 1.2}"#,
        )
        .unwrap();
        let r = read_rewards(d.path()).unwrap();
        assert_eq!(
            (r.primary, r.source.as_str(), r.all.len()),
            (1.0, "reward.json", 2)
        );
        // Harbor's multi-reward shape: every key kept; the lowest is the headline unless the
        // task names one.
        std::fs::write(
            d.path().join("reward.json"),
            r#"{"correctness": 1, "performance": 0.25}"#,
        )
        .unwrap();
        let r = read_rewards(d.path()).unwrap();
        assert_eq!(
            (r.primary, r.primary_key.as_str(), r.all.len()),
            (0.25, "min(correctness, performance)", 2)
        );
        let r = super::read_rewards(d.path(), Some("correctness")).unwrap();
        assert_eq!((r.primary, r.primary_key.as_str()), (1.0, "correctness"));
        let e = super::read_rewards(d.path(), Some("speed"))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("reward.json") && e.contains("\"speed\"") && e.contains("reward_key"),
            "{e}"
        );
        std::fs::write(d.path().join("reward.json"), r#"{"score": 0.5}"#).unwrap();
        let r = read_rewards(d.path()).unwrap();
        assert_eq!((r.primary, r.primary_key.as_str()), (0.5, "score"));
        std::fs::remove_file(d.path().join("reward.json")).unwrap();
        std::fs::write(d.path().join("reward.txt"), "yes").unwrap();
        let e = read_rewards(d.path()).unwrap_err().to_string();
        assert!(
            e.contains("reward.txt") && e.contains("not a number"),
            "{e}"
        );
    }
}
