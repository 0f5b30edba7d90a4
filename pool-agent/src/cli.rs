//! The command line (`pool-wait`, `pool-next`, `pool-watch`;
//! docs/protocol.md#the-agents-commands) and the environment: anything
//! wrong here is a one-line usage error, exit 2.

use std::{ffi::OsString, time::Duration};

use orca_db::{DatabaseUrl, DbError};

use crate::{imds::Endpoint, ssm::Parameter};

pub const USAGE: &str = "usage: orca-pool-agent pool-wait <instance> <run> <start> | orca-pool-agent pool-next <instance> <run> <start> <seconds> | orca-pool-agent pool-watch <instance> | orca-pool-agent database-url";

pub const HELP: &str = "\
orca-pool-agent: an EC2 instance's side of the orca warm pool

usage:
  orca-pool-agent pool-wait <instance> <run> <start>
      a worker: exits 0 once the run is not running at that start any more,
      or the instance's row for it has ended
  orca-pool-agent pool-next <instance> <run> <start> <seconds>
      marks the row of the run served idle (run 0, start 0: the instance's
      warm row, created in ORCA_POOL) and waits for a hand-out: prints
      `next <run> <start> <head address> <0|1>` and exits 0; exits 1 when
      its row ends with no other, the operator claims the instance, or
      <seconds> and a minute more pass (on the database's clock or its own:
      with the database out of reach it still exits 1, a few seconds
      later, leaving its row); a spot interruption notice or a
      rebalance recommendation while it waits ends its idle row and exits 1,
      unless a hand-out took the instance first: then it takes that run
  orca-pool-agent pool-watch <instance>
      beside a run: records a spot interruption notice or a rebalance
      recommendation on the instance's row; exits 0 once an interruption is
      recorded (at once if the metadata service is disabled), else runs until
      stopped
  orca-pool-agent database-url
      prints the database URL read from ORCA_DATABASE_URL_PARAMETER (for the
      user-data script to give the run command); exits 1 if it can't be read

exit: 0 and 1 as above; 2 for bad arguments or a missing or malformed URL

environment:
  ORCA_DATABASE_URL          libpq-style URL (sslmode=disable|prefer|require|verify-full,
                             sslrootcert=<CA bundle>); required unless
                             ORCA_DATABASE_URL_PARAMETER is set
  ORCA_DATABASE_URL_PARAMETER
                             an SSM Parameter Store parameter (SecureString) holding
                             the URL: read at start when ORCA_DATABASE_URL is unset,
                             and again when the database refuses the URL; with the
                             instance role's credentials from the metadata service
                             (or AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
                             AWS_SESSION_TOKEN when set)
  ORCA_DATABASE_URL_REGION   the parameter's region; required with the parameter
  ORCA_DATABASE_URL_ENDPOINT SSM's endpoint, http(s)://<host>[:<port>] (default
                             https://ssm.<region>.amazonaws.com)
  ORCA_POOL                  the pool (namespace/name) of a fresh instance; required
                             for pool-next <instance> 0 0 <seconds>
  ORCA_LOG                   log filter (default: info); logs go to stderr
  AWS_EC2_METADATA_DISABLED  true: don't read the instance metadata service (no spot
                             notices are seen); for hosts that are not pool instances
  ORCA_POOL_AGENT_GRACE_MS   TEST ONLY: replaces the minute pool-next waits after
                             <seconds> (milliseconds); never set it in production
  ORCA_POOL_AGENT_IMDS       TEST ONLY: http://<host>:<port> of a stand-in for the
                             instance metadata service (http://169.254.169.254);
                             never set it in production
";

/// A command line or environment that can't be run.
#[derive(Debug, thiserror::Error)]
pub enum UsageError {
    #[error("no command; {USAGE}")]
    NoCommand,
    #[error("unknown command `{0}`; {USAGE}")]
    UnknownCommand(String),
    #[error("{command} takes {want} arguments, got {got}; {USAGE}")]
    Count {
        command: &'static str,
        want: usize,
        got: usize,
    },
    #[error("an argument is not UTF-8; {USAGE}")]
    NotUtf8,
    #[error("instance `{0}` is not an instance id (1 to 56 of A-Z a-z 0-9 - _ .); {USAGE}")]
    Instance(String),
    #[error("{what} `{value}` is not a whole number from 0 to {max}; {USAGE}")]
    Number {
        what: &'static str,
        value: String,
        max: i64,
    },
    #[error(
        "ORCA_POOL is missing: a fresh instance (run 0, start 0) creates its warm row in that pool"
    )]
    NoPool,
    #[error("ORCA_POOL_AGENT_GRACE_MS `{0}` is not a whole number of milliseconds")]
    Grace(String),
    #[error("ORCA_POOL_AGENT_IMDS `{0}` is not http://<host>:<port>")]
    Imds(String),
    #[error("{0}")]
    Url(DbError),
    #[error("no database: set ORCA_DATABASE_URL or ORCA_DATABASE_URL_PARAMETER")]
    NoDatabase,
    #[error("database-url reads ORCA_DATABASE_URL_PARAMETER, which is not set")]
    NoParameter,
    #[error("ORCA_DATABASE_URL_PARAMETER is set without ORCA_DATABASE_URL_REGION, the parameter's region")]
    NoRegion,
    #[error("ORCA_DATABASE_URL_ENDPOINT `{0}` is not http(s)://<host>[:<port>]")]
    SsmEndpoint(String),
}

