//! The validity report of `geode tasks validate` on synthetic oracle / nop rewards.

use geode_graders::{TaskFlag, TaskTrials, ValidityReport};

fn t(task: &str, oracle: &[Option<f64>], nop: &[Option<f64>]) -> TaskTrials {
    TaskTrials {
        task: task.into(),
        oracle: oracle.to_vec(),
        nop: nop.to_vec(),
    }
}

#[test]
fn flags_each_category() {
    let report = ValidityReport::build(
        "geode-core",
        3,
        &[
            t("good", &[Some(1.0); 3], &[Some(0.0); 3]),
            t("impossible", &[Some(0.0), Some(0.5), None], &[Some(0.0); 3]),
            t(
                "trivial",
                &[Some(1.0); 3],
                &[Some(0.0), Some(1.0), Some(0.0)],
            ),
            t("flaky", &[Some(1.0), Some(0.0), Some(1.0)], &[Some(0.0); 3]),
            t("broken-env", &[None, None, None], &[Some(0.0); 3]),
        ],
    );
    assert_eq!(report.flagged(TaskFlag::OracleCannotPass), ["impossible"]);
    assert_eq!(report.flagged(TaskFlag::NopPasses), ["trivial"]);
    assert_eq!(report.flagged(TaskFlag::Flaky), ["impossible", "flaky"]);
    assert_eq!(report.flagged(TaskFlag::Unmeasured), ["broken-env"]);
    assert!(report.tasks[0].is_ok() && !report.all_ok());
    assert_eq!(report.tasks[1].infra_trials, 1);
    assert_eq!(report.tasks[3].oracle_pass_rate, Some(2.0 / 3.0));

    let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
    assert_eq!(json["schema"], "geode.validity.v1");
    assert_eq!(json["tasks"][2]["flags"][0], "nop_passes");
    let back: ValidityReport = serde_json::from_value(json).unwrap();
    assert_eq!(back, report);

    let text = report.render_text();
    assert!(
        text.lines()
            .any(|l| l.starts_with("good") && l.ends_with(" ok")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.starts_with("trivial") && l.ends_with("nop_passes")),
        "{text}"
    );
    assert!(
        text.ends_with("1/5 tasks ok, 1 oracle_cannot_pass, 1 nop_passes, 2 flaky, 1 unmeasured\n"),
        "{text}"
    );
}
