//! The environment backends by name: parsed once (by clap, or serde from a run's
//! `config.json`), then carried as this enum, never as a string.

use serde::{Deserialize, Serialize};

/// Which backend runs a run's trials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
#[derive(strum::IntoStaticStr, strum::EnumString, strum::Display, strum::EnumIter)]
#[strum(serialize_all = "lowercase")]
pub enum BackendKind {
    /// Namespaces and overlayfs over the task's image, no engine (the default).
    Sandbox,
    /// A docker engine on this machine.
    Docker,
    /// This machine itself, without isolation (needs an explicit opt-in).
    Host,
    /// Pods of a Kubernetes cluster, reached through its API server.
    Kubernetes,
}

impl BackendKind {
    /// The name the CLI, `config.json` and Harbor's result files use.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serde_clap_and_display_agree_on_every_name() {
        use clap::ValueEnum;
        for kind in BackendKind::value_variants() {
            let json = serde_json::to_string(kind).unwrap();
            assert_eq!(json, format!("\"{kind}\""));
            assert_eq!(BackendKind::from_str(kind.as_str(), false), Ok(*kind));
        }
        assert!(serde_json::from_str::<BackendKind>("\"podman\"").is_err());
    }
}
