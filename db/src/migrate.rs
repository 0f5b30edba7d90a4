//! The migrator (morca's `State.migrate`): the files of `migrations/`, in
//! order, each in its own transaction under a transaction-scoped advisory
//! lock, so processes starting at once apply each file exactly once.

use std::path::Path;

use sha2::{Digest, Sha256};

use crate::{Db, DbError};

include!(concat!(env!("OUT_DIR"), "/migrations.rs"));

/// The transaction-scoped advisory lock every migrator takes ("orcamigr").
pub const MIGRATE_LOCK: i64 = 0x6f72_6361_6d69_6772;

/// One SQL file of `migrations/`.
#[derive(Clone, Debug)]
pub struct Migration {
    n: i32,
    name: String,
    sql: String,
    checksum: String,
}

/// The migrations a binary knows, in order.
#[derive(Clone, Debug)]
pub struct Migrations(Vec<Migration>);

/// How many migrations this binary knows: what it records in
/// `orca.schedulers.migrations` when it joins.
pub fn known() -> i32 {
    EMBEDDED.len() as i32
}

impl Migrations {
    /// The files of `migrations/`, built into the binary.
    pub fn embedded() -> Self {
        Self::from_files(EMBEDDED.iter().map(|(n, s)| (n.to_string(), s.to_string())))
            .expect("invariant: the build script embeds well-named, numbered migrations")
    }

    /// The `*.sql` files of a directory.
    pub fn from_dir(dir: &Path) -> Result<Self, DbError> {
        let read =
            |e: std::io::Error| DbError::Migration(format!("reading {}: {e}", dir.display()));
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).map_err(read)? {
            let name = entry
                .map_err(read)?
                .file_name()
                .to_string_lossy()
                .into_owned();
            if name.ends_with(".sql") {
                let sql = std::fs::read_to_string(dir.join(&name)).map_err(read)?;
                files.push((name, sql));
            }
        }
        files.sort();
        Self::from_files(files.into_iter())
    }

    fn from_files(files: impl Iterator<Item = (String, String)>) -> Result<Self, DbError> {
        let mut all = Vec::new();
        for (i, (name, sql)) in files.enumerate() {
            let n: i32 = name
                .split('_')
                .next()
                .and_then(|d| d.parse().ok())
                .ok_or_else(|| {
                    DbError::Migration(format!("migration {name}: not named NNNN_name.sql"))
                })?;
            if n != i as i32 + 1 {
                return Err(DbError::Migration(format!(
                    "migration {name}: numbered {n}, expected {}",
                    i + 1
                )));
            }
            let checksum = format!("{:x}", Sha256::digest(sql.as_bytes()));
            all.push(Migration {
                n,
                name,
                sql,
                checksum,
            });
        }
        Ok(Migrations(all))
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = &Migration> {
        self.0.iter()
    }
}

/// Brings the `orca` schema up to date; returns the names of the files it
/// applied (none when the schema was current).
pub async fn migrate(db: &mut Db, migrations: &Migrations) -> Result<Vec<String>, DbError> {
    {
        let tx = db.transaction().await?;
        let lock_and_bootstrap = format!(
            "select pg_advisory_xact_lock({MIGRATE_LOCK});
             create schema if not exists orca;
             create table if not exists orca.migrations (
                 n        integer primary key,
                 name     text not null,
                 checksum text not null,
                 applied  timestamptz not null default now()
             );"
        );
        tx.batch_execute(&lock_and_bootstrap)
            .await
            .map_err(|e| db_err(e, "bootstrap"))?;
        tx.commit().await.map_err(|e| db_err(e, "bootstrap"))?;
    }
    let mut applied = Vec::new();
    for m in migrations.iter() {
        let tx = db.transaction().await?;
        let fail = |e: tokio_postgres::Error| db_err(e, &m.name);
        tx.execute("select pg_advisory_xact_lock($1)", &[&MIGRATE_LOCK])
            .await
            .map_err(fail)?;
        let done = tx
            .query_opt(
                "select name, checksum from orca.migrations where n = $1",
                &[&m.n],
            )
            .await
            .map_err(fail)?;
        if let Some(row) = done {
            let (name, checksum): (String, String) = (row.get(0), row.get(1));
            if checksum != m.checksum {
                return Err(DbError::Migration(format!(
                    "migration {} was changed after it was applied as {name}: its checksum is {} now, {} when applied",
                    m.name,
                    &m.checksum[..12],
                    &checksum[..12.min(checksum.len())]
                )));
            }
            continue;
        }
        tx.batch_execute(&m.sql).await.map_err(fail)?;
        tx.execute(
            "insert into orca.migrations (n, name, checksum) values ($1, $2, $3)",
            &[&m.n, &m.name, &m.checksum],
        )
        .await
        .map_err(fail)?;
        tx.commit().await.map_err(fail)?;
        tracing::info!(migration = %m.name, "applied");
        applied.push(m.name.clone());
    }
    Ok(applied)
}

/// How many migrations the database has had, 0 for a fresh one.
pub async fn applied_count(db: &Db) -> Result<i64, DbError> {
    let row = db
        .query_one(
            "select case when to_regclass('orca.migrations') is null then 0
                    else (select count(*) from orca.migrations) end",
            &[],
        )
        .await?;
    Ok(row.get(0))
}

fn db_err(e: tokio_postgres::Error, what: &str) -> DbError {
    let detail = e
        .as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string());
    if crate::error::is_connection_error(&e) {
        DbError::Connect {
            target: format!("migration {what}"),
            reason: detail,
        }
    } else {
        DbError::Migration(format!("migration {what}: {detail}"))
    }
}
