//! A built-in agent's installation: one layer folder per agent and version under
//! `$GEODE_HOME/agents/`, made once on this machine from the package registry and stacked by
//! every trial over its task's image as the top lower layer of the sandbox's overlay. A warm
//! layer costs a trial one more lower folder, nothing copied.
//!
//! The layer holds `/opt/geode-agent/<name>/` and nothing else, so it hides nothing of the
//! image. `agent.json` beside it is written last: a folder without it is an interrupted
//! install, made again.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::spec::{AGENT_ROOT, BuiltinAgent, Install};

/// Schema of `agent.json`.
const INSTALL_SCHEMA: &str = "geode.agent-layer.v1";

/// The Python a [`Install::PythonVenv`] layer is made with, and which the image must have at
/// the same path: images made from the Debian archive have it, as this machine does.
const VENV_PYTHON: &str = "/usr/bin/python3";

/// An installed agent: its layer and what it was made from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstalledAgent {
    /// Always `geode.agent-layer.v1`.
    pub schema: String,
    /// The agent's name.
    pub name: String,
    /// The package version installed.
    pub version: String,
    /// The package spec as given to the registry's installer.
    pub package: String,
    /// SHA-256 over the layer's paths, modes and contents: two machines with the same digest
    /// ran the same agent.
    pub digest: String,
    /// For a Python agent, the interpreter (`/usr/bin/python3.11`) the image must have.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<String>,
    /// The layer folder (set when read; not stored).
    #[serde(skip)]
    pub layer: PathBuf,
}

/// Why an agent could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    /// A file or folder of the install could not be made or read.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The installer ran and failed.
    #[error("installing {package}: `{command}` failed ({status}): {output}")]
    Installer {
        /// The package spec.
        package: String,
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// The end of its output.
        output: String,
    },
    /// The installer succeeded but the program the agent runs is not where it should be.
    #[error(
        "installing {package}: {missing} is missing after the install (the package's layout changed?)"
    )]
    Missing {
        /// The package spec.
        package: String,
        /// The expected path.
        missing: String,
    },
    /// `agent.json` could not be read or written.
    #[error("{path}: {message}")]
    Record {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InstallError + '_ {
    move |source| InstallError::Io {
        path: path.display().to_string(),
        source,
    }
}

/// Where agents' layers are kept: `$GEODE_AGENTS`, else `$GEODE_HOME/agents`.
pub fn agents_dir() -> PathBuf {
    std::env::var_os("GEODE_AGENTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::home::geode_home().join("agents"))
}

/// The installed layer of `agent` at `version` under `dir`, made now if it is not there yet.
/// Concurrent callers (two runs at once) wait for one install.
pub fn ensure(
    dir: &Path,
    agent: &BuiltinAgent,
    version: &str,
) -> Result<InstalledAgent, InstallError> {
    let key = format!("{}@{version}", agent.name);
    let home = dir.join(&key);
    if let Some(found) = read_record(&home)? {
        return Ok(found);
    }
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let lock_path = dir.join(format!("{key}.lock"));
    let lock_file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .map_err(io(&lock_path))?;
    let _held = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive).map_err(
        |(_, errno)| InstallError::Io {
            path: lock_path.display().to_string(),
            source: errno.into(),
        },
    )?;
    // Someone else may have finished while we waited for the lock.
    if let Some(found) = read_record(&home)? {
        return Ok(found);
    }
    if home.exists() {
        std::fs::remove_dir_all(&home).map_err(io(&home))?;
    }
    let building = dir.join(format!("{key}.building"));
    if building.exists() {
        std::fs::remove_dir_all(&building).map_err(io(&building))?;
    }
    let target = building
        .join("layer")
        .join(&AGENT_ROOT[1..])
        .join(agent.name);
    std::fs::create_dir_all(&target).map_err(io(&target))?;
    let (package, python) = match agent.install {
        Install::Npm { package, binary } => {
            let spec = format!("{package}@{version}");
            npm_install(&target, &spec)?;
            let program = target.join("node_modules").join(binary);
            if !program.is_file() {
                return Err(InstallError::Missing {
                    package: spec,
                    missing: program.display().to_string(),
                });
            }
            (spec, None)
        }
        Install::PythonVenv { package, .. } => {
            let spec = format!("{package}=={version}");
            let python = venv_install(&target, &spec)?;
            (spec, Some(python))
        }
    };
    let digest = digest_tree(&building.join("layer"))?;
    let record = InstalledAgent {
        schema: INSTALL_SCHEMA.into(),
        name: agent.name.into(),
        version: version.into(),
        package,
        digest,
        python,
        layer: PathBuf::new(),
    };
    let text = serde_json::to_string_pretty(&record).map_err(|e| InstallError::Record {
        path: building.join("agent.json").display().to_string(),
        message: e.to_string(),
    })?;
    let record_path = building.join("agent.json");
    std::fs::write(&record_path, text).map_err(io(&record_path))?;
    std::fs::rename(&building, &home).map_err(io(&home))?;
    read_record(&home)?.ok_or_else(|| InstallError::Record {
        path: home.join("agent.json").display().to_string(),
        message: "written, then not found".into(),
    })
}

