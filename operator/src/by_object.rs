//! What a controller keeps of each object between its reconciles, by
//! namespace and name ([`ByObject`]): the back-off of its failures, the
//! status it last wrote, the changes its watch is to show.

use std::{
    collections::HashMap,
    sync::{Mutex, MutexGuard, PoisonError},
};

/// One value per object (`namespace/name`) behind one lock. A panic while
/// it is held — a reconcile's panic is that object's alone — leaves a map
/// that is still whole, so the lock is taken all the same.
#[derive(Debug)]
pub struct ByObject<T>(Mutex<HashMap<(String, String), T>>);

impl<T> Default for ByObject<T> {
    fn default() -> Self {
        ByObject(Mutex::new(HashMap::new()))
    }
}

impl<T> ByObject<T> {
    /// The map, locked.
    pub fn lock(&self) -> MutexGuard<'_, HashMap<(String, String), T>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Drops what is kept of `namespace/name` (it is gone, or starts over),
    /// returning it.
    pub fn forget(&self, namespace: &str, name: &str) -> Option<T> {
        self.lock().remove(&key(namespace, name))
    }
}

/// The map's key of `namespace/name`.
pub fn key(namespace: &str, name: &str) -> (String, String) {
    (namespace.to_string(), name.to_string())
}
