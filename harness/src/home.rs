//! `$GEODE_HOME`: where GEODE keeps what outlives a run on this machine (sessions, timeline,
//! images, the holdout ledger), and the trials' scratch.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

/// `$GEODE_HOME`, else `~/.geode`, else `./.geode` without a home directory.
pub fn geode_home() -> PathBuf {
    if let Some(h) = std::env::var_os("GEODE_HOME") {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".geode")
}

/// Where the trials of runs kept in `jobs_dir` have their scratch (writable layers, disk images,
/// a crashed run's leftovers): `$GEODE_HOME/scratch/<12 hex of the jobs folder's path>`.
/// Outside the jobs folder, because Harbor's viewer lists every folder there as a job; one per
/// jobs folder, so a run's clean-up of stale scratch never touches another folder's trials.
pub fn scratch_dir(jobs_dir: &Path) -> PathBuf {
    let jobs = std::fs::canonicalize(jobs_dir).unwrap_or_else(|_| jobs_dir.to_path_buf());
    let digest = Sha256::digest(jobs.as_os_str().as_encoded_bytes());
    let name: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    geode_home().join("scratch").join(name)
}
