//! `orca-operator`: wires the commands to their modules; nothing else.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use orca_db::{migrate, ConnectOptions, DatabaseUrl};
use orca_operator::crd;

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
    /// Runs the operator in a cluster: the Scheduler and WarmPool
    /// controllers, leader election on a Lease, and /metrics, /healthz,
    /// /readyz.
    Run(orca_operator::k8s::RunArgs),
    /// Prints the CustomResourceDefinitions (what `crds/` holds).
    Crds,
    /// Prints the API reference of the CRDs (what `docs/api.md` holds).
    ApiDocs,
    /// Prints the admission rules refusing the fields a WarmPoolClass owns
    /// (what the chart's `files/admission-rules.yaml` holds).
    AdmissionRules,
    /// Prints the least IAM policy of one cluster's operator (what
    /// `docs/iam-policy.json` holds for an example cluster), or with
    /// `--instance-role` that of its pool instances' role.
    IamPolicy(orca_operator::iam_policy::IamPolicyArgs),
    /// Asks AWS whether each action this release calls for its pools is
    /// allowed (EC2's DryRun, a parameter of no Scheduler's written and
    /// deleted), prints what is missing with the statements that grant it,
    /// and exits 1 if anything is.
    Preflight(orca_operator::preflight::PreflightArgs),
    /// Prints a line per scheduler instance not long gone, oldest first.
    Instances {
        #[command(flatten)]
        db: DbArgs,
        /// An instance unseen for longer than this is gone.
        #[arg(long, default_value_t = 10.0)]
        stale_seconds: f64,
    },
    /// Asks live scheduler instance <ID> to drain.
    Drain {
        #[command(flatten)]
        db: DbArgs,
        id: i64,
        #[arg(long, default_value_t = 10.0)]
        stale_seconds: f64,
    },
    /// Runs the Schedulers and WarmPools of a directory of YAML on this
    /// machine: revisions as processes, a throwaway PostgreSQL unless a
    /// Secret or --database-url names one, moto for EC2.
    Local {
        /// The directory of YAML files (Secret, Scheduler, WarmPool).
        dir: std::path::PathBuf,
        /// The database when no Secret names one.
        #[arg(
            long = "database-url",
            env = "ORCA_DATABASE_URL",
            hide_env_values = true
        )]
        database_url: Option<String>,
    },
    /// The local mode's stand-in for the kubelet: runs one pod's command.
    #[command(hide = true)]
    LocalSupervise {
        dir: std::path::PathBuf,
        #[arg(long)]
        timeout: Option<u64>,
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Waits until the newest live instance leads (verified in pg_locks).
    WaitForLead {
        #[command(flatten)]
        db: DbArgs,
        /// Seconds to wait; exit 1 after.
        #[arg(long)]
        timeout: f64,
        #[arg(long, default_value_t = 10.0)]
        stale_seconds: f64,
    },
}

/// The AWS SDK logs request and response bodies when this is `true`: the
/// instances' user-data and the database URL parameter's value would be in
/// the operator's log.
const SIGNABLE_BODY: &str = "LOG_SIGNABLE_BODY";

fn main() -> ExitCode {
    let cli = Cli::parse();
    if std::env::var_os(SIGNABLE_BODY).is_some() {
        eprintln!(
            "orca-operator: {SIGNABLE_BODY} is set: the AWS SDK would log request bodies \
             (user-data, the database URL); unset it"
        );
        return ExitCode::from(2);
    }
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
            let opts = ConnectOptions::named("orca-operator migrate")
                .with_statement_timeout(std::time::Duration::from_secs(600));
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
        Command::Run(args) => orca_operator::k8s::run(args).await?,
        Command::Local { dir, database_url } => {
            orca_operator::local::run(orca_operator::local::LocalOptions::new(dir, database_url))
                .await?
        }
        Command::LocalSupervise {
            dir,
            timeout,
            command,
        } => return Ok(orca_operator::local::supervise::supervise(&dir, timeout, &command).await),
        Command::Crds => {
            // A closed pipe (`| head`) is not an error worth a panic.
            use std::io::Write;
            let _ = std::io::stdout().write_all(crd::crds_yaml().as_bytes());
        }
        Command::ApiDocs => {
            use std::io::Write;
            let _ = std::io::stdout().write_all(crd::api_markdown().as_bytes());
        }
        Command::AdmissionRules => {
            use std::io::Write;
            let rules = orca_operator::warmpool::admission::admission_rules();
            let _ = std::io::stdout().write_all(rules.as_bytes());
        }
        Command::IamPolicy(args) => {
            use std::io::Write;
            let _ = std::io::stdout().write_all(args.render().as_bytes());
        }
        Command::Preflight(args) => return orca_operator::preflight::command(&args).await,
        Command::Instances { db, stale_seconds } => {
            return orca_operator::scheduler::commands::instances(&db.url()?, secs(stale_seconds)?)
                .await
        }
        Command::Drain {
            db,
            id,
            stale_seconds,
        } => {
            return orca_operator::scheduler::commands::drain(&db.url()?, id, secs(stale_seconds)?)
                .await
        }
        Command::WaitForLead {
            db,
            timeout,
            stale_seconds,
        } => {
            let (timeout, stale) = (secs(timeout)?, secs(stale_seconds)?);
            return orca_operator::scheduler::commands::wait_for_lead(&db.url()?, timeout, stale)
                .await;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A number of seconds from the command line.
fn secs(n: f64) -> anyhow::Result<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(n)
        .map_err(|_| anyhow::anyhow!("{n}: not a number of seconds"))
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
