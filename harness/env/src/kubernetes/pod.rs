//! The Pod one trial runs in, asking for no privilege: no `privileged`, no host namespace,
//! path or port, no capability added, `allowPrivilegeEscalation: false`, the runtime's default
//! seccomp profile, no service-account token, only `emptyDir` volumes. That passes Pod
//! Security "baseline"; "restricted" further drops every capability and runs a non-root uid,
//! which images that need root cannot take (most task images: their Dockerfiles and tests
//! `apt-get install`), so it is a setting, not the default. Isolation beyond that is the
//! runtime class's (gVisor's `runsc`, Kata) where the cluster has one.

use std::time::Duration;

use serde_json::{Value, json};

use super::settings::{KubernetesSettings, PodSecurity};
use crate::{EnvironmentSpec, PreparedImage, TESTS_DIR};

/// The uid an image whose user is root runs as under "restricted", unless set.
pub const DEFAULT_NON_ROOT_UID: u32 = 65532;

/// The labels every trial Pod carries, by which a later coordinator finds it.
pub mod labels {
    /// Which program made the Pod.
    pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
    /// The run (its folder's name, made a label value).
    pub const RUN: &str = "geode.run";
    /// The trial (its folder's name, made a label value).
    pub const TRIAL: &str = "geode.trial";
    /// The coordinator process that made it: a resumed run deletes its run's Pods of every
    /// other session.
    pub const SESSION: &str = "geode.session";
    /// `off` for tasks without network: the namespace's NetworkPolicy selects on it.
    pub const NETWORK: &str = "geode.network";
}

/// Who a trial's Pod names as its Pod.
#[derive(Debug, Clone)]
pub struct PodIdentity {
    /// The Pod's name.
    pub name: String,
    /// The run's label value.
    pub run: String,
    /// The trial's label value.
    pub trial: String,
    /// The coordinator session's label value.
    pub session: String,
    /// The trial's folder, as an annotation for people reading the cluster.
    pub trial_dir: String,
}

/// The user an image runs as, as far as a Pod spec can say it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ImageUser {
    /// uid 0 (no USER, `root`, `0`).
    Root,
    /// A numeric uid (and gid) other than 0.
    Uid(u32, Option<u32>),
    /// A name no `/etc/passwd` of the image resolved: the runtime resolves it, a Pod cannot
    /// claim it non-root.
    Named,
}

impl ImageUser {
    /// The image's USER (`uid`, `uid:gid`, a name) as a Pod spec can use it.
    pub fn of(user: Option<&str>) -> ImageUser {
        let Some(user) = user.filter(|u| !u.is_empty()) else {
            return ImageUser::Root;
        };
        let (uid, gid) = user.split_once(':').unwrap_or((user, ""));
        match (uid.parse::<u32>(), uid) {
            (Ok(0), _) | (_, "root") => ImageUser::Root,
            (Ok(uid), _) => ImageUser::Uid(uid, gid.parse().ok()),
            (Err(_), _) => ImageUser::Named,
        }
    }
}

