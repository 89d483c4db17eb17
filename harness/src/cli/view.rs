//! `geode view [JOBS_DIR]`: serves the viewer (`geode_harness::view`) over a jobs folder on
//! loopback, printing the address with its token on stdout (a script or a test reads that one
//! line), as Jupyter does, and runs until Ctrl-C.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use geode_harness::view::{ViewOptions, Viewer};
use tokio_util::sync::CancellationToken;

use super::exit::Exit;

#[derive(Debug, Args)]
pub struct ViewArgs {
    /// The jobs folder: `geode run`'s (`geode.db` beside the run folders), or one `harbor run
    /// -o` wrote.
    #[arg(default_value = "jobs")]
    jobs: PathBuf,
    /// Address to serve on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:0")]
    addr: SocketAddr,
    /// Serve an address off loopback (the token still guards every request).
    #[arg(long)]
    allow_remote: bool,
    /// A scaffold search's output folder to show (repeatable); the jobs folder's own subfolders
    /// holding a `lineage.jsonl` are found without it.
    #[arg(long = "search", value_name = "DIR")]
    searches: Vec<PathBuf>,
}

pub async fn run(a: ViewArgs) -> anyhow::Result<Exit> {
    let viewer = Viewer::bind(ViewOptions {
        jobs: a.jobs.clone(),
        addr: a.addr,
        allow_remote: a.allow_remote,
        searches: a.searches,
    })
    .await?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", viewer.url())?;
    out.flush()?;
    drop(out);
    say!(
        "geode view: {} on {} (open the address above; Ctrl-C stops)",
        a.jobs.display(),
        viewer.local_addr()
    );
    let shutdown = CancellationToken::new();
    let on_signal = shutdown.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_signal.cancel();
        }
    });
    viewer.serve(shutdown).await?;
    Ok(Exit::Cancelled)
}
