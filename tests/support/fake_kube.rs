//! A fake Kubernetes API server on loopback for the kubernetes backend's tests: exactly the
//! calls the backend makes (create, get, list by label selector and delete Pods; `pods/exec`
//! over a WebSocket with the `v5.channel.k8s.io` channel protocol, spoken by tungstenite, an
//! implementation independent of the backend's), each Pod backed by a real container of its
//! image in the tests' docker engine, pulled from the registry the backend pushed to.
//!
//! It checks what a cluster enforcing Pod Security would: a Pod asking for privilege (
//! `privileged`, host namespaces, `hostPath`, added capabilities, an unconfined seccomp profile,
//! privilege escalation, a service-account token) is refused with 422, and a Pod annotated as
//! `restricted` must carry what "restricted" demands. It records the most Pods alive at once.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};

/// One Pod the fake holds.
#[derive(Debug, Clone)]
pub struct FakePod {
    pub manifest: Value,
    pub container: String,
}

/// What the fake saw.
#[derive(Debug, Default)]
pub struct State {
    pub pods: BTreeMap<String, FakePod>,
    pub max_live: usize,
    pub created: Vec<String>,
    pub deleted: Vec<String>,
    pub refused: Vec<String>,
    /// `create NAME` and `delete NAME`, in order.
    pub events: Vec<String>,
    pub execs: usize,
    pub unauthorized: usize,
}

/// The fake API server.
pub struct FakeCluster {
    pub addr: String,
    pub token: String,
    pub state: Arc<Mutex<State>>,
    docker_host: String,
}

impl FakeCluster {
    /// Serve on a free loopback port; Pods become containers of the engine at `docker_host`.
    pub fn start(docker_host: &str) -> FakeCluster {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let state = Arc::new(Mutex::new(State::default()));
        let token = uuid::Uuid::new_v4().simple().to_string();
        let server = Server {
            state: Arc::clone(&state),
            token: token.clone(),
            docker_host: docker_host.to_string(),
        };
        let server = Arc::new(server);
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let server = Arc::clone(&server);
                std::thread::spawn(move || server.connection(stream));
            }
        });
        FakeCluster {
            addr,
            token,
            state,
            docker_host: docker_host.to_string(),
        }
    }

    pub fn live(&self) -> Vec<String> {
        self.state.lock().unwrap().pods.keys().cloned().collect()
    }
}

impl Drop for FakeCluster {
    fn drop(&mut self) {
        // A test that failed holding the lock still has its containers removed.
        let containers: Vec<String> = self
            .state
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .pods
            .values()
            .map(|p| p.container.clone())
            .collect();
        for c in containers {
            let _ = Command::new("docker")
                .env("DOCKER_HOST", &self.docker_host)
                .args(["rm", "--force", &c])
                .output();
        }
    }
}

struct Server {
    state: Arc<Mutex<State>>,
    token: String,
    docker_host: String,
}

struct Request {
    method: String,
    path: String,
    query: Vec<(String, String)>,
    headers: BTreeMap<String, String>,
    body: Vec<u8>,
}

fn respond(stream: &mut TcpStream, code: u16, body: &Value) {
    let text = body.to_string();
    let reason = match code {
        200 => "OK",
        201 => "Created",
        401 => "Unauthorized",
        404 => "Not Found",
        422 => "Unprocessable Entity",
        _ => "Error",
    };
    let _ = write!(
        stream,
        "HTTP/1.1 {code} {reason}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{text}",
        text.len()
    );
}

fn status(code: u16, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "code": code})
}

impl Server {
    fn docker(&self) -> Command {
        let mut c = Command::new("docker");
        c.env("DOCKER_HOST", &self.docker_host);
        c
    }

