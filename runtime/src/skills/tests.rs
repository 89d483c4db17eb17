//! Front matter, discovery order, the hash and the read-only view of skill folders.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::*;
use crate::tools::workspace::{LocalWorkspace, Workspace};

fn skill(root: &Path, name: &str, front: &str, files: &[(&str, &str)]) {
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join(SKILL_FILE),
        format!("---\n{front}---\nDo the thing.\n"),
    )
    .unwrap();
    for (rel, text) in files {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

fn parse(text: &str) -> Result<front_matter::Parsed, SkillError> {
    front_matter::parse(Path::new("x/SKILL.md"), text)
}

#[test]
fn front_matter_errors_name_the_file_and_the_field() {
    let ok = parse("---\nname: x\ndescription: >\n  Two\n  lines\nallowed-tools: Read, Bash(git add:*)\nlicense: MIT\nmetadata:\n  k: v\n---\nbody\n").unwrap();
    assert_eq!(ok.description, "Two lines");
    assert_eq!(ok.allowed_tools, ["Read", "Bash(git add:*)"]);
    assert_eq!(ok.body, "body\n");
    let list =
        parse("---\nname: x\ndescription: d\nallowed-tools: [read_file, bash]\n---\n").unwrap();
    assert_eq!(list.allowed_tools, ["read_file", "bash"]);

    let cases = [
        ("no front matter\n", "must open with a `---`"),
        ("---\nname: x\n", "no closing `---`"),
        ("---\ndescription: d\n---\n", "field `name`: missing"),
        ("---\nname: Big_Name\ndescription: d\n---\n", "field `name`"),
        ("---\nname: x\n---\n", "field `description`"),
        (
            "---\nname: x\ndescription: \"\"\n---\n",
            "field `description`",
        ),
        ("---\nname: [x\n---\n", "front matter"),
        (
            "---\nname: x\ndescription: d\nallowed-tools: {a: 1}\n---\n",
            "allowed-tools",
        ),
    ];
    for (text, want) in cases {
        let e = parse(text).unwrap_err().to_string();
        assert!(e.starts_with("x/SKILL.md"), "{e}");
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

#[tokio::test]
async fn later_roots_shadow_earlier_ones_and_the_hash_follows_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let (user, project) = (dir.path().join("user"), dir.path().join("project"));
    skill(&user, "lint", "name: lint\ndescription: user lint\n", &[]);
    skill(
        &user,
        "deploy",
        "name: deploy\ndescription: ship it\n",
        &[("bin/run.sh", "echo")],
    );
    skill(
        &project,
        "lint",
        "name: lint\ndescription: project lint\n",
        &[],
    );
    std::fs::create_dir_all(project.join("not-a-skill")).unwrap();
    let missing = dir.path().join("missing");
    let set = discover_local(&[user.clone(), missing, project.clone()])
        .await
        .unwrap();
    let names: Vec<&str> = set.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["deploy", "lint"]);
    assert_eq!(set.get("lint").unwrap().description, "project lint");
    assert_eq!(set.warnings().len(), 1, "{:?}", set.warnings());
    assert!(set.warnings()[0].contains("shadows"));
    let deploy = set.get("deploy").unwrap();
    let files: Vec<&PathBuf> = deploy.files.keys().collect();
    assert_eq!(files, [Path::new("SKILL.md"), Path::new("bin/run.sh")]);

    let hash = set.hash().unwrap();
    let again = discover_local(&[user.clone(), project.clone()])
        .await
        .unwrap();
    assert_eq!(again.hash().unwrap(), hash, "stable across reads");
    std::fs::write(user.join("deploy/bin/run.sh"), "echo changed").unwrap();
    let changed = discover_local(&[user, project]).await.unwrap();
    assert_ne!(
        changed.hash().unwrap(),
        hash,
        "a file beside SKILL.md counts"
    );
    assert_eq!(SkillSet::default().hash(), None);

    let prompt = set.prompt_section().unwrap();
    assert!(
        prompt.contains("- deploy: ship it\n- lint: project lint\n"),
        "{prompt}"
    );
}

#[tokio::test]
async fn a_bad_skill_is_an_error_naming_its_file_and_an_odd_folder_a_warning() {
    let dir = tempfile::tempdir().unwrap();
    skill(dir.path(), "folder", "name: other\ndescription: d\n", &[]);
    // The same root twice (GEODE_HOME inside the project) does not shadow itself.
    let roots = [dir.path().to_path_buf(), dir.path().join(".")];
    let set = discover_local(&roots).await.unwrap();
    assert!(set.get("other").is_some());
    assert_eq!(set.warnings().len(), 1, "{:?}", set.warnings());
    assert!(set.warnings()[0].contains("folder named \"folder\""));
    skill(dir.path(), "bad", "name: Bad\ndescription: d\n", &[]);
    let e = discover_local(&roots).await.unwrap_err().to_string();
    assert!(
        e.contains("bad/SKILL.md") && e.contains("field `name`"),
        "{e}"
    );
}

#[test]
fn the_scaffold_hash_moves_only_with_skills() {
    let base = crate::scaffold::Scaffold::default();
    let none = SkillSet::default().apply_to(base.clone());
    assert_eq!(none.hash(), base.hash());
    assert!(
        !serde_json::to_value(&none)
            .unwrap()
            .as_object()
            .unwrap()
            .contains_key("skills")
    );
}

#[tokio::test]
async fn skill_folders_outside_the_root_are_readable_and_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let ws_root = dir.path().join("ws");
    let skills_root = dir.path().join("skills");
    std::fs::create_dir_all(&ws_root).unwrap();
    skill(
        &skills_root,
        "s",
        "name: s\ndescription: d\n",
        &[("ref/a.md", "A")],
    );
    std::fs::write(dir.path().join("secret.txt"), "no").unwrap();
    let set = Arc::new(
        discover_local(std::slice::from_ref(&skills_root))
            .await
            .unwrap(),
    );
    let inner: Arc<dyn Workspace> = Arc::new(LocalWorkspace::new(&ws_root).unwrap());
    let ws = SkillWorkspace::new(inner, set);
    let skill_dir = skills_root.canonicalize().unwrap().join("s");

    let file = ws
        .resolve(&format!("{}/ref/../ref/a.md", skill_dir.display()))
        .unwrap();
    assert_eq!(ws.read_file(&file).await.unwrap(), b"A");
    let listing = ws.list_dir(&skill_dir).await.unwrap();
    let names: Vec<(&str, bool)> = listing
        .iter()
        .map(|e| (e.name.as_str(), e.is_dir))
        .collect();
    assert_eq!(names, [("SKILL.md", false), ("ref", true)]);
    let e = ws.write_file(&file, b"B").await.unwrap_err().to_string();
    assert!(e.contains("read-only"), "{e}");
    assert_eq!(
        std::fs::read_to_string(skills_root.join("s/ref/a.md")).unwrap(),
        "A"
    );
    // Beside the skills, the workspace's own scope still holds.
    let outside = dir.path().canonicalize().unwrap().join("secret.txt");
    assert!(ws.resolve(&outside.display().to_string()).is_err());
    assert!(
        ws.resolve(&format!("{}/../../secret.txt", skill_dir.display()))
            .is_err()
    );
    assert!(
        ws.resolve(&format!("{}/missing.md", skill_dir.display()))
            .is_err()
    );
    // Inside the root, files are the workspace's as before.
    let inside = ws.resolve("note.txt").unwrap();
    ws.write_file(&inside, b"x").await.unwrap();
    assert_eq!(ws.read_file(&inside).await.unwrap(), b"x");
}
