//! `orca-operator`: wires the commands to their modules; nothing else.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use orca_db::{migrate, ConnectOptions, DatabaseUrl};

#[derive(Parser)]
#[command(name = "orca-operator", version, about = "The orca control plane")]
struct Cli {
    /// Log as JSON lines.
    #[arg(long, global = true, env = "ORCA_LOG_JSON")]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Args)]
struct DbArgs {
    /// The database, a libpq-style URL.
    #[arg(
        long = "database-url",
        env = "ORCA_DATABASE_URL",
        hide_env_values = true
    )]
    database_url: Option<String>,
}

impl DbArgs {
    fn url(&self) -> anyhow::Result<DatabaseUrl> {
        match &self.database_url {
            Some(text) => Ok(DatabaseUrl::parse(text)?),
            None => anyhow::bail!("no database: set ORCA_DATABASE_URL or pass --database-url"),
        }
    }
}

#[derive(Subcommand)]
enum Command {
    /// Creates the orca schema or brings it up to date.
    Migrate {
        #[command(flatten)]
        db: DbArgs,
        /// Apply the SQL files of this directory instead of the built-in ones.
        #[arg(long, hide = true)]
        migrations_dir: Option<std::path::PathBuf>,
    },
    /// Prints how many migrations this binary knows.
    Migrations,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logs(cli.log_json);
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("orca-operator: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("orca-operator: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(command: Command) -> anyhow::Result<ExitCode> {
    match command {
        Command::Migrate { db, migrations_dir } => {
            let url = db.url()?;
            let migrations = match migrations_dir {
                Some(dir) => migrate::Migrations::from_dir(&dir)?,
                None => migrate::Migrations::embedded(),
            };
            let opts = ConnectOptions {
                statement_timeout: std::time::Duration::from_secs(600),
                ..ConnectOptions::named("orca-operator migrate")
            };
            let mut conn = orca_db::connect(&url, &opts).await?;
            let applied = migrate::migrate(&mut conn, &migrations).await?;
            if applied.is_empty() {
                println!(
                    "{}: up to date ({} migrations)",
                    url.target(),
                    migrations.len()
                );
            } else {
                println!("{}: applied {}", url.target(), applied.join(", "));
            }
        }
        Command::Migrations => println!("{}", migrate::known()),
    }
    Ok(ExitCode::SUCCESS)
}

fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}
