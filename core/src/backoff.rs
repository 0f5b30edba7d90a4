//! Back-off, one formula for the whole operator: a wait that doubles with
//! each failure in a row, up to a cap ([`doubling`]). The register Job's
//! retries, a crash-looping pod's restarts, a refused action's retries and
//! failing boots use it as it is; [`Backoff`] adds jitter for
//! `RequestLimitExceeded` (docs/architecture.md#warmpool-controller-act)
//! and failed passes, each wait drawn from its upper half so that many
//! throttled callers spread out.

use std::{
    collections::hash_map::RandomState,
    hash::{BuildHasher, Hasher},
    time::Duration,
};

use crate::by_object::{key, ByObject};

/// `base` doubled `doublings` times, at most `cap`.
pub fn doubling(base: Duration, doublings: u32, cap: Duration) -> Duration {
    base.saturating_mul(1u32 << doublings.min(20)).min(cap)
}

/// A jittered [`doubling`] that counts its own attempts.
#[derive(Clone, Debug)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
    random: RandomState,
}

impl Backoff {
    /// A back-off whose first wait is at most `base` and no wait exceeds
    /// `cap`.
    pub fn new(base: Duration, cap: Duration) -> Self {
        Backoff {
            base,
            cap,
            attempt: 0,
            random: RandomState::new(),
        }
    }

    /// The next wait: in `[d/2, d]` where `d = base · 2^attempt`, at most
    /// `cap`.
    pub fn next_wait(&mut self) -> Duration {
        let d = doubling(self.base, self.attempt, self.cap);
        self.attempt = self.attempt.saturating_add(1);
        let mut h = self.random.build_hasher();
        h.write_u32(self.attempt);
        let fraction = (h.finish() % 1001) as f64 / 1000.0;
        d.mul_f64(0.5 + 0.5 * fraction)
    }

    /// After a success: the next wait starts from `base` again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// The waits handed out since the last reset: how many tries in a row
    /// have failed.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

/// Failed reconciles in a row per object (`namespace/name`), for a
/// controller's `error_policy`: 5 s, 10 s, … 5 min, starting over after a
/// success.
#[derive(Default)]
pub struct PerObject {
    failures: ByObject<u32>,
}

impl PerObject {
    /// The delay before the next try of `namespace/name`, after one more
    /// failure.
    pub fn failed(&self, namespace: &str, name: &str) -> Duration {
        let mut failures = self.failures.lock();
        let n = failures.entry(key(namespace, name)).or_insert(0);
        *n = n.saturating_add(1);
        doubling(Duration::from_secs(5), *n - 1, Duration::from_secs(300))
    }

    /// `namespace/name` reconciled: the back-off starts over.
    pub fn succeeded(&self, namespace: &str, name: &str) {
        self.failures.forget(namespace, name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubling_stops_at_the_cap() {
        let s = Duration::from_secs;
        let waits: Vec<u64> = (0..8)
            .map(|n| doubling(s(10), n, s(300)).as_secs())
            .collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(doubling(s(10), u32::MAX, s(300)), s(300));
    }

    #[test]
    fn waits_grow_with_jitter_up_to_the_cap_and_reset() {
        let mut b = Backoff::new(Duration::from_millis(100), Duration::from_secs(1));
        let waits: Vec<Duration> = (0..8).map(|_| b.next_wait()).collect();
        for (k, w) in waits.iter().enumerate() {
            let d = Duration::from_millis(100 * (1 << k)).min(Duration::from_secs(1));
            assert!(
                *w >= d / 2 && *w <= d,
                "{k}: {w:?} not in [{:?}, {d:?}]",
                d / 2
            );
        }
        b.reset();
        assert!(b.next_wait() <= Duration::from_millis(100));
    }

    #[test]
    fn the_back_off_grows_and_starts_over_after_a_success() {
        let b = PerObject::default();
        let delays: Vec<u64> = (0..9).map(|_| b.failed("ns", "a").as_secs()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 300, 300, 300]);
        assert_eq!(b.failed("ns", "other").as_secs(), 5, "per object");
        b.succeeded("ns", "a");
        assert_eq!(b.failed("ns", "a").as_secs(), 5);
    }
}
