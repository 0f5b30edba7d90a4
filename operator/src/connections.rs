//! One connection per database, shared by everything of one controller
//! that reaches it (docs/operations.md#sizing): a thousand Schedulers or
//! two hundred WarmPools on one database make one connection of the
//! controller's, not one each. Their statements are single statements,
//! which one connection carries side by side (the client pipelines them).
//!
//! A database is known by a digest of its URL text: the text itself is
//! kept only by those who connect with it. A connection nobody uses any
//! more is closed, and one that dropped is made again by the next user.
//!
//! A database that cannot be reached is one tenant's trouble: its users
//! are told so at once for a few seconds after a failed attempt, and while
//! another attempt is under way, rather than each waiting out a
//! connection time-out in turn — which would hold the controller's
//! reconciles, and stall everyone else's objects behind them.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use orca_db::{ConnectOptions, DatabaseUrl, Db, DbError};
use sha2::{Digest, Sha256};

/// The connections of one controller, one per database, each under
/// `application_name`.
pub struct Connections {
    application_name: String,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    /// A digest of the URL text → its connection, once made.
    slots: HashMap<Vec<u8>, Arc<Slot>>,
    /// Each user → the digest of the URL it uses.
    users: HashMap<String, Vec<u8>>,
}

/// A database's connection; connecting holds its lock, so that the users
/// who ask at once make one connection. And the last failed attempt: when,
/// and what it said.
#[derive(Default)]
struct Slot {
    db: tokio::sync::Mutex<Option<Arc<Db>>>,
    failed: Mutex<Option<(Instant, String)>>,
}

/// After a failed attempt, its users are told so for this long without
/// another.
const FAILED_FOR: Duration = Duration::from_secs(5);
/// While an attempt is under way, a failure this recent is told rather than
/// waited on.
const FAILED_WHILE_TRYING: Duration = Duration::from_secs(120);

impl Slot {
    /// The last failure, if within `within`, as the error it was.
    fn failure(&self, within: Duration, url: &DatabaseUrl) -> Option<DbError> {
        let failed = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        failed
            .as_ref()
            .filter(|(at, _)| at.elapsed() < within)
            .map(|(_, reason)| DbError::Connect {
                target: url.target(),
                reason: reason.clone(),
            })
    }
}

fn digest(url_text: &str) -> Vec<u8> {
    Sha256::digest(url_text.as_bytes()).to_vec()
}

impl Connections {
    /// No connections yet; those made carry `application_name`.
    pub fn named(application_name: &str) -> Self {
        Connections {
            application_name: application_name.to_string(),
            open: Mutex::new(Open::default()),
        }
    }

    /// The connection to `url` (whose text is `url_text`) for `user`: the
    /// one kept for that database if it is still open, else a new one. A
    /// user that moves to another database lets go of the one it had.
    pub async fn get(
        &self,
        user: &str,
        url_text: &str,
        url: &DatabaseUrl,
    ) -> Result<Arc<Db>, DbError> {
        let key = digest(url_text);
        let slot = {
            let mut open = self.lock();
            if let Some(was) = open.users.insert(user.to_string(), key.clone()) {
                if was != key {
                    open.close_unused(&was);
                }
            }
            open.slots.entry(key).or_default().clone()
        };
        let mut db = match slot.db.try_lock() {
            Ok(db) => db,
            Err(_) => {
                // An attempt is under way: if the last one failed, so will
                // this, most likely; say so at once.
                if let Some(e) = slot.failure(FAILED_WHILE_TRYING, url) {
                    return Err(e);
                }
                slot.db.lock().await
            }
        };
        if let Some(kept) = db.as_ref().filter(|d| !d.is_closed()) {
            return Ok(kept.clone());
        }
        if let Some(e) = slot.failure(FAILED_FOR, url) {
            return Err(e);
        }
        let opts = ConnectOptions::named(&self.application_name);
        match orca_db::connect(url, &opts).await {
            Ok(made) => {
                let made = Arc::new(made);
                *db = Some(made.clone());
                *slot.failed.lock().unwrap_or_else(|e| e.into_inner()) = None;
                Ok(made)
            }
            Err(e) => {
                let reason = match &e {
                    DbError::Connect { reason, .. } => reason.clone(),
                    other => other.to_string(),
                };
                *slot.failed.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some((Instant::now(), reason));
                Err(e)
            }
        }
    }

    /// `user` is gone, or its last statement failed: it lets go of its
    /// database's connection, which is closed if no other user has it (and
    /// made again by the next one that asks, if it dropped).
    pub fn forget(&self, user: &str) {
        let mut open = self.lock();
        if let Some(key) = open.users.remove(user) {
            open.close_unused(&key);
        }
    }

    fn lock(&self) -> MutexGuard<'_, Open> {
        // A panic while holding this lock leaves maps that are still whole.
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Open {
    fn close_unused(&mut self, key: &[u8]) {
        if !self.users.values().any(|k| k == key) {
            self.slots.remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A database that takes connections and never answers: each
    /// attempt waits out the connect time-out. Counts the attempts.
    async fn silent_database() -> (String, Arc<AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let attempts = Arc::new(AtomicUsize::new(0));
        let counted = attempts.clone();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                held.push(socket);
            }
        });
        (
            format!("postgres://orca:secret@127.0.0.1:{port}/orca"),
            attempts,
        )
    }

    #[tokio::test]
    async fn users_of_a_database_that_does_not_answer_wait_out_one_attempt_between_them() {
        let (text, attempts) = silent_database().await;
        let url = DatabaseUrl::parse(&text).unwrap();
        let connections = Arc::new(Connections::named("test"));
        let mut tasks = Vec::new();
        for user in 0..8 {
            let (connections, text, url) = (connections.clone(), text.clone(), url.clone());
            tasks.push(tokio::spawn(async move {
                connections.get(&format!("s-{user}"), &text, &url).await
            }));
        }
        for t in tasks {
            let e = t
                .await
                .unwrap()
                .err()
                .expect("no connection to a silent database");
            assert!(e.is_connection(), "{e}");
            assert!(!e.to_string().contains("secret"), "{e}");
        }
        assert_eq!(attempts.load(Ordering::SeqCst), 1, "one attempt for all");
        // Told at once for a while after; then tried again.
        let again = connections.get("s-0", &text, &url).await;
        assert!(again.is_err());
        assert_eq!(attempts.load(Ordering::SeqCst), 1);
    }
}
