//! What a controller keeps of each object between its reconciles, by
//! namespace and name ([`ByObject`]): the back-off of its failures, the
//! status it last wrote, the changes its watch is to show; and the rule
//! every such lock of the operator's is taken by ([`locked`]).

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
        locked(&self.0)
    }

    /// Drops what is kept of `namespace/name` (it is gone, or starts over),
    /// returning it.
    pub fn forget(&self, namespace: &str, name: &str) -> Option<T> {
        self.lock().remove(&key(namespace, name))
    }
}

/// `m`, locked even if a panic elsewhere poisoned it: what the operator
/// keeps behind its locks is whole between statements (a reconcile's panic
/// is that object's alone), so it is read all the same.
pub fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The map's key of `namespace/name`.
pub fn key(namespace: &str, name: &str) -> (String, String) {
    (namespace.to_string(), name.to_string())
}
