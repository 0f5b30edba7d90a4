use std::time::Duration;

/// An error of the connection layer or of a statement.
///
/// Every message is one line and never contains the database password: URLs
/// are shown as `host:port/dbname` only (see [`crate::DatabaseUrl::target`]).
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("malformed database URL: {0}")]
    Url(String),
    #[error("database URL is missing: set {0}")]
    MissingUrl(&'static str),
    #[error("cannot connect to {target}: {reason}")]
    Connect { target: String, reason: String },
    /// The server answered and refused the URL's credentials (SQLSTATE
    /// class 28): a wrong or rotated password, an unknown user.
    #[error("{target} refused the credentials: {reason}")]
    Refused { target: String, reason: String },
    #[error("{what} on {target} timed out after {after:?}")]
    Timeout {
        what: &'static str,
        target: String,
        after: Duration,
    },
    #[error("{target}: {}", said(.source))]
    Statement {
        target: String,
        #[source]
        source: tokio_postgres::Error,
    },
    #[error("{0}")]
    Migration(String),
    /// The database answered more than a statement reads: a table grown
    /// past any pool's or Scheduler's, which the operator does not act on
    /// in part.
    #[error("{target} holds more than {max} {what}: the operator reads no more of them, and acts on none")]
    TooMany {
        target: String,
        what: &'static str,
        max: usize,
    },
}

impl DbError {
    /// Whether the connection is lost (or can't be had) rather than the
    /// statement wrong: the caller should reconnect and try again.
    pub fn is_connection(&self) -> bool {
        match self {
            DbError::Connect { .. } | DbError::Refused { .. } | DbError::Timeout { .. } => true,
            DbError::Statement { source, .. } => is_connection_error(source),
            DbError::Url(_)
            | DbError::MissingUrl(_)
            | DbError::Migration(_)
            | DbError::TooMany { .. } => false,
        }
    }

    /// Whether the server refused the credentials (see [`DbError::Refused`]).
    pub fn is_refused(&self) -> bool {
        matches!(self, DbError::Refused { .. })
    }

    /// The SQLSTATE of a statement's error, if the server sent one.
    pub fn code(&self) -> Option<&str> {
        match self {
            DbError::Statement { source, .. } => source.code().map(|c| c.code()),
            _ => None,
        }
    }
}

/// The server's own words when it answered (`canceling statement due to
/// statement timeout`, `password authentication failed for user "x"`),
/// else the error's: tokio-postgres says only "db error" for an error the
/// server sent. The server's message names no password; its DETAIL, which
/// may quote a row's values, is left out.
pub(crate) fn said(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{} (SQLSTATE {})", db.message(), db.code().code()),
        None => e.to_string(),
    }
}

/// A closed connection, an I/O error, or the server going away
/// (class 08 connection exception, class 57 operator intervention such as
/// `pg_terminate_backend` or a shutdown).
pub(crate) fn is_connection_error(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    match e.code() {
        Some(code) => {
            let code = code.code();
            code.starts_with("08") || (code.starts_with("57") && code != "57014")
        }
        // No SQLSTATE: an I/O or protocol error, not a wrong statement.
        None => e.as_db_error().is_none(),
    }
}
