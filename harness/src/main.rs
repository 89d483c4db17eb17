//! The `geode` binary: parses arguments and calls library functions; nothing else lives here.

use std::process::ExitCode;

use clap::Parser;

mod cli;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    if let Some(code) = geode_harness::env::sandbox_entry(&args) {
        return code;
    }
    let args = cli::Cli::parse();
    cli::init_logging(args.verbose);
    match cli::run(args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("geode: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