/// `home/agent.json` with its layer, when the install finished.
fn read_record(home: &Path) -> Result<Option<InstalledAgent>, InstallError> {
    let path = home.join("agent.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(InstallError::Io {
                path: path.display().to_string(),
                source,
            });
        }
    };
    let mut record: InstalledAgent =
        serde_json::from_str(&text).map_err(|e| InstallError::Record {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
    if record.schema != INSTALL_SCHEMA {
        return Err(InstallError::Record {
            path: path.display().to_string(),
            message: format!("schema {:?} is not {INSTALL_SCHEMA}", record.schema),
        });
    }
    record.layer = home.join("layer");
    Ok(Some(record))
}

/// `npm install` for the sandbox's platform (linux, x64, glibc) whatever this machine is, with
/// the packages' scripts off: the programs come whole in their platform packages.
fn npm_install(prefix: &Path, spec: &str) -> Result<(), InstallError> {
    let mut command = Command::new("npm");
    command
        .arg("install")
        .arg("--prefix")
        .arg(prefix)
        .args([
            "--no-audit",
            "--no-fund",
            "--no-update-notifier",
            "--ignore-scripts",
            "--os=linux",
            "--cpu=x64",
            "--libc=glibc",
        ])
        .arg(spec);
    run(command, spec)
}

/// A virtual environment at `target` made with [`VENV_PYTHON`]'s real interpreter (so the
/// layer names `/usr/bin/python3.X`, which the image must have), then `pip install spec`.
/// Returns the interpreter's path.
fn venv_install(target: &Path, spec: &str) -> Result<String, InstallError> {
    let real = std::fs::canonicalize(VENV_PYTHON).map_err(io(Path::new(VENV_PYTHON)))?;
    let python = real.display().to_string();
    let mut venv = Command::new(&real);
    venv.args(["-m", "venv", "--without-scm-ignore-files"])
        .arg(target);
    if run(venv, spec).is_err() {
        // Pythons before 3.13 do not know the flag.
        let mut venv = Command::new(&real);
        venv.args(["-m", "venv"]).arg(target);
        run(venv, spec)?;
    }
    let mut pip = Command::new(target.join("bin").join("python3"));
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-input",
        spec,
    ]);
    run(pip, spec)?;
    Ok(python)
}

fn run(mut command: Command, spec: &str) -> Result<(), InstallError> {
    let shown = format!("{command:?}");
    let output = command
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| InstallError::Io {
            path: shown.clone(),
            source,
        })?;
    if output.status.success() {
        return Ok(());
    }
    let mut text = String::from_utf8_lossy(&output.stderr).into_owned();
    text.push_str(&String::from_utf8_lossy(&output.stdout));
    let tail: String = text
        .lines()
        .rev()
        .take(12)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect::<Vec<_>>()
        .join("\n");
    Err(InstallError::Installer {
        package: spec.into(),
        command: shown,
        status: output.status.to_string(),
        output: tail,
    })
}

/// SHA-256 over every entry of `root` in path order: its relative path, kind, mode and
/// contents (a link's target).
fn digest_tree(root: &Path) -> Result<String, InstallError> {
    use std::io::Read;
    use std::os::unix::fs::PermissionsExt;
    let mut hasher = Sha256::new();
    for entry in walkdir::WalkDir::new(root).sort_by_file_name() {
        let entry = entry.map_err(|e| InstallError::Io {
            path: root.display().to_string(),
            source: e.into(),
        })?;
        let path = entry.path();
        let relative = path.strip_prefix(root).unwrap_or(path);
        let meta = entry.metadata().map_err(|e| InstallError::Io {
            path: path.display().to_string(),
            source: e.into(),
        })?;
        hasher.update(relative.as_os_str().as_encoded_bytes());
        hasher.update([0]);
        hasher.update(meta.permissions().mode().to_le_bytes());
        if entry.file_type().is_symlink() {
            let target = std::fs::read_link(path).map_err(io(path))?;
            hasher.update(target.as_os_str().as_encoded_bytes());
        } else if entry.file_type().is_file() {
            let mut file = std::fs::File::open(path).map_err(io(path))?;
            let mut buf = vec![0u8; 1 << 20];
            loop {
                let n = file.read(&mut buf).map_err(io(path))?;
                if n == 0 {
                    break;
                }
                hasher.update(&buf[..n]);
            }
        }
        hasher.update([0xff]);
    }
    Ok(format!("sha256:{}", hex::encode(hasher.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_install_is_found_and_an_interrupted_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let home = dir.path().join("codex@0.1.0");
        std::fs::create_dir_all(home.join("layer")).unwrap();
        assert_eq!(read_record(&home).unwrap(), None, "no agent.json yet");
        let record = InstalledAgent {
            schema: INSTALL_SCHEMA.into(),
            name: "codex".into(),
            version: "0.1.0".into(),
            package: "@openai/codex@0.1.0".into(),
            digest: "sha256:00".into(),
            python: None,
            layer: PathBuf::new(),
        };
        std::fs::write(
            home.join("agent.json"),
            serde_json::to_string(&record).unwrap(),
        )
        .unwrap();
        let found = read_record(&home).unwrap().unwrap();
        assert_eq!(found.layer, home.join("layer"));
        assert_eq!(found.package, record.package);
        std::fs::write(home.join("agent.json"), "{\"schema\":\"other\"}").unwrap();
        let err = read_record(&home).unwrap_err().to_string();
        assert!(err.contains("agent.json"), "{err}");
    }

    #[test]
    fn the_digest_sees_contents_modes_and_links() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("a"), b"one").unwrap();
        let first = digest_tree(root).unwrap();
        assert_eq!(first, digest_tree(root).unwrap());
        std::fs::write(root.join("a"), b"two").unwrap();
        let second = digest_tree(root).unwrap();
        assert_ne!(first, second);
        std::fs::set_permissions(root.join("a"), std::fs::Permissions::from_mode(0o755)).unwrap();
        let third = digest_tree(root).unwrap();
        assert_ne!(second, third);
        std::os::unix::fs::symlink("a", root.join("l")).unwrap();
        assert_ne!(third, digest_tree(root).unwrap());
    }
}
