//! One connection per database, shared by everything of one controller
//! that reaches it (docs/operations.md#sizing): a thousand Schedulers or
//! two hundred WarmPools on one database make one connection of the
//! controller's, not one each. Their statements are single statements,
//! which one connection carries side by side (the client pipelines them).
//!
//! A database is known by a digest of its URL text: the text itself is
//! kept only by those who connect with it. A connection nobody uses any
//! more is closed, and one that dropped is made again by the next user.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard},
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
/// who ask at once make one connection.
#[derive(Default)]
struct Slot {
    db: tokio::sync::Mutex<Option<Arc<Db>>>,
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
        let mut db = slot.db.lock().await;
        if let Some(kept) = db.as_ref().filter(|d| !d.is_closed()) {
            return Ok(kept.clone());
        }
        let opts = ConnectOptions::named(&self.application_name);
        let made = Arc::new(orca_db::connect(url, &opts).await?);
        *db = Some(made.clone());
        Ok(made)
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

    /// The databases this controller keeps a connection to.
    pub fn databases(&self) -> usize {
        self.lock().slots.len()
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
