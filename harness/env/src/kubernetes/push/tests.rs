//! The push against a registry on loopback that wants a bearer token for `pull,push`.

use super::*;

use std::sync::Arc;

/// A registry that wants a bearer token for pull,push, which its token endpoint gives
/// for the right user and password; it checks every blob's digest.
#[derive(Default)]
struct Registry {
    blobs: Mutex<HashMap<String, Vec<u8>>>,
    manifests: Mutex<Vec<String>>,
    port: Mutex<u16>,
}

async fn serve(reg: Arc<Registry>, req: axum::extract::Request) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (parts, body) = req.into_parts();
    let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap();
    let path = parts.uri.path().to_string();
    let query = parts.uri.query().unwrap_or_default().to_string();
    let auth = parts
        .headers
        .get("authorization")
        .and_then(|a| a.to_str().ok())
        .unwrap_or_default()
        .to_string();
    if path == "/token" {
        let basic = format!(
            "Basic {}",
            base64::Engine::encode(&base64::engine::general_purpose::STANDARD, "ci:s3cret")
        );
        if auth != basic
            || !query.contains("scope=repository%3Ageode%2Fgeode-task%2Fx%3Apull%2Cpush")
        {
            return (axum::http::StatusCode::FORBIDDEN, "no").into_response();
        }
        return axum::Json(serde_json::json!({"token": "tok"})).into_response();
    }
    if auth != "Bearer tok" {
        let port = *reg.port.lock().unwrap();
        let challenge = format!("Bearer realm=\"http://127.0.0.1:{port}/token\",service=\"fake\"");
        return (
            axum::http::StatusCode::UNAUTHORIZED,
            [("www-authenticate", challenge)],
        )
            .into_response();
    }
    match (parts.method.as_str(), path.as_str()) {
        ("HEAD", p) if p.contains("/blobs/") => {
            let d = p.rsplit('/').next().unwrap();
            if reg.blobs.lock().unwrap().contains_key(d) {
                axum::http::StatusCode::OK.into_response()
            } else {
                axum::http::StatusCode::NOT_FOUND.into_response()
            }
        }
        ("POST", p) if p.ends_with("/blobs/uploads/") => (
            axum::http::StatusCode::ACCEPTED,
            [("location", "/upload/1?state=x")],
        )
            .into_response(),
        ("PUT", "/upload/1") => {
            let d = query
                .split('&')
                .find_map(|q| q.strip_prefix("digest="))
                .unwrap()
                .replace("%3A", ":");
            assert_eq!(digest_of(&bytes), d);
            reg.blobs.lock().unwrap().insert(d, bytes.to_vec());
            axum::http::StatusCode::CREATED.into_response()
        }
        ("PUT", p) if p.contains("/manifests/") => {
            let d = p.rsplit('/').next().unwrap();
            assert_eq!(digest_of(&bytes), d);
            let manifest: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            for blob in manifest["layers"]
                .as_array()
                .unwrap()
                .iter()
                .chain([&manifest["config"]])
            {
                assert!(
                    reg.blobs
                        .lock()
                        .unwrap()
                        .contains_key(blob["digest"].as_str().unwrap())
                );
            }
            reg.manifests.lock().unwrap().push(p.to_string());
            axum::http::StatusCode::CREATED.into_response()
        }
        _ => axum::http::StatusCode::NOT_FOUND.into_response(),
    }
}

fn image() -> PreparedImage {
    PreparedImage {
        root: crate::ImageRoot::Layers(Vec::new()),
        workdir: "/app".into(),
        env: Vec::new(),
        user: None,
        entrypoint: Vec::new(),
        cmd: Vec::new(),
        from: String::new(),
        source: String::new(),
        digest: None,
        notes: Vec::new(),
        origin: Default::default(),
        cache_hit: false,
        build_duration: std::time::Duration::ZERO,
    }
}

#[tokio::test]
async fn a_push_answers_the_registrys_token_challenge_with_the_credentials() {
    let reg = Arc::new(Registry::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    *reg.port.lock().unwrap() = port;
    let app = axum::Router::new().fallback({
        let reg = Arc::clone(&reg);
        move |req| serve(Arc::clone(&reg), req)
    });
    tokio::spawn(async move { axum::serve(listener, app).await });
    let dir = tempfile::tempdir().unwrap();
    let layer = dir.path().join("layer");
    std::fs::create_dir_all(layer.join("etc")).unwrap();
    std::fs::write(layer.join("etc/hello"), "hi").unwrap();
    let target = |credentials| RegistryTarget {
        base_url: format!("http://127.0.0.1:{port}"),
        prefix: "geode".into(),
        pull_name: "registry.internal/geode".into(),
        credentials,
    };
    let anonymous = Pusher::new(target(None), dir.path().join("scratch")).unwrap();
    let err = anonymous
        .push("geode-task/x", std::slice::from_ref(&layer), &image())
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("registry_username"), "{err}");
    let wrong = Pusher::new(
        target(Some(super::super::settings::PushCredentials {
            user: "ci".into(),
            password: "guess".into(),
        })),
        dir.path().join("scratch"),
    )
    .unwrap();
    let err = wrong
        .push("geode-task/x", std::slice::from_ref(&layer), &image())
        .await
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("403") && !err.contains("registry_username"),
        "{err}"
    );
    let pusher = Pusher::new(
        target(Some(super::super::settings::PushCredentials {
            user: "ci".into(),
            password: "s3cret".into(),
        })),
        dir.path().join("scratch"),
    )
    .unwrap();
    let reference = pusher
        .push("geode-task/x", std::slice::from_ref(&layer), &image())
        .await
        .unwrap();
    let manifests = reg.manifests.lock().unwrap().clone();
    assert_eq!(manifests.len(), 1);
    let digest = manifests[0].rsplit('/').next().unwrap();
    assert_eq!(
        reference,
        format!("registry.internal/geode/geode-task/x@{digest}")
    );
    assert_eq!(reg.blobs.lock().unwrap().len(), 2, "one layer, one config");
}

#[test]
fn the_pull_name_carries_its_own_prefix() {
    assert_eq!(repo_tail("geode/task-x", "geode"), "task-x");
    assert_eq!(repo_tail("task-x", ""), "task-x");
}
