//! `geode show RUN/TRIAL` and `geode grade RUN --grader SPEC`: what a trial's verifier said,
//! and re-grading stored trials without running an agent again. A re-grade is named by the
//! grader's content hash, in the trial folder (`grades/<kind>-<hash>.json`) and in the run
//! store's `grades` table, where `geode report` finds it.

use super::exit::Exit;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use geode_graders::grade::{CommandOutput, CommandRunner};
use geode_graders::rubric::{CriterionKind, Rubric};
use geode_graders::{
    GradeInput, GraderSpec, Validity, build_grader, detect_checks, grader_hash, read_grade,
    render_checks, render_grade, write_grade,
};
use geode_harness::env::{Backend, Sandbox};
use geode_harness::pack::{Task, TaskPack};
use geode_harness::rollout::images::ImageCache;
use geode_harness::rollout::trial::{WORKSPACE_DIR, environment_spec};
use geode_harness::store::{GradeRow, RunStore};
use geode_runtime::model::http::RouteOptions;
use geode_runtime::tools::workspace::ExecRequest;
use tokio_util::sync::CancellationToken;

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// `RUN/TRIAL` inside the jobs folder, or a trial folder's path.
    trial: String,
    /// The jobs folder `RUN/TRIAL` is looked up in.
    #[arg(long, default_value = "jobs")]
    jobs_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct GradeArgs {
    /// The run id (a folder of the jobs folder), or a run folder's path.
    run: String,
    /// `tests`, `rubric:FILE` or `judge:ROUTE[:VOTES][@TEMPLATE]`.
    #[arg(long, default_value = "tests")]
    grader: String,
    /// The jobs folder the run is looked up in.
    #[arg(long, default_value = "jobs")]
    jobs_dir: PathBuf,
}

fn trial_dir(arg: &str, jobs: &Path) -> anyhow::Result<PathBuf> {
    let direct = PathBuf::from(arg);
    let dir = if direct.join("result.json").is_file() {
        direct
    } else {
        jobs.join(arg)
    };
    if !dir.join("result.json").is_file() {
        bail!(
            "{}: no trial here (expected RUN/TRIAL under {})",
            dir.display(),
            jobs.display()
        );
    }
    Ok(dir)
}

pub fn show(a: ShowArgs) -> anyhow::Result<Exit> {
    let dir = trial_dir(&a.trial, &a.jobs_dir)?;
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("result.json"))?)
            .with_context(|| format!("{}", dir.join("result.json").display()))?;
    println!(
        "{} ({}): {}",
        result["trial_name"].as_str().unwrap_or("?"),
        result["task_name"].as_str().unwrap_or("?"),
        result["outcome"].as_str().unwrap_or("?")
    );
    let steps = result["step_results"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if steps.is_empty() {
        print_checks(&dir)?;
    }
    // A multi-step trial: each step, its rewards, and its own checks.
    for step in &steps {
        let name = step["step_name"].as_str().unwrap_or("?");
        let rewards = match step["verifier_result"]["rewards"].as_object() {
            Some(r) => r
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", "),
            None => step["exception_info"]["exception_type"]
                .as_str()
                .unwrap_or("no reward")
                .to_string(),
        };
        println!(
            "step {name}: {} ({rewards})",
            step["outcome"].as_str().unwrap_or("?")
        );
        print_checks(&dir.join("steps").join(name))?;
    }
    Ok(Exit::Success)
}

/// The checks a verifier left in `dir` (a trial, or one step of it), one per line.
fn print_checks(dir: &Path) -> anyhow::Result<()> {
    let grade_file = dir.join(geode_graders::GRADE_FILE);
    if grade_file.is_file() {
        print!("{}", render_grade(&read_grade(&grade_file)?));
    } else if let Some(parsed) = detect_checks(&dir.join("verifier"))? {
        print!("{}", render_checks(&parsed.checks));
    } else {
        println!("no checks recorded");
    }
    Ok(())
}

fn has_command_criteria(path: &Path) -> bool {
    Rubric::load(path).is_ok_and(|r| {
        r.criteria
            .iter()
            .any(|c| matches!(c.kind, CriterionKind::Command { .. }))
    })
}

/// Runs a rubric's commands in a sandbox started from the task's image with the kept workspace
/// copied into its WORKDIR.
struct SandboxCommands<'a>(&'a dyn Sandbox);

#[async_trait::async_trait]
impl CommandRunner for SandboxCommands<'_> {
    async fn run(&self, command: &str, timeout: Duration) -> Result<CommandOutput, String> {
        let out = self
            .0
            .exec(
                ExecRequest {
                    command: command.to_string(),
                    cwd: None,
                    timeout,
                    output_cap: 64 * 1024,
                    env: Vec::new(),
                },
                CancellationToken::new(),
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(CommandOutput {
            exit_code: out.exit_code,
            stdout: out.stdout,
            stderr: out.stderr,
            timed_out: out.timed_out,
        })
    }
}