/// The Pod for one trial, and the notes its result should carry about what was asked.
pub fn pod_spec(
    id: &PodIdentity,
    image_ref: &str,
    spec: &EnvironmentSpec,
    image: &PreparedImage,
    settings: &KubernetesSettings,
) -> (Value, Vec<String>) {
    let mut notes = Vec::new();
    let user = ImageUser::of(image.user.as_deref());
    let mut pod_security = json!({ "seccompProfile": { "type": "RuntimeDefault" } });
    let mut container_security = json!({
        "privileged": false,
        "allowPrivilegeEscalation": false,
        "seccompProfile": { "type": "RuntimeDefault" },
    });
    let level = match (settings.pod_security, user) {
        (PodSecurity::Restricted, ImageUser::Named) => {
            notes.push(format!(
                "kubernetes: the image's user {:?} has no numeric uid in its /etc/passwd, so \
                 the Pod cannot claim runAsNonRoot: it runs under Pod Security baseline",
                image.user.as_deref().unwrap_or_default()
            ));
            PodSecurity::Baseline
        }
        (level, _) => level,
    };
    if level == PodSecurity::Restricted {
        let (uid, gid) = match user {
            ImageUser::Uid(uid, gid) => (uid, gid.unwrap_or(uid)),
            ImageUser::Root | ImageUser::Named => {
                let uid = settings.run_as_user.unwrap_or(DEFAULT_NON_ROOT_UID);
                notes.push(format!(
                    "kubernetes: Pod Security restricted: the image's user is root, the trial \
                     ran as uid {uid} (what needs root in it fails)"
                ));
                (uid, uid)
            }
        };
        pod_security["runAsNonRoot"] = json!(true);
        pod_security["runAsUser"] = json!(uid);
        pod_security["runAsGroup"] = json!(gid);
        pod_security["fsGroup"] = json!(gid);
        container_security["runAsNonRoot"] = json!(true);
        container_security["capabilities"] = json!({ "drop": ["ALL"] });
    } else if let ImageUser::Uid(uid, gid) = user {
        pod_security["runAsUser"] = json!(uid);
        if let Some(gid) = gid {
            pod_security["runAsGroup"] = json!(gid);
        }
    }
    let mut quantities = serde_json::Map::new();
    if let Some(cpus) = spec.cpus {
        let millis = (cpus * 1000.0).ceil().max(1.0) as u64;
        quantities.insert("cpu".into(), json!(format!("{millis}m")));
    }
    if let Some(mb) = spec.memory_mb {
        quantities.insert("memory".into(), json!(format!("{mb}Mi")));
    }
    if let Some(mb) = spec.storage_mb {
        quantities.insert("ephemeral-storage".into(), json!(format!("{mb}Mi")));
    }
    if spec.pids_max.is_some() {
        notes.push(
            "kubernetes: the task's process limit is the node's (a Pod cannot set pids.max; \
             the kubelet's podPidsLimit applies)"
                .into(),
        );
    }
    let env: Vec<Value> = image
        .env
        .iter()
        .map(|(name, value)| json!({ "name": name, "value": value }))
        .collect();
    let network = if spec.network.is_off() {
        "off"
    } else {
        "public"
    };
    let mut pod = json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": id.name,
            "labels": {
                labels::MANAGED_BY: "geode",
                labels::RUN: id.run,
                labels::TRIAL: id.trial,
                labels::SESSION: id.session,
                labels::NETWORK: network,
            },
            "annotations": {
                "geode.trial-dir": id.trial_dir,
                "geode.pod-security": level.to_string(),
            },
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "terminationGracePeriodSeconds": 0,
            "hostname": hostname(&spec.task_name),
            "securityContext": pod_security,
            "volumes": [
                { "name": "logs", "emptyDir": {} },
                { "name": "tests", "emptyDir": {} },
            ],
            "containers": [{
                "name": "main",
                "image": image_ref,
                // The container idles; every command arrives by exec, the ENTRYPOINT too.
                "command": ["sleep", "infinity"],
                "workingDir": image.workdir,
                "env": env,
                "resources": { "requests": quantities.clone(), "limits": quantities },
                "securityContext": container_security,
                "volumeMounts": [
                    { "name": "logs", "mountPath": "/logs" },
                    { "name": "tests", "mountPath": TESTS_DIR },
                ],
            }],
        },
    });
    if let Some(limits) = spec.time_limits {
        pod["spec"]["activeDeadlineSeconds"] = json!((limits + LIFETIME_MARGIN).as_secs());
    }
    if let Some(class) = &settings.runtime_class {
        pod["spec"]["runtimeClassName"] = json!(class);
    }
    if !settings.image_pull_secrets.is_empty() {
        pod["spec"]["imagePullSecrets"] = settings
            .image_pull_secrets
            .iter()
            .map(|name| json!({ "name": name }))
            .collect();
    }
    if !spec.group.names.is_empty() {
        pod["spec"]["hostAliases"] = json!([{ "ip": "127.0.0.1", "hostnames": spec.group.names }]);
    }
    if spec.network.is_off() {
        notes.push(format!(
            "kubernetes: no network is the namespace's NetworkPolicy on {}=off (the README's \
             geode-no-network policy); GEODE does not make it",
            labels::NETWORK
        ));
    }
    (pod, notes)
}

/// A label value (at most 63 characters of `[A-Za-z0-9._-]`, alphanumeric at both ends):
/// the value itself when it is one, else its readable part and a hash of the whole.
pub fn label_value(raw: &str) -> String {
    let clean: String = raw
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '-'
            }
        })
        .collect();
    let trimmed = clean.trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if trimmed == raw && raw.len() <= 63 {
        return raw.to_string();
    }
    use sha2::Digest;
    let hash = hex::encode(&sha2::Sha256::digest(raw.as_bytes())[..5]);
    let head: String = trimmed.chars().take(52).collect();
    let head = head.trim_end_matches(|c: char| !c.is_ascii_alphanumeric());
    if head.is_empty() {
        hash
    } else {
        format!("{head}-{hash}")
    }
}

/// A DNS label for the Pod's hostname, from the task's name.
fn hostname(task: &str) -> String {
    let slug: String = task
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let slug: String = slug.trim_matches('-').chars().take(63).collect();
    match slug.trim_end_matches('-') {
        "" => "task".into(),
        name => name.to_string(),
    }
}

/// A Pod name for a trial: `geode-`, the trial's readable part, a random tail.
pub fn pod_name(trial: &str) -> String {
    let slug = hostname(trial);
    let head: String = slug.chars().take(44).collect();
    let tail = &uuid::Uuid::new_v4().simple().to_string()[..8];
    format!("geode-{}-{tail}", head.trim_end_matches('-'))
}

