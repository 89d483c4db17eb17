//! The image's ENTRYPOINT in a trial's main environment, as Harbor's compose runs it.
//!
//! Harbor's compose file gives `main` the command `sh -c "sleep infinity"`, which replaces
//! only the image's CMD: docker then runs `ENTRYPOINT... sh -c "sleep infinity"`, so an
//! entrypoint that edits `/etc/hosts` or starts a server before its `exec "$@"` has done so
//! when the agent starts. GEODE's backends keep their own long-lived process, so the
//! entrypoint runs beside it instead: started in the background by a trial command (as the
//! image's USER, in its WORKDIR, with its Env), with its output in `/logs/agent/entrypoint.log`
//! (or `/tmp/geode-entrypoint.log` when that user cannot write there). It lives as the
//! agent's background processes do, until teardown.
//!
//! Docker does not wait for an entrypoint; GEODE waits a little, so that the agent, which
//! starts within milliseconds rather than Harbor's seconds, finds what it set up: until it
//! reaches `sleep infinity` (its `exec "$@"`, or a `sleep infinity` / `tail -f /dev/null` of
//! its own), ends, or [`READY_WINDOW`] passes. One that ends with a non-zero status within the
//! window is a set-up failure whose message carries its output; one that ends with 0 is a
//! note (under docker the container would have stopped).

use std::time::Duration;

use geode_runtime::tools::workspace::ExecRequest;
use tokio_util::sync::CancellationToken;

use super::dockerfile::shell_quote;
use super::{EnvError, Sandbox};

/// What Harbor's compose file makes `main` run after the ENTRYPOINT.
pub const HARBOR_COMMAND: [&str; 3] = ["sh", "-c", "sleep infinity"];

/// How long the agent waits for an entrypoint that neither reaches its sleep nor ends.
pub const READY_WINDOW: Duration = Duration::from_secs(5);

/// Where the entrypoint's output may go, the first file its user can write wins.
const LOG_FILES: [&str; 2] = ["/logs/agent/entrypoint.log", "/tmp/geode-entrypoint.log"];

/// How far the entrypoint came within the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Launched {
    /// It reached `sleep infinity` (or its own endless wait).
    Ready { pid: u32, log: String },
    /// Still running, not yet at its sleep (a server in the foreground, a slow set-up).
    Starting { pid: u32, log: String },
    /// It ended with `code`; `output` is the end of its log.
    Exited {
        code: i32,
        log: String,
        output: String,
    },
}

/// Start `entrypoint` (exec form) with Harbor's command in `sandbox`; the trial's notes about
/// it. `Err` when it could not be started or ended with a non-zero status in the window.
pub async fn start(
    sandbox: &dyn Sandbox,
    entrypoint: &[String],
    cancel: &CancellationToken,
) -> Result<Vec<String>, EnvError> {
    let step = format!("ENTRYPOINT {entrypoint:?}");
    let req = ExecRequest {
        command: launcher(entrypoint, &LOG_FILES, READY_WINDOW),
        cwd: None,
        timeout: READY_WINDOW + Duration::from_secs(30),
        output_cap: 16 << 10,
        env: Vec::new(),
    };
    let out = sandbox.exec(req, cancel.clone()).await?;
    if out.exit_code != Some(0) {
        return Err(EnvError::SetupFailed {
            step,
            message: format!(
                "could not start it (exit {:?}{}): {}{}",
                out.exit_code,
                if out.timed_out { ", timed out" } else { "" },
                out.stdout.trim(),
                out.stderr.trim()
            ),
        });
    }
    let secs = READY_WINDOW.as_secs();
    match parse(&out.stdout) {
        Some(Launched::Ready { pid, log }) => {
            tracing::debug!("{step} reached its sleep as pid {pid} of the agent's view ({log})");
            Ok(Vec::new())
        }
        Some(Launched::Starting { pid, log }) => Ok(vec![format!(
            "{step} had not reached `sh -c \"sleep infinity\"` after {secs}s; the agent \
             started beside it (pid {pid} of the agent's view; its output: {log})"
        )]),
        Some(Launched::Exited { code: 0, log, .. }) => Ok(vec![format!(
            "{step} ended with status 0 within {secs}s instead of running `sh -c \"sleep \
             infinity\"` (under docker the container would have stopped; its output: {log})"
        )]),
        Some(Launched::Exited { code, output, .. }) => Err(EnvError::SetupFailed {
            step,
            message: format!(
                "it exited with status {code} within {secs}s: {}",
                output.trim()
            ),
        }),
        None => Err(EnvError::SetupFailed {
            step,
            message: format!(
                "its launcher answered nothing GEODE understands: {}{}",
                out.stdout.trim(),
                out.stderr.trim()
            ),
        }),
    }
}

