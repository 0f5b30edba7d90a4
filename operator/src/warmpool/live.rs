//! The world a loop acts on for real: the pool's database connection (its
//! own, or its database's, shared with the controller's other pools) and
//! its EC2 client, both behind its fence; and what [`World`] does there.

use std::{
    collections::HashSet,
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};

use orca_db::{ConnectOptions, DatabaseUrl, Db, DbError, Reconnect};

use super::ec2::{Ec2, Ec2Config, Ec2Error, RunRequest};
use super::plan::Offering;
use super::preflight::{Check, Probe};
use super::ssm::{Ssm, SsmError};
use super::world::World;
use crate::connections::Connections;
use crate::fence::{Fence, Fenced};

use super::pass_report::PoolError;

/// The world a loop acts on for real: its database connection and its EC2
/// client, both behind its fence.
pub struct Live {
    pool: String,
    ec2: Ec2,
    ec2_config: Ec2Config,
    reconnect: Reconnect,
    /// The loop's own connection.
    db: Option<Db>,
    /// Its database's shared connection instead, and the one in use.
    shared: Option<Shared>,
    held: Option<Arc<Db>>,
    /// Until when the loop may act; always open unless set.
    fence: Fence,
    /// The credentials of an EC2 client given to the loop
    /// ([`super::PoolLoop::with_ec2`]), for its SSM calls too; `None`: the
    /// default chain's.
    credentials: Option<aws_sdk_ssm::config::Credentials>,
}

/// A loop's share of its database's connection.
struct Shared {
    connections: Arc<Connections>,
    /// This loop, as the connections know it: no two loops alike.
    user: String,
    /// The URL's text (never shown) and its parse.
    text: String,
    url: DatabaseUrl,
}

