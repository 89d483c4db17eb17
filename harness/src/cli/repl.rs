//! `geode` without arguments: the interactive REPL. The session runs in this process behind an
//! in-memory pipe speaking the daemon's protocol, so the REPL and `geode --connect` share one
//! renderer (connect.rs) and one session driver (runtime server::connection).

use super::exit::Exit;

use geode_runtime::config::Config;
use geode_runtime::policy::SessionMode;
use geode_runtime::server::connection::serve_connection;

use super::connect::drive;
use super::serve::shared;
use super::terminal::input::LineInput;

/// The REPL; `first` is sent before anything typed (see `connect::drive`).
pub async fn run(cfg: Config, first: Option<String>) -> anyhow::Result<Exit> {
    let cwd = std::env::current_dir()?;
    let shared = shared(cfg, &cwd, SessionMode::Repl).await?;
    let (client, server) = tokio::io::duplex(1 << 16);
    let session = tokio::spawn(serve_connection(server, shared));
    let input = LineInput::start()?;
    let (rd, wr) = tokio::io::split(client);
    // Early: the prompt is drawn before the session's stores are created (most of the start).
    let code = drive(rd, wr, &input, first, true).await?;
    // The session closes (and checkpoints) once the client said exit. A session that could not
    // start said why over the protocol, which the client has shown.
    if let Ok(Err(e)) = session.await {
        tracing::debug!("the session ended with: {e}");
    }
    Ok(code)
}
