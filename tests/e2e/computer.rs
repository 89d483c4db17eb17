//! The `computer` tool against a real X server: an Xvfb the test starts, an xterm on it, and a
//! scripted model that types a shell command into the xterm through a DAEMON channel session
//! with the operator's computer-use switch. The effect is checked twice, not by eye: the file
//! the typed command writes, and the pixels of the screenshots the tool returned. The refusals
//! (HEADLESS `geode exec`, DAEMON without the switch) need no display.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use geode_runtime::conversation::{ContentBlock, ImageMediaType};
use geode_runtime::tools::computer::{ComputerAction, x11};

use super::channel::{ChannelDaemon, TOKEN, messages};

/// A process killed when the test ends, passed or failed.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A private X server (1024x768, white root, no TCP) on a display number nobody holds.
struct Xvfb {
    _server: Guard,
    display: String,
}

impl Xvfb {
    fn start() -> Xvfb {
        for offset in 0..100 {
            let n = 200 + (std::process::id() + offset) % 600;
            let socket = format!("/tmp/.X11-unix/X{n}");
            if Path::new(&format!("/tmp/.X{n}-lock")).exists() || Path::new(&socket).exists() {
                continue;
            }
            let child = Command::new("Xvfb")
                .args([&format!(":{n}"), "-screen", "0", "1024x768x24", "-wr"])
                .args(["-nolisten", "tcp"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("Xvfb (Debian package xvfb; scripts/test installs it)");
            let mut server = Guard(child);
            let deadline = Instant::now() + Duration::from_secs(20);
            while Instant::now() < deadline {
                if Path::new(&socket).exists() {
                    return Xvfb {
                        _server: server,
                        display: format!(":{n}"),
                    };
                }
                // Lost a race for the number: try the next one.
                if server.0.try_wait().unwrap().is_some() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("no Xvfb display could be started");
    }
}

/// An RGB8 picture decoded from PNG.
struct Picture {
    width: u32,
    height: u32,
    rgb: Vec<u8>,
}

impl Picture {
    fn decode(png_bytes: &[u8]) -> Picture {
        let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        buf.truncate(info.buffer_size());
        Picture {
            width: info.width,
            height: info.height,
            rgb: buf,
        }
    }

    /// Text pixels: the xterm draws black on white over a white root, so whatever is dark is
    /// text or the cursor. Returns their count and the lowest row holding one.
    fn ink(&self) -> (usize, Option<u32>) {
        let mut count = 0;
        let mut lowest = None;
        for (i, px) in self.rgb.chunks(3).enumerate() {
            if px.iter().all(|c| *c < 100) {
                count += 1;
                lowest = Some(i as u32 / self.width);
            }
        }
        (count, lowest)
    }
}

/// The xterm the model types into: black on white, no border, at the top-left corner, a
/// plain bash in `dir` with a short prompt.
fn xterm(display: &str, dir: &Path) -> Guard {
    let child = Command::new("xterm")
        .args([
            "-geometry",
            "80x24+0+0",
            "-bw",
            "0",
            "-bg",
            "white",
            "-fg",
            "black",
        ])
        .args(["-e", "bash", "--norc", "--noprofile"])
        .current_dir(dir)
        .env("DISPLAY", display)
        .env("PS1", "$ ")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("xterm (Debian package xterm; scripts/test installs it)");
    let term = Guard(child);
    // Ready when the prompt shows: the test looks through the same X client the tool uses.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let shot = x11::perform(Some(display), &ComputerAction::Screenshot).unwrap();
        if Picture::decode(&shot.png).ink().0 > 0 {
            return term;
        }
        assert!(Instant::now() < deadline, "the xterm never drew its prompt");
        std::thread::sleep(Duration::from_millis(100));
    }
}

const DONE: &str = "I typed the command into the terminal, and the screenshot shows it ran.";

fn channels(computer_use: bool) -> String {
    format!(
        "[channels.ops]\ntoken = \"{TOKEN}\"\ntools = [\"computer\"]\ncomputer_use = \
         {computer_use}\ntime_budget_secs = 120\n"
    )
}

#[test]
fn a_scripted_model_types_into_an_xterm_and_the_screenshots_show_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let x = Xvfb::start();
    let _term = xterm(&x.display, d);
    let script = format!(
        r#"
[[turns]]
[[turns.tool_calls]]
id = "c1"
name = "computer"
input = {{ action = "mouse_move", coordinate = [200, 100] }}
[[turns]]
[[turns.tool_calls]]
id = "c2"
name = "computer"
input = {{ action = "type", text = "echo geode-typed > typed.txt\n" }}
[[turns]]
[[turns.tool_calls]]
id = "c3"
name = "computer"
input = {{ action = "wait", duration_ms = 1500 }}
[[turns]]
text = "{DONE}"
"#
    );
    let daemon = ChannelDaemon::start_with(d, &script, &channels(true), &[("DISPLAY", &x.display)]);
    let reply = daemon.send("desk", "type the command into the terminal");
    assert_eq!(reply["tool_calls"], 3, "{reply}");
    let id = reply["session_id"].as_str().unwrap().to_string();
    daemon.term();

    // The application got the keys: its shell ran the typed command.
    let typed = d.join("typed.txt");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !typed.exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(std::fs::read_to_string(&typed).unwrap(), "geode-typed\n");

    // Every call answered with its text and a PNG screenshot right after it.
    let blocks: Vec<ContentBlock> = messages(d, &id)
        .into_iter()
        .flat_map(|m| m.content)
        .collect();
    let mut shots = Vec::new();
    for pair in blocks.windows(2) {
        if let [
            ContentBlock::ToolResult {
                content, is_error, ..
            },
            ContentBlock::Image(image),
        ] = pair
        {
            assert!(!is_error, "{content}");
            assert!(
                content.starts_with("screenshot 1024x768 (screen 1024x768)"),
                "{content}"
            );
            assert_eq!(image.media_type, ImageMediaType::Png);
            use base64::Engine as _;
            let png = base64::engine::general_purpose::STANDARD
                .decode(&image.data_b64)
                .unwrap();
            shots.push(Picture::decode(&png));
        }
    }
    assert_eq!(shots.len(), 3, "one screenshot per call");
    assert!(shots.iter().all(|s| (s.width, s.height) == (1024, 768)));
    // Before typing: the prompt on the first line. After: the command on that line, and a new
    // prompt on a line below it, so more ink reaching further down.
    let (before, before_low) = shots[0].ink();
    let (after, after_low) = shots[2].ink();
    eprintln!(
        "computer e2e: ink before typing {before} px down to row {before_low:?}; \
         after {after} px down to row {after_low:?}"
    );
    assert!(after > before + 100, "ink {before} -> {after}");
    assert!(
        after_low.unwrap() > before_low.unwrap() + 8,
        "lowest ink row {before_low:?} -> {after_low:?}"
    );
}

#[test]
fn computer_use_is_refused_in_daemon_mode_without_the_operator_switch() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let script = format!(
        "[[turns]]\n[[turns.tool_calls]]\nid = \"c1\"\nname = \"computer\"\n\
         input = {{ action = \"screenshot\" }}\n[[turns]]\ntext = \"{DONE}\"\n"
    );
    let daemon = ChannelDaemon::start_with(d, &script, &channels(false), &[]);
    let reply = daemon.send("desk", "look at the screen");
    let id = reply["session_id"].as_str().unwrap().to_string();
    daemon.term();
    let blocks: Vec<ContentBlock> = messages(d, &id)
        .into_iter()
        .flat_map(|m| m.content)
        .collect();
    let denied = blocks.iter().any(|b| {
        matches!(b, ContentBlock::ToolResult { tool_use_id, content, is_error: true }
            if tool_use_id == "c1" && content.contains("denied at scope"))
    });
    assert!(denied, "{blocks:?}");
    assert!(!blocks.iter().any(|b| matches!(b, ContentBlock::Image(_))));
}

#[test]
fn headless_exec_refuses_computer_use_even_with_dangerous_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("script.toml"),
        "[[turns]]\n[[turns.tool_calls]]\nname = \"computer\"\n\
         input = { action = \"screenshot\" }\n[[turns]]\ntext = \"The computer tool is not \
         available in this session.\"\n",
    )
    .unwrap();
    let out = super::common::geode_bin()
        .args(["exec", "--model", "scripted:script.toml", "--json"])
        .args(["--allow", "dangerous", "look at the screen"])
        .current_dir(d)
        .env("GEODE_HOME", d.join("home"))
        .env_remove("GEODE_MODEL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ended = stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["type"] == "tool_ended")
        .unwrap_or_else(|| panic!("no tool_ended event: {stdout}"));
    assert_eq!(ended["is_error"], true, "{ended}");
    assert!(
        ended["output"]
            .as_str()
            .unwrap()
            .contains("denied at scope"),
        "{ended}"
    );
}