/// What to run.
#[derive(Debug)]
pub enum Command {
    Wait {
        instance: String,
        run: i64,
        start: i32,
    },
    Next {
        instance: String,
        run: i64,
        start: i32,
        /// `seconds` plus the minute (or the test-only grace).
        wait: Duration,
        /// `ORCA_POOL`, for a fresh instance's warm row.
        pool: Option<String>,
        /// The metadata service to read spot notices from; `None`: disabled.
        imds: Option<Endpoint>,
    },
    Watch {
        instance: String,
        /// As for `Next`.
        imds: Option<Endpoint>,
    },
    /// Prints the parameter's value.
    DatabaseUrl,
}

/// Where the database URL comes from: the environment's, else the
/// parameter's (read at start); the parameter, if named, is read again
/// when the database refuses the URL.
pub struct Database {
    url: Option<DatabaseUrl>,
    parameter: Option<Parameter>,
}

impl Database {
    /// `ORCA_DATABASE_URL`, if set.
    pub fn url(&self) -> Option<&DatabaseUrl> {
        self.url.as_ref()
    }

    /// The parameter `ORCA_DATABASE_URL_PARAMETER` names, if any.
    pub fn parameter(&self) -> Option<&Parameter> {
        self.parameter.as_ref()
    }

    /// The parameter, for the session that reads it again.
    pub fn into_parameter(self) -> Option<Parameter> {
        self.parameter
    }
}

pub enum Parsed {
    Help,
    Run(Command, Box<Database>),
}

/// Parses the arguments (without the program's name) and the environment.
pub fn parse(args: impl Iterator<Item = OsString>) -> Result<Parsed, UsageError> {
    let args: Vec<String> = args
        .map(|a| a.into_string().map_err(|_| UsageError::NotUtf8))
        .collect::<Result<_, _>>()?;
    let Some((command, rest)) = args.split_first() else {
        return Err(UsageError::NoCommand);
    };
    let command = match command.as_str() {
        "-h" | "--help" | "help" => return Ok(Parsed::Help),
        "pool-wait" => {
            let [instance, run, start] = fixed("pool-wait", rest)?;
            Command::Wait {
                instance: instance_id(instance)?,
                run: number("run", run, i64::MAX)?,
                start: number("start", start, i32::MAX.into())? as i32,
            }
        }
        "pool-next" => {
            let [instance, run, start, seconds] = fixed("pool-next", rest)?;
            let run = number("run", run, i64::MAX)?;
            let start = number("start", start, i32::MAX.into())? as i32;
            // A year is far past any pool's idle time; the cap keeps the sum
            // below from overflowing.
            let seconds = number("seconds", seconds, 366 * 86_400)? as u64;
            let pool = std::env::var("ORCA_POOL").ok().filter(|p| !p.is_empty());
            if run == 0 && start == 0 && pool.is_none() {
                return Err(UsageError::NoPool);
            }
            Command::Next {
                instance: instance_id(instance)?,
                run,
                start,
                wait: Duration::from_secs(seconds) + grace()?,
                pool,
                imds: imds()?,
            }
        }
        "pool-watch" => {
            let [instance] = fixed("pool-watch", rest)?;
            Command::Watch {
                instance: instance_id(instance)?,
                imds: imds()?,
            }
        }
        "database-url" => {
            let [] = fixed("database-url", rest)?;
            Command::DatabaseUrl
        }
        other => return Err(UsageError::UnknownCommand(other.to_string())),
    };
    let parameter = parameter()?;
    if matches!(command, Command::DatabaseUrl) {
        return match parameter {
            Some(parameter) => Ok(Parsed::Run(
                command,
                Box::new(Database {
                    url: None,
                    parameter: Some(parameter),
                }),
            )),
            None => Err(UsageError::NoParameter),
        };
    }
    let url = match DatabaseUrl::from_env("ORCA_DATABASE_URL") {
        Ok(url) => Some(url),
        Err(DbError::MissingUrl(_)) if parameter.is_some() => None,
        Err(DbError::MissingUrl(_)) => return Err(UsageError::NoDatabase),
        Err(e) => return Err(UsageError::Url(e)),
    };
    Ok(Parsed::Run(command, Box::new(Database { url, parameter })))
}

