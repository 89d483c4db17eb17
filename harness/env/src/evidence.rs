//! What a trial's writable layer shows about the agent: changes to what the verifier will run.
//!
//! The verifier runs in the agent's environment (Harbor's shared mode, which tasks rely on), so
//! a wrapper `bash`, `pytest` or `cmp` early in `PATH`, a `.pth` hook in site-packages or an
//! `ld.so.preload` can make a wrong answer pass. Preventing that in general would break tasks
//! that install tools; every such change is in the overlay's upper layer, though, so it is
//! found there and flagged. The walk never follows a link (a planted link could point the host
//! anywhere).

use std::path::Path;

/// Folders on `PATH` in the images tasks use, and where shared libraries are looked up.
const EXECUTABLE_DIRS: &[&str] = &[
    "usr/local/sbin",
    "usr/local/bin",
    "usr/sbin",
    "usr/bin",
    "sbin",
    "bin",
    "usr/lib/x86_64-linux-gnu",
    "lib/x86_64-linux-gnu",
    "usr/local/lib",
    // Where `pip install --user` and uv's installer put programs, and what a verifier that
    // sources `$HOME/.local/bin/env` (Terminal-Bench's uv set-up) puts first on PATH.
    "root/.local/bin",
];
/// Files that change how every program, or every Python, starts; and where the package
/// managers a verifier installs its test runner with take packages from (a verifier that runs
/// `pip install pytest` gets whatever index or folder of wheels these name).
const START_HOOKS: &[&str] = &[
    "etc/ld.so.preload",
    "etc/ld.so.conf",
    "etc/environment",
    "etc/pip.conf",
    "root/.pip/pip.conf",
    "root/.config/pip/pip.conf",
    "etc/uv/uv.toml",
    "root/.config/uv/uv.toml",
    "root/.pydistutils.cfg",
];

/// Folders whose every file is a start hook: the loader reads each `ld.so.conf.d/*.conf`.
const START_HOOK_DIRS: &[&str] = &["etc/ld.so.conf.d"];

/// Debian's Pythons import `/etc/python3.X/sitecustomize.py` through a link in their standard
/// library: every file of an `etc/python3*` folder is a start hook.
const PYTHON_ETC: &str = "etc/python3";

/// Where Debian's alternatives live: links a PATH program goes through (`/usr/bin/awk` ->
/// `/etc/alternatives/awk` -> `/usr/bin/mawk`). A package install repoints them into the
/// system's folders; one that leads anywhere else (`/tmp`, `/app`) is a wrapper in disguise.
const ALTERNATIVES: &str = "etc/alternatives";

/// Test-runner configuration that applies to `/tests` from the root, the one ancestor the
/// tests' folder has (pytest reads its ini files and `conftest.py` there).
const ROOT_TEST_CONFIG: &[&str] = &[
    "conftest.py",
    "pytest.ini",
    "pyproject.toml",
    "tox.ini",
    "setup.cfg",
    ".pytest.ini",
];

/// How much of a package's `entry_points.txt` is read to find a pytest plugin.
const ENTRY_POINTS_READ: u64 = 64 << 10;

/// Changed paths (as seen inside, `/usr/local/bin/pytest`) that the verifier may run, in
/// `upper` (the trial's writable layer) and not below `exempt` (the task's own work folder,
/// where changes are the task). A layer that cannot be read is a finding itself: the check
/// fails closed.
pub fn verifier_inputs_changed(upper: &Path, exempt: &str) -> Vec<String> {
    if !upper.is_dir() {
        return vec![format!(
            "(the writable layer {} could not be read)",
            upper.display()
        )];
    }
    let exempt = exempt.trim_matches('/');
    let mut found = Vec::new();
    for entry in walkdir::WalkDir::new(upper)
        .follow_links(false)
        .min_depth(1)
        .sort_by_file_name()
    {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                found.push(format!("(the writable layer could not be walked: {e})"));
                break;
            }
        };
        let Ok(rel) = entry.path().strip_prefix(upper) else {
            continue;
        };
        let rel_text = rel.to_string_lossy();
        if entry.file_type().is_dir() {
            continue;
        }
        let in_work = !exempt.is_empty()
            && (rel_text == exempt || rel_text.starts_with(&format!("{exempt}/")));
        let found_here = if in_work {
            is_program_input(rel)
        } else {
            is_verifier_input(rel)
        };
        if found_here
            || is_pytest_plugin(entry.path(), rel)
            || is_foreign_alternative(entry.path(), rel)
        {
            found.push(format!("/{rel_text}"));
        }
        if found.len() >= 50 {
            break;
        }
    }
    found
}

