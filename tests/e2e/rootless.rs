//! The rootless sandbox, as a person without root meets it: a user made for each test (with
//! the `/etc/subuid` and `/etc/subgid` ranges `useradd` gives on Debian, and its own home),
//! running `geode` with nothing but its own `GEODE_HOME`: its images are bootstrapped into its
//! own store, its trials run in the sandbox inside its own user namespace.
//!
//! Root only (the test makes and removes users); the rest of the e2e suite runs as root too.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::common::{run_model_with, trial_result};

/// A user made for one test, removed (with its home) when the test ends.
struct TestUser {
    name: String,
    home: PathBuf,
    geode: PathBuf,
}

impl TestUser {
    /// `None` when the tests do not run as root.
    fn create(tag: &str) -> Option<TestUser> {
        if !nix::unistd::geteuid().is_root() {
            return None;
        }
        assert!(
            Path::new("/usr/bin/newuidmap").exists(),
            "the rootless sandbox needs newuidmap and newgidmap (Debian's uidmap; scripts/test \
             installs it)"
        );
        // slirp4netns opens /dev/net/tun as the user: udev's default rule opens it to everyone
        // on any Debian machine; a machine without udev (a VM's bare devtmpfs) leaves it 0600.
        open_tun_to_all();
        let name = format!("geode-rl-{tag}-{}", std::process::id());
        let home = PathBuf::from("/home").join(&name);
        let _ = accounts(Command::new("userdel").args(["-r", &name]));
        let out = accounts(Command::new("useradd").args(["-m", "-s", "/bin/bash", &name]));
        assert!(
            out.status.success(),
            "useradd {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let mut user = TestUser {
            name,
            home,
            geode: PathBuf::new(),
        };
        // Its own copy of the binary, as a person's build or install would be.
        let bin = user.home.join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let geode = bin.join("geode");
        std::fs::copy(env!("CARGO_BIN_EXE_geode"), &geode).unwrap();
        user.give(&bin);
        user.geode = geode;
        Some(user)
    }

