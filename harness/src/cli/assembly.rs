//! The binary's face of session assembly (`geode_harness::assembly`): the library builds, this
//! says on stderr what a person must be told. The commands import it; it imports none of them.

use std::path::{Path, PathBuf};

use geode_runtime::config::Config;

pub(super) use geode_harness::assembly::{
    checkpoint_root, checkpoint_settings, load_scaffold, open_timeline, person_workspace,
    socket_path,
};
pub(super) use geode_harness::home::geode_home;

/// The hook files of a session (`assembly::configured_hooks`), its notices said on stderr.
pub(super) fn configured_hooks(cfg: &Config, cwd: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let hooks = geode_harness::assembly::configured_hooks(cfg, cwd)?;
    say_notices(&hooks.notices);
    Ok(hooks.files)
}

/// Each notice on stderr, as `geode: NOTICE`.
pub(super) fn say_notices(notices: &[String]) {
    for notice in notices {
        say!("geode: {notice}");
    }
}
