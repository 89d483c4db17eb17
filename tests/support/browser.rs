//! A headless Chromium (Debian's `chromium`) driven through the DevTools protocol over its
//! websocket: enough of CDP for the viewer's tests to open a page, evaluate expressions in it,
//! wait for the DOM to reach a state and take screenshots. One browser process per `Browser`,
//! with an empty profile of its own, killed on drop.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::stream::MaybeTlsStream;
use tungstenite::{Message, WebSocket};

pub struct Browser {
    child: Child,
    ws: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    session: String,
    _profile: tempfile::TempDir,
}

/// The flags that work here as root, with no GPU, no network chatter and no first-run UI.
const FLAGS: [&str; 10] = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    "--window-size=1400,1000",
];

impl Browser {
    pub fn start() -> Browser {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new("chromium")
            .args(FLAGS)
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("chromium (apt-get install chromium) must be on PATH");
        // The address is announced on stderr; the rest of stderr keeps being read, so a
        // chatty browser never blocks on a full pipe.
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(url) = line.split("DevTools listening on ").nth(1) {
                    let _ = tx.send(url.trim().to_string());
                }
            }
        });
        let url = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("chromium did not announce its DevTools address");
        let (ws, _) = tungstenite::connect(url.as_str()).unwrap();
        if let MaybeTlsStream::Plain(s) = ws.get_ref() {
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        }
        let mut b = Browser {
            child,
            ws,
            next_id: 0,
            session: String::new(),
            _profile: profile,
        };
        let target = b.call("Target.createTarget", json!({"url": "about:blank"}));
        let attached = b.call(
            "Target.attachToTarget",
            json!({"targetId": target["targetId"], "flatten": true}),
        );
        b.session = attached["sessionId"].as_str().unwrap().to_string();
        b.page(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": 1400, "height": 1000, "deviceScaleFactor": 1, "mobile": false}),
        );
        b
    }

    fn send(&mut self, method: &str, params: Value, session: Option<String>) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let mut msg = json!({"id": id, "method": method, "params": params});
        if let Some(s) = session {
            msg["sessionId"] = json!(s);
        }
        self.ws.send(Message::text(msg.to_string())).unwrap();
        loop {
            let reply = self.ws.read().unwrap();
            let Message::Text(text) = reply else { continue };
            let v: Value = serde_json::from_str(text.as_str()).unwrap();
            if v["id"] == json!(id) {
                if let Some(e) = v.get("error") {
                    panic!("{method}: {e}");
                }
                return v["result"].clone();
            }
        }
    }

    /// A browser-level call.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.send(method, params, None)
    }

    /// A call to the page's session.
    fn page(&mut self, method: &str, params: Value) -> Value {
        let s = self.session.clone();
        self.send(method, params, Some(s))
    }

    pub fn goto(&mut self, url: &str) {
        self.page("Page.navigate", json!({"url": url}));
    }

    /// The value of `expression` in the page (promises awaited); a thrown error fails the test.
    pub fn eval(&mut self, expression: &str) -> Value {
        let r = self.page(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        if let Some(e) = r.get("exceptionDetails") {
            panic!("{expression}: {e}");
        }
        r["result"]["value"].clone()
    }

    /// Polls `expression` until it is truthy and returns it; on timeout, fails with the page's
    /// text so the failure says what the page showed instead.
    pub fn wait_for(&mut self, expression: &str, timeout: Duration) -> Value {
        let start = Instant::now();
        loop {
            let v = self.eval(&format!(
                "(() => {{ try {{ return {expression}; }} catch (_) {{ return null; }} }})()"
            ));
            let truthy = match &v {
                Value::Null => false,
                Value::Bool(b) => *b,
                Value::Number(n) => n.as_f64() != Some(0.0),
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return v;
            }
            if start.elapsed() > timeout {
                let text = self.eval("document.body ? document.body.innerText.slice(0, 3000) : ''");
                panic!("waited {timeout:?} for {expression}; the page shows:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Opens `#/...` of the current page and waits until the view has drawn.
    pub fn route(&mut self, hash: &str) {
        self.eval(&format!(
            "document.body.dataset.state = 'loading'; location.hash = {}; true",
            json!(hash)
        ));
        self.wait_for(
            "document.body.dataset.state === 'ready'",
            Duration::from_secs(30),
        );
    }

    /// The whole page as a PNG at `path`.
    pub fn screenshot(&mut self, path: &Path) {
        let metrics = self.page("Page.getLayoutMetrics", json!({}));
        let size = &metrics["cssContentSize"];
        let width = size["width"].as_f64().unwrap_or(1400.0).max(1400.0);
        let height = size["height"]
            .as_f64()
            .unwrap_or(1000.0)
            .clamp(600.0, 8000.0);
        let shot = self.page(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true,
                   "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1}}),
        );
        use base64::Engine as _;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        assert!(bytes.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
