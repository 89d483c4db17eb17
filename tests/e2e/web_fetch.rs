//! `web_fetch` in a person's session: a scripted model fetches a page from a real HTTP server on
//! loopback and reads its text; it is a `sensitive` call, refused in headless mode unless
//! allowed. (A benchmark agent never has it: a unit test of the runtime's built-in tools.)

use std::io::{Read, Write};
use std::net::TcpListener;

const PAGE: &str = "<html><head><script>var hidden = 1;</script></head><body><h1>Release notes</h1>\
                    <p>Version 4.2 &amp; later</p></body></html>";

/// Answers every connection with PAGE, counting them.
fn serve_page() -> (u16, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for mut conn in listener.incoming().map_while(Result::ok) {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut buf = [0u8; 4096];
            let _ = conn.read(&mut buf);
            let _ = write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: text/html; charset=utf-8\r\nContent-Length: \
                 {}\r\nConnection: close\r\n\r\n{PAGE}",
                PAGE.len()
            );
        }
    });
    (port, hits)
}

fn exec(d: &std::path::Path, allow: &str) -> serde_json::Value {
    let out = super::common::geode_in(d)
        .args([
            "exec",
            "--json",
            "--model",
            "scripted:script.toml",
            "--no-checkpoint",
        ])
        .args(["--allow", allow, "read the notes"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["type"] == "tool_ended" && e["tool"] == "web_fetch")
        .unwrap_or_else(|| panic!("no web_fetch call:\n{stdout}"))
}

#[test]
fn a_person_s_session_fetches_a_page_s_text_under_its_policy() {
    let (port, hits) = serve_page();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("script.toml"),
        format!(
            "[[turns]]\n[[turns.tool_calls]]\nname = \"web_fetch\"\n\
             input = {{ url = \"http://127.0.0.1:{port}/notes\" }}\n[[turns]]\ntext = \"Read.\"\n"
        ),
    )
    .unwrap();
    // Headless and not allowed: refused before any request.
    let refused = exec(d, "write");
    assert_eq!(refused["is_error"], true, "{refused}");
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 0);

    let fetched = exec(d, "sensitive");
    assert_eq!(fetched["is_error"], false, "{fetched}");
    let text = fetched["output"].as_str().unwrap();
    assert!(text.starts_with("200 OK text/html"), "{text}");
    assert!(
        text.contains("Release notes\nVersion 4.2 & later"),
        "{text}"
    );
    assert!(!text.contains("hidden") && !text.contains("<p>"), "{text}");
}