/// How long past the task's own limits a Pod may live before the cluster ends it: set-up, the
/// ENTRYPOINT, a healthcheck and teardown.
pub const LIFETIME_MARGIN: Duration = Duration::from_secs(600);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{GroupNetwork, ImageRoot, NetworkPolicy};

    fn spec() -> EnvironmentSpec {
        EnvironmentSpec {
            task_name: "geode/hello_World".into(),
            environment_dir: "/nonexistent".into(),
            build: None,
            network: NetworkPolicy::Off,
            cpus: Some(1.5),
            memory_mb: Some(512),
            pids_max: Some(512),
            storage_mb: None,
            build_timeout: Duration::from_secs(60),
            time_limits: Some(Duration::from_secs(600)),
            env: Vec::new(),
            docker_image: None,
            build_args: Vec::new(),
            build_log: None,
            group: GroupNetwork::default(),
        }
    }

    fn image(user: Option<&str>) -> PreparedImage {
        PreparedImage {
            root: ImageRoot::Registry("r/x@sha256:00".into()),
            workdir: "/app".into(),
            env: vec![("PATH".into(), "/usr/bin".into())],
            user: user.map(str::to_string),
            entrypoint: Vec::new(),
            cmd: Vec::new(),
            from: String::new(),
            source: String::new(),
            digest: None,
            notes: Vec::new(),
            origin: Default::default(),
            cache_hit: false,
            build_duration: Duration::ZERO,
        }
    }

    fn id() -> PodIdentity {
        PodIdentity {
            name: "geode-x".into(),
            run: "run".into(),
            trial: "t__0".into(),
            session: "s".into(),
            trial_dir: "/jobs/run/t__0".into(),
        }
    }

    #[test]
    fn a_root_image_gets_a_baseline_pod_that_asks_for_nothing() {
        let (pod, notes) = pod_spec(
            &id(),
            "r/x@sha256:00",
            &spec(),
            &image(None),
            &Default::default(),
        );
        let s = &pod["spec"];
        assert_eq!(
            s["securityContext"]["seccompProfile"]["type"],
            "RuntimeDefault"
        );
        assert!(s["securityContext"].get("runAsUser").is_none());
        let c = &s["containers"][0];
        assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(c["securityContext"]["privileged"], false);
        assert!(c["securityContext"].get("capabilities").is_none());
        assert_eq!(c["resources"]["limits"]["cpu"], "1500m");
        assert_eq!(c["resources"]["limits"]["memory"], "512Mi");
        assert_eq!(s["activeDeadlineSeconds"], 1200);
        assert_eq!(s["automountServiceAccountToken"], false);
        assert_eq!(s["hostname"], "geode-hello-world");
        assert_eq!(pod["metadata"]["labels"]["geode.network"], "off");
        assert!(s.get("runtimeClassName").is_none());
        assert!(notes.iter().any(|n| n.contains("NetworkPolicy")));
    }

    #[test]
    fn restricted_drops_everything_and_runs_a_root_image_as_a_non_root_uid() {
        let settings = KubernetesSettings {
            pod_security: PodSecurity::Restricted,
            runtime_class: Some("gvisor".into()),
            ..Default::default()
        };
        let (pod, notes) = pod_spec(&id(), "x", &spec(), &image(Some("root")), &settings);
        let s = &pod["spec"];
        assert_eq!(s["securityContext"]["runAsNonRoot"], true);
        assert_eq!(s["securityContext"]["runAsUser"], DEFAULT_NON_ROOT_UID);
        assert_eq!(
            s["containers"][0]["securityContext"]["capabilities"]["drop"][0],
            "ALL"
        );
        assert_eq!(s["runtimeClassName"], "gvisor");
        assert!(
            notes.iter().any(|n| n.contains("ran as uid 65532")),
            "{notes:?}"
        );
        // An image with its own uid keeps it.
        let (pod, _) = pod_spec(&id(), "x", &spec(), &image(Some("1000:1001")), &settings);
        assert_eq!(pod["spec"]["securityContext"]["runAsUser"], 1000);
        assert_eq!(pod["spec"]["securityContext"]["runAsGroup"], 1001);
        // A name no passwd resolved cannot be claimed non-root.
        let (pod, notes) = pod_spec(&id(), "x", &spec(), &image(Some("app")), &settings);
        assert!(pod["spec"]["securityContext"].get("runAsNonRoot").is_none());
        assert_eq!(
            pod["metadata"]["annotations"]["geode.pod-security"],
            "baseline"
        );
        assert!(notes.iter().any(|n| n.contains("baseline")));
    }

    #[test]
    fn label_values_are_what_the_api_accepts() {
        assert_eq!(label_value("2026-12-07__05-52-50"), "2026-12-07__05-52-50");
        let long = label_value(&format!("{}/x", "a".repeat(80)));
        assert!(long.len() <= 63 && long.starts_with("aaaa"), "{long}");
        assert_ne!(label_value("a/b"), label_value("a-b"));
        let odd = label_value("__");
        assert!(odd.chars().all(|c| c.is_ascii_hexdigit()), "{odd}");
        let name = pod_name("geode/Hello__0");
        assert!(
            name.starts_with("geode-geode-hello--0-") && name.len() <= 63,
            "{name}"
        );
    }
}
