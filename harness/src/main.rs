//! The `geode` binary: parses arguments and calls library functions; nothing else lives here.

// Only `say!` writes to stderr: `eprintln!` panics when stderr is closed (`geode ... 2>&1 | true`),
// ending a command over a line nobody reads.
#![deny(clippy::print_stderr)]

use std::process::ExitCode;

use clap::Parser;

/// A line for the person, on stderr. A closed or failing stderr loses the line instead of ending
/// the command: diagnostics nobody can read must not stop the work or lose its results.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

mod cli;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(code) = geode_harness::env::sandbox_entry(&args) {
        return code;
    }
    quiet_on_closed_stdout();
    let args = cli::Cli::parse();
    // Without root, a command that starts sandboxes runs again in geode's rootless user
    // namespace; before any thread, as unshare demands.
    if cli::starts_sandboxes(&args)
        && let Some(code) = geode_harness::env::rootless::enter_if_unprivileged()
    {
        return ExitCode::from(u8::try_from(code).unwrap_or(1));
    }
    // Before the first thread; a failure is reported when a holdout is about to open, and
    // refuses that opening (nothing burned), rather than here.
    if cli::may_open_a_holdout(&args) {
        let _ = geode_harness::env::vault::enter_private_mounts();
    }
    cli::init_logging(args.verbose);
    match cli::run(args) {
        Ok(code) => code,
        // A subcommand that writes with `write!` (not `println!`) fails with the EPIPE instead.
        Err(_) if stdout_reader_gone() => ExitCode::from(141),
        Err(e) => {
            say!("geode: error: {}", cli::printable(&one_sentence(&e)));
            ExitCode::from(1)
        }
    }
}

/// The error and its causes joined by `: `, each said once: an error whose message already
/// quotes its cause (`cannot read x: No such file or directory (os error 2)`) does not repeat it.
fn one_sentence(e: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in e.chain() {
        let part = cause.to_string();
        if part.is_empty() || text.contains(&part) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&part);
    }
    text
}

/// Standard output is a pipe whose reader has gone. Asked of the descriptor itself rather than
/// read from the error: an EPIPE from one of geode's own children is a failure to report.
fn stdout_reader_gone() -> bool {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let stdout = std::io::stdout();
    let mut fds = [PollFd::new(stdout.as_fd(), PollFlags::POLLOUT)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
        && fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLERR))
}

/// `geode ... | head` ends quietly when the reader goes, as a shell tool does, with the status
/// a SIGPIPE death would give (128 + 13).
///
/// Not by restoring SIGPIPE's default action: geode writes to pipes of its own children (the
/// sandbox server, MCP servers), and a child that dies must be an `EPIPE` it handles, not the
/// harness killed. So SIGPIPE stays ignored, and the one failure `println!` turns into a panic,
/// a write to a closed standard output, exits here instead of printing a panic.
fn quiet_on_closed_stdout() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let message = info
            .payload()
            .downcast_ref::<String>()
            .map(String::as_str)
            .or_else(|| info.payload().downcast_ref::<&str>().copied())
            .unwrap_or("");
        if message.starts_with("failed printing to stdout") && message.contains("Broken pipe") {
            std::process::exit(141);
        }
        default(info);
    }));
}
