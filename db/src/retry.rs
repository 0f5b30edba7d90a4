//! Riding out a database that can't be reached: connect again every second,
//! say "database unreachable" once when it goes and "reconnected" once when
//! it is back, and LISTEN again on every new connection.

use std::time::Duration;

use crate::{connect, ConnectOptions, DatabaseUrl, Db, DbError};

/// A connection that comes back.
pub struct Reconnect {
    url: DatabaseUrl,
    opts: ConnectOptions,
    channels: Vec<String>,
    db: Option<Db>,
    down: bool,
}

impl Reconnect {
    pub fn new(url: DatabaseUrl, opts: ConnectOptions) -> Self {
        Reconnect {
            url,
            opts,
            channels: Vec::new(),
            db: None,
            down: false,
        }
    }

    /// LISTENs on `channel` on every connection it makes.
    pub fn listen(mut self, channel: impl Into<String>) -> Self {
        self.channels.push(channel.into());
        self
    }

    /// The connection, connecting first if there is none: tries every second
    /// until the server answers.
    pub async fn db(&mut self) -> &mut Db {
        while self.connect_unless_refused().await.is_err() {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        self.db
            .as_mut()
            .expect("invariant: the loop above leaves a connection")
    }

    /// Connects if there is no connection, trying every second while the
    /// server can't be reached; a server that refuses the URL's credentials
    /// ([`DbError::is_refused`]) is the error, for the caller to find
    /// another URL ([`Reconnect::set_url`]) or to wait.
    pub async fn connect_unless_refused(&mut self) -> Result<(), DbError> {
        loop {
            if self.db.as_ref().is_some_and(|db| !db.is_closed()) {
                return Ok(());
            }
            self.db = None;
            match self.try_connect().await {
                Ok(db) => {
                    if self.down {
                        tracing::warn!(target = %self.url.target(), "reconnected");
                        self.down = false;
                    }
                    self.db = Some(db);
                }
                Err(e) => {
                    self.lost(&e);
                    if e.is_refused() {
                        return Err(e);
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    /// Connects to `url` from now on (the connection there is, if any, is
    /// dropped).
    pub fn set_url(&mut self, url: DatabaseUrl) {
        self.url = url;
        self.db = None;
    }

    /// Connects once, without retrying (and LISTENs).
    pub async fn try_connect(&self) -> Result<Db, DbError> {
        let db = connect(&self.url, &self.opts).await?;
        for channel in &self.channels {
            db.listen(channel).await?;
        }
        Ok(db)
    }

    /// Reports a statement's error: a lost connection is dropped, to be made
    /// again by the next [`Reconnect::db`]. Returns whether it was one.
    pub fn failed(&mut self, e: &DbError) -> bool {
        if e.is_connection() {
            self.db = None;
            self.lost(e);
            true
        } else {
            false
        }
    }

    fn lost(&mut self, e: &DbError) {
        if !self.down {
            tracing::warn!(error = %e, "database unreachable; retrying every second");
            self.down = true;
        }
    }

    /// Whether the last connect attempt or statement failed and no
    /// connection has been made since.
    pub fn is_down(&self) -> bool {
        self.down
    }

    pub fn url(&self) -> &DatabaseUrl {
        &self.url
    }
}
