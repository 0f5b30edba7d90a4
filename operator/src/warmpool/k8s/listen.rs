//! The database's notifications as reconcile triggers: one `LISTEN
//! orca_pool` connection per database the pools run on, whose payloads
//! (`namespace/name` of a pool whose demand or rows changed) become
//! requests to reconcile that WarmPool — only a pool whose loop runs on
//! that very database (any database may notify any name: it is its
//! owner's to write), each pool at most once per [`MIN_GAP`], and at most
//! [`PER_SECOND`] of them a second per database, the rest dropped (the
//! resync still comes).
//!
//! Each listener is a task of the controller's [`Listeners`]; dropping it
//! aborts them all. A listener whose database no pool uses any more is
//! stopped. Connecting checks the fence first, so a replica that lost its
//! Lease opens no connection; a closed one is made again with back-off.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use futures::channel::mpsc::UnboundedSender;
use kube::runtime::reflector::ObjectRef;
use orca_db::{ConnectOptions, DatabaseUrl, Reconnect};
use tokio::task::{AbortHandle, JoinSet};

use crate::{backoff::Backoff, by_object::locked, crd::WarmPool, fence::Fence};

/// A database, by the hash of its URL (the URL itself is never kept in a
/// map or shown).
pub(super) type DatabaseKey = [u8; 32];

/// A pool's notifications closer than this wake it once.
pub const MIN_GAP: Duration = Duration::from_millis(200);
/// The most pools one database's notifications wake in a second.
pub const PER_SECOND: usize = 50;

/// Which database each pool's loop runs on (`namespace/name` → its key):
/// whom a database's notification may wake.
pub(super) type OnDatabase = Arc<Mutex<HashMap<String, DatabaseKey>>>;

/// The listeners of the controller, one per database.
pub(super) struct Listeners {
    triggers: UnboundedSender<ObjectRef<WarmPool>>,
    /// Shared with the controller, which keeps it ([`Listeners::on_database`]).
    on_database: OnDatabase,
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
            on_database: OnDatabase::default(),
            fence,
            name,
            running: Mutex::new(HashMap::new()),
            tasks: Mutex::new(Some(JoinSet::new())),
        }
    }

    /// Which database each pool's loop runs on: the controller's to keep,
    /// the listeners' to wake only those.
    pub(super) fn on_database(&self) -> &OnDatabase {
        &self.on_database
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
            Wake {
                key,
                on_database: self.on_database.clone(),
                triggers: self.triggers.clone(),
                last: HashMap::new(),
                second: (Instant::now(), 0),
                dropped: 0,
            },
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

/// Whom one database's notifications wake, and how often.
struct Wake {
    key: DatabaseKey,
    on_database: OnDatabase,
    triggers: UnboundedSender<ObjectRef<WarmPool>>,
    /// When each pool was last woken.
    last: HashMap<String, Instant>,
    /// The current second's start and how many were woken in it.
    second: (Instant, usize),
    /// Notifications dropped since the last said.
    dropped: u64,
}

/// What became of a notification.
#[derive(Debug, PartialEq, Eq)]
enum Woke {
    Woken,
    /// Not a pool of this database's, too soon after its last, or past
    /// the second's budget.
    Dropped,
    /// The controller is gone.
    Gone,
}

impl Wake {
    fn payload(&mut self, payload: &str, now: Instant) -> Woke {
        let ours = locked(&self.on_database).get(payload) == Some(&self.key);
        let Some((namespace, name)) = payload.split_once('/').filter(|_| ours) else {
            return self.drop_one();
        };
        if self
            .last
            .get(payload)
            .is_some_and(|t| now.duration_since(*t) < MIN_GAP)
        {
            return self.drop_one();
        }
        if now.duration_since(self.second.0) >= Duration::from_secs(1) {
            self.second = (now, 0);
            self.last.retain(|_, t| now.duration_since(*t) < MIN_GAP);
        }
        if self.second.1 >= PER_SECOND {
            return self.drop_one();
        }
        self.second.1 += 1;
        self.last.insert(payload.to_string(), now);
        match self
            .triggers
            .unbounded_send(ObjectRef::new(name).within(namespace))
        {
            Ok(()) => Woke::Woken,
            Err(_) => Woke::Gone,
        }
    }

    fn drop_one(&mut self) -> Woke {
        self.dropped += 1;
        Woke::Dropped
    }
}

/// Turns the notifications of the database at `url` into reconcile
/// requests, connecting again (with back-off) whenever the connection
/// ends.
async fn listen(url: DatabaseUrl, options: ConnectOptions, fence: Fence, mut wake: Wake) {
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
            if wake.payload(n.payload(), Instant::now()) == Woke::Gone {
                return;
            }
            if wake.dropped >= 10_000 {
                tracing::info!(database = %target, dropped = wake.dropped,
                    "notifications dropped: not of this database's pools, or too many");
                wake.dropped = 0;
            }
        }
        tracing::debug!(database = %target, "the notification connection ended; connecting again");
    }
}

#[cfg(test)]
mod tests {
    use futures::channel::mpsc;

    use super::*;

    fn wake(key: u8) -> (Wake, mpsc::UnboundedReceiver<ObjectRef<WarmPool>>) {
        let (triggers, woken) = mpsc::unbounded();
        let on_database = OnDatabase::default();
        locked(&on_database).insert("team-a/runners".into(), [key; 32]);
        locked(&on_database).insert("team-b/runners".into(), [key + 1; 32]);
        let w = Wake {
            key: [key; 32],
            on_database,
            triggers,
            last: HashMap::new(),
            second: (Instant::now(), 0),
            dropped: 0,
        };
        (w, woken)
    }

    #[test]
    fn a_database_wakes_only_its_own_pools_each_once_a_gap_and_so_many_a_second() {
        let (mut w, mut woken) = wake(1);
        let t = Instant::now();
        assert_eq!(w.payload("team-a/runners", t), Woke::Woken);
        // Another database's pool, a pool of none, nonsense: dropped.
        for other in ["team-b/runners", "team-c/x", "no-slash", ""] {
            assert_eq!(w.payload(other, t), Woke::Dropped, "{other}");
        }
        // Again within the gap: once.
        assert_eq!(w.payload("team-a/runners", t + MIN_GAP / 2), Woke::Dropped);
        assert_eq!(w.payload("team-a/runners", t + MIN_GAP), Woke::Woken);
        let got: Vec<_> = std::iter::from_fn(|| woken.try_recv().ok()).collect();
        assert_eq!(got.len(), 2);
        assert!(got
            .iter()
            .all(|r| r.name == "runners" && r.namespace.as_deref() == Some("team-a")));
        // A flood of its own pools: at most PER_SECOND a second.
        for i in 0..1000 {
            locked(&w.on_database).insert(format!("team-a/p{i}"), [1; 32]);
        }
        let later = t + Duration::from_secs(5);
        let woke = (0..1000)
            .filter(|i| w.payload(&format!("team-a/p{i}"), later) == Woke::Woken)
            .count();
        assert_eq!(woke, PER_SECOND);
        let next = later + Duration::from_secs(1);
        assert_eq!(w.payload("team-a/p999", next), Woke::Woken);
        drop(woken);
        let (mut w, woken) = wake(1);
        drop(woken);
        assert_eq!(w.payload("team-a/runners", t), Woke::Gone);
    }
}
