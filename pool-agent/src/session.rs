//! The agent's one connection: LISTENs on its channels (again after every
//! reconnect), retries every second while the database can't be reached, and
//! says so once on stderr, not every second (the `Reconnect` of orca-db).
//! With the URL from a parameter, a connection the server refuses (the
//! password was rotated) reads the parameter again and connects with what
//! it holds now.

use std::time::Duration;

use orca_db::{ConnectOptions, DatabaseUrl, Db, DbError, Reconnect};
use tokio::time::Instant;

use crate::ssm::Parameter;

/// How often, at most, a refused connection reads the parameter again: a
/// database that refuses every instance of a pool must not make them all
/// call SSM every second.
const REREAD_AFTER: Duration = Duration::from_secs(30);

/// Where the agent's database URL comes from.
pub struct Source {
    url: DatabaseUrl,
    /// The parameter it was read from, to read again when refused.
    parameter: Option<Parameter>,
}

impl Source {
    /// The URL `url`, read from `parameter` if it came from one (to
    /// read again when the database refuses it).
    pub fn new(url: DatabaseUrl, parameter: Option<Parameter>) -> Self {
        Source { url, parameter }
    }
}

pub struct Session {
    conn: Reconnect,
    parameter: Option<Parameter>,
    /// When the parameter was last read.
    read_at: Option<Instant>,
    /// The error of a statement that keeps failing though the connection
    /// is fine, logged once until a statement succeeds.
    failing: Option<String>,
}

/// Runs `$call` (an async statement on `$db`) until it succeeds, riding out
/// lost connections and failing statements.
macro_rules! until_done {
    ($session:expr, |$db:ident| $call:expr) => {
        loop {
            let $db = $session.db().await;
            match $call.await {
                Ok(v) => {
                    $session.succeeded();
                    break v;
                }
                Err(e) => $session.failed(e).await,
            }
        }
    };
}
pub(crate) use until_done;

/// As [`until_done!`], but gives up once `$by` (an
/// `Option<tokio::time::Instant>`; `None`: never) has passed: `Some` of the
/// statement's result, or `None` if it did not succeed in time. A connect
/// or statement under way at `$by` is dropped, which loses nothing: the
/// connection is made again by the next call.
macro_rules! until_done_by {
    ($session:expr, $by:expr, |$db:ident| $call:expr) => {{
        let by: Option<tokio::time::Instant> = $by;
        loop {
            let attempt = async {
                let $db = $session.db().await;
                $call.await
            };
            let result = match by {
                Some(by) => tokio::time::timeout_at(by, attempt).await.ok(),
                None => Some(attempt.await),
            };
            match result {
                None => break None,
                Some(Ok(v)) => {
                    $session.succeeded();
                    break Some(v);
                }
                Some(Err(e)) => {
                    let failed = $session.failed(e);
                    match by {
                        Some(by) => {
                            if tokio::time::timeout_at(by, failed).await.is_err() {
                                break None;
                            }
                        }
                        None => failed.await,
                    }
                }
            }
        }
    }};
}
pub(crate) use until_done_by;

impl Session {
    pub fn new(source: Source, channels: &[String]) -> Self {
        let url = source.url;
        // Short limits: a lost database must be noticed within seconds, and
        // every statement of the agent is a single-row one.
        let opts = ConnectOptions::named("orca-pool-agent")
            .with_connect_timeout(Duration::from_secs(5))
            .with_statement_timeout(Duration::from_secs(5))
            .with_keepalive(Duration::from_secs(3));
        let conn = channels
            .iter()
            .fold(Reconnect::new(url, opts), |c, ch| c.listen(ch.as_str()));
        Session {
            conn,
            parameter: source.parameter,
            read_at: None,
            failing: None,
        }
    }

    /// The connection; connects (and LISTENs) first if there is none,
    /// trying every second.
    pub async fn db(&mut self) -> &mut Db {
        while self.conn.connect_unless_refused().await.is_err() {
            if !self.reread().await {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
        self.conn.db().await
    }

    /// The server refused the URL: reads the parameter again, unless it
    /// was read lately; whether its value is now in use.
    async fn reread(&mut self) -> bool {
        let Some(parameter) = &self.parameter else {
            return false;
        };
        if self.read_at.is_some_and(|at| at.elapsed() < REREAD_AFTER) {
            return false;
        }
        self.read_at = Some(Instant::now());
        let text = match parameter.read().await {
            Ok(text) => text,
            Err(e) => {
                tracing::warn!(error = %e, "the database refused the URL, and its parameter cannot be read again");
                return false;
            }
        };
        match DatabaseUrl::parse(&text) {
            Ok(url) => {
                tracing::info!(parameter = %parameter.name(),
                    "the database refused the URL; connecting with the parameter's value as read now");
                self.conn.set_url(url);
                true
            }
            Err(e) => {
                tracing::warn!(parameter = %parameter.name(), error = %e,
                    "the parameter's new value is not a database URL");
                false
            }
        }
    }

    pub fn succeeded(&mut self) {
        self.failing = None;
    }

    /// A statement failed: a lost connection is made again by the next
    /// [`Session::db`] at once; any other error is logged once and tried
    /// again a second later (a database being migrated, say), since giving
    /// up would power the instance off.
    pub async fn failed(&mut self, e: DbError) {
        if self.conn.failed(&e) {
            return;
        }
        let msg = e.to_string();
        if self.failing.as_deref() != Some(msg.as_str()) {
            tracing::error!(error = %msg, "statement failed; trying again every second");
            self.failing = Some(msg);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    /// Waits `d`, or less if a notification comes (or the connection ends:
    /// the next statement then reconnects).
    pub async fn wait(&mut self, d: Duration) {
        let db = self.conn.db().await;
        tokio::select! {
            _ = tokio::time::sleep(d) => {}
            _ = db.notification() => {}
        }
    }
}
