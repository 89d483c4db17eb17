//! Running a Dockerfile's steps in a build sandbox: the state the instructions build up
//! (WORKDIR, ENV, ARG, USER, SHELL) and what each instruction does inside.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use geode_runtime::tools::workspace::ExecRequest;
use tokio_util::sync::CancellationToken;

use super::EnvError;
use super::dockerfile::{self, Command, Instruction, Step};
use super::sandbox::SandboxHandle;

/// Output kept per RUN step; the failure message shows its tail.
const RUN_OUTPUT_CAP: usize = 1 << 20;
const TAIL_CHARS: usize = 2000;

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> EnvError {
    let context = context.into();
    move |source| EnvError::Io { context, source }
}

/// What a finished build leaves for the image's metadata.
pub(crate) struct Built {
    pub from: String,
    pub workdir: String,
    pub env: Vec<(String, String)>,
    pub user: Option<String>,
    pub ignored: Vec<String>,
}

/// The Dockerfile's state while its steps run.
pub(crate) struct Builder<'a> {
    sandbox: &'a SandboxHandle,
    context: &'a Path,
    deadline: Instant,
    timeout: Duration,
    from: String,
    workdir: String,
    env: Vec<(String, String)>,
    args: Vec<(String, String)>,
    user: Option<String>,
    shell: Vec<String>,
    ignored: Vec<String>,
    staged: usize,
}

fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn step_name(step: &Step) -> String {
    let mut text: String = step.text.chars().take(200).collect();
    if text.len() < step.text.len() {
        text.push_str(" ...");
    }
    text
}

impl<'a> Builder<'a> {
    pub(crate) fn new(
        sandbox: &'a SandboxHandle,
        context: &'a Path,
        deadline: Instant,
        timeout: Duration,
    ) -> Self {
        Builder {
            sandbox,
            context,
            deadline,
            timeout,
            from: String::new(),
            workdir: "/".into(),
            // What base images define and Dockerfiles extend (`ENV PATH=/x:$PATH`).
            env: vec![("PATH".into(), super::exec::DEFAULT_PATH.into())],
            args: Vec::new(),
            user: None,
            shell: vec!["/bin/sh".into(), "-c".into()],
            ignored: Vec::new(),
            staged: 0,
        }
    }

    pub(crate) fn finish(self) -> Built {
        Built {
            from: self.from,
            workdir: self.workdir,
            env: self.env,
            user: self.user,
            ignored: self.ignored,
        }
    }

    fn lookup(&self, name: &str) -> Option<String> {
        let env = self.env.iter().rev().find(|(k, _)| k == name);
        let arg = self.args.iter().rev().find(|(k, _)| k == name);
        env.or(arg).map(|(_, v)| v.clone())
    }

    fn expand(&self, text: &str) -> String {
        dockerfile::expand(text, &|n| self.lookup(n))
    }

    fn absolute(&self, path: &str) -> String {
        if path.starts_with('/') {
            path.to_string()
        } else {
            Path::new(&self.workdir)
                .join(path)
                .to_string_lossy()
                .into_owned()
        }
    }

    pub(crate) async fn run(&mut self, steps: &[Step]) -> Result<(), EnvError> {
        for step in steps {
            if Instant::now() >= self.deadline {
                return Err(self.timed_out(step));
            }
            self.step(step).await?;
        }
        Ok(())
    }

    fn timed_out(&self, step: &Step) -> EnvError {
        EnvError::SetupFailed {
            step: step_name(step),
            message: format!("the build exceeded its timeout of {:?}", self.timeout),
        }
    }

