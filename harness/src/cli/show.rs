//! `geode show RUN/TRIAL` and `geode grade RUN --grader SPEC`: what a trial's verifier said,
//! and re-grading stored trials without running an agent again. A re-grade is named by the
//! grader's content hash, in the trial folder (`grades/<kind>-<hash>.json`) and in the run
//! store's `grades` table, where `geode report` finds it.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use geode_graders::{
    GradeInput, GraderSpec, Validity, build_grader, detect_checks, grader_hash, read_grade,
    render_checks, render_grade, write_grade,
};
use geode_harness::pack::TaskPack;
use geode_harness::rollout::job::RunConfig;
use geode_harness::store::{GradeRow, RunStore};
use geode_runtime::model::http::RouteOptions;

#[derive(Debug, Args)]
pub struct ShowArgs {
    /// `RUN/TRIAL` inside the jobs folder, or a trial folder's path.
    trial: String,
    #[arg(long, default_value = "jobs")]
    jobs_dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct GradeArgs {
    run: String,
    /// `tests`, `rubric:FILE` or `judge:ROUTE[:VOTES][@TEMPLATE]`.
    #[arg(long, default_value = "tests")]
    grader: String,
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

pub fn show(a: ShowArgs) -> anyhow::Result<ExitCode> {
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
    let grade_file = dir.join(geode_graders::GRADE_FILE);
    if grade_file.is_file() {
        print!("{}", render_grade(&read_grade(&grade_file)?));
    } else if let Some(parsed) = detect_checks(&dir.join("verifier"))? {
        print!("{}", render_checks(&parsed.checks));
    } else {
        println!("no checks recorded");
    }
    Ok(ExitCode::SUCCESS)
}

pub async fn grade(a: GradeArgs) -> anyhow::Result<ExitCode> {
    let run_dir = a.jobs_dir.join(&a.run);
    let cfg_path = run_dir.join("config.json");
    let config: RunConfig = serde_json::from_str(
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
            eprintln!(
                "warning: run {} is not in {}: grades are written to the trial folders only",
                a.run,
                store_path.display()
            );
            None
        }
    };
    println!("grader {} ({})", a.grader, &hash[..16]);
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
        let task_dir = pack
            .as_ref()
            .and_then(|p| p.tasks.iter().find(|x| x.id == task))
            .map(|x| x.dir.clone());
        let input = GradeInput::from_trial_dir(t, task_dir.as_deref());
        let g = grader.grade(&input, None).await.with_grader_hash(&hash);
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
    Ok(ExitCode::SUCCESS)
}
