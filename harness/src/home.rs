//! `$GEODE_HOME`: where GEODE keeps what outlives a run on this machine (sessions, timeline,
//! images, the holdout ledger).

use std::path::PathBuf;

/// `$GEODE_HOME`, else `~/.geode`, else `./.geode` without a home directory.
pub fn geode_home() -> PathBuf {
    if let Some(h) = std::env::var_os("GEODE_HOME") {
        return PathBuf::from(h);
    }
    let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
    home.join(".geode")
}
