//! Scaffold search without trials: the space, the policies, fingerprint dedup, the lineage,
//! and the model-proposed policy (a scripted proposer) rejecting bad proposals for free.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use geode_harness::env::host::HostBackend;
use geode_harness::rollout::trial::{PhaseEvent, PhaseObserver};
use geode_harness::search::champion::{Env, StopReason, run_search};
use geode_harness::search::config::SearchConfig;
use geode_harness::search::lineage::{EntryKind, LINEAGE_FILE, Lineage};
use geode_harness::search::mutate::{Member, PolicyKind, neighbours, propose, tournament};
use geode_harness::search::proposer::parse_answer;
use geode_harness::search::space::{Mutation, SearchSpace, apply, diff};
use geode_runtime::scaffold::Scaffold;
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::json;
use tokio_util::sync::CancellationToken;

const SPACE: &str = r#"
schema = "geode.search-space.v1"
[frozen]
grader = "geode.grader.tests.v1"
[[knob]]
path = "repair_budget"
int = { min = 0, max = 3 }
[[knob]]
path = "tool_result_cap"
values = [65536, 32768]
[[knob]]
path = "compaction.threshold"
float = { min = 0.6, max = 0.8, step = 0.1 }
[[knob]]
path = "system_prompt.0"
text = ["Prompt A", "Prompt B"]
"#;

fn space() -> SearchSpace {
    let s: SearchSpace = toml::from_str(SPACE).unwrap();
    s.validate().unwrap();
    s
}

fn member(id: &str, s: Scaffold, fitness: Option<f64>) -> Member {
    Member {
        id: id.into(),
        scaffold: s,
        fitness,
    }
}

#[test]
fn space_validation_names_the_field_at_fault() {
    let bad = SPACE.replace("path = \"tool_result_cap\"", "path = \"tool_result_capp\"");
    let s: SearchSpace = toml::from_str(&bad).unwrap();
    let (field, msg) = s.validate().unwrap_err();
    assert_eq!(field, "knob[1].path");
    assert!(msg.contains("tool_result_capp"), "{msg}");

    let bad = SPACE.replace("values = [65536, 32768]", "values = [\"many\", 3]");
    let (field, _) = toml::from_str::<SearchSpace>(&bad)
        .unwrap()
        .validate()
        .unwrap_err();
    assert_eq!(field, "knob[1].path");

    let bad = SPACE.replace("geode.grader.tests.v1", "geode.grader.llm.v9");
    let (field, _) = toml::from_str::<SearchSpace>(&bad)
        .unwrap()
        .validate()
        .unwrap_err();
    assert_eq!(field, "frozen.grader");

    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("space.toml");
    std::fs::write(&p, SPACE.replace("search-space.v1", "search-space.v0")).unwrap();
    let e = SearchSpace::load(&p).unwrap_err().to_string();
    assert!(e.contains("space.toml") && e.contains("schema"), "{e}");
}

/// Knobs are validated together with the baseline: a repair budget the convergence guard
/// always cuts short is refused at load, with the reason, and allowed once the window lets it
/// run (as a frozen field or as a knob of its own).
#[test]
fn a_repair_budget_the_convergence_guard_cuts_short_is_refused() {
    let sp = space();
    let (field, msg) = sp.check_interactions(&Scaffold::default()).unwrap_err();
    assert_eq!(field, "knob[0].values");
    assert!(
        msg.contains("repair_budget = 3 cannot take effect")
            && msg.contains("guards.convergence_window = 3 (frozen)"),
        "{msg}"
    );
    let mut wide = Scaffold::default();
    wide.guards.convergence_window = 10;
    sp.check_interactions(&wide).unwrap();
    wide.guards.convergence_window = 0;
    sp.check_interactions(&wide).unwrap();
    let with_window =
        format!("{SPACE}[[knob]]\npath = \"guards.convergence_window\"\nvalues = [3, 5]\n");
    let sp: SearchSpace = toml::from_str(&with_window).unwrap();
    sp.validate().unwrap();
    sp.check_interactions(&Scaffold::default()).unwrap();
}