impl Shared {
    /// `loop_of`'s share in `connections` of the database at `url`.
    fn new(connections: Arc<Connections>, loop_of: &str, text: &str, url: DatabaseUrl) -> Shared {
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
    /// The world of the pool `pool`: EC2 through `ec2` (in `ec2_config`'s
    /// region and endpoint), the database through `reconnect`, each call
    /// behind `fence`.
    pub(super) fn new(
        pool: String,
        (ec2, ec2_config): (Ec2, Ec2Config),
        reconnect: Reconnect,
        fence: Fence,
    ) -> Live {
        Live {
            pool,
            ec2,
            ec2_config,
            reconnect,
            db: None,
            shared: None,
            held: None,
            fence,
            credentials: None,
        }
    }

    /// The EC2 client, behind the fence.
    pub(super) fn ec2(&self) -> &Ec2 {
        &self.ec2
    }

    /// The region and endpoint EC2 is called in.
    pub(super) fn ec2_config(&self) -> &Ec2Config {
        &self.ec2_config
    }

    /// EC2 in `cfg`'s region and endpoint from now: a new client if they
    /// changed (with the default chain's credentials).
    pub(super) async fn move_to(&mut self, cfg: Ec2Config) {
        if cfg != self.ec2_config {
            self.ec2 = Ec2::new(&cfg, self.fence.clone()).await;
            self.ec2_config = cfg;
        }
    }

    /// EC2 through `ec2` and its credentials (SSM too), behind this
    /// world's fence.
    pub(super) fn use_ec2(&mut self, ec2: Ec2) {
        self.credentials = ec2.credentials();
        self.ec2 = ec2.behind(self.fence.clone());
    }

    /// Its own connection, named `application_name`, without a `LISTEN`.
    pub(super) fn not_listening(&mut self, application_name: &str) {
        let url = self.reconnect.url().clone();
        self.reconnect = Reconnect::new(url, ConnectOptions::named(application_name));
    }

    /// Its statements over its database's connection in `connections`
    /// (shared with the controller's other pools there) as the user of the
    /// URL `text`, rather than a connection of its own.
    pub(super) fn share(&mut self, connections: &Arc<Connections>, text: &str) {
        let url = self.reconnect.url().clone();
        self.shared = Some(Shared::new(connections.clone(), &self.pool, text, url));
        self.db = None;
    }

    /// Returns on a notification for the pool, or after `wait`.
    pub(super) async fn wake(&mut self, wait: Duration) {
        let deadline = tokio::time::Instant::now() + wait;
        let Some(db) = self.db.as_mut() else {
            tokio::time::sleep(wait.min(Duration::from_secs(1))).await;
            return;
        };
        loop {
            match tokio::time::timeout_at(deadline, db.notification()).await {
                Err(_) => return,
                Ok(None) => {
                    self.db = None;
                    return;
                }
                Ok(Some(n)) if n.payload() == self.pool => {
                    db.drain_notifications();
                    return;
                }
                Ok(Some(_)) => {}
            }
        }
    }

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

impl World for Live {
    async fn had_rows(
        &mut self,
        pool: &str,
        instances: &[String],
    ) -> Result<HashSet<String>, PoolError> {
        self.read(async |db| orca_db::pool::had_rows(db, pool, instances).await)
            .await
    }

    async fn console_tail(&mut self, instance: &str) -> Result<String, Ec2Error> {
        self.ec2.console_tail(instance).await
    }

    async fn end_idle_rows(&mut self, rows: &[i64]) -> Result<HashSet<i64>, PoolError> {
        self.read(async |db| orca_db::pool::end_idle_rows(db, rows).await)
            .await
    }

    async fn claim(&mut self, instance: &str, pool: &str) -> Result<Option<i64>, PoolError> {
        self.read(async |db| orca_db::pool::claim(db, instance, pool).await)
            .await
    }

    async fn end_busy_row(&mut self, row: i64) -> Result<bool, PoolError> {
        self.read(async |db| orca_db::pool::end_busy_row(db, row).await)
            .await
    }

    async fn end_claim(&mut self, row: i64) -> Result<(), PoolError> {
        self.read(async |db| orca_db::pool::end_claim(db, row).await)
            .await
    }

    async fn end_rows_of_gone(&mut self, rows: &[i64]) -> Result<Vec<i64>, PoolError> {
        self.read(async |db| orca_db::pool::end_rows_of_gone(db, rows).await)
            .await
    }

    async fn terminate(&mut self, ids: &[String]) -> Result<(), Ec2Error> {
        self.ec2.terminate(ids).await
    }

    async fn reserve_idle_rows(&mut self, rows: &[i64]) -> Result<HashSet<i64>, PoolError> {
        self.read(async |db| orca_db::pool::reserve_idle_rows(db, rows).await)
            .await
    }

    async fn wake_rows(&mut self, rows: &[i64]) -> Result<HashSet<i64>, PoolError> {
        self.read(async |db| orca_db::pool::wake_rows(db, rows).await)
            .await
    }

    async fn unwake_rows(&mut self, rows: &[i64]) -> Result<(), PoolError> {
        self.read(async |db| orca_db::pool::unwake_rows(db, rows).await)
            .await
    }

    async fn claim_reserved(&mut self, row: i64) -> Result<Option<i64>, PoolError> {
        self.read(async |db| orca_db::pool::claim_reserved(db, row).await)
            .await
    }

    async fn stop(&mut self, ids: &[String]) -> Result<(), Ec2Error> {
        self.ec2.stop(ids).await
    }

    async fn start(&mut self, ids: &[String], offering: &Offering) -> Result<(), Ec2Error> {
        self.ec2.start(ids, offering).await
    }

    async fn run(&mut self, req: &RunRequest<'_>) -> Result<Vec<String>, Ec2Error> {
        self.ec2.run(req).await
    }

    async fn publish(
        &mut self,
        name: &str,
        value: &str,
        tags: &[(&str, &str)],
        endpoint: Option<&str>,
    ) -> Result<bool, SsmError> {
        self.ssm(endpoint).await.publish(name, value, tags).await
    }

    async fn preflight(&mut self, probe: &Probe<'_>) -> Vec<Check> {
        super::preflight_aws::ec2_checks(&self.ec2, probe).await
    }
}

impl Live {
    /// The SSM client of the pool's region (at `endpoint`, if not the
    /// region's own), with the loop's credentials, behind its fence.
    async fn ssm(&self, endpoint: Option<&str>) -> Ssm {
        let at = super::ec2::Ec2Config::new(self.ec2_config.region(), endpoint);
        let fence = self.fence.clone();
        match &self.credentials {
            None => Ssm::new(&at, fence).await,
            Some(credentials) => Ssm::with_credentials(&at, credentials.clone(), fence).await,
        }
    }
}