    fn connection(&self, stream: TcpStream) {
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = line.split_whitespace();
        let method = parts.next().unwrap_or_default().to_string();
        let target = parts.next().unwrap_or_default().to_string();
        let mut headers = BTreeMap::new();
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).unwrap_or(0) == 0 || h == "\r\n" {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
            }
        }
        let len: usize = headers
            .get("content-length")
            .and_then(|l| l.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let url = reqwest::Url::parse(&format!("http://fake{target}")).unwrap();
        let req = Request {
            method,
            path: url.path().to_string(),
            query: url
                .query_pairs()
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
            headers,
            body,
        };
        let mut stream = reader.into_inner();
        if req.headers.get("authorization") != Some(&format!("Bearer {}", self.token)) {
            self.state.lock().unwrap().unauthorized += 1;
            respond(&mut stream, 401, &status(401, "Unauthorized"));
            return;
        }
        let segments: Vec<&str> = req.path.trim_matches('/').split('/').collect();
        match (req.method.as_str(), segments.as_slice()) {
            ("POST", ["api", "v1", "namespaces", ns, "pods"]) => self.create(&mut stream, ns, &req),
            ("GET", ["api", "v1", "namespaces", _, "pods"]) => self.list(&mut stream, &req),
            ("GET", ["api", "v1", "namespaces", _, "pods", name]) => self.get(&mut stream, name),
            ("DELETE", ["api", "v1", "namespaces", _, "pods", name]) => {
                self.delete(&mut stream, name)
            }
            ("GET", ["api", "v1", "namespaces", _, "pods", name, "exec"]) => {
                self.exec(stream, name, &req)
            }
            _ => respond(&mut stream, 404, &status(404, "no such route in the fake")),
        }
    }

    fn create(&self, stream: &mut TcpStream, ns: &str, req: &Request) {
        let pod: Value = serde_json::from_slice(&req.body).unwrap_or(Value::Null);
        let problems = pod_security_problems(&pod);
        let name = pod["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if !problems.is_empty() {
            let message = format!(
                "pods \"{name}\" is forbidden: violates PodSecurity: {}",
                problems.join("; ")
            );
            self.state.lock().unwrap().refused.push(message.clone());
            respond(stream, 422, &status(422, &message));
            return;
        }
        let container = &pod["spec"]["containers"][0];
        let mut args: Vec<String> = vec![
            "run".into(),
            "--detach".into(),
            format!("--name=fake-k8s-{ns}-{name}"),
            "--label=geode.fake-k8s=1".into(),
            // allowPrivilegeEscalation: false.
            "--security-opt=no-new-privileges".into(),
        ];
        let sc = &pod["spec"]["securityContext"];
        if let Some(uid) = sc["runAsUser"].as_u64() {
            let gid = sc["runAsGroup"].as_u64().unwrap_or(uid);
            args.push(format!("--user={uid}:{gid}"));
        }
        let drops = container["securityContext"]["capabilities"]["drop"].to_string();
        if drops.contains("\"ALL\"") {
            args.push("--cap-drop=ALL".into());
        }
        // The namespace's NetworkPolicy on geode.network=off, as the README gives it.
        if pod["metadata"]["labels"]["geode.network"] == "off" {
            args.push("--network=none".into());
        }
        if let Some(host) = pod["spec"]["hostname"].as_str() {
            args.push(format!("--hostname={host}"));
        }
        for alias in pod["spec"]["hostAliases"].as_array().into_iter().flatten() {
            for host in alias["hostnames"].as_array().into_iter().flatten() {
                args.push(format!(
                    "--add-host={}:{}",
                    host.as_str().unwrap(),
                    alias["ip"].as_str().unwrap()
                ));
            }
        }
        let limits = &container["resources"]["limits"];
        if let Some(cpu) = limits["cpu"].as_str().and_then(|c| c.strip_suffix('m')) {
            let millis: f64 = cpu.parse().unwrap();
            args.push(format!("--cpus={}", millis / 1000.0));
        }
        if let Some(mem) = limits["memory"].as_str().and_then(|m| m.strip_suffix("Mi")) {
            args.push(format!("--memory={mem}m"));
        }
        if let Some(dir) = container["workingDir"].as_str() {
            args.push(format!("--workdir={dir}"));
        }
        for env in container["env"].as_array().into_iter().flatten() {
            args.push(format!(
                "--env={}={}",
                env["name"].as_str().unwrap(),
                env["value"].as_str().unwrap()
            ));
        }
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            args.push(format!(
                "--mount=type=tmpfs,destination={},tmpfs-mode=1777",
                mount["mountPath"].as_str().unwrap()
            ));
        }
        let command: Vec<String> = container["command"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c.as_str().unwrap().to_string())
            .collect();
        args.push(format!("--entrypoint={}", command[0]));
        args.push(container["image"].as_str().unwrap().to_string());
        args.extend(command[1..].iter().cloned());
        let out = self.docker().args(&args).output().unwrap();
        if !out.status.success() {
            let message = format!("docker run: {}", String::from_utf8_lossy(&out.stderr));
            respond(stream, 500, &status(500, &message));
            return;
        }
        let id = String::from_utf8_lossy(&out.stdout).trim().to_string();
        let mut state = self.state.lock().unwrap();
        state.pods.insert(
            name.clone(),
            FakePod {
                manifest: pod.clone(),
                container: id,
            },
        );
        state.events.push(format!("create {name}"));
        state.created.push(name);
        state.max_live = state.max_live.max(state.pods.len());
        drop(state);
        let mut created = pod;
        created["status"] = json!({"phase": "Pending"});
        respond(stream, 201, &created);
    }

    fn with_status(&self, pod: &FakePod) -> Value {
        let out = self
            .docker()
            .args(["inspect", "--format", "{{.State.Running}}", &pod.container])
            .output()
            .unwrap();
        let running = String::from_utf8_lossy(&out.stdout).trim() == "true";
        let mut value = pod.manifest.clone();
        value["status"] = if running {
            json!({"phase": "Running", "containerStatuses": [{"name": "main", "ready": true, "state": {"running": {}}}]})
        } else {
            json!({"phase": "Failed", "containerStatuses": [{"name": "main", "state": {"terminated": {"reason": "Error"}}}]})
        };
        value
    }

    fn get(&self, stream: &mut TcpStream, name: &str) {
        let pod = self.state.lock().unwrap().pods.get(name).cloned();
        match pod {
            Some(pod) => respond(stream, 200, &self.with_status(&pod)),
            None => respond(
                stream,
                404,
                &status(404, &format!("pods \"{name}\" not found")),
            ),
        }
    }

    fn list(&self, stream: &mut TcpStream, req: &Request) {
        let selector = req
            .query
            .iter()
            .find(|(k, _)| k == "labelSelector")
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        let pods: Vec<FakePod> = self.state.lock().unwrap().pods.values().cloned().collect();
        let items: Vec<Value> = pods
            .iter()
            .filter(|pod| selects(&selector, &pod.manifest["metadata"]["labels"]))
            .map(|pod| self.with_status(pod))
            .collect();
        respond(
            stream,
            200,
            &json!({"kind": "PodList", "apiVersion": "v1", "items": items}),
        );
    }

    fn delete(&self, stream: &mut TcpStream, name: &str) {
        let pod = self.state.lock().unwrap().pods.remove(name);
        match pod {
            Some(pod) => {
                let _ = self
                    .docker()
                    .args(["rm", "--force", &pod.container])
                    .output();
                let mut state = self.state.lock().unwrap();
                state.deleted.push(name.to_string());
                state.events.push(format!("delete {name}"));
                respond(stream, 200, &pod.manifest);
            }
            None => respond(
                stream,
                404,
                &status(404, &format!("pods \"{name}\" not found")),
            ),
        }
    }

    fn exec(&self, mut stream: TcpStream, name: &str, req: &Request) {
        let Some(pod) = self.state.lock().unwrap().pods.get(name).cloned() else {
            respond(
                &mut stream,
                404,
                &status(404, &format!("pods \"{name}\" not found")),
            );
            return;
        };
        self.state.lock().unwrap().execs += 1;
        let offered = req
            .headers
            .get("sec-websocket-protocol")
            .cloned()
            .unwrap_or_default();
        if !offered.split(',').any(|p| p.trim() == "v5.channel.k8s.io") {
            respond(
                &mut stream,
                400,
                &status(400, "this fake speaks v5.channel.k8s.io only"),
            );
            return;
        }
        let key = req
            .headers
            .get("sec-websocket-key")
            .cloned()
            .unwrap_or_default();
        let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
        let _ = write!(
            stream,
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: v5.channel.k8s.io\r\n\r\n"
        );
        let flag = |k: &str| req.query.iter().any(|(key, v)| key == k && v == "true");
        let argv: Vec<String> = req
            .query
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.clone())
            .collect();
        let mut cmd = self.docker();
        cmd.arg("exec");
        if flag("stdin") {
            cmd.arg("--interactive");
        }
        cmd.arg(&pod.container).args(&argv);
        cmd.stdin(if flag("stdin") {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap();
        let mut stdin = child.stdin.take();
        let (tx, rx) = mpsc::channel::<(u8, Vec<u8>)>();
        for (channel, pipe) in [
            (
                1u8,
                Box::new(child.stdout.take().unwrap()) as Box<dyn Read + Send>,
            ),
            (2u8, Box::new(child.stderr.take().unwrap())),
        ] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let mut pipe = pipe;
                let mut buf = [0u8; 32 * 1024];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 || tx.send((channel, buf[..n].to_vec())).is_err() {
                        break;
                    }
                }
            });
        }
        drop(tx);
        stream
            .set_read_timeout(Some(Duration::from_millis(5)))
            .unwrap();
        let mut ws = tungstenite::WebSocket::from_raw_socket(
            stream,
            tungstenite::protocol::Role::Server,
            None,
        );
        use tungstenite::Message;
        let mut outputs_done = false;
        loop {
            loop {
                match rx.try_recv() {
                    Ok((channel, data)) => {
                        let mut message = vec![channel];
                        message.extend(data);
                        if ws.send(Message::binary(message)).is_err() {
                            let _ = child.kill();
                            let _ = child.wait();
                            return;
                        }
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        outputs_done = true;
                        break;
                    }
                }
            }
            if outputs_done && let Ok(Some(exit)) = child.try_wait() {
                let body = match exit.code() {
                    Some(0) => json!({"metadata": {}, "status": "Success"}),
                    Some(code) => json!({"metadata": {}, "status": "Failure",
                        "message": format!("command terminated with non-zero exit code: exit code {code}"),
                        "reason": "NonZeroExitCode",
                        "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]}}),
                    None => json!({"metadata": {}, "status": "Failure", "message": "killed"}),
                };
                let mut message = vec![3u8];
                message.extend(body.to_string().into_bytes());
                let _ = ws.send(Message::binary(message));
                let _ = ws.close(None);
                let _ = ws.flush();
                return;
            }
            match ws.read() {
                Ok(Message::Binary(data)) => match data.first() {
                    Some(0) => {
                        if let Some(pipe) = stdin.as_mut() {
                            let _ = pipe.write_all(&data[1..]);
                        }
                    }
                    Some(255) if data.get(1) == Some(&0) => stdin = None,
                    _ => {}
                },
                Ok(Message::Close(_)) => {
                    // The client went away: the CLI ends, what it started inside does not (as
                    // on a real node).
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
                Ok(_) => {}
                Err(tungstenite::Error::Io(e))
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                    ) => {}
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return;
                }
            }
        }
    }
}