#[test]
fn grid_walks_the_neighbours_in_order_and_skips_seen_fingerprints() {
    let sp = space();
    let base = Scaffold {
        repair_budget: 0,
        ..Scaffold::default()
    };
    let n = neighbours(&sp, &base);
    // 3 repair budgets + 1 cap + 3 thresholds except 0.8 (2) + 2 prompts.
    assert_eq!(n.len(), 3 + 1 + 2 + 2);
    assert_eq!(n[0].0.path, "repair_budget");
    assert_eq!(n[0].1.repair_budget, 1);
    let champ = member("c0000", base.clone(), None);
    let mut seen: HashSet<String> = [base.hash(), n[0].1.hash()].into();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    let p = propose(PolicyKind::Grid, &sp, &champ, &[], &seen, 2, &mut rng).unwrap();
    assert_eq!(p.scaffold.repair_budget, 2);
    for (_, s) in &n {
        seen.insert(s.hash());
    }
    assert!(propose(PolicyKind::Grid, &sp, &champ, &[], &seen, 2, &mut rng).is_none());
}

#[test]
fn random_and_evolutionary_are_reproducible_from_the_seed() {
    let sp = space();
    let champ = member("c0000", Scaffold::default(), Some(0.5));
    let seen: HashSet<String> = [Scaffold::default().hash()].into();
    let draw = |policy, seed| {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let pop = vec![champ.clone()];
        (0..5)
            .map(|_| {
                propose(policy, &sp, &champ, &pop, &seen, 2, &mut rng)
                    .unwrap()
                    .scaffold
                    .hash()
            })
            .collect::<Vec<_>>()
    };
    for policy in [PolicyKind::Random, PolicyKind::Evolutionary] {
        assert_eq!(draw(policy, 7), draw(policy, 7));
        assert!(draw(policy, 7).iter().all(|h| !seen.contains(h)));
    }
    assert_ne!(draw(PolicyKind::Random, 7), draw(PolicyKind::Random, 8));
}

#[test]
fn tournament_selection_prefers_the_fitter_member() {
    let pop = vec![
        member("a", Scaffold::default(), Some(0.2)),
        member("b", Scaffold::default(), Some(0.9)),
        member("c", Scaffold::default(), None),
    ];
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let wins = (0..200)
        .filter(|_| tournament(&pop, 3, &mut rng).id == "b")
        .count();
    // P(b in 3 draws) = 1 - (2/3)^3 = 0.70.
    assert!((110..170).contains(&wins), "{wins}");
}

#[test]
fn frozen_fields_and_out_of_space_mutations_are_refused() {
    let sp = space();
    let base = Scaffold::default();
    let changed = Scaffold {
        reflection: geode_runtime::scaffold::ReflectionMode::ModelCall,
        ..base.clone()
    };
    let e = sp.check_candidate(&base, &changed).unwrap_err();
    assert!(e.contains("reflection"), "{e}");
    let m = Mutation {
        path: "repair_budget".into(),
        value: json!(9),
    };
    assert!(sp.check_mutation(&m).is_err());
    let m = Mutation {
        path: "repair_budget".into(),
        value: json!(3),
    };
    sp.check_mutation(&m).unwrap();
    let next = apply(&base, &m).unwrap();
    let d = diff(&base, &next);
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].path, "repair_budget");
    sp.check_candidate(&base, &next).unwrap();
    // Setting a default compaction value leaves the default hash alone.
    let m = Mutation {
        path: "compaction.threshold".into(),
        value: json!(0.8),
    };
    assert_eq!(apply(&base, &m).unwrap().hash(), base.hash());
}

#[test]
fn proposer_answers_are_parsed_from_prose() {
    let (m, h) =
        parse_answer("Sure:\n```json\n{\"path\": \"repair_budget\", \"value\": 2, \"hypothesis\": \"repairs catch false claims\"}\n```").unwrap();
    assert_eq!(m.path, "repair_budget");
    assert_eq!(m.value, json!(2));
    assert_eq!(h, "repairs catch false claims");
    assert!(parse_answer("no json here").is_err());
}

struct Quiet;
impl PhaseObserver for Quiet {
    fn phase(&self, _: &str, _: PhaseEvent<'_>) {}
}

fn core_pack() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../tasks/geode-core")
}

