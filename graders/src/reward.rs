//! Reading the reward a verifier wrote, with Harbor's semantics: the test script's exit code is
//! ignored, only the reward file counts.
//!
//! Precedence (documented, fixed): `reward.json` first, a flat object of finite numbers whose
//! primary value is the `reward` key (or the only key); otherwise `reward.txt`, one finite
//! number. Neither present: `RewardError::Missing`. Present but unreadable: `Malformed`, naming
//! the file and what is wrong.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

/// Named rewards of one trial; `primary` is what scores use.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rewards {
    pub primary: f64,
    pub all: BTreeMap<String, f64>,
    /// `reward.json` or `reward.txt`.
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RewardError {
    #[error("no reward.json or reward.txt in {dir}")]
    Missing { dir: String },
    #[error("{file}: {why}")]
    Malformed { file: String, why: String },
}

fn malformed(file: &Path, why: impl Into<String>) -> RewardError {
    RewardError::Malformed {
        file: file.display().to_string(),
        why: why.into(),
    }
}

/// Read the rewards from a verifier log folder.
pub fn read_rewards(verifier_dir: &Path) -> Result<Rewards, RewardError> {
    let json_path = verifier_dir.join("reward.json");
    if crate::safe_fs::is_file(&json_path) {
        return read_json(&json_path);
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

fn read_json(path: &Path) -> Result<Rewards, RewardError> {
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
    let primary = match (all.get("reward"), all.len()) {
        (Some(r), _) => *r,
        (None, 1) => *all.values().next().unwrap_or(&0.0),
        (None, 0) => return Err(malformed(path, "the object is empty")),
        (None, _) => return Err(malformed(path, "several values and no \"reward\" key")),
    };
    Ok(Rewards {
        primary,
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
        std::fs::write(d.path().join("reward.json"), r#"{"a": 1, "b": 2}"#).unwrap();
        let e = read_rewards(d.path()).unwrap_err().to_string();
        assert!(
            e.contains("reward.json") && e.contains("no \"reward\" key"),
            "{e}"
        );
        std::fs::remove_file(d.path().join("reward.json")).unwrap();
        std::fs::write(d.path().join("reward.txt"), "yes").unwrap();
        let e = read_rewards(d.path()).unwrap_err().to_string();
        assert!(
            e.contains("reward.txt") && e.contains("not a number"),
            "{e}"
        );
    }
}
