//! A private X display inside a sandbox, for tasks that declare `[environment] display`.
//!
//! Xvfb runs as a process of the sandbox (it left the starting command's process group with
//! `setsid`, so it outlives that command and dies with the sandbox), listening only on its
//! Unix socket in the sandbox's own `/tmp/.X11-unix` (`-nolisten tcp`, and the sandbox's
//! network namespace would hide a TCP port anyway). The harness never connects to it: the
//! `computer` tool's actions travel as [`Op::Computer`](super::protocol::Op::Computer) to the
//! sandbox's agent, which connects from inside.

/// The display's name inside the sandbox; one display per sandbox, so a fixed number.
pub(crate) const DISPLAY: &str = ":99";

/// The task's X application: an executable the image installs here is started on the display
/// once Xvfb accepts connections (an X session's script, hence the name).
pub const XSESSION: &str = "/etc/geode/xsession";

/// The shell script that starts Xvfb at `width`x`height`, waits for its socket, then starts
/// the image's [`XSESSION`] when there is one. Exit code 0 means the display is up.
///
/// The script waits for a sign of life from each (the socket; the session's pid file, written
/// after `setsid`) because its own process group is killed when it exits: a child of
/// `setsid -f` that had not yet left the group would die with it.
pub(crate) fn start_script(width: u32, height: u32) -> String {
    format!(
        r#"set -u
command -v Xvfb >/dev/null || {{ echo "the image has no Xvfb (Debian package xvfb)" >&2; exit 127; }}
mkdir -p /tmp/.X11-unix && chmod 1777 /tmp/.X11-unix
setsid -f Xvfb {DISPLAY} -screen 0 {width}x{height}x24 -nolisten tcp </dev/null >/tmp/.geode-xvfb.log 2>&1
i=0
while [ ! -S /tmp/.X11-unix/X99 ]; do
  i=$((i + 1))
  if [ "$i" -gt 400 ]; then echo "Xvfb did not start:" >&2; cat /tmp/.geode-xvfb.log >&2; exit 1; fi
  sleep 0.05
done
if [ -x {XSESSION} ]; then
  rm -f /tmp/.geode-xsession.pid
  DISPLAY={DISPLAY} setsid -f sh -c 'echo $$ >/tmp/.geode-xsession.pid; exec {XSESSION}' \
    </dev/null >/tmp/.geode-xsession.log 2>&1
  i=0
  while [ ! -s /tmp/.geode-xsession.pid ]; do
    i=$((i + 1))
    if [ "$i" -gt 400 ]; then echo "{XSESSION} did not start" >&2; exit 1; fi
    sleep 0.05
  done
fi
"#
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_starts_xvfb_at_the_size_without_tcp_and_the_session_after_it() {
        let script = start_script(800, 600);
        assert!(script.contains("Xvfb :99 -screen 0 800x600x24 -nolisten tcp"));
        let xvfb = script.find("setsid -f Xvfb").unwrap();
        let wait = script.find("-S /tmp/.X11-unix/X99").unwrap();
        let session = script.find("exec /etc/geode/xsession").unwrap();
        let alive = script.find("-s /tmp/.geode-xsession.pid").unwrap();
        assert!(xvfb < wait && wait < session && session < alive, "{script}");
    }
}
