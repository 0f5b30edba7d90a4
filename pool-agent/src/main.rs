//! `orca-pool-agent`: what each EC2 instance of a warm pool runs between
//! runs (docs/protocol.md#the-agents-commands). stdout carries only the
//! `next` line; logs go to stderr, a line per event.

mod cli;
mod imds;
mod next;
mod session;
mod spot;
mod wait;

use std::process::ExitCode;

use tracing_subscriber::{filter::LevelFilter, EnvFilter};

fn main() -> ExitCode {
    let (command, url) = match cli::parse(std::env::args_os().skip(1)) {
        Ok(cli::Parsed::Help) => {
            print!("{}", cli::HELP);
            return ExitCode::SUCCESS;
        }
        Ok(cli::Parsed::Run(command, url)) => (command, *url),
        Err(e) => {
            eprintln!("orca-pool-agent: {}", e.to_string().replace('\n', " "));
            return ExitCode::from(2);
        }
    };
    let filter = EnvFilter::builder()
        .with_default_directive(LevelFilter::INFO.into())
        .with_env_var("ORCA_LOG")
        .from_env_lossy();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_target(false)
        .with_env_filter(filter)
        .init();
    // One thread: the agent waits on one connection, and a small RSS
    // matters on every instance of the pool.
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the async runtime");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async {
        match command {
            cli::Command::Wait {
                instance,
                run,
                start,
            } => wait::pool_wait(url, &instance, run, start).await,
            cli::Command::Next {
                instance,
                run,
                start,
                wait,
                pool,
                imds,
            } => {
                let notices = imds::watch(imds);
                next::pool_next(url, &instance, run, start, wait, pool.as_deref(), notices).await
            }
            cli::Command::Watch { instance, imds } => spot::pool_watch(url, &instance, imds).await,
        }
    })
}