/// Whether a label selector (`k=v`, `k!=v`, comma-separated) selects `labels`.
fn selects(selector: &str, labels: &Value) -> bool {
    selector.split(',').filter(|t| !t.is_empty()).all(|term| {
        if let Some((k, v)) = term.split_once("!=") {
            labels[k.trim()].as_str() != Some(v.trim())
        } else if let Some((k, v)) = term.split_once('=') {
            labels[k.trim()].as_str() == Some(v.trim())
        } else {
            false
        }
    })
}

/// What Pod Security "baseline" refuses in `pod`, what "restricted" demands when the Pod
/// claims it, and what GEODE's Pods promise beyond both (no token, no escalation).
pub fn pod_security_problems(pod: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    let spec = &pod["spec"];
    for key in ["hostNetwork", "hostPID", "hostIPC", "hostUsers"] {
        if spec[key] == true {
            problems.push(format!("{key}=true"));
        }
    }
    if spec["automountServiceAccountToken"] != false {
        problems.push("a service-account token is mounted".into());
    }
    for volume in spec["volumes"].as_array().into_iter().flatten() {
        let kinds: Vec<&String> = volume
            .as_object()
            .unwrap()
            .keys()
            .filter(|k| *k != "name")
            .collect();
        if kinds.iter().any(|k| *k != "emptyDir") {
            problems.push(format!("volume {} is {kinds:?}", volume["name"]));
        }
    }
    let restricted = pod["metadata"]["annotations"]["geode.pod-security"] == "restricted";
    let pod_seccomp = spec["securityContext"]["seccompProfile"]["type"].as_str();
    for c in spec["containers"].as_array().into_iter().flatten() {
        let sc = &c["securityContext"];
        if sc["privileged"] == true {
            problems.push("privileged".into());
        }
        if sc["allowPrivilegeEscalation"] != false {
            problems.push("allowPrivilegeEscalation != false".into());
        }
        let added: Vec<&str> = sc["capabilities"]["add"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter(|cap| *cap != "NET_BIND_SERVICE")
            .collect();
        if !added.is_empty() {
            problems.push(format!("capabilities added: {added:?}"));
        }
        let seccomp = sc["seccompProfile"]["type"].as_str().or(pod_seccomp);
        if seccomp != Some("RuntimeDefault") && seccomp != Some("Localhost") {
            problems.push(format!("seccompProfile {seccomp:?}"));
        }
        for port in c["ports"].as_array().into_iter().flatten() {
            if port.get("hostPort").is_some() {
                problems.push("hostPort".into());
            }
        }
        if restricted {
            let drops = sc["capabilities"]["drop"].to_string();
            if !drops.contains("\"ALL\"") {
                problems.push("restricted: capabilities not dropped".into());
            }
            let non_root =
                sc["runAsNonRoot"] == true || spec["securityContext"]["runAsNonRoot"] == true;
            let uid = sc["runAsUser"]
                .as_u64()
                .or(spec["securityContext"]["runAsUser"].as_u64());
            if !non_root || uid == Some(0) {
                problems.push("restricted: may run as root".into());
            }
        }
    }
    for key in ["geode.run", "geode.trial", "geode.session"] {
        if pod["metadata"]["labels"][key].as_str().is_none() {
            problems.push(format!("label {key} missing"));
        }
    }
    if spec["activeDeadlineSeconds"]
        .as_u64()
        .is_none_or(|s| s == 0)
    {
        problems.push("no activeDeadlineSeconds".into());
    }
    problems
}
