//! Run progress on stderr: indicatif bars on a terminal (overall, one spinner per running trial
//! showing its phase, live pass rate), plain log lines otherwise.

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use geode_harness::rollout::job::RunObserver;
use geode_harness::rollout::trial::{PhaseEvent, PhaseObserver};
use geode_harness::store::TrialRow;
use geode_harness::summary::RunSummary;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

pub struct Progress {
    bars: Option<Bars>,
    done: AtomicUsize,
    passed: AtomicUsize,
    total: AtomicUsize,
}

struct Bars {
    multi: MultiProgress,
    main: ProgressBar,
    trials: Mutex<HashMap<String, ProgressBar>>,
}

impl Progress {
    pub fn new() -> Self {
        let bars = std::io::stderr().is_terminal().then(|| {
            let multi = MultiProgress::new();
            let main = multi.add(ProgressBar::new(0));
            if let Ok(style) = ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} trials {msg}",
            ) {
                main.set_style(style.progress_chars("=> "));
            }
            Bars {
                multi,
                main,
                trials: Mutex::new(HashMap::new()),
            }
        });
        Progress {
            bars,
            done: AtomicUsize::new(0),
            passed: AtomicUsize::new(0),
            total: AtomicUsize::new(0),
        }
    }

    fn rate(&self) -> String {
        let done = self.done.load(Ordering::SeqCst);
        let passed = self.passed.load(Ordering::SeqCst);
        if done == 0 {
            return String::new();
        }
        format!(
            "pass rate {:.1}% ({passed}/{done})",
            100.0 * passed as f64 / done as f64
        )
    }
}

impl PhaseObserver for Progress {
    fn phase(&self, trial: &str, phase: PhaseEvent<'_>) {
        match &self.bars {
            Some(b) => {
                let mut trials = b.trials.lock().unwrap_or_else(|p| p.into_inner());
                let bar = trials.entry(trial.to_string()).or_insert_with(|| {
                    let bar = b.multi.add(ProgressBar::new_spinner());
                    bar.enable_steady_tick(Duration::from_millis(120));
                    bar
                });
                bar.set_message(format!("{trial}: {phase}"));
            }
            None => say!("geode: {trial}: {phase}"),
        }
    }
}

impl RunObserver for Progress {
    fn started(&self, run_id: &str, total: usize, skipped: usize) {
        self.total.store(total, Ordering::SeqCst);
        match &self.bars {
            Some(b) => {
                b.main.set_length(total as u64);
                b.main.set_position(skipped as u64);
                b.main.println(format!(
                    "run {run_id}: {total} trials ({skipped} already finished)"
                ));
            }
            None => say!("geode: run {run_id}: {total} trials ({skipped} already finished)"),
        }
    }

    fn queue(&self, pending: usize, running: usize) {
        let line = format!("slurm: {pending} array tasks pending, {running} running");
        match &self.bars {
            Some(b) => b.main.set_message(format!("{} | {line}", self.rate())),
            None => say!("geode: {line}"),
        }
    }

    fn trial_finished(&self, row: &TrialRow) {
        self.done.fetch_add(1, Ordering::SeqCst);
        if row.reward.is_some_and(geode_graders::summary::passes) {
            self.passed.fetch_add(1, Ordering::SeqCst);
        }
        let line = format!(
            "{} {} reward {}",
            row.trial_name,
            row.outcome,
            row.reward.map_or("-".to_string(), |r| format!("{r:.2}"))
        );
        match &self.bars {
            Some(b) => {
                if let Some(bar) = b
                    .trials
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&row.trial_name)
                {
                    bar.finish_and_clear();
                }
                b.main.inc(1);
                b.main.set_message(self.rate());
                b.main.println(line);
            }
            None => say!("geode: {line}; {}", self.rate()),
        }
    }

    fn finished(&self, _summary: &RunSummary) {
        if let Some(b) = &self.bars {
            b.main.finish_and_clear();
        }
    }
}