/// Grades one trial with its command criteria run against its kept workspace. The sandbox's
/// logs go to a scratch folder beside the trial, removed after; when no sandbox can be made
/// the trial is graded without one (its command criteria skipped) and the reason printed.
async fn grade_in_sandbox(
    grader: &dyn geode_graders::Grader,
    input: &GradeInput,
    backend: &dyn Backend,
    images: &ImageCache,
    task: &Task,
    kept: &Path,
    trial: &Path,
) -> geode_graders::Grade {
    let scratch = trial.join(".regrade");
    let _ = std::fs::remove_dir_all(&scratch);
    let started = async {
        for sub in ["agent", "verifier", "artifacts"] {
            std::fs::create_dir_all(scratch.join(sub))
                .map_err(|e| format!("{}: {e}", scratch.display()))?;
        }
        let spec = environment_spec(task, 1.0, None);
        let image = images
            .prepare(backend, &task.hash, &spec)
            .await
            .map_err(|e| e.to_string())?;
        let sandbox = backend
            .start(&spec, &image, &scratch)
            .await
            .map_err(|e| e.to_string())?;
        let root = sandbox.workspace().root().to_string_lossy().into_owned();
        if let Err(e) = sandbox.copy_in(kept, &root).await {
            let _ = sandbox.teardown().await;
            return Err(e.to_string());
        }
        Ok(sandbox)
    }
    .await;
    let grade = match started {
        Ok(sandbox) => {
            let g = grader
                .grade(input, Some(&SandboxCommands(sandbox.as_ref())))
                .await;
            let _ = sandbox.teardown().await;
            g
        }
        Err(e) => {
            say!(
                "{}: no sandbox for the command criteria: {e}",
                trial.display()
            );
            grader.grade(input, None).await
        }
    };
    let _ = std::fs::remove_dir_all(&scratch);
    grade
}

/// What grading needs of a run's `config.json`: its pack. Read alone, so a run whose route
/// this geode no longer knows (a model the catalog retired) can still be graded again.
#[derive(serde::Deserialize)]
struct GradedRun {
    pack: std::path::PathBuf,
}

pub async fn grade(a: GradeArgs) -> anyhow::Result<Exit> {
    let run_dir = a.jobs_dir.join(&a.run);
    let cfg_path = run_dir.join("config.json");
    let config: GradedRun = serde_json::from_str(
        &std::fs::read_to_string(&cfg_path)
            .with_context(|| format!("reading {}", cfg_path.display()))?,
    )
    .with_context(|| format!("{}", cfg_path.display()))?;
    let pack = TaskPack::load(&config.pack).ok();
    let spec: GraderSpec = a.grader.parse()?;
    let grader = build_grader(&spec, &RouteOptions::from_env())?;
    let hash = grader_hash(&spec)?;
    let store_path = a.jobs_dir.join(geode_harness::store::STORE_FILE);
    let store = match RunStore::open(&store_path) {
        Ok(s) if s.run(&a.run)?.is_some() => Some(s),
        _ => {
            say!(
                "warning: run {} is not in {}: grades are written to the trial folders only",
                a.run,
                store_path.display()
            );
            None
        }
    };
    println!("grader {} ({})", a.grader, &hash[..16]);
    // A rubric with command criteria runs them in a sandbox rebuilt from each trial's kept
    // workspace (`geode run --keep-workspace`); without one they are skipped, as before.
    let commands = match &spec {
        GraderSpec::Rubric { path } if has_command_criteria(path) => {
            Some(super::backends::sandbox(&a.jobs_dir)?)
        }
        _ => None,
    };
    let images = ImageCache::new();
    let mut trials: Vec<PathBuf> = std::fs::read_dir(&run_dir)?
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.join("result.json").is_file())
        .collect();
    trials.sort();
    let mut sum = 0.0;
    let mut graded = 0usize;
    for t in &trials {
        let result: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(t.join("result.json"))?)?;
        let task = result["task_name"].as_str().unwrap_or_default();
        let task = pack
            .as_ref()
            .and_then(|p| p.tasks.iter().find(|x| x.id == task));
        let input = GradeInput::from_trial_dir(t, task.map(|x| x.dir.as_path()));
        let kept = t.join(WORKSPACE_DIR);
        let g = match (&commands, task) {
            (Some(backend), Some(task)) if kept.is_dir() => {
                let backend = backend.as_ref();
                grade_in_sandbox(grader.as_ref(), &input, backend, &images, task, &kept, t).await
            }
            _ => grader.grade(&input, None).await,
        }
        .with_grader_hash(&hash);
        write_grade(t, &g)?;
        let name = t
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(store) = &store {
            store.record_grade(&GradeRow {
                run_id: a.run.clone(),
                trial_name: result["trial_name"]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_else(|| name.clone()),
                grader: a.grader.clone(),
                grader_hash: hash.clone(),
                reward: g.primary(),
                validity: match g.validity() {
                    Validity::Valid => "valid".into(),
                    Validity::Invalid(cause) => cause.class().as_str().to_string(),
                },
                graded_at: chrono::Utc::now().to_rfc3339(),
            })?;
        }
        match g.primary() {
            Some(r) => {
                sum += r;
                graded += 1;
                println!("{name:<48} {r:.3}");
            }
            None => println!("{name:<48} invalid: {:?}", g.validity()),
        }
    }
    if graded > 0 {
        println!(
            "mean {:.3} over {graded} graded trials ({} stored)",
            sum / graded as f64,
            trials.len()
        );
    }
    Ok(Exit::Success)
}