    async fn step(&mut self, step: &Step) -> Result<(), EnvError> {
        match &step.instruction {
            Instruction::From(image) => {
                if !self.from.is_empty() {
                    return Err(EnvError::Unsupported(format!(
                        "Dockerfile line {}: a second FROM (multi-stage builds)",
                        step.line
                    )));
                }
                self.from = self.expand(image);
                if is_python_image(&self.from) {
                    // Official python images install packages system-wide with pip; a Debian
                    // host root marks its Python as externally managed (PEP 668), so the
                    // stand-in would refuse the `RUN pip install` every such task starts with.
                    self.env
                        .push(("PIP_BREAK_SYSTEM_PACKAGES".into(), "1".into()));
                    self.env
                        .push(("PIP_ROOT_USER_ACTION".into(), "ignore".into()));
                }
            }
            Instruction::Arg { name, default } => {
                let value = default
                    .as_deref()
                    .map(|d| self.expand(d))
                    .unwrap_or_default();
                self.args.push((name.clone(), value));
            }
            Instruction::Env(pairs) => {
                for (k, v) in pairs {
                    let v = self.expand(v);
                    self.env.push((k.clone(), v));
                }
            }
            Instruction::Workdir(dir) => {
                let dir = self.absolute(&self.expand(dir));
                self.sh(step, &format!("mkdir -p {}", sh_quote(&dir)), true)
                    .await?;
                self.workdir = dir;
            }
            Instruction::User(user) => self.user = Some(self.expand(user)),
            Instruction::Shell(argv) => self.shell = argv.clone(),
            Instruction::Run(cmd) => {
                let (shell, command) = match cmd {
                    Command::Shell(s) => (self.shell.clone(), s.clone()),
                    Command::Exec(argv) => match argv.split_last() {
                        Some((last, init)) if !init.is_empty() => (init.to_vec(), last.clone()),
                        _ => {
                            let line = argv
                                .iter()
                                .map(|a| sh_quote(a))
                                .collect::<Vec<_>>()
                                .join(" ");
                            (vec!["/bin/sh".into(), "-c".into()], format!("exec {line}"))
                        }
                    },
                };
                self.exec(step, shell, command).await?;
            }
            Instruction::Copy(copy) => self.copy(step, copy).await?,
            Instruction::Ignored(keyword, _) => {
                if !self.ignored.contains(keyword) {
                    self.ignored.push(keyword.clone());
                }
            }
        }
        Ok(())
    }

    /// A helper command of the build itself (mkdir, chown): `/bin/sh -c`, as root.
    async fn sh(&self, step: &Step, command: &str, as_root: bool) -> Result<i32, EnvError> {
        let user = if as_root {
            Some("0".to_string())
        } else {
            self.user.clone()
        };
        let result = self
            .run_in(
                vec!["/bin/sh".into(), "-c".into()],
                command.to_string(),
                user,
            )
            .await?;
        if result.timed_out {
            return Err(self.timed_out(step));
        }
        if result.exit_code != Some(0) {
            return Err(EnvError::SetupFailed {
                step: step_name(step),
                message: format!(
                    "`{command}` failed: {}",
                    tail(&result.stdout, &result.stderr)
                ),
            });
        }
        Ok(0)
    }

    async fn run_in(
        &self,
        shell: Vec<String>,
        command: String,
        user: Option<String>,
    ) -> Result<super::protocol::ExecResult, EnvError> {
        let mut env = self.args.clone();
        env.extend(self.env.iter().cloned());
        let req = ExecRequest {
            command,
            cwd: Some(PathBuf::from(&self.workdir)),
            timeout: self.deadline.saturating_duration_since(Instant::now()),
            output_cap: RUN_OUTPUT_CAP,
            env,
        };
        self.sandbox
            .exec_as(req, Some(shell), user, CancellationToken::new())
            .await
    }

    async fn exec(&self, step: &Step, shell: Vec<String>, command: String) -> Result<(), EnvError> {
        let result = self.run_in(shell, command, self.user.clone()).await?;
        if result.timed_out {
            return Err(self.timed_out(step));
        }
        if result.exit_code != Some(0) {
            let status = match (result.exit_code, result.signal) {
                (Some(code), _) => format!("exit code {code}"),
                (None, Some(sig)) => format!("killed by signal {sig}"),
                (None, None) => "no exit status".to_string(),
            };
            return Err(EnvError::SetupFailed {
                step: step_name(step),
                message: format!(
                    "{status}; output tail:\n{}",
                    tail(&result.stdout, &result.stderr)
                ),
            });
        }
        Ok(())
    }

