//! Exponential back-off with jitter, for `RequestLimitExceeded`
//! (docs/architecture.md#warmpool-controller-act) and any pass that failed:
//! each wait doubles up to a cap and is drawn from its upper half, so many
//! throttled callers spread out.

use std::{
    collections::hash_map::RandomState,
    hash::{BuildHasher, Hasher},
    time::Duration,
};

#[derive(Clone, Debug)]
pub struct Backoff {
    base: Duration,
    cap: Duration,
    attempt: u32,
    random: RandomState,
}

impl Backoff {
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
        let d = self
            .base
            .saturating_mul(1u32 << self.attempt.min(20))
            .min(self.cap);
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

    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
