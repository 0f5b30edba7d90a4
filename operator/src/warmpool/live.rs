//! The world a loop acts on for real: the pool's database connection (its
//! own, or its database's, shared with the controller's other pools) and
//! its EC2 client, both behind its fence.

use std::sync::{
    atomic::{AtomicU64, Ordering},
    Arc,
};

use orca_db::{DatabaseUrl, Db, DbError, Reconnect};

use super::ec2::{Ec2, Ec2Config};
use crate::connections::Connections;
use crate::fence::{Fence, Fenced};

use super::pass_report::PoolError;

/// The world a loop acts on for real: its database connection and its EC2
/// client, both behind its fence.
pub struct Live {
    pub(super) pool: String,
    pub(super) ec2: Ec2,
    pub(super) ec2_config: Ec2Config,
    pub(super) reconnect: Reconnect,
    /// The loop's own connection.
    pub(super) db: Option<Db>,
    /// Its database's shared connection instead, and the one in use.
    pub(super) shared: Option<Shared>,
    pub(super) held: Option<Arc<Db>>,
    /// Until when the loop may act; always open unless set.
    pub(super) fence: Fence,
    /// The credentials of an EC2 client given to the loop
    /// ([`super::PoolLoop::with_ec2`]), for its SSM calls too; `None`: the
    /// default chain's.
    pub(super) credentials: Option<aws_sdk_ssm::config::Credentials>,
}

/// A loop's share of its database's connection.
pub(super) struct Shared {
    pub(super) connections: Arc<Connections>,
    /// This loop, as the connections know it: no two loops alike.
    pub(super) user: String,
    /// The URL's text (never shown) and its parse.
    pub(super) text: String,
    pub(super) url: DatabaseUrl,
}

impl Shared {
    /// `loop_of`'s share in `connections` of the database at `url`.
    pub(super) fn new(
        connections: Arc<Connections>,
        loop_of: &str,
        text: &str,
        url: DatabaseUrl,
    ) -> Shared {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        Shared {
            connections,
            user: format!("pool {loop_of} #{}", NEXT.fetch_add(1, Ordering::Relaxed)),
            text: text.to_string(),
            url,
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.connections.forget(&self.user);
    }
}

impl Live {
    pub(super) fn db_error(&mut self, source: DbError) -> PoolError {
        if source.is_connection() {
            self.db = None;
            self.held = None;
        }
        PoolError::Db {
            pool: self.pool.clone(),
            source,
        }
    }

    pub(super) fn fenced(&self, source: Fenced) -> PoolError {
        PoolError::Fenced {
            pool: self.pool.clone(),
            source,
        }
    }

    /// One statement `f` on the pool's database, once the fence is
    /// checked: its answer, or a [`PoolError::Db`] (a lost connection is
    /// dropped, for the next statement to connect again).
    pub(super) async fn read<T>(
        &mut self,
        f: impl AsyncFnOnce(&Db) -> Result<T, DbError>,
    ) -> Result<T, PoolError> {
        let db = self.connected().await?;
        let read = f(db).await;
        read.map_err(|e| self.db_error(e))
    }

    /// The connection for the next statement, once the fence is checked:
    /// call it before each statement.
    pub(super) async fn connected(&mut self) -> Result<&Db, PoolError> {
        self.fence.check().map_err(|e| self.fenced(e))?;
        if let Some(s) = &self.shared {
            let got = s.connections.get(&s.user, &s.text, &s.url).await;
            let db = got.map_err(|e| self.db_error(e))?;
            self.fence.check().map_err(|e| self.fenced(e))?;
            return Ok(&**self.held.insert(db));
        }
        if self.db.as_ref().is_none_or(Db::is_closed) {
            self.db = None;
            let db = self
                .reconnect
                .try_connect()
                .await
                .map_err(|e| self.db_error(e))?;
            self.db = Some(db);
            // Connecting took a while: the fence again.
            self.fence.check().map_err(|e| self.fenced(e))?;
        }
        self.db.as_ref().ok_or_else(|| PoolError::Db {
            pool: self.pool.clone(),
            source: DbError::Connect {
                target: self.reconnect.url().target(),
                reason: "no connection".into(),
            },
        })
    }
}
