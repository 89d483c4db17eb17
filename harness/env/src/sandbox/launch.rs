//! Starting one sandbox from the host: its scratch folder, the files docker would give a
//! container, the owners a user namespace needs, then the server process and its network.
//!
//! Trials and image builds both come through here ([`Launch`] says which), so what a build
//! step sees is what a trial sees. Everything the server needs travels in one
//! [`ServerSpec`]; nothing here runs inside the namespaces.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::client::ServerClient;
use super::handle::SandboxHandle;
use super::launch_spec::Launch;
use super::netns::{self};
use super::protocol::{self, Bind, Disk, ImageMount, Network, RootSpec, ServerSpec};
use super::scratch::{cgroup_name, hold_lock};
use super::{SandboxBackend, io};
use crate::cgroup::Cgroups;
use crate::{EnvError, GroupNetwork, ImageRoot, SharedNetwork};

impl SandboxBackend {
    pub(crate) async fn launch(&self, launch: Launch) -> Result<SandboxHandle, EnvError> {
        let join_network = joined_namespace(&launch.group)?;
        let held = make_scratch(&launch)?;
        // Every failure from here on (a disk the host cannot make, a layer it cannot hand over)
        // takes the scratch folder with it; only a started sandbox keeps it.
        let scratch = ScratchGuard(launch.remove_dir.then(|| launch.dir.clone()));
        let name = cgroup_name(&launch.dir);
        let hostname = format!("geode-{name}");
        let mut binds = launch.binds.clone();
        if launch.verifier_logs.is_some() {
            let decoy = launch.sub("decoy");
            std::fs::create_dir_all(&decoy).map_err(io(format!("create {}", decoy.display())))?;
            binds.push(Bind {
                host: decoy,
                inside: "/logs/verifier".into(),
                read_only: false,
                on_disk: false,
            });
        }
        let root = self.root_spec(&launch, &hostname, &mut binds)?;
        let disk = self.writable_disk(&launch).await?;
        // An image sandbox runs in a user namespace: its layers' owners and the host folders
        // it writes to must be host ids of its users (see `ids`).
        let userns = matches!(launch.root, ImageRoot::Layers(_));
        if userns {
            hand_to_userns(&launch, &binds).await?;
        }
        let mut cgroups = Cgroups::create(&name, launch.limits);
        let spec = ServerSpec {
            schema: protocol::SERVER_SCHEMA.into(),
            geode_exe: self.config.geode_exe.clone(),
            root_mount: launch.sub("root"),
            root,
            upper: launch.sub("upper"),
            work: launch.sub("work"),
            inbox: launch.sub("inbox"),
            binds,
            verifier_logs: launch.verifier_logs.clone(),
            disk,
            hostname,
            network: launch.network,
            join_network,
            cgroup_procs: cgroups.procs.clone(),
            tool_cgroup_procs: cgroups.tool_procs.clone(),
            rlimit_as: cgroups.rlimit_as,
            rlimit_nproc: cgroups.rlimit_nproc,
            workdir: launch.workdir.clone(),
            env: launch.env.clone(),
            user: launch.user.clone(),
            userns,
        };
        let client = match ServerClient::start(&self.config.geode_exe, &spec).await {
            Ok(client) => client,
            Err(e) => {
                abandon(&mut cgroups, &launch);
                return Err(e);
            }
        };
        let slirp = match launch.network {
            // A joined namespace has its network (and its routes) from the group's first.
            _ if launch.group.join.is_some() => None,
            Network::Private | Network::Allowlist => match start_network(&client, &launch).await {
                Ok(child) => Some(child),
                Err(e) => {
                    drop(client);
                    abandon(&mut cgroups, &launch);
                    return Err(e);
                }
            },
            _ => None,
        };
        scratch.keep();
        Ok(SandboxHandle::new(Arc::new(client), cgroups, launch, slirp, held).await)
    }

