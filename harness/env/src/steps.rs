//! Running a Dockerfile's steps in a build sandbox: the state the instructions build up
//! (WORKDIR, ENV, ARG, USER, SHELL, CMD, ENTRYPOINT) and what each instruction does inside.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use geode_runtime::tools::workspace::ExecRequest;
use tokio_util::sync::CancellationToken;

use super::EnvError;
use super::dockerfile::{self, Command, Instruction, Step, shell_quote};
use super::image::ImageConfig;
use super::sandbox::SandboxHandle;

/// Output kept per RUN step; the failure message shows its tail.
const RUN_OUTPUT_CAP: usize = 1 << 20;
const TAIL_CHARS: usize = 2000;

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> EnvError {
    let context = context.into();
    move |source| EnvError::Io { context, source }
}

/// What a stage's instructions build up (and what a finished stage leaves for its image).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StageState {
    pub workdir: String,
    pub env: Vec<(String, String)>,
    pub args: Vec<(String, String)>,
    pub user: Option<String>,
    pub shell: Vec<String>,
    /// ENTRYPOINT and CMD, exec form (a shell form is wrapped in `shell`).
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    /// This stage set CMD itself (an ENTRYPOINT then keeps it).
    pub cmd_set: bool,
    pub ignored: Vec<String>,
}

impl StageState {
    /// A stage's state right after `FROM`: the base image's config.
    pub(crate) fn from_image(config: &ImageConfig) -> Self {
        let env = &config.env;
        let workdir = config.working_dir.as_deref();
        let user = config.user.as_deref();
        let shell = config.shell.as_deref();
        let mut all = Vec::new();
        // Docker's default PATH when the image sets none; Dockerfiles extend it.
        if !env.iter().any(|(k, _)| k == "PATH") {
            all.push(("PATH".to_string(), super::sandbox::DEFAULT_PATH.to_string()));
        }
        all.extend(env.iter().cloned());
        StageState {
            workdir: workdir.filter(|w| !w.is_empty()).unwrap_or("/").to_string(),
            env: all,
            args: Vec::new(),
            user: user.filter(|u| !u.is_empty()).map(str::to_string),
            shell: shell
                .map(<[String]>::to_vec)
                .unwrap_or_else(|| vec!["/bin/sh".into(), "-c".into()]),
            entrypoint: config.entrypoint.clone().unwrap_or_default(),
            cmd: config.cmd.clone().unwrap_or_default(),
            cmd_set: false,
            ignored: Vec::new(),
        }
    }

    fn argv(&self, command: &Command) -> Vec<String> {
        match command {
            Command::Exec(argv) => argv.clone(),
            Command::Shell(line) => {
                let mut argv = self.shell.clone();
                argv.push(line.clone());
                argv
            }
        }
    }

    /// The last value of each variable, in first-set order (for the image's config).
    pub(crate) fn final_env(&self) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for (k, v) in &self.env {
            match out.iter_mut().find(|(name, _)| name == k) {
                Some(slot) => slot.1 = v.clone(),
                None => out.push((k.clone(), v.clone())),
            }
        }
        out
    }
}

/// Runs one stage's instructions: metadata ones change [`StageState`], the others act in a
/// build sandbox.
pub(crate) struct Builder<'a> {
    context: &'a Path,
    deadline: Instant,
    timeout: Duration,
    pub state: StageState,
    /// `--build-arg`-style values of the task, which win over an ARG's default.
    build_args: &'a [(String, String)],
    staged: usize,
}

pub(crate) fn step_name(step: &Step) -> String {
    let mut text: String = step.text.chars().take(200).collect();
    if text.len() < step.text.len() {
        text.push_str(" ...");
    }
    format!("Dockerfile line {}: {text}", step.line)
}

impl<'a> Builder<'a> {
    pub(crate) fn new(
        context: &'a Path,
        deadline: Instant,
        timeout: Duration,
        state: StageState,
        build_args: &'a [(String, String)],
    ) -> Self {
        Builder {
            context,
            deadline,
            timeout,
            state,
            build_args,
            staged: 0,
        }
    }

    fn lookup(&self, name: &str) -> Option<String> {
        let env = self.state.env.iter().rev().find(|(k, _)| k == name);
        let arg = self.state.args.iter().rev().find(|(k, _)| k == name);
        env.or(arg).map(|(_, v)| v.clone())
    }

    pub(crate) fn expand(&self, text: &str) -> String {
        dockerfile::expand(text, &|n| self.lookup(n))
    }

    fn absolute(&self, path: &str) -> String {
        if path.starts_with('/') {
            path.to_string()
        } else {
            Path::new(&self.state.workdir)
                .join(path)
                .to_string_lossy()
                .into_owned()
        }
    }

