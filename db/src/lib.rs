//! The `orca` schema and everything the orca components say to Postgres:
//! the connection layer ([`connect()`]), the migrator ([`migrate`]) and the
//! protocols of docs/protocol.md (scheduler instances and the warm pool's
//! hand-out).
//!
//! The operator, the pool agent and the reference scheduler all use this one
//! implementation, so the protocol cannot drift between the two halves.

pub mod ca;
pub mod connect;
mod error;
pub mod migrate;
pub mod pool;
pub mod retry;
pub mod schedulers;
mod tls;
pub mod url;

pub use connect::{connect, ConnectOptions, Db};
pub use error::DbError;
pub use retry::Reconnect;
pub use url::DatabaseUrl;