    /// Hand `path` (recursively) to the user.
    fn give(&self, path: &Path) {
        let out = Command::new("chown")
            .arg("-R")
            .arg(format!("{0}:{0}", self.name))
            .arg(path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
    }

    /// `geode` as the user, in its home, with a clean environment and `GEODE_HOME` there.
    fn geode(&self) -> Command {
        let mut c = Command::new("runuser");
        c.args(["-u", &self.name, "--", "env", "-i"])
            .arg(format!("HOME={}", self.home.display()))
            .arg(format!("USER={}", self.name))
            .arg("PATH=/usr/local/bin:/usr/bin:/bin")
            .arg(format!("GEODE_HOME={}", self.home.join(".geode").display()))
            .arg(&self.geode)
            .current_dir(&self.home);
        c
    }

    fn uid(&self) -> u32 {
        nix::unistd::User::from_name(&self.name)
            .unwrap()
            .unwrap()
            .uid
            .as_raw()
    }
}

impl Drop for TestUser {
    fn drop(&mut self) {
        // The user's processes first (none should be left), then the user, its home (with the
        // files its sandboxes' users wrote) and its subordinate ranges.
        let _ = Command::new("pkill")
            .args(["-KILL", "-u", &self.name])
            .output();
        let _ = accounts(Command::new("userdel").args(["-r", &self.name]));
        let _ = std::fs::remove_dir_all(&self.home);
    }
}

/// `useradd`, `usermod`, `userdel`: one at a time in this process (they lock `/etc/passwd`
/// and fail at once when another holds it), and again while another process holds the lock.
fn accounts(cmd: &mut Command) -> std::process::Output {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _held = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut tries = 0;
    loop {
        let out = cmd.output().unwrap();
        let locked = String::from_utf8_lossy(&out.stderr).contains("lock");
        tries += 1;
        if out.status.success() || !locked || tries == 20 {
            return out;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

fn open_tun_to_all() {
    use std::os::unix::fs::PermissionsExt;
    let tun = Path::new("/dev/net/tun");
    let mode = std::fs::metadata(tun).unwrap().permissions().mode();
    if mode & 0o666 != 0o666 {
        std::fs::set_permissions(tun, std::fs::Permissions::from_mode(0o666)).unwrap();
    }
}

/// Tasks of the built-in pack on both of its images, with a git, a C and an SQLite one.
const CORE_SUBSET: [&str; 6] = [
    "c-rle-bugs",
    "git-purge-secret",
    "sqlite-upsert-import",
    "json-flatten",
    "semver-sort",
    "log-5xx-by-hour",
];

#[test]
fn the_built_in_pack_passes_with_the_oracle_and_fails_with_nop_for_a_user_without_root() {
    let Some(user) = TestUser::create("pack") else {
        return;
    };
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tasks/geode-core");
    let pack = user.home.join("pack");
    for task in CORE_SUBSET {
        super::common::copy_tree(&core.join(task), &pack.join(task));
    }
    user.give(&pack);
    let jobs = user.home.join("jobs");

    let (summary, run_dir) = run_model_with(user.geode(), &pack, &jobs, "oracle", &["-n", "2"]);
    assert_eq!(
        summary["summary"]["outcomes"]["passed"],
        CORE_SUBSET.len(),
        "{summary}"
    );
    for task in CORE_SUBSET {
        let r = trial_result(&run_dir, &format!("geode-{task}__0"));
        assert_eq!(r["outcome"], "passed", "{r}");
        // Said in every result, with the user's own range.
        let notes = r["notes"].to_string();
        assert!(
            notes.contains("sandbox: rootless (user namespace of uid")
                && notes.contains(&format!("uid {}", user.uid())),
            "{notes}"
        );
    }
    // The results are the user's: it can read them and remove its run.
    let meta = std::fs::metadata(run_dir.join("result.json")).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), user.uid());

    let (summary, run_dir) = run_model_with(user.geode(), &pack, &jobs, "nop", &["-n", "2"]);
    assert_eq!(
        summary["summary"]["outcomes"]["failed"],
        CORE_SUBSET.len(),
        "{summary}"
    );
    for task in CORE_SUBSET {
        let r = trial_result(&run_dir, &format!("geode-{task}__0"));
        assert_eq!(r["verifier_result"]["rewards"]["reward"], 0.0, "{r}");
    }

    // What the trials' users wrote (the verifier's folders) belongs to the user's subordinate
    // ids: the user's own `rm` cannot remove it, `geode unshare rm` can.
    let plain = Command::new("runuser")
        .args(["-u", &user.name, "--", "rm", "-rf"])
        .arg(&jobs)
        .output()
        .unwrap();
    assert!(!plain.status.success() && jobs.exists(), "{plain:?}");
    let out = user
        .geode()
        .args(["unshare", "rm", "-rf"])
        .arg(&jobs)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert!(!jobs.exists());
}

/// A user with no subordinate range gets the sandbox refused with the reason and the fix,
/// not a mount error from deep inside.
#[test]
fn without_a_subordinate_range_the_sandbox_is_refused_naming_the_file() {
    let Some(user) = TestUser::create("norange") else {
        return;
    };
    for file in ["/etc/subuid", "/etc/subgid"] {
        let out = accounts(
            Command::new("usermod")
                .arg(if file == "/etc/subuid" {
                    "--del-subuids"
                } else {
                    "--del-subgids"
                })
                .arg("1-4294967294")
                .arg(&user.name),
        );
        assert!(out.status.success(), "{out:?}");
    }
    let core = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tasks/geode-core");
    let pack = user.home.join("pack");
    super::common::copy_tree(&core.join("semver-sort"), &pack.join("semver-sort"));
    user.give(&pack);
    let out = user
        .geode()
        .arg("run")
        .arg(&pack)
        .args(["--model", "oracle"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(
        err.contains("/etc/subuid: no range of 65536 subordinate ids for user")
            && err.contains("usermod --add-subuids"),
        "{err}"
    );
}

#[test]
fn attacks_from_inside_hold_in_the_rootless_sandbox() {
    let Some(user) = TestUser::create("atk") else {
        return;
    };
    let victims = super::attacks::Victims::new_in(&user.home);
    let jobs = user.home.join("jobs");
    super::attacks::the_attacks_hold(&user.home, &victims, &|| user.give(&user.home), &|pack| {
        run_model_with(user.geode(), pack, &jobs, "oracle", &["-n", "2"])
    });
}

#[test]
fn the_red_team_s_corpus_holds_in_the_rootless_sandbox() {
    let Some(user) = TestUser::create("red") else {
        return;
    };
    let jobs = user.home.join("jobs");
    super::red_team::the_red_team_holds(
        &user.home,
        &user.home,
        &|| user.give(&user.home),
        &|pack| run_model_with(user.geode(), pack, &jobs, "oracle", &["-n", "2"]),
        super::red_team::Sandbox::Rootless,
    );
}
