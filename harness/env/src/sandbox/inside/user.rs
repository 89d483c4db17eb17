//! The user a command runs as, looked up in the sandbox's own `/etc/passwd` and `/etc/group`
//! (Docker's USER syntax). Read by the command runner and by the views it enters.

use crate::sandbox::protocol::{ErrorKind, ReplyError};

fn fail(kind: ErrorKind, message: String) -> ReplyError {
    ReplyError { kind, message }
}

/// Who a command runs as.
pub(crate) struct User {
    pub name: String,
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups: those `/etc/group` lists the user in, as docker gives them.
    pub groups: Vec<u32>,
    pub home: String,
}

/// `name`, `uid`, `name:group` or `uid:gid`, looked up in the sandbox's /etc/passwd and
/// /etc/group (Docker's USER syntax).
pub(crate) fn resolve_user(spec: &str) -> Result<User, ReplyError> {
    let (user_part, group_part) = match spec.split_once(':') {
        Some((u, g)) => (u, Some(g)),
        None => (spec, None),
    };
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    let entry = passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() >= 6 && (f[0] == user_part || f[2] == user_part)).then(|| {
            (
                f[0].to_string(),
                f[2].parse::<u32>().ok(),
                f[3].parse::<u32>().ok(),
                f[5].to_string(),
            )
        })
    });
    let (name, uid, gid, home) = match entry {
        Some((name, Some(uid), Some(gid), home)) => (name, uid, gid, home),
        _ => match user_part.parse::<u32>() {
            Ok(uid) => (user_part.to_string(), uid, uid, "/".to_string()),
            Err(_) => {
                return Err(fail(
                    ErrorKind::NotFound,
                    format!("user {user_part:?} is not in the sandbox's /etc/passwd"),
                ));
            }
        },
    };
    let gid = match group_part {
        None => gid,
        Some(g) => match g.parse::<u32>() {
            Ok(n) => n,
            Err(_) => std::fs::read_to_string("/etc/group")
                .unwrap_or_default()
                .lines()
                .find_map(|line| {
                    let f: Vec<&str> = line.split(':').collect();
                    (f.len() >= 3 && f[0] == g).then(|| f[2].parse::<u32>().ok())?
                })
                .ok_or_else(|| {
                    fail(
                        ErrorKind::NotFound,
                        format!("group {g:?} is not in /etc/group"),
                    )
                })?,
        },
    };
    let groups = std::fs::read_to_string("/etc/group")
        .unwrap_or_default()
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split(':').collect();
            let listed = f.len() >= 4 && f[3].split(',').any(|m| m == name);
            listed.then(|| f[2].parse::<u32>().ok())?
        })
        .filter(|g| *g != gid)
        .collect();
    Ok(User {
        name,
        uid,
        gid,
        groups,
        home,
    })
}
