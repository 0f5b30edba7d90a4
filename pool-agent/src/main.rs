//! `orca-pool-agent`: what each EC2 instance of a warm pool runs between
//! runs (docs/protocol.md#the-agents-commands). stdout carries only the
//! `next` line; logs go to stderr, a line per event.

mod cli;
mod http;
mod imds;
mod next;
mod session;
mod spot;
mod ssm;
mod wait;

use std::{process::ExitCode, time::Duration};

use orca_db::DatabaseUrl;

use tracing_subscriber::{filter::LevelFilter, EnvFilter};

fn main() -> ExitCode {
    let (command, database) = match cli::parse(std::env::args_os().skip(1)) {
        Ok(cli::Parsed::Help) => {
            print!("{}", cli::HELP);
            return ExitCode::SUCCESS;
        }
        Ok(cli::Parsed::Run(command, database)) => (command, *database),
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
        if let cli::Command::DatabaseUrl = command {
            return print_url(database).await;
        }
        let Some(url) = url(&database).await else {
            return ExitCode::from(1);
        };
        let url = session::Source::new(url, database.into_parameter());
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
            cli::Command::DatabaseUrl => unreachable!("handled above"),
        }
    })
}

/// How long an agent without `ORCA_DATABASE_URL` tries to read its
/// parameter at start before it gives up (exit 1: the instance powers off).
const FIRST_READ: Duration = Duration::from_secs(60);

/// The environment's URL, else the parameter's, tried every 2 s for
/// [`FIRST_READ`]; `None` (said on stderr) if there is none.
async fn url(database: &cli::Database) -> Option<DatabaseUrl> {
    if let Some(url) = database.url() {
        return Some(url.clone());
    }
    let parameter = database.parameter()?;
    let by = tokio::time::Instant::now() + FIRST_READ;
    loop {
        match parameter.read().await {
            Ok(text) => match DatabaseUrl::parse(&text) {
                Ok(url) => return Some(url),
                Err(e) => {
                    tracing::error!(parameter = %parameter.name(), error = %e,
                        "the parameter does not hold a database URL");
                    return None;
                }
            },
            Err(e) if tokio::time::Instant::now() >= by => {
                tracing::error!(error = %e, "cannot read the database URL's parameter; giving up");
                return None;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the database URL's parameter; trying again");
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}

/// How long `database-url` tries before it gives up: a minute, or
/// `ORCA_POOL_AGENT_READ_SECONDS` (a test-only setting).
fn read_for() -> Duration {
    std::env::var("ORCA_POOL_AGENT_READ_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .map(Duration::from_secs)
        .unwrap_or(FIRST_READ)
}

/// `database-url`: the parameter's value on stdout, tried every 2 s for a
/// minute (a new role's permission takes a while to reach IAM, a route a
/// while to come up). Giving up, its last stderr line says why, for the
/// user-data to put on the instance's console.
async fn print_url(database: cli::Database) -> ExitCode {
    use std::io::Write;
    let Some(parameter) = database.into_parameter() else {
        return ExitCode::from(2);
    };
    let by = tokio::time::Instant::now() + read_for();
    let mut said = false;
    loop {
        match parameter.read().await {
            Ok(text) => {
                let mut out = std::io::stdout().lock();
                if writeln!(out, "{text}").and_then(|_| out.flush()).is_err() {
                    return ExitCode::from(1);
                }
                return ExitCode::SUCCESS;
            }
            Err(e) if tokio::time::Instant::now() >= by => {
                eprintln!(
                    "orca-pool-agent: cannot read the database URL: {}",
                    e.cause()
                );
                return ExitCode::from(1);
            }
            Err(e) => {
                if !said {
                    tracing::warn!(error = %e, "cannot read the database URL's parameter; trying again for a minute");
                    said = true;
                }
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
}
