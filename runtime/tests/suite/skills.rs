//! Skills in a session: the prompt lists them, `load_skill` returns a body and the folder's
//! files, `read_file` reads those files through the pipeline although they lie outside the
//! workspace, writes there are refused, and the scaffold hash names the skills.

use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use geode_runtime::conversation::AssistantTurn;
use geode_runtime::model::embedded::ScriptedModel;
use geode_runtime::model::{Model, ModelError, ModelRequest};
use geode_runtime::policy::SafetyLevel;
use geode_runtime::session::create_session;
use geode_runtime::skills::{SkillSet, discover_local};
use geode_runtime::store::timeline::{CallOutcome, PipelineStep, TimelineEvent};
use serde_json::json;

use super::common::{Fixture, completed, headless, run, tool_result_for};

/// A scripted model that keeps every system prompt it was sent.
struct Recording {
    inner: ScriptedModel,
    systems: Mutex<Vec<String>>,
}

#[async_trait]
impl Model for Recording {
    fn id(&self) -> &str {
        "scripted"
    }

    async fn complete(&self, req: &ModelRequest<'_>) -> Result<AssistantTurn, ModelError> {
        self.systems.lock().unwrap().push(req.system.to_string());
        self.inner.complete(req).await
    }
}

fn scaffold_hash(f: &Fixture, session: &geode_runtime::agent::AgenticLoop) -> String {
    f.rows(session)
        .into_iter()
        .find_map(|r| match r.event {
            TimelineEvent::SessionStarted { scaffold_hash, .. } => Some(scaffold_hash),
            _ => None,
        })
        .unwrap()
}

/// A `release-notes` skill in `f.outside/skills`: its root and its folder.
fn release_notes_skill(f: &Fixture) -> (std::path::PathBuf, std::path::PathBuf) {
    let skills_root = f.outside.join("skills");
    let dir = skills_root.join("release-notes");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("SKILL.md"),
        "---\nname: release-notes\ndescription: Write release notes in the house format.\n---\n\
         Copy template.md into NOTES.md, then fill in the version.\n",
    )
    .unwrap();
    std::fs::write(dir.join("template.md"), "# Release VERSION\n").unwrap();
    (skills_root, dir)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_scripted_model_loads_a_skill_reads_its_file_and_follows_it() {
    let f = Fixture::new();
    let (skills_root, dir) = release_notes_skill(&f);
    std::fs::write(f.outside.join("private.txt"), "not a skill").unwrap();
    let skills = Arc::new(
        discover_local(std::slice::from_ref(&skills_root))
            .await
            .unwrap(),
    );
    let template = dir.join("template.md").display().to_string();
    let script = json!({"turns": [
        {"tool_calls": [{"id": "load", "name": "load_skill", "input": {"name": "release-notes"}}]},
        {"tool_calls": [
            {"id": "read", "name": "read_file", "input": {"path": template}},
            {"id": "tamper", "name": "write_file", "input": {"path": template, "content": "x"}},
            {"id": "peek", "name": "read_file",
             "input": {"path": f.outside.join("private.txt").display().to_string()}}]},
        {"tool_calls": [{"id": "write", "name": "write_file",
            "input": {"path": "NOTES.md", "content": "# Release 1.2\n"}}]},
        {"text": "NOTES.md follows the release-notes skill."}
    ]});
    let model = Arc::new(Recording {
        inner: ScriptedModel::from_json(script).unwrap(),
        systems: Mutex::new(Vec::new()),
    });
    let mut cfg = f.config(model.clone(), headless(SafetyLevel::Write));
    cfg.skills = skills.clone();
    let mut session = create_session(cfg).unwrap();
    let outcome = run(&mut session, "write the release notes for 1.2").await;
    assert_eq!(outcome.text, "NOTES.md follows the release-notes skill.");

    let first = model.systems.lock().unwrap()[0].clone();
    assert!(
        first.contains("<skills>") && first.contains("- release-notes: Write release notes"),
        "{first}"
    );
    assert!(
        !first.contains("Copy template.md"),
        "bodies load on demand: {first}"
    );

    let (loaded, err) = tool_result_for(&session, "load");
    assert!(!err, "{loaded}");
    assert!(
        loaded.contains("Copy template.md into NOTES.md"),
        "{loaded}"
    );
    assert!(
        loaded.contains(&template),
        "the file list names the template: {loaded}"
    );
    let (read, err) = tool_result_for(&session, "read");
    assert!(!err && read.contains("# Release VERSION"), "{read}");
    let (tamper, err) = tool_result_for(&session, "tamper");
    assert!(err && tamper.contains("read-only"), "{tamper}");
    assert_eq!(
        std::fs::read_to_string(&template).unwrap(),
        "# Release VERSION\n"
    );
    let rows = f.rows(&session);
    let peek = completed(&rows)
        .into_iter()
        .find(|(id, _)| id == "peek")
        .unwrap();
    assert!(
        matches!(
            peek.1,
            CallOutcome::Denied {
                step: PipelineStep::Scope,
                ..
            }
        ),
        "{peek:?}"
    );
    assert_eq!(
        std::fs::read_to_string(f.path("NOTES.md")).unwrap(),
        "# Release 1.2\n"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_scaffold_hash_names_the_skills_and_only_when_there_are_some() {
    let f = Fixture::new();
    let (skills_root, dir) = release_notes_skill(&f);
    let skills = Arc::new(
        discover_local(std::slice::from_ref(&skills_root))
            .await
            .unwrap(),
    );
    let script = json!({"turns": [{"text": "ok"}]});
    let mut session = f.session_with(script.clone(), SafetyLevel::Safe, |cfg| {
        cfg.skills = skills.clone();
    });
    run(&mut session, "hi").await;
    // The same scaffold without the skill hashes differently, and so does a changed skill.
    let with = scaffold_hash(&f, &session);
    let mut plain = f.session(script, SafetyLevel::Safe);
    run(&mut plain, "hi").await;
    assert_ne!(scaffold_hash(&f, &plain), with);
    assert_eq!(
        scaffold_hash(&f, &plain),
        geode_runtime::scaffold::Scaffold::default().hash(),
        "no skills: the hash a scaffold had before skills existed"
    );
    std::fs::write(dir.join("template.md"), "# Release V\n").unwrap();
    let changed = discover_local(&[skills_root]).await.unwrap();
    assert_ne!(changed.hash(), skills.hash());
    assert!(SkillSet::default().hash().is_none());
}
