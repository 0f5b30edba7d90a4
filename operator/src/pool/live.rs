//! The world a loop acts on for real: the pool's database connection and
//! its EC2 client, both behind its fence.

use orca_db::{Db, DbError, Reconnect};

use super::ec2::{Ec2, Ec2Config};
use crate::fence::{Fence, Fenced};

use super::report::PoolError;

/// The world a loop acts on for real: its database connection and its EC2
/// client, both behind its fence.
pub struct Live {
    pub(super) pool: String,
    pub(super) ec2: Ec2,
    pub(super) ec2_config: Ec2Config,
    pub(super) reconnect: Reconnect,
    pub(super) db: Option<Db>,
    /// Until when the loop may act; always open unless set.
    pub(super) fence: Fence,
}

impl Live {
    pub(super) fn db_error(&mut self, source: DbError) -> PoolError {
        if source.is_connection() {
            self.db = None;
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

    /// The connection for the next statement, once the fence is checked:
    /// call it before each statement.
    /// One statement `f` on the pool's database, once the fence is
    /// checked: its answer, or a [`PoolError::Db`] (a lost connection is
    /// dropped, for the next statement to connect again).
    pub(super) async fn read<T>(
        &mut self,
        f: impl AsyncFnOnce(&mut Db) -> Result<T, DbError>,
    ) -> Result<T, PoolError> {
        let db = self.connected().await?;
        let read = f(db).await;
        read.map_err(|e| self.db_error(e))
    }

    pub(super) async fn connected(&mut self) -> Result<&mut Db, PoolError> {
        self.fence.check().map_err(|e| self.fenced(e))?;
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
        self.db.as_mut().ok_or_else(|| PoolError::Db {
            pool: self.pool.clone(),
            source: DbError::Connect {
                target: self.reconnect.url().target(),
                reason: "no connection".into(),
            },
        })
    }
}