/// The same finding from a list of changed paths (absolute), as a docker engine's `docker
/// diff` gives them. A diff names a folder whose content changed as changed itself and says
/// nothing of what it became, so the folders of PATH and above are left to their files here.
pub fn verifier_inputs_among(changed: &[String], exempt: &str) -> Vec<String> {
    let exempt = exempt.trim_matches('/');
    changed
        .iter()
        .map(|path| path.trim_start_matches('/'))
        .filter(|rel| !on_a_verifier_path(Path::new(rel)))
        .filter(|rel| {
            let in_work =
                !exempt.is_empty() && (*rel == exempt || rel.starts_with(&format!("{exempt}/")));
            if in_work {
                is_program_input(Path::new(rel))
            } else {
                is_verifier_input(Path::new(rel))
            }
        })
        .take(50)
        .map(|rel| format!("/{rel}"))
        .collect()
}

/// Whether a non-folder entry (relative to the root) is something the verifier runs, or that
/// changes how it starts or what its test runner loads. Classes, not a list of attacks:
/// anything in a folder programs and libraries are looked up in, or in place of such a folder
/// or one above it (a folder replaced by a link); the Python interpreters' own standard
/// libraries, and the start hooks of their site folders; the files that change how every
/// program starts; the tests; test-runner configuration above them.
fn is_verifier_input(rel: &Path) -> bool {
    let rel_text = rel.to_string_lossy();
    let name = rel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let top_level = rel.parent().is_none_or(|p| p.as_os_str().is_empty());
    is_program_input(rel)
        || rel_text.starts_with("tests/")
        || rel_text == "tests"
        || (top_level && ROOT_TEST_CONFIG.contains(&name.as_str()))
}

/// The part of [`is_verifier_input`] that holds even inside the task's work folder (a task
/// whose WORKDIR is `/usr/local` still has its PATH folder judged): programs, libraries,
/// start hooks, and the Pythons' own files.
fn is_program_input(rel: &Path) -> bool {
    let rel_text = rel.to_string_lossy();
    let name = rel
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let parent = rel
        .parent()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default();
    EXECUTABLE_DIRS.contains(&parent.as_str())
        || on_a_verifier_path(rel)
        || START_HOOKS.contains(&rel_text.as_ref())
        || START_HOOK_DIRS.contains(&parent.as_str())
        || parent.starts_with(PYTHON_ETC)
        || python_start(rel, &name)
}

/// An alternatives link (see [`ALTERNATIVES`]) that leads outside the system's program and
/// library folders.
fn is_foreign_alternative(path: &Path, rel: &Path) -> bool {
    if rel.parent().is_none_or(|p| p != Path::new(ALTERNATIVES)) {
        return false;
    }
    match std::fs::read_link(path) {
        Ok(target) => {
            let target = target.to_string_lossy();
            !["/usr/", "/bin/", "/sbin/", "/lib/", "/etc/alternatives/"]
                .iter()
                .any(|dir| target.starts_with(dir))
                || target.contains("/../")
        }
        // A file in place of a link is foreign too.
        Err(_) => true,
    }
}

