//! `orca-sim`: the reference scheduler (tests/src/sim).

use std::process::ExitCode;

use clap::Parser;
use orca_tests::sim::{
    self,
    args::{Cli, Command},
};

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .init();
    let Command::Scheduler(args) = cli.into_command();
    let config = match args.resolve() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("orca-sim: {e}");
            return ExitCode::from(2);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("orca-sim: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    ExitCode::from(runtime.block_on(sim::scheduler(config)))
}
