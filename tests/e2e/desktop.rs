//! The built-in `geode-desktop` pack end to end: a task that declares a display gets a private
//! Xvfb inside its sandbox with the task's xterm on it; the oracle types a command into that
//! xterm through the `computer` tool (the whole pipeline, in a HEADLESS trial), nop does
//! nothing. Checked by the verifier's file (the xterm's shell wrote it) and by the pixels of
//! the last screenshot the trajectory keeps.

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn run(dir: &Path, model: &str) -> (serde_json::Value, PathBuf) {
    let cmd = super::common::geode_in(dir);
    let pack = repo().join("tasks/geode-desktop");
    super::common::run_model_with(cmd, &pack, &dir.join("jobs"), model, &[])
}

/// The image files the trajectory's tool results name, in order.
fn screenshots(trial: &Path) -> Vec<PathBuf> {
    let text = std::fs::read_to_string(trial.join("agent/trajectory.json")).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut paths = Vec::new();
    for step in doc["steps"].as_array().unwrap() {
        let Some(results) = step["observation"]["results"].as_array() else {
            continue;
        };
        for part in results
            .iter()
            .filter_map(|r| r["content"].as_array())
            .flatten()
        {
            if part["type"] == "image" {
                assert_eq!(part["source"]["media_type"], "image/png");
                let path = part["source"]["path"].as_str().unwrap();
                paths.push(trial.join("agent").join(path));
            }
        }
    }
    paths
}

/// RGB8 pixels of a PNG: (width, height, bytes).
fn pixels(path: &Path) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    buf.truncate(info.buffer_size());
    (info.width, info.height, buf)
}

#[test]
fn the_desktop_task_passes_with_the_oracle_through_the_screen_and_fails_with_nop() {
    let dir = tempfile::tempdir().unwrap();

    let (oracle, run_dir) = run(dir.path(), "oracle");
    let trial = run_dir.join("geode-xterm-echo__0");
    let result = std::fs::read_to_string(trial.join("result.json")).unwrap_or_default();
    let said = std::fs::read_to_string(trial.join("verifier/test-stdout.txt")).unwrap_or_default();
    assert_eq!(
        oracle["summary"]["outcomes"]["passed"], 1,
        "{oracle}\n{result}\n{said}"
    );
    let shots = screenshots(&trial);
    // One screenshot per action of solution/computer.json (identical ones share a file).
    assert_eq!(shots.len(), 4, "{shots:?}");
    let (width, height, rgb) = pixels(shots.last().unwrap());
    assert_eq!((width, height), (800, 600), "the task's display size");
    let at = |x: u32, y: u32| &rgb[((y * width + x) * 3) as usize..][..3];
    // The xterm (80x24 cells of 6x13, white) covers the top-left corner; the bare root
    // window (black) the rest.
    assert!(at(300, 200).iter().all(|c| *c > 200), "xterm is white");
    assert!(at(700, 500).iter().all(|c| *c < 50), "root is black");
    // Text in the xterm (inside its 1-pixel black border; lines at y 2-16 and 17-30): the
    // typed command well right of the 30-character prompt `root@geode-<12 hex>:/app# ` and its
    // cursor on the first line (the screenshot before typing has no ink there), the prompt
    // that came back after the command ran on the second, nothing further down.
    let ink_in = |columns: std::ops::Range<u32>, rows: std::ops::Range<u32>| {
        rows.flat_map(|y| columns.clone().map(move |x| (x, y)))
            .filter(|(x, y)| at(*x, *y).iter().all(|c| *c < 100))
            .count()
    };
    assert!(ink_in(250..410, 2..17) > 100, "the typed command");
    assert!(ink_in(4..170, 17..31) > 50, "the next prompt");
    assert_eq!(ink_in(4..470, 40..300), 0, "nothing below the second line");
    let (_, _, before) = pixels(&shots[0]);
    let before_at = |x: u32, y: u32| &before[((y * width + x) * 3) as usize..][..3];
    let typed_before = (250..410)
        .flat_map(|x| (2..17).map(move |y| (x, y)))
        .filter(|(x, y)| before_at(*x, *y).iter().all(|c| *c < 100))
        .count();
    assert_eq!(
        typed_before, 0,
        "the first screenshot shows only the prompt"
    );

    let (nop, run_dir) = run(dir.path(), "nop");
    assert_eq!(nop["summary"]["outcomes"]["failed"], 1, "{nop}");
    assert!(screenshots(&run_dir.join("geode-xterm-echo__0")).is_empty());
}

/// The grant follows the task's key: the same scripted screenshot call is denied in a copy of
/// the task without `display`, and answered with a screenshot with it.
#[test]
fn computer_is_granted_only_to_a_trial_whose_task_declares_a_display() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.json");
    std::fs::write(
        &script,
        r#"{"repeat_last": true, "turns": [
            {"tool_calls": [{"name": "computer", "input": {"action": "screenshot"}}]},
            {"text": "The computer tool is not available in this session."}
        ]}"#,
    )
    .unwrap();
    let model = format!("scripted:{}", script.display());
    let src = repo().join("tasks/geode-desktop/xterm-echo");
    for (pack, display) in [("with", true), ("without", false)] {
        let task = dir.path().join(pack).join("xterm-echo");
        super::common::copy_tree(&src, &task);
        if !display {
            let toml = std::fs::read_to_string(task.join("task.toml")).unwrap();
            let kept: Vec<&str> = toml.lines().filter(|l| !l.starts_with("display")).collect();
            std::fs::write(task.join("task.toml"), kept.join("\n")).unwrap();
        }
        let cmd = super::common::geode_in(dir.path());
        let (summary, run_dir) = super::common::run_model_with(
            cmd,
            &dir.path().join(pack),
            &dir.path().join("jobs"),
            &model,
            &[],
        );
        let trial = run_dir.join("geode-xterm-echo__0");
        let result: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(trial.join("result.json")).unwrap())
                .unwrap();
        assert_eq!(
            summary["summary"]["outcomes"]["failed"], 1,
            "{pack}: {result}"
        );
        let trajectory = std::fs::read_to_string(trial.join("agent/trajectory.json")).unwrap();
        let denied = trajectory.contains("denied at scope: tool computer is not allowed");
        assert_eq!(denied, !display, "{pack}: {trajectory}");
        assert_eq!(screenshots(&trial).len(), usize::from(display), "{pack}");
    }
}