    pub(crate) fn check_deadline(&self, step: &Step) -> Result<(), EnvError> {
        if Instant::now() >= self.deadline {
            return Err(self.timed_out(step));
        }
        Ok(())
    }

    fn timed_out(&self, step: &Step) -> EnvError {
        EnvError::SetupFailed {
            step: step_name(step),
            message: format!("the build exceeded its timeout of {:?}", self.timeout),
        }
    }

    /// Apply a metadata instruction (ARG, ENV, WORKDIR, USER, SHELL, ignored ones) and return
    /// `true`; `false` for RUN and COPY/ADD, which must run in a sandbox ([`Self::execute`]).
    pub(crate) fn apply(&mut self, step: &Step) -> bool {
        match &step.instruction {
            Instruction::Arg { name, default } => {
                let value = match self.build_args.iter().rev().find(|(k, _)| k == name) {
                    Some((_, v)) => v.clone(),
                    None => default
                        .as_deref()
                        .map(|d| self.expand(d))
                        .unwrap_or_default(),
                };
                self.state.args.push((name.clone(), value));
            }
            Instruction::Env(pairs) => {
                for (k, v) in pairs {
                    let v = self.expand(v);
                    self.state.env.push((k.clone(), v));
                }
            }
            // The directory itself is made by the sandbox of the next step (or the trial's),
            // which creates its work directory on entry.
            Instruction::Workdir(dir) => self.state.workdir = self.absolute(&self.expand(dir)),
            Instruction::User(user) => self.state.user = Some(self.expand(user)),
            Instruction::Shell(argv) => self.state.shell = argv.clone(),
            Instruction::Cmd(command) => {
                self.state.cmd = self.state.argv(command);
                self.state.cmd_set = true;
            }
            // As docker does: a new ENTRYPOINT drops the CMD inherited from the base image.
            Instruction::Entrypoint(command) => {
                self.state.entrypoint = self.state.argv(command);
                if !self.state.cmd_set {
                    self.state.cmd.clear();
                }
            }
            Instruction::Ignored(keyword, _) => {
                if !self.state.ignored.contains(keyword) {
                    self.state.ignored.push(keyword.clone());
                }
            }
            // A stage's FROM is the build's business, not the stage's.
            Instruction::From { .. } => {}
            Instruction::Run(_) | Instruction::Copy(_) => return false,
        }
        true
    }

    /// Run a RUN or COPY/ADD step in `sandbox`; a RUN's output, for the build log. `copy_root`
    /// is where a `COPY --from`'s sources were exported to on the host (the build context
    /// otherwise).
    pub(crate) async fn execute(
        &mut self,
        sandbox: &SandboxHandle,
        step: &Step,
        copy_root: Option<&Path>,
    ) -> Result<String, EnvError> {
        self.check_deadline(step)?;
        match &step.instruction {
            Instruction::Run(cmd) => {
                let (shell, command) = match cmd {
                    Command::Shell(s) => (self.state.shell.clone(), s.clone()),
                    Command::Exec(argv) => match argv.split_last() {
                        Some((last, init)) if !init.is_empty() => (init.to_vec(), last.clone()),
                        _ => {
                            let line = argv
                                .iter()
                                .map(|a| shell_quote(a))
                                .collect::<Vec<_>>()
                                .join(" ");
                            (vec!["/bin/sh".into(), "-c".into()], format!("exec {line}"))
                        }
                    },
                };
                self.exec(sandbox, step, shell, command).await
            }
            Instruction::Copy(copy) => {
                let root = copy_root.unwrap_or(self.context);
                self.copy(sandbox, step, copy, root)
                    .await
                    .map(|()| String::new())
            }
            _ => Ok(String::new()),
        }
    }

    /// The build-context files a COPY/ADD step reads, for its cache key (empty for other
    /// steps, URLs and `--from`).
    pub(crate) fn copy_inputs(&self, step: &Step) -> Result<Vec<PathBuf>, EnvError> {
        let Instruction::Copy(copy) = &step.instruction else {
            return Ok(Vec::new());
        };
        if copy.from.is_some() {
            return Ok(Vec::new());
        }
        let mut found = Vec::new();
        for src in &copy.sources {
            let src = self.expand(src);
            if copy.add && (src.starts_with("http://") || src.starts_with("https://")) {
                continue;
            }
            found.extend(self.context_matches(step, &src, self.context)?);
        }
        Ok(found)
    }