    async fn copy(&mut self, step: &Step, copy: &dockerfile::Copy) -> Result<(), EnvError> {
        let dest_raw = self.expand(&copy.dest);
        let dest = self.absolute(&dest_raw);
        let sources: Vec<String> = copy.sources.iter().map(|s| self.expand(s)).collect();
        let wildcard = sources.iter().any(|s| s.contains(['*', '?', '[']));
        let dest_is_dir = dest_raw.ends_with('/')
            || sources.len() > 1
            || wildcard
            || self
                .sh(step, &format!("test -d {}", sh_quote(&dest)), true)
                .await
                .is_ok();
        let mut targets = Vec::new();
        if let Some(body) = &copy.heredoc {
            let file = self.stage_file(body.as_bytes())?;
            self.sandbox.install(&file, &dest, false).await?;
            let _ = std::fs::remove_file(file);
            targets.push(dest.clone());
        }
        for src in &sources {
            if copy.add && (src.starts_with("http://") || src.starts_with("https://")) {
                let name = src
                    .rsplit('/')
                    .next()
                    .filter(|n| !n.is_empty())
                    .unwrap_or("download");
                let target = if dest_is_dir {
                    format!("{}/{name}", dest.trim_end_matches('/'))
                } else {
                    dest.clone()
                };
                let (u, t) = (sh_quote(src), sh_quote(&target));
                let fetch = format!(
                    "mkdir -p \"$(dirname {t})\" && (curl -fsSL {u} -o {t} || wget -qO {t} {u} || \
                     python3 -c 'import sys,urllib.request;urllib.request.urlretrieve(sys.argv[1],sys.argv[2])' {u} {t})"
                );
                self.sh(step, &fetch, true).await?;
                targets.push(target);
                continue;
            }
            for path in self.context_matches(step, src)? {
                let target = if path.is_dir() {
                    dest.clone()
                } else if dest_is_dir {
                    let name = path
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default();
                    format!("{}/{name}", dest.trim_end_matches('/'))
                } else {
                    dest.clone()
                };
                if copy.add && is_archive(&path) {
                    let staged = format!("/tmp/.geode-add-{}", self.staged);
                    self.staged += 1;
                    self.sandbox.install(&path, &staged, false).await?;
                    let (s, d) = (sh_quote(&staged), sh_quote(&dest));
                    self.sh(
                        step,
                        &format!("mkdir -p {d} && tar -xf {s} -C {d} && rm -f {s}"),
                        true,
                    )
                    .await?;
                    targets.push(dest.clone());
                } else {
                    self.sandbox.install(&path, &target, true).await?;
                    targets.push(target);
                }
            }
        }
        let quoted = targets
            .iter()
            .map(|t| sh_quote(t))
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(owner) = &copy.chown {
            let owner = self.expand(owner);
            self.sh(
                step,
                &format!("chown -R {} {quoted}", sh_quote(&owner)),
                true,
            )
            .await?;
        }
        if let Some(mode) = &copy.chmod {
            self.sh(step, &format!("chmod -R {} {quoted}", sh_quote(mode)), true)
                .await?;
        }
        Ok(())
    }

    fn stage_file(&mut self, bytes: &[u8]) -> Result<PathBuf, EnvError> {
        let path = self
            .sandbox
            .scratch_dir()
            .join(format!("heredoc-{}", self.staged));
        self.staged += 1;
        std::fs::write(&path, bytes).map_err(io(format!("write {}", path.display())))?;
        Ok(path)
    }

    /// Build-context paths for one COPY source (globs allowed); never outside the context.
    fn context_matches(&self, step: &Step, src: &str) -> Result<Vec<PathBuf>, EnvError> {
        let missing = |why: String| EnvError::SetupFailed {
            step: step_name(step),
            message: why,
        };
        let rel = src.trim_start_matches('/').trim_end_matches('/');
        if Path::new(rel)
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir))
        {
            return Err(missing(format!("{src} leaves the build context")));
        }
        if !src.contains(['*', '?', '[']) {
            let path = if rel.is_empty() || rel == "." {
                self.context.to_path_buf()
            } else {
                self.context.join(rel)
            };
            if std::fs::symlink_metadata(&path).is_err() {
                return Err(missing(format!("{src} not found in the build context")));
            }
            return Ok(vec![path]);
        }
        let glob = globset::Glob::new(rel)
            .map_err(|e| missing(format!("bad pattern {src}: {e}")))?
            .compile_matcher();
        let found: Vec<PathBuf> = walkdir::WalkDir::new(self.context)
            .min_depth(1)
            .sort_by_file_name()
            .into_iter()
            .flatten()
            .filter(|e| {
                e.path()
                    .strip_prefix(self.context)
                    .is_ok_and(|r| glob.is_match(r))
            })
            .map(|e| e.path().to_path_buf())
            .collect();
        if found.is_empty() {
            return Err(missing(format!(
                "no file in the build context matches {src}"
            )));
        }
        Ok(found)
    }
}

fn is_archive(path: &Path) -> bool {
    let name = path.to_string_lossy();
    [
        ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz",
    ]
    .iter()
    .any(|ext| name.ends_with(ext))
}

fn tail(stdout: &str, stderr: &str) -> String {
    let both = format!("{}{}", stdout, stderr);
    let chars: Vec<char> = both.chars().collect();
    let start = chars.len().saturating_sub(TAIL_CHARS);
    chars[start..]
        .iter()
        .collect::<String>()
        .trim_end()
        .to_string()
}

/// `python:3.11-slim`, `docker.io/library/python:3.12`, ...
fn is_python_image(from: &str) -> bool {
    let name = from.split(':').next().unwrap_or("");
    name == "python" || name.ends_with("/python")
}