/// A scripted proposer that proposes a duplicate, an out-of-space value and an unknown knob:
/// all three are refused without a single trial (the backend is never reached).
#[tokio::test]
async fn model_proposals_that_are_duplicates_or_outside_the_space_spend_no_trials() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(d.join("space.toml"), SPACE).unwrap();
    // A window the space's largest repair budget (3) can run under.
    std::fs::write(
        d.join("base.toml"),
        "repair_budget = 0\n[guards]\nconvergence_window = 10\n",
    )
    .unwrap();
    let turn = |path: &str, value: serde_json::Value| json!({"text": json!({"path": path, "value": value, "hypothesis": "h"}).to_string()});
    let script = json!({"turns": [
        turn("repair_budget", json!(0)),
        turn("repair_budget", json!(7)),
        turn("guards.max_rounds", json!(10)),
    ]});
    std::fs::write(d.join("proposals.json"), script.to_string()).unwrap();
    let core = core_pack();
    let config = format!(
        r#"
schema = "geode.search.v1"
space = "space.toml"
baseline = "base.toml"
policy = "model"
proposer = "scripted:proposals.json"
seed = 1
model = "flaky-oracle:0.5"
train = "{core}"
trials = 1
out = "out"
# No campaign runs here (every proposal is refused first), so the design is not in question.
allow_infeasible = true
[test]
pack = "{core}"
trials = 1
[budgets]
max_consecutive_rejected = 3
"#,
        core = core.display()
    );
    std::fs::write(d.join("search.toml"), config).unwrap();
    let c = SearchConfig::load(&d.join("search.toml")).unwrap();
    let env = Env {
        backend: Arc::new(HostBackend::new(d.join("host"))),
        observer: Arc::new(Quiet),
        cancel: CancellationToken::new(),
        timeout_multiplier: 1.0,
        slurm: None,
        // No holdout is opened here.
        backend_over: Arc::new(|_: &std::path::Path| Err("no sealed campaign".to_string())),
    };
    let summary = run_search(&c, &env, &mut |_| {}).await.unwrap();
    assert_eq!(summary.stop, StopReason::ConsecutiveRejected);
    assert_eq!(summary.evaluated, 0);
    let l = Lineage::open(&d.join("out")).unwrap();
    let kinds: Vec<EntryKind> = l.entries.iter().map(|e| e.kind).collect();
    assert_eq!(
        kinds,
        [
            EntryKind::Baseline,
            EntryKind::Rejected,
            EntryKind::Rejected,
            EntryKind::Rejected
        ]
    );
    let why: Vec<&str> = l.entries[1..]
        .iter()
        .map(|e| e.rejection.as_deref().unwrap())
        .collect();
    assert!(why[0].contains("duplicate fingerprint"), "{why:?}");
    assert!(why[1].contains("outside the domain"), "{why:?}");
    assert!(why[2].contains("not a knob"), "{why:?}");
    assert!(!d.join("out/candidates/c0001/campaign").exists());
    assert!(!d.join("host").exists(), "no trial may run");

    // A torn last line (a kill mid-append) is dropped; the rest of the lineage stands.
    let p = d.join("out").join(LINEAGE_FILE);
    let mut text = std::fs::read_to_string(&p).unwrap();
    text.push_str("{\"schema\":\"geode.search.lin");
    std::fs::write(&p, text).unwrap();
    assert_eq!(Lineage::open(&d.join("out")).unwrap().entries.len(), 4);
    assert!(std::fs::read_to_string(&p).unwrap().ends_with('\n'));

    // Another configuration in the same output folder is refused.
    let other = std::fs::read_to_string(d.join("search.toml"))
        .unwrap()
        .replace("seed = 1", "seed = 2");
    std::fs::write(d.join("search.toml"), other).unwrap();
    let c2 = SearchConfig::load(&d.join("search.toml")).unwrap();
    let e = run_search(&c2, &env, &mut |_| {}).await.unwrap_err();
    assert!(e.to_string().contains("another search"), "{e}");
}

/// The configuration format the README documents is the one `search run` reads: both examples
/// load as written (unknown fields are refused, so a renamed field fails here).
#[test]
fn the_readme_documents_the_search_formats_that_load() {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))
            .unwrap();
    let block_after = |marker: &str| -> String {
        let at = readme
            .find(marker)
            .unwrap_or_else(|| panic!("{marker} not in README"));
        let rest = &readme[at..];
        let start = rest.find("```toml\n").unwrap() + "```toml\n".len();
        let len = rest[start..].find("```").unwrap();
        rest[start..start + len].to_string()
    };
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(
        tmp.path().join("search.toml"),
        block_after("`search.toml` (`geode.search.v1`)"),
    )
    .unwrap();
    std::fs::write(
        tmp.path().join("space.toml"),
        block_after("`space.toml` (`geode.search-space.v1`)"),
    )
    .unwrap();
    let config = SearchConfig::load(&tmp.path().join("search.toml")).unwrap();
    assert_eq!(config.policy, PolicyKind::Grid);
    assert_eq!(
        config.space,
        tmp.path().join("space.toml"),
        "resolved beside the file"
    );
    assert_eq!(
        config.test.commitments.as_deref(),
        Some(tmp.path().join("datasets/commitments").as_path())
    );
    let space = SearchSpace::load(&tmp.path().join("space.toml")).unwrap();
    assert_eq!(space.knobs.len(), 1);
}