    /// A helper command of the build itself (mkdir, chown): `/bin/sh -c`, as root.
    async fn sh(
        &self,
        sandbox: &SandboxHandle,
        step: &Step,
        command: &str,
    ) -> Result<(), EnvError> {
        let result = self
            .run_in(
                sandbox,
                vec!["/bin/sh".into(), "-c".into()],
                command.to_string(),
                Some("0".to_string()),
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
        Ok(())
    }

    async fn run_in(
        &self,
        sandbox: &SandboxHandle,
        shell: Vec<String>,
        command: String,
        user: Option<String>,
    ) -> Result<super::protocol::ExecResult, EnvError> {
        let mut env = self.state.args.clone();
        env.extend(self.state.env.iter().cloned());
        let req = ExecRequest {
            command,
            cwd: Some(PathBuf::from(&self.state.workdir)),
            timeout: self.deadline.saturating_duration_since(Instant::now()),
            output_cap: RUN_OUTPUT_CAP,
            env,
        };
        sandbox
            .exec_as(req, Some(shell), user, CancellationToken::new())
            .await
    }

    async fn exec(
        &self,
        sandbox: &SandboxHandle,
        step: &Step,
        shell: Vec<String>,
        command: String,
    ) -> Result<String, EnvError> {
        let result = self
            .run_in(sandbox, shell, command, self.state.user.clone())
            .await?;
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
        Ok(format!("{}{}", result.stdout, result.stderr))
    }

    async fn copy(
        &mut self,
        sandbox: &SandboxHandle,
        step: &Step,
        copy: &dockerfile::Copy,
        root: &Path,
    ) -> Result<(), EnvError> {
        let dest_raw = self.expand(&copy.dest);
        let dest = self.absolute(&dest_raw);
        let sources: Vec<String> = copy.sources.iter().map(|s| self.expand(s)).collect();
        let wildcard = sources.iter().any(|s| s.contains(['*', '?', '[']));
        let dest_is_dir = dest_raw.ends_with('/')
            || sources.len() > 1
            || wildcard
            || self
                .sh(sandbox, step, &format!("test -d {}", shell_quote(&dest)))
                .await
                .is_ok();
        let mut targets = Vec::new();
        if let Some(body) = &copy.heredoc {
            let file = self.stage_file(sandbox, body.as_bytes())?;
            sandbox.install(&file, &dest, false).await?;
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
                let (u, t) = (shell_quote(src), shell_quote(&target));
                let fetch = format!(
                    "mkdir -p \"$(dirname {t})\" && (curl -fsSL {u} -o {t} || wget -qO {t} {u} || \
                     python3 -c 'import sys,urllib.request;urllib.request.urlretrieve(sys.argv[1],sys.argv[2])' {u} {t})"
                );
                self.sh(sandbox, step, &fetch).await?;
                targets.push(target);
                continue;
            }
            for path in self.context_matches(step, src, root)? {
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
                    sandbox.install(&path, &staged, false).await?;
                    let (s, d) = (shell_quote(&staged), shell_quote(&dest));
                    self.sh(
                        sandbox,
                        step,
                        &format!("mkdir -p {d} && tar -xf {s} -C {d} && rm -f {s}"),
                    )
                    .await?;
                    targets.push(dest.clone());
                } else {
                    sandbox.install(&path, &target, true).await?;
                    targets.push(target);
                }
            }
        }
        let quoted = targets
            .iter()
            .map(|t| shell_quote(t))
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(owner) = &copy.chown {
            let owner = self.expand(owner);
            self.sh(
                sandbox,
                step,
                &format!("chown -R {} {quoted}", shell_quote(&owner)),
            )
            .await?;
        }
        if let Some(mode) = &copy.chmod {
            self.sh(
                sandbox,
                step,
                &format!("chmod -R {} {quoted}", shell_quote(mode)),
            )
            .await?;
        }
        Ok(())
    }

    fn stage_file(&mut self, sandbox: &SandboxHandle, bytes: &[u8]) -> Result<PathBuf, EnvError> {
        let path = sandbox
            .scratch_dir()
            .join(format!("heredoc-{}", self.staged));
        self.staged += 1;
        std::fs::write(&path, bytes).map_err(io(format!("write {}", path.display())))?;
        Ok(path)
    }

    /// Build-context paths for one COPY source (globs allowed); never outside the context.
    fn context_matches(
        &self,
        step: &Step,
        src: &str,
        context: &Path,
    ) -> Result<Vec<PathBuf>, EnvError> {
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
                context.to_path_buf()
            } else {
                context.join(rel)
            };
            if std::fs::symlink_metadata(&path).is_err() {
                return Err(missing(format!("{src} not found in the build context")));
            }
            return Ok(vec![path]);
        }
        let glob = globset::Glob::new(rel)
            .map_err(|e| missing(format!("bad pattern {src}: {e}")))?
            .compile_matcher();
        let found: Vec<PathBuf> = walkdir::WalkDir::new(context)
            .min_depth(1)
            .sort_by_file_name()
            .into_iter()
            .flatten()
            .filter(|e| {
                e.path()
                    .strip_prefix(context)
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
