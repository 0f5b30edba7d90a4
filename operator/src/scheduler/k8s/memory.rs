//! What this replica last wrote into each Scheduler's status, for the
//! passes that start before the watch shows it. The controller hands each
//! pass the object from its watch cache; a pass triggered by a pod's change
//! can start before the cache has the status the previous pass applied.
//! Deciding on that older status would forget what the status remembers
//! (the handover under way, the last pod sequence) and write the older
//! view back. So each status write records the resourceVersions known to
//! be older than it and the one it produced: a cached object at one of the
//! older versions is read with the status written instead; at the version
//! written, or at any other (someone else wrote since), the cache is
//! believed and the memory dropped. No extra API call.

use std::collections::HashSet;

use crate::by_object::{key, ByObject};
use crate::crd::SchedulerStatus;

/// The status this replica last wrote to each Scheduler, kept until the
/// watch cache shows it or someone else writes.
#[derive(Default)]
pub struct StatusMemory {
    written: ByObject<Written>,
}

struct Written {
    /// Versions of the object older than the write.
    older: HashSet<String>,
    /// The version the write produced.
    version: String,
    status: SchedulerStatus,
}

impl StatusMemory {
    /// The status a pass should start from: `cached` (at `version`), or
    /// what this replica wrote since, if the cache is older than that.
    pub fn status(
        &self,
        namespace: &str,
        name: &str,
        version: Option<&str>,
        cached: &SchedulerStatus,
    ) -> SchedulerStatus {
        let key = key(namespace, name);
        let mut written = self.written.lock();
        match (written.get(&key), version) {
            (Some(w), Some(v)) if w.older.contains(v) => w.status.clone(),
            (Some(_), _) => {
                written.remove(&key);
                cached.clone()
            }
            (None, _) => cached.clone(),
        }
    }

    /// A status write of an object seen at `seen` produced `version`.
    pub fn wrote(
        &self,
        namespace: &str,
        name: &str,
        seen: Option<&str>,
        version: Option<String>,
        status: &SchedulerStatus,
    ) {
        let key = key(namespace, name);
        let mut written = self.written.lock();
        let Some(version) = version else {
            written.remove(&key);
            return;
        };
        let mut older = written
            .remove(&key)
            .map(|w| {
                let mut older = w.older;
                older.insert(w.version);
                older
            })
            .unwrap_or_default();
        older.extend(seen.map(String::from));
        written.insert(
            key,
            Written {
                older,
                version,
                status: status.clone(),
            },
        );
    }

    /// The Scheduler is gone.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.written.forget(namespace, name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::Phase;

    /// This replica wrote `status` of ns/a over `seen`, the API answering
    /// `version`.
    fn wrote(m: &StatusMemory, seen: &str, version: &str, status: &SchedulerStatus) {
        m.wrote("ns", "a", Some(seen), Some(version.into()), status);
    }

    fn status(phase: Phase, sequence: i64) -> SchedulerStatus {
        SchedulerStatus {
            phase,
            last_sequence: sequence,
            ..Default::default()
        }
    }

    /// A first pass adds the finalizer (version 11), then writes the status
    /// (12). A pass whose cache shows the finalizer's patch has not seen
    /// that status: it once started from the empty one, and made its first
    /// pod again under the same name.
    #[test]
    fn the_finalizers_patch_is_older_than_the_status_written_after_it() {
        let m = StatusMemory::default();
        let empty = SchedulerStatus::default();
        wrote(&m, "10", "11", &empty);
        wrote(&m, "10", "12", &status(Phase::Starting, 1));
        assert_eq!(m.status("ns", "a", Some("11"), &empty).last_sequence, 1);
        assert_eq!(m.status("ns", "a", Some("10"), &empty).last_sequence, 1);
    }

    #[test]
    fn a_cache_behind_this_replicas_writes_is_read_with_the_last_one() {
        let m = StatusMemory::default();
        let old = status(Phase::Ready, 1);
        wrote(&m, "10", "11", &status(Phase::HandingOver, 2));
        // The cache still at 10: the write is what the status is.
        assert_eq!(m.status("ns", "a", Some("10"), &old).last_sequence, 2);
        // A second write before the cache caught up: 10 and 11 are older.
        wrote(&m, "10", "12", &status(Phase::Draining, 2));
        assert_eq!(m.status("ns", "a", Some("11"), &old).phase, Phase::Draining);
        assert_eq!(m.status("ns", "a", Some("10"), &old).phase, Phase::Draining);
        // Caught up: the cache is believed, and the memory dropped.
        let fresh = status(Phase::Draining, 2);
        assert_eq!(m.status("ns", "a", Some("12"), &fresh), fresh);
        assert_eq!(m.status("ns", "a", Some("10"), &old), old, "dropped");
    }

    #[test]
    fn someone_elses_write_is_believed() {
        let m = StatusMemory::default();
        wrote(&m, "10", "11", &status(Phase::HandingOver, 2));
        let theirs = status(Phase::Paused, 2);
        assert_eq!(m.status("ns", "a", Some("13"), &theirs), theirs);
        assert_eq!(
            m.status("ns", "b", Some("10"), &theirs),
            theirs,
            "per Scheduler"
        );
    }
}
