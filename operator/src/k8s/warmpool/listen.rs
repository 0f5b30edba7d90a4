//! The database's notifications as reconcile triggers: one `LISTEN
//! orca_pool` connection per database the pools run on, whose payloads
//! (`namespace/name` of a pool whose demand or rows changed) become
//! requests to reconcile that WarmPool.
//!
//! Each listener is a task of the controller's [`Listeners`]; dropping it
//! aborts them all. A listener whose database no pool uses any more is
//! stopped. Connecting checks the fence first, so a replica that lost its
//! Lease opens no connection; a closed one is made again with back-off.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::ObjectRef;
use orca_db::{ConnectOptions, DatabaseUrl, Reconnect};
use tokio::task::{AbortHandle, JoinSet};

use crate::{backoff::Backoff, by_object::locked, crd::WarmPool, fence::Fence};

/// A database, by the hash of its URL (the URL itself is never kept in a
/// map or shown).
pub(super) type DatabaseKey = [u8; 32];

/// The listeners of the controller, one per database.
pub(super) struct Listeners {
    triggers: UnboundedSender<ObjectRef<WarmPool>>,
    fence: Fence,
    /// The listeners' connections' `application_name`.
    name: String,
    running: Mutex<HashMap<DatabaseKey, AbortHandle>>,
    /// `None` once stopped: nothing starts after.
    tasks: Mutex<Option<JoinSet<()>>>,
}

impl Listeners {
    pub(super) fn new(
        triggers: UnboundedSender<ObjectRef<WarmPool>>,
        fence: Fence,
        name: String,
    ) -> Self {
        Listeners {
            triggers,
            fence,
            name,
            running: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Some(JoinSet::new())),
        }
    }

    /// Listens on the database `key` (at `url`) unless it does already.
    pub(super) fn ensure(&self, key: DatabaseKey, url: &DatabaseUrl) {
        let mut running = locked(&self.running);
        if running.get(&key).is_some_and(|t| !t.is_finished()) {
            return;
        }
        let mut tasks = locked(&self.tasks);
        let Some(set) = tasks.as_mut() else {
            return;
        };
        while set.try_join_next().is_some() {}
        let task = listen(
            url.clone(),
            ConnectOptions::named(&self.name),
            self.fence.clone(),
            self.triggers.clone(),
        );
        running.insert(key, set.spawn(task));
    }

    /// Stops the listeners of databases not in `used`.
    pub(super) fn retain(&self, used: &[DatabaseKey]) {
        locked(&self.running).retain(|key, task| {
            let keep = used.contains(key);
            if !keep {
                task.abort();
            }
            keep
        });
    }

    /// Stops every listener; none starts after.
    pub(super) fn stop(&self) {
        let set = locked(&self.tasks).take();
        locked(&self.running).clear();
        drop(set);
    }
}

/// Turns the notifications of the database at `url` into reconcile
/// requests, connecting again (with back-off) whenever the connection
/// ends.
async fn listen(
    url: DatabaseUrl,
    options: ConnectOptions,
    fence: Fence,
    triggers: UnboundedSender<ObjectRef<WarmPool>>,
) {
    let target = url.target();
    let reconnect = Reconnect::new(url, options).listen("orca_pool");
    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
    let mut down = false;
    loop {
        if fence.check().is_err() {
            // The controller stops with the fence; until then, no call.
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        }
        let mut db = match reconnect.try_connect().await {
            Ok(db) => db,
            Err(e) => {
                if !down {
                    tracing::warn!(database = %target, error = %e,
                        "cannot listen for pool notifications; passes go on at the resync");
                    down = true;
                }
                tokio::time::sleep(backoff.next_wait()).await;
                continue;
            }
        };
        if down {
            tracing::info!(database = %target, "listening for pool notifications again");
            down = false;
        }
        backoff.reset();
        while let Some(n) = db.notification().await {
            let Some((namespace, name)) = n.payload().split_once('/') else {
                continue;
            };
            let pool = ObjectRef::new(name).within(namespace);
            if triggers.unbounded_send(pool).is_err() {
                // The controller is gone.
                return;
            }
        }
        tracing::debug!(database = %target, "the notification connection ended; connecting again");
    }
}