/// A folder programs are looked up in, or one above it, that is now something else (only
/// non-folders reach here): `/usr/local/bin` replaced by a link to another folder.
fn on_a_verifier_path(rel: &Path) -> bool {
    let rel_text = rel.to_string_lossy();
    EXECUTABLE_DIRS
        .iter()
        .any(|dir| *dir == rel_text || dir.starts_with(&format!("{rel_text}/")))
        || python_root(rel).is_some_and(|(root, rest)| rest.is_empty() && !root.is_empty())
}

/// `(interpreter folder, the rest)` for a path in a Python's library folder
/// (`usr/lib/python3.11/...`, `usr/local/lib/python3.11/...`, Debian's `usr/lib/python3/...`,
/// root's user site `root/.local/lib/python3.11/...`).
fn python_root(rel: &Path) -> Option<(String, String)> {
    let mut parts = rel.components().map(|c| c.as_os_str().to_string_lossy());
    let first: Vec<String> = parts.by_ref().take(3).map(|p| p.into_owned()).collect();
    let lib = match first.as_slice() {
        [usr, lib, py] if usr == "usr" && lib == "lib" && py.starts_with("python3") => py,
        // `/usr/local`'s Pythons, and root's user site, which every Python run as root reads
        // (`.pth` hooks included).
        [a, b, lib]
            if lib == "lib"
                && matches!(
                    (a.as_str(), b.as_str()),
                    ("usr", "local") | ("root", ".local")
                ) =>
        {
            let py = parts.next()?.into_owned();
            if !py.starts_with("python3") {
                return None;
            }
            let rest: Vec<String> = parts.map(|p| p.into_owned()).collect();
            return Some((format!("{a}/{b}/lib/{py}"), rest.join("/")));
        }
        _ => return None,
    };
    let rest: Vec<String> = parts.map(|p| p.into_owned()).collect();
    Some((format!("usr/lib/{lib}"), rest.join("/")))
}

/// What every Python runs when it starts, or imports from its own library: a module of the
/// standard library (never a task's honest change), or a site folder's start hooks (`.pth`,
/// `sitecustomize`, `usercustomize`). Packages installed into a site folder are not: tasks
/// install them on purpose.
fn python_start(rel: &Path, name: &str) -> bool {
    let Some((_, rest)) = python_root(rel) else {
        return false;
    };
    let in_site = rest.starts_with("site-packages/")
        || rest.starts_with("dist-packages/")
        || rest.contains("/site-packages/")
        || rest.contains("/dist-packages/");
    let hook = name.ends_with(".pth") || name == "sitecustomize.py" || name == "usercustomize.py";
    // What an import loads: source, bytecode (a forged `__pycache__` entry whose header
    // matches its source is loaded as well), extension modules.
    let module = [".py", ".pyc", ".so"].iter().any(|ext| name.ends_with(ext));
    hook || (!in_site && module)
}