/// The parameter named by `ORCA_DATABASE_URL_PARAMETER`, if any.
fn parameter() -> Result<Option<Parameter>, UsageError> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let Some(name) = var("ORCA_DATABASE_URL_PARAMETER") else {
        return Ok(None);
    };
    let region = var("ORCA_DATABASE_URL_REGION").ok_or(UsageError::NoRegion)?;
    let endpoint = match var("ORCA_DATABASE_URL_ENDPOINT") {
        None => None,
        Some(url) => Some(Endpoint::parse(&url).ok_or(UsageError::SsmEndpoint(url))?),
    };
    Ok(Some(Parameter::new(name, region, endpoint, imds()?)))
}

fn fixed<'a, const N: usize>(
    command: &'static str,
    rest: &'a [String],
) -> Result<&'a [String; N], UsageError> {
    rest.try_into().map_err(|_| UsageError::Count {
        command,
        want: N,
        got: rest.len(),
    })
}

/// An id that fits the notification channel `orca_i_<instance>` (63 bytes).
fn instance_id(text: &str) -> Result<String, UsageError> {
    let ok = (1..=56).contains(&text.len())
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    if ok {
        Ok(text.to_string())
    } else {
        Err(UsageError::Instance(text.to_string()))
    }
}

fn number(what: &'static str, text: &str, max: i64) -> Result<i64, UsageError> {
    match text.parse::<i64>() {
        Ok(n) if (0..=max).contains(&n) && !text.starts_with('+') => Ok(n),
        _ => Err(UsageError::Number {
            what,
            value: text.to_string(),
            max,
        }),
    }
}

/// The minute after `seconds`; only tests shorten it.
fn grace() -> Result<Duration, UsageError> {
    match std::env::var("ORCA_POOL_AGENT_GRACE_MS") {
        Err(_) => Ok(Duration::from_secs(60)),
        Ok(ms) => ms
            .parse::<u32>()
            .map(|ms| Duration::from_millis(ms.into()))
            .map_err(|_| UsageError::Grace(ms)),
    }
}

/// The metadata service: 169.254.169.254, or the test-only stand-in;
/// `None` if `AWS_EC2_METADATA_DISABLED` is `true` (the AWS SDKs' switch,
/// which the local mode sets: its hosts are no pool instances, and the
/// machine's own notices are not theirs).
fn imds() -> Result<Option<Endpoint>, UsageError> {
    let disabled = std::env::var("AWS_EC2_METADATA_DISABLED")
        .is_ok_and(|v| v.trim().eq_ignore_ascii_case("true"));
    if disabled {
        return Ok(None);
    }
    match std::env::var("ORCA_POOL_AGENT_IMDS") {
        Err(_) => Ok(Some(Endpoint::imds())),
        Ok(url) => Endpoint::parse_http(&url)
            .map(Some)
            .ok_or(UsageError::Imds(url)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> impl Iterator<Item = OsString> {
        a.iter().map(OsString::from).collect::<Vec<_>>().into_iter()
    }

    #[test]
    fn bad_command_lines_are_one_line_errors() {
        for bad in [
            &[][..],
            &["pool-sleep"],
            &["pool-wait", "i-1", "2"],
            &["pool-wait", "i-1", "2", "3", "4"],
            &["pool-wait", "i 1", "2", "3"],
            &["pool-wait", "", "2", "3"],
            &["pool-wait", "i-1", "-2", "3"],
            &["pool-wait", "i-1", "2", "x"],
            &["pool-wait", "i-1", "2", "3000000000"],
            &["pool-next", "i-1", "2", "3"],
            &["pool-next", "i-1", "2", "3", "1.5"],
            &["pool-watch"],
            &["pool-watch", "i-1", "2"],
            &["pool-watch", "i 1"],
            &["database-url", "x"],
        ] {
            match parse(args(bad)) {
                Err(e) => {
                    let msg = e.to_string();
                    assert!(!msg.contains('\n'), "{bad:?}: {msg}");
                }
                Ok(_) => panic!("{bad:?} was accepted"),
            }
        }
    }

    #[test]
    fn help_is_not_an_error() {
        assert!(matches!(parse(args(&["--help"])), Ok(Parsed::Help)));
    }
}