    /// The root the server mounts, with the binds an image root adds.
    fn root_spec(
        &self,
        launch: &Launch,
        hostname: &str,
        binds: &mut Vec<Bind>,
    ) -> Result<RootSpec, EnvError> {
        match &launch.root {
            ImageRoot::Layers(lower) => {
                binds.extend(container_files(launch, hostname)?);
                Ok(RootSpec::Layers {
                    lower: lower.clone(),
                })
            }
            ImageRoot::Engine(id) => Err(EnvError::Unsupported(format!(
                "the image {id} lives in a docker engine: run it with --env docker"
            ))),
            ImageRoot::Registry(reference) => Err(EnvError::Unsupported(format!(
                "the image {reference} was pushed for a cluster: run it with --env kubernetes"
            ))),
            ImageRoot::Host { .. } => {
                let mut hide = vec![
                    self.config.cache_dir.clone(),
                    self.config.scratch_dir.clone(),
                    self.config.image_store.clone(),
                ];
                hide.extend(self.config.hide.iter().cloned());
                Ok(RootSpec::Host {
                    image: launch.host_layer().map(|layer| ImageMount {
                        layer,
                        work: launch.sub("image-work"),
                        mount: launch.sub("image"),
                    }),
                    hide,
                    fresh_dirs: self.config.fresh_dirs.clone(),
                })
            }
        }
    }

    /// A fresh sparse disk for the writable layer, when the launch asks for one.
    async fn writable_disk(&self, launch: &Launch) -> Result<Option<Disk>, EnvError> {
        let Some(mb) = launch.disk_mb else {
            return Ok(None);
        };
        // Loop devices need root of the machine; a user namespace mounts a tmpfs instead.
        if crate::rootless::active() {
            return Ok(Some(Disk::Tmpfs(mb)));
        }
        let cache = self.config.cache_dir.clone();
        let image = launch.sub("disk.img");
        let to = image.clone();
        tokio::task::spawn_blocking(move || {
            crate::disk::clone_sparse(&crate::disk::template(&cache, mb)?, &to)
        })
        .await
        .map_err(|e| EnvError::Lost(format!("disk task: {e}")))??;
        Ok(Some(Disk::Image(image)))
    }
}

/// The network namespace of the compose group's main sandbox, when this one joins it.
fn joined_namespace(group: &GroupNetwork) -> Result<Option<PathBuf>, EnvError> {
    match &group.join {
        None => Ok(None),
        Some(SharedNetwork::Namespace(netns)) => Ok(Some(netns.clone())),
        Some(SharedNetwork::Container(_)) => Err(EnvError::Unsupported(
            "a sandbox cannot join a docker container's network".into(),
        )),
    }
}

/// The sandbox's scratch folders, and the lock a trial holds on them while it lives.
fn make_scratch(launch: &Launch) -> Result<Option<nix::fcntl::Flock<std::fs::File>>, EnvError> {
    let dir = &launch.dir;
    let mut dirs = vec![
        launch.sub("upper"),
        launch.sub("work"),
        launch.sub("root"),
        launch.sub("inbox"),
    ];
    if launch.host_layer().is_some() {
        dirs.extend([launch.sub("image"), launch.sub("image-work")]);
    }
    // The lock first: a killed run leaves folders the next start can tell are stale.
    std::fs::create_dir_all(dir).map_err(io(format!("create {}", dir.display())))?;
    let held = if launch.remove_dir {
        Some(hold_lock(dir)?)
    } else {
        None
    };
    for d in &dirs {
        std::fs::create_dir_all(d).map_err(io(format!("create {}", d.display())))?;
    }
    Ok(held)
}

