//! The throwaway PostgreSQL cluster (the local mode's own, see
//! `orca_operator::local::postgres`), and a connection for a test's own
//! statements.

pub use orca_operator::local::postgres::Cluster;

/// Connects to `url` for a test's own statements.
pub async fn connect(url: &str) -> orca_db::Db {
    orca_db::connect(
        &orca_db::DatabaseUrl::parse(url).unwrap(),
        &orca_db::ConnectOptions::named("orca-tests"),
    )
    .await
    .unwrap_or_else(|e| panic!("test connection: {e}"))
}
