//! What every end-to-end module starts from: the `geode` binary in a folder of its own.

use std::path::Path;
use std::process::Command;

/// `geode` run in `dir`, with `GEODE_HOME` at `dir/home` and none of the `GEODE_*` settings of
/// the environment the tests were started from.
pub fn geode_in(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_geode"));
    c.current_dir(dir);
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("GEODE_") {
            c.env_remove(key);
        }
    }
    c.env("GEODE_HOME", dir.join("home"));
    c
}