/// What docker gives every container: its own hosts file, and the host's resolver when it
/// has the network.
fn container_files(launch: &Launch, hostname: &str) -> Result<Vec<Bind>, EnvError> {
    let mut binds = Vec::new();
    let hosts = launch.sub("hosts");
    let mut text = format!(
        "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t{hostname}\n"
    );
    // The compose group's services: all on the group's loopback.
    for name in &launch.group.names {
        text.push_str(&format!("127.0.0.1\t{name}\n"));
    }
    // An allowlist's names, pinned to what they resolved to on the host.
    for pin in &launch.allowed {
        if let Some(name) = &pin.name {
            text.push_str(&format!("{}\t{name}\n", pin.addr));
        }
    }
    std::fs::write(&hosts, text).map_err(io(format!("write {}", hosts.display())))?;
    binds.push(Bind {
        host: hosts,
        inside: "/etc/hosts".into(),
        read_only: false,
        on_disk: false,
    });
    match launch.network {
        Network::Host if Path::new("/etc/resolv.conf").exists() => {
            binds.push(Bind {
                host: PathBuf::from("/etc/resolv.conf"),
                inside: "/etc/resolv.conf".into(),
                read_only: true,
                on_disk: false,
            });
        }
        Network::Private | Network::Allowlist => {
            let resolv = launch.sub("resolv.conf");
            let text = if launch.network == Network::Private {
                format!("nameserver {}\n", netns::SLIRP_DNS)
            } else {
                "# allowlist: no resolver; the allowed names are in /etc/hosts\n".to_string()
            };
            std::fs::write(&resolv, text).map_err(io(format!("write {}", resolv.display())))?;
            binds.push(Bind {
                host: resolv,
                inside: "/etc/resolv.conf".into(),
                read_only: true,
                on_disk: false,
            });
        }
        _ => {}
    }
    Ok(binds)
}

/// Shift the image layers' owners into the user namespace's range and give the folders the
/// sandbox writes to its root.
async fn hand_to_userns(launch: &Launch, binds: &[Bind]) -> Result<(), EnvError> {
    let mut lower = match &launch.root {
        ImageRoot::Layers(lower) => lower.clone(),
        ImageRoot::Host { .. } | ImageRoot::Engine(_) | ImageRoot::Registry(_) => Vec::new(),
    };
    // A writable layer on the host may come filled: a Debian bootstrap's new root.
    if launch.disk_mb.is_none() {
        lower.push(launch.sub("upper"));
    }
    let writable: Vec<PathBuf> = binds
        .iter()
        .filter(|b| !b.read_only)
        .map(|b| b.host.clone())
        .chain(launch.verifier_logs.clone())
        .collect();
    tokio::task::spawn_blocking(move || {
        for layer in &lower {
            crate::ids::shift_layer(layer)
                .map_err(io(format!("shift the owners of {}", layer.display())))?;
        }
        for host in &writable {
            crate::ids::give_to_root(host)
                .map_err(io(format!("give {} to the sandbox's root", host.display())))?;
        }
        Ok::<_, EnvError>(())
    })
    .await
    .map_err(|e| EnvError::Lost(format!("ownership task: {e}")))?
}

/// Undo a launch that failed after its cgroups were made.
/// A sandbox's scratch folder while its launch may still fail: removed on drop unless kept.
struct ScratchGuard(Option<PathBuf>);

impl ScratchGuard {
    fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for ScratchGuard {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

fn abandon(cgroups: &mut Cgroups, launch: &Launch) {
    cgroups.remove(Duration::from_secs(2));
    if launch.remove_dir {
        let _ = std::fs::remove_dir_all(&launch.dir);
    }
}

/// slirp4netns for a sandbox with network, and an allowlist's routes once it is up.
async fn start_network(
    client: &ServerClient,
    launch: &Launch,
) -> Result<tokio::process::Child, EnvError> {
    let pid = client.pid().await;
    let slirp = netns::start_slirp(pid).await?;
    if launch.network == Network::Private {
        let pid = pid.ok_or_else(|| EnvError::Lost("the sandbox server has no pid".into()))?;
        let host = netns::host_addresses();
        netns::fence(pid, &host).map_err(|message| EnvError::SetupFailed {
            step: "network".into(),
            message,
        })?;
    }
    if launch.network == Network::Allowlist {
        let addrs: Vec<_> = launch.allowed.iter().map(|pin| pin.addr).collect();
        let pid = pid.ok_or_else(|| EnvError::Lost("the sandbox server has no pid".into()))?;
        netns::allow_only(pid, &addrs).map_err(|message| EnvError::SetupFailed {
            step: "network".into(),
            message,
        })?;
    }
    Ok(slirp)
}