/// A package in a site folder that registers a pytest plugin (`[pytest11]` in its
/// `entry_points.txt`), which pytest loads into every run unasked.
fn is_pytest_plugin(path: &Path, rel: &Path) -> bool {
    use std::io::Read;
    if rel.file_name().is_none_or(|n| n != "entry_points.txt") || python_root(rel).is_none() {
        return false;
    }
    let mut text = String::new();
    let read =
        std::fs::File::open(path).and_then(|f| f.take(ENTRY_POINTS_READ).read_to_string(&mut text));
    // Unreadable is suspicious enough to name.
    read.is_err() || text.contains("[pytest11]")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrappers_hooks_and_tests_are_found_and_the_work_folder_is_not() {
        let upper = tempfile::tempdir().unwrap();
        for (path, text) in [
            ("usr/local/bin/pytest", "#!/bin/sh\nexit 0\n"),
            ("usr/lib/python3/dist-packages/zz.pth", "import os\n"),
            (
                "usr/local/lib/python3.11/site-packages/sitecustomize.py",
                "x=1\n",
            ),
            ("etc/ld.so.preload", "/tmp/x.so\n"),
            ("tests/test.sh", "echo 1\n"),
            ("app/out.txt", "42\n"),
            ("app/bin/tool", "#!/bin/sh\n"),
            ("tmp/scratch", "x\n"),
            ("usr/share/doc/readme", "x\n"),
            ("usr/lib/python3.11/os.py", "import evil\n"),
            ("usr/lib/python3.11/__pycache__/os.cpython-311.pyc", "x"),
            ("usr/lib/python3.11/lib2to3/Grammar.txt", "x"),
            (
                "usr/local/lib/python3.11/site-packages/honest/__init__.py",
                "x=1\n",
            ),
            (
                "usr/local/lib/python3.11/site-packages/evil-1.0.dist-info/entry_points.txt",
                "[pytest11]\nevil = evil\n",
            ),
            (
                "usr/local/lib/python3.11/site-packages/ok-1.0.dist-info/entry_points.txt",
                "[console_scripts]\nok = ok:main\n",
            ),
            ("conftest.py", "x=1\n"),
            ("pytest.ini", "[pytest]\n"),
            ("app/conftest.py", "x=1\n"),
            (
                "root/.local/lib/python3.11/site-packages/zz-user.pth",
                "import os\n",
            ),
            (
                "root/.local/lib/python3.11/site-packages/honest/__init__.py",
                "x=1\n",
            ),
            ("root/.local/bin/uv", "#!/bin/sh\n"),
            ("etc/ld.so.conf.d/evil.conf", "/tmp/lib\n"),
            ("etc/python3.11/sitecustomize.py", "import evil\n"),
            ("etc/pip.conf", "[global]\nfind-links = /tmp/wheels\n"),
        ] {
            let p = upper.path().join(path);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, text).unwrap();
        }
        std::os::unix::fs::symlink("/etc/passwd", upper.path().join("usr/local/bin/cmp")).unwrap();
        // A folder of PATH replaced by a link to another folder.
        std::os::unix::fs::symlink("/tmp/evil", upper.path().join("usr/sbin")).unwrap();
        // Alternatives: one repointed into the system (a package install), one out of it.
        let alternatives = upper.path().join("etc/alternatives");
        std::fs::create_dir_all(&alternatives).unwrap();
        std::os::unix::fs::symlink("/usr/bin/mawk", alternatives.join("awk")).unwrap();
        std::os::unix::fs::symlink("/tmp/evil/awk", alternatives.join("nawk")).unwrap();
        let found = verifier_inputs_changed(upper.path(), "/app");
        assert_eq!(
            found,
            vec![
                "/conftest.py",
                "/etc/alternatives/nawk",
                "/etc/ld.so.conf.d/evil.conf",
                "/etc/ld.so.preload",
                "/etc/pip.conf",
                "/etc/python3.11/sitecustomize.py",
                "/pytest.ini",
                "/root/.local/bin/uv",
                "/root/.local/lib/python3.11/site-packages/zz-user.pth",
                "/tests/test.sh",
                "/usr/lib/python3/dist-packages/zz.pth",
                "/usr/lib/python3.11/__pycache__/os.cpython-311.pyc",
                "/usr/lib/python3.11/os.py",
                "/usr/local/bin/cmp",
                "/usr/local/bin/pytest",
                "/usr/local/lib/python3.11/site-packages/evil-1.0.dist-info/entry_points.txt",
                "/usr/local/lib/python3.11/site-packages/sitecustomize.py",
                "/usr/sbin",
            ]
        );
    }

    #[test]
    fn an_unreadable_layer_is_a_finding() {
        let found = verifier_inputs_changed(Path::new("/nonexistent/layer"), "/app");
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("could not be read"), "{found:?}");
    }

    #[test]
    fn a_work_folder_that_holds_a_path_folder_is_not_exempt() {
        let upper = tempfile::tempdir().unwrap();
        let p = upper.path().join("usr/local/bin/pytest");
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, "#!/bin/sh\n").unwrap();
        // A task whose WORKDIR is /usr/local is still judged on its PATH folder.
        assert_eq!(
            verifier_inputs_changed(upper.path(), "/usr/local"),
            vec!["/usr/local/bin/pytest"]
        );
    }
}
