//! A connection that the scheduler's loops make again, one attempt a tick,
//! so that a loop never blocks on a server that is away: it says "database
//! unreachable" once when the server goes and "reconnected" once when it is
//! back.

use std::time::Duration;

use orca_db::{connect, ConnectOptions, DatabaseUrl, Db, DbError};

use super::args::Config;

pub struct Link {
    url: DatabaseUrl,
    opts: ConnectOptions,
    db: Option<Db>,
    down: bool,
    /// Made since the last time [`Link::take_new`] was asked.
    new: bool,
}

impl Link {
    /// Short keepalives on both ends: a vanished scheduler's session (and
    /// so its lead lock) is freed by the server within seconds.
    pub fn new(config: &Config, name: &str) -> Self {
        Link {
            url: config.url().clone(),
            opts: ConnectOptions::named(name)
                .with_connect_timeout(Duration::from_secs(3))
                .with_statement_timeout(Duration::from_secs(5))
                .with_keepalive(Duration::from_secs(1)),
            db: None,
            down: false,
            new: false,
        }
    }

    /// The connection, after one attempt to make it if there is none.
    pub async fn db(&mut self) -> Option<&mut Db> {
        if self.db.as_ref().is_some_and(|db| db.is_closed()) {
            self.db = None;
        }
        if self.db.is_none() {
            match connect(&self.url, &self.opts).await {
                Ok(db) => {
                    if self.down {
                        tracing::warn!(target = %self.url.target(), "reconnected");
                        self.down = false;
                    }
                    self.db = Some(db);
                    self.new = true;
                }
                Err(e) => {
                    self.report(&e);
                    return None;
                }
            }
        }
        self.db.as_mut()
    }

    /// Whether the connection was made since the last call (LISTEN again).
    pub fn take_new(&mut self) -> bool {
        std::mem::take(&mut self.new)
    }

    /// A statement failed: a lost connection is dropped, to be made again.
    /// Returns whether it was one.
    pub fn failed(&mut self, e: &DbError) -> bool {
        if e.is_connection() {
            self.db = None;
            self.report(e);
            true
        } else {
            tracing::warn!(error = %e, "statement failed");
            false
        }
    }

    /// The connection as it is, without trying to make one.
    pub fn current(&mut self) -> Option<&mut Db> {
        self.db.as_mut()
    }

    /// The connection has closed under its user: make it again.
    pub fn lost(&mut self) {
        self.db = None;
    }

    fn report(&mut self, e: &DbError) {
        if !self.down {
            tracing::warn!(error = %e, "database unreachable; trying again every tick");
            self.down = true;
        }
    }
}