/// The bash script that starts `entrypoint` with [`HARBOR_COMMAND`] in the background and
/// reports, on its first line, `geode-entrypoint ready|starting PID LOG` or
/// `geode-entrypoint exited CODE LOG` followed by the log's end.
pub(crate) fn launcher(entrypoint: &[String], log_files: &[&str], window: Duration) -> String {
    let argv: Vec<String> = entrypoint
        .iter()
        .map(String::as_str)
        .chain(HARBOR_COMMAND)
        .map(shell_quote)
        .collect();
    let files: Vec<String> = log_files.iter().map(|f| shell_quote(f)).collect();
    let steps = (window.as_millis() / 50).max(1);
    format!(
        r#"set -- {argv}
log=/dev/null
for file in {files}; do
  if {{ : > "$file"; }} 2>/dev/null; then log=$file; break; fi
done
"$@" > "$log" 2>&1 < /dev/null &
pid=$!
waiting() {{
  case "$(tr '\0' ' ' < "/proc/$1/cmdline" 2>/dev/null)" in
    "sh -c sleep infinity "|"/bin/sh -c sleep infinity "|"sleep infinity "|"/bin/sleep infinity "|"/usr/bin/sleep infinity "|"tail -f /dev/null ") return 0 ;;
  esac
  return 1
}}
ended() {{
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 0
  set -- ${{stat##*) }}
  [ "$1" = Z ]
}}
i=0
while [ "$i" -lt {steps} ]; do
  if ended; then
    wait "$pid"; code=$?
    echo "geode-entrypoint exited $code $log"
    tail -c 4000 "$log" 2>/dev/null
    exit 0
  fi
  for p in "$pid" $(cat "/proc/$pid/task/$pid/children" 2>/dev/null); do
    if waiting "$p"; then echo "geode-entrypoint ready $pid $log"; exit 0; fi
  done
  sleep 0.05
  i=$((i + 1))
done
echo "geode-entrypoint starting $pid $log""#,
        argv = argv.join(" "),
        files = files.join(" "),
    )
}

/// The launcher's report.
pub(crate) fn parse(stdout: &str) -> Option<Launched> {
    let (first, rest) = stdout.split_once('\n').unwrap_or((stdout, ""));
    let mut words = first.trim().splitn(4, ' ');
    if words.next() != Some("geode-entrypoint") {
        return None;
    }
    let state = words.next()?;
    let number = words.next()?;
    let log = words.next()?.to_string();
    match state {
        "ready" => Some(Launched::Ready {
            pid: number.parse().ok()?,
            log,
        }),
        "starting" => Some(Launched::Starting {
            pid: number.parse().ok()?,
            log,
        }),
        "exited" => Some(Launched::Exited {
            code: number.parse().ok()?,
            log,
            output: rest.to_string(),
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The launcher run by this machine's bash, its log in a folder of the test's own.
    fn launch(entrypoint: &[&str], window: Duration) -> (Launched, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let argv: Vec<String> = entrypoint.iter().map(|s| s.to_string()).collect();
        let log = dir.path().join("entrypoint.log");
        let files = [
            "/nonexistent-geode-dir/entrypoint.log",
            log.to_str().unwrap(),
        ];
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(launcher(&argv, &files, window))
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8(out.stdout).unwrap();
        (parse(&stdout).unwrap_or_else(|| panic!("{stdout}")), dir)
    }

    /// `pid` and its children (a shell may fork its last command instead of exec'ing it).
    fn kill(pid: u32) {
        let children =
            std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
        let pids = children
            .split_whitespace()
            .filter_map(|p| p.parse::<i32>().ok())
            .chain([i32::try_from(pid).unwrap()]);
        for p in pids {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(p),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    #[test]
    fn an_entrypoint_that_execs_its_arguments_is_ready_with_its_output_logged() {
        let script = "echo 'set up it'\"'\"'s done'; exec \"$@\"";
        let (launched, dir) = launch(&["sh", "-c", script, "entry"], Duration::from_secs(5));
        let Launched::Ready { pid, log } = launched.clone() else {
            panic!("{launched:?}");
        };
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap();
        kill(pid);
        assert!(
            cmdline.starts_with(b"sh\0-c\0sleep infinity\0") || cmdline.starts_with(b"sleep\0"),
            "{:?}",
            String::from_utf8_lossy(&cmdline)
        );
        assert_eq!(log, dir.path().join("entrypoint.log").to_str().unwrap());
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "set up it's done\n");
    }

    #[test]
    fn an_entrypoint_that_fails_reports_its_status_and_output() {
        let (launched, _dir) = launch(
            &["sh", "-c", "echo cannot bind port 80 >&2; exit 3"],
            Duration::from_secs(5),
        );
        let Launched::Exited { code, output, .. } = launched.clone() else {
            panic!("{launched:?}");
        };
        assert_eq!(code, 3);
        assert_eq!(output, "cannot bind port 80\n");
    }

    #[test]
    fn an_entrypoint_in_the_foreground_is_still_starting_when_the_window_ends() {
        // A server in the foreground that never runs its arguments.
        let (launched, _dir) = launch(
            &["sh", "-c", "sleep 30", "entry"],
            Duration::from_millis(300),
        );
        let Launched::Starting { pid, .. } = launched.clone() else {
            panic!("{launched:?}");
        };
        kill(pid);
    }

    #[test]
    fn reports_that_are_not_the_launcher_s_are_refused() {
        assert_eq!(parse("hello\n"), None);
        assert_eq!(parse("geode-entrypoint ready x /log\n"), None);
        assert_eq!(
            parse("geode-entrypoint exited 0 /logs/agent/entrypoint.log\n"),
            Some(Launched::Exited {
                code: 0,
                log: "/logs/agent/entrypoint.log".into(),
                output: String::new()
            })
        );
    }
}
