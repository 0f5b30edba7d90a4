//! `orca-sim scheduler`'s flags and environment (the image contract,
//! docs/architecture.md#the-reference-scheduler-orca-sim), resolved once
//! into a [`Config`].

use std::{path::PathBuf, time::Duration};

use clap::{Parser, Subcommand, ValueEnum};
use orca_db::{migrate, DatabaseUrl, DbError};

#[derive(Parser)]
#[command(
    name = "orca-sim",
    about = "The reference scheduler: follows the scheduler-instance protocol as morca's does"
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
}

impl Cli {
    /// The command it was given.
    pub fn into_command(self) -> Command {
        self.command
    }
}

#[derive(Subcommand)]
pub enum Command {
    /// Runs a scheduler: joins, leads, drains (ORCA_OVERLAP=on), runs
    /// `sleep:N` and `fail:N` pipelines.
    Scheduler(SchedulerArgs),
}

/// `on` or `off` (ORCA_OVERLAP, ORCA_SIM_LISTEN).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Overlap {
    On,
    Off,
}

#[derive(clap::Args, Debug)]
pub struct SchedulerArgs {
    /// How often it beats, and looks at the lead and the queue.
    #[arg(long, default_value_t = 1000)]
    tick_ms: u64,
    /// An instance or a run's heartbeat older than this is stale.
    #[arg(long, default_value_t = 10.0)]
    stale_seconds: f64,
    /// How many migrations it says it knows (default: what it has).
    #[arg(long)]
    migrations: Option<i32>,
    /// Refuse to start beside a live instance knowing fewer migrations than
    /// this (default: what it has).
    #[arg(long)]
    floor: Option<i32>,
    /// Place each run on an instance of this WarmPool (`namespace/name`).
    #[arg(long)]
    pool: Option<String>,
    #[arg(
        long = "database-url",
        env = "ORCA_DATABASE_URL",
        hide_env_values = true
    )]
    database_url: Option<String>,
    #[arg(long, env = "ORCA_OVERLAP", value_enum, default_value = "off")]
    overlap: Overlap,
    #[arg(long, env = "ORCA_IMAGE", default_value = "")]
    image: String,
    /// The host name (the pod's); the kernel's when unset.
    #[arg(long, env = "HOSTNAME")]
    host: Option<String>,
    /// LISTEN for the other instances' notifications (off: polling only,
    /// as behind a transaction-pooling proxy).
    #[arg(long, env = "ORCA_SIM_LISTEN", value_enum, default_value = "on")]
    listen: Overlap,
    #[arg(
        long,
        env = "ORCA_TERMINATION_LOG",
        default_value = "/dev/termination-log"
    )]
    termination_log: PathBuf,
    /// Tests only: acts as leader without the lock, to show the lock check
    /// fails (tests/tests/lead_lock_check.rs). Never use it otherwise.
    #[arg(long, hide = true)]
    unsafe_skip_lead_lock: bool,
}

/// Everything the scheduler needs, resolved.
#[derive(Clone, Debug)]
pub struct Config {
    url: DatabaseUrl,
    tick: Duration,
    stale: Duration,
    migrations: i32,
    floor: i32,
    pool: Option<String>,
    overlap: bool,
    /// LISTEN on the lock connection (a speed-up only).
    listen: bool,
    image: String,
    host: String,
    pid: i32,
    /// `runs.owner` of the runs it starts.
    owner: String,
    termination_log: PathBuf,
    /// Tests only: acts as leader without the lock, to show the lock check
    /// fails (`--unsafe-skip-lead-lock`).
    unsafe_skip_lead_lock: bool,
}

impl Config {
    /// The database.
    pub fn url(&self) -> &DatabaseUrl {
        &self.url
    }

    /// How often it beats, and looks at the lead and the queue.
    pub fn tick(&self) -> Duration {
        self.tick
    }

    /// An instance or a run's heartbeat older than this is stale.
    pub fn stale(&self) -> Duration {
        self.stale
    }

    /// How many migrations it says it knows.
    pub fn migrations(&self) -> i32 {
        self.migrations
    }

    /// It refuses to start beside a live instance knowing fewer migrations
    /// than this.
    pub fn floor(&self) -> i32 {
        self.floor
    }

    /// The warm pool its runs go to (`namespace/name`), if any.
    pub fn pool(&self) -> Option<&str> {
        self.pool.as_deref()
    }

    /// Whether it joins beside a leader (the overlap handover).
    pub fn overlap(&self) -> bool {
        self.overlap
    }

    /// LISTEN on the lock connection (a speed-up only).
    pub fn listen(&self) -> bool {
        self.listen
    }

    /// The image it says it runs.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// The host it says it runs on.
    pub fn host(&self) -> &str {
        &self.host
    }

    /// Its process id, as it registers it.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// `runs.owner` of the runs it starts.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Where it writes why it ended.
    pub fn termination_log(&self) -> &PathBuf {
        &self.termination_log
    }

    /// Tests only: acts as leader without the lock, to show the lock check
    /// fails (`--unsafe-skip-lead-lock`).
    pub fn unsafe_skip_lead_lock(&self) -> bool {
        self.unsafe_skip_lead_lock
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Url(#[from] DbError),
    #[error("no database: set ORCA_DATABASE_URL or pass --database-url")]
    NoUrl,
    #[error("--tick-ms {0}: must be at least 1")]
    Tick(u64),
    #[error("--stale-seconds {0}: must be a positive number of seconds")]
    Stale(f64),
    #[error("--pool {0:?}: must be namespace/name")]
    Pool(String),
}

impl SchedulerArgs {
    pub fn resolve(self) -> Result<Config, ConfigError> {
        let url = DatabaseUrl::parse(self.database_url.as_deref().ok_or(ConfigError::NoUrl)?)?;
        if self.tick_ms == 0 {
            return Err(ConfigError::Tick(self.tick_ms));
        }
        if !(self.stale_seconds.is_finite() && self.stale_seconds > 0.0) {
            return Err(ConfigError::Stale(self.stale_seconds));
        }
        if let Some(pool) = &self.pool {
            let parts: Vec<&str> = pool.split('/').collect();
            if parts.len() != 2 || parts.iter().any(|p| p.is_empty()) {
                return Err(ConfigError::Pool(pool.clone()));
            }
        }
        let host = self
            .host
            .filter(|h| !h.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/proc/sys/kernel/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
            })
            .unwrap_or_else(|| "localhost".into());
        let pid = std::process::id() as i32;
        Ok(Config {
            url,
            tick: Duration::from_millis(self.tick_ms),
            stale: Duration::from_secs_f64(self.stale_seconds),
            migrations: self.migrations.unwrap_or_else(migrate::known),
            floor: self.floor.unwrap_or_else(migrate::known),
            pool: self.pool,
            overlap: self.overlap == Overlap::On,
            listen: self.listen == Overlap::On,
            image: self.image,
            owner: format!("{host}:{pid}"),
            host,
            pid,
            termination_log: self.termination_log,
            unsafe_skip_lead_lock: self.unsafe_skip_lead_lock,
        })
    }
}
