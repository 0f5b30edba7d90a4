//! Time to start: the pool's hand-outs of the last hour, each with where
//! its instance came from and how long its run waited, for the status's
//! figures (the metrics' histogram takes each hand-out as it is seen).

use std::collections::{HashMap, VecDeque};

use crate::rows::{HandOut, Source};

use super::plan::{Ec2Instance, Offering};
use crate::crd::{StartFigures, TimeToStart};

/// How far back the status's figures reach, in seconds.
pub const WINDOW_SECS: f64 = 3600.0;

/// The most hand-outs kept: beyond it the oldest go first, so a pool
/// serving thousands of runs an hour costs the operator a bounded memory.
const KEPT: usize = 20_000;

/// The hand-outs of the last [`WINDOW_SECS`], oldest first.
#[derive(Clone, Debug, Default)]
pub struct Starts {
    kept: VecDeque<Kept>,
}

/// One hand-out kept: its instance, where it came from, how long its run
/// waited, when, and the offering (instance type, subnet, spot or not) the
/// instance runs in, once a listing showed it.
#[derive(Clone, Debug)]
struct Kept {
    instance: String,
    source: Source,
    waited: f64,
    at: f64,
    offering: Option<Offering>,
}

impl Starts {
    /// Adds hand-outs seen (oldest first) and drops those older than the
    /// window at `now` (the database's epoch seconds).
    pub fn add(&mut self, seen: &[HandOut], now: f64) {
        self.kept.extend(seen.iter().map(|h| Kept {
            instance: h.instance().to_string(),
            source: h.source(),
            waited: h.waited(),
            at: h.at(),
            offering: None,
        }));
        while self.kept.front().is_some_and(|h| h.at <= now - WINDOW_SECS) || self.kept.len() > KEPT
        {
            self.kept.pop_front();
        }
    }

    /// The figures by source; `None` before any hand-out in the window.
    pub fn figures(&self) -> Option<TimeToStart> {
        if self.kept.is_empty() {
            return None;
        }
        let of = |source: Source| {
            let waits = self.waits(source, None)?;
            let millis = |q: f64| (nearest_rank(&waits, q) * 1000.0).round() as i64;
            Some(StartFigures {
                runs: waits.len() as i64,
                p50_millis: millis(0.5),
                p95_millis: millis(0.95),
                max_millis: millis(1.0),
            })
        };
        Some(TimeToStart {
            window_seconds: WINDOW_SECS as i64,
            idle: of(Source::Idle),
            reserve: of(Source::Reserve),
            cold: of(Source::Cold),
        })
    }

    /// Notes the offering of each hand-out's instance that `listed` shows
    /// and none before it did.
    pub fn place(&mut self, listed: &[Ec2Instance]) {
        if self.kept.iter().all(|h| h.offering.is_some()) {
            return;
        }
        let by_id: HashMap<&str, &Offering> =
            listed.iter().map(|i| (i.id(), i.offering())).collect();
        for h in self.kept.iter_mut().filter(|h| h.offering.is_none()) {
            h.offering = by_id.get(h.instance.as_str()).map(|o| (*o).clone());
        }
    }

    /// `source`'s waits in the window, sorted, of instances in `on` if
    /// given; `None` without any.
    fn waits(&self, source: Source, on: Option<&Offering>) -> Option<Vec<f64>> {
        let mut waits: Vec<f64> = self
            .kept
            .iter()
            .filter(|h| h.source == source && on.is_none_or(|o| h.offering.as_ref() == Some(o)))
            .map(|h| h.waited)
            .collect();
        waits.sort_by(f64::total_cmp);
        (!waits.is_empty()).then_some(waits)
    }

    /// The share of `source`'s hand-outs in the window whose run waited at
    /// most `secs`, and how many there were; `None` without any.
    pub fn within(&self, source: Source, secs: f64) -> Option<(f64, usize)> {
        within(&self.waits(source, None)?, secs)
    }

    /// [`Starts::within`] of the hand-outs of instances in offering `on`
    /// only: start times differ by instance type and subnet.
    pub fn within_on(&self, source: Source, secs: f64, on: &Offering) -> Option<(f64, usize)> {
        within(&self.waits(source, Some(on))?, secs)
    }

    /// The `q` quantile (0 to 1) of `source`'s waits in the window, in
    /// seconds, of instances in `on` if given; `None` without any.
    pub fn quantile(&self, source: Source, q: f64, on: Option<&Offering>) -> Option<f64> {
        Some(nearest_rank(&self.waits(source, on)?, q))
    }
}

/// The share of sorted, non-empty `waits` at most `secs`, and how many.
fn within(waits: &[f64], secs: f64) -> Option<(f64, usize)> {
    let n = waits.iter().filter(|w| **w <= secs).count();
    Some((n as f64 / waits.len() as f64, waits.len()))
}

/// The nearest rank of sorted, non-empty `waits`: the smallest wait at
/// least `q` of the runs did not exceed.
fn nearest_rank(waits: &[f64], q: f64) -> f64 {
    let rank = ((q * waits.len() as f64).ceil() as usize).clamp(1, waits.len());
    waits[rank - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(source: Source, waited: f64, at: f64) -> HandOut {
        HandOut::new(format!("i-{at}"), source, waited, at)
    }

    #[test]
    fn figures_are_by_source_over_the_last_hour() {
        let mut s = Starts::default();
        assert_eq!(s.figures(), None);
        let mut seen: Vec<HandOut> = (1..=20)
            .map(|i| out(Source::Cold, f64::from(i), 1000.0 + f64::from(i)))
            .collect();
        seen.push(out(Source::Idle, 0.0, 1030.0));
        s.add(&seen, 1100.0);
        let f = s.figures().unwrap();
        assert_eq!(f.window_seconds, 3600);
        let cold = f.cold.unwrap();
        assert_eq!(
            (cold.runs, cold.p50_millis, cold.p95_millis, cold.max_millis),
            (20, 10_000, 19_000, 20_000)
        );
        assert_eq!(f.idle.unwrap().max_millis, 0);
        assert_eq!(f.reserve, None);
        // An hour on, only what came since counts.
        s.add(&[out(Source::Reserve, 2.5, 4640.0)], 4645.0);
        let f = s.figures().unwrap();
        assert_eq!((f.cold, f.idle), (None, None));
        assert_eq!(f.reserve.unwrap().p50_millis, 2500);
        s.add(&[], 9000.0);
        assert_eq!(s.figures(), None);
    }

    #[test]
    fn the_share_within_a_target_is_by_source() {
        let mut s = Starts::default();
        let seen: Vec<HandOut> = (1..=10)
            .map(|i| out(Source::Cold, f64::from(i) * 10.0, 1000.0 + f64::from(i)))
            .collect();
        s.add(&seen, 1100.0);
        assert_eq!(s.within(Source::Cold, 35.0), Some((0.3, 10)));
        assert_eq!(s.within(Source::Reserve, 35.0), None);
        assert_eq!(s.quantile(Source::Cold, 0.95, None), Some(100.0));
        assert_eq!(s.quantile(Source::Cold, 0.5, None), Some(50.0));
    }

    #[test]
    fn start_times_are_told_apart_by_offering() {
        let off = |subnet: &str| Offering::new("t3.micro".into(), subnet.into(), false);
        // Cold starts in subnet a take 30 s, in b 90 s.
        let seen: Vec<HandOut> = (1..=10)
            .map(|i| {
                let slow = i % 2 == 0;
                out(
                    Source::Cold,
                    if slow { 90.0 } else { 30.0 },
                    1000.0 + f64::from(i),
                )
            })
            .collect();
        let mut s = Starts::default();
        s.add(&seen, 1100.0);
        // Not listed yet: no offering's own.
        assert_eq!(s.within_on(Source::Cold, 60.0, &off("a")), None);
        let listed: Vec<Ec2Instance> = seen
            .iter()
            .map(|h| {
                Ec2Instance::bare(
                    h.instance(),
                    super::super::plan::Ec2State::Running,
                    chrono::DateTime::UNIX_EPOCH,
                )
                .with_offering(off(if (h.at() as i64) % 2 == 0 {
                    "b"
                } else {
                    "a"
                }))
            })
            .collect();
        s.place(&listed);
        assert_eq!(s.within(Source::Cold, 60.0), Some((0.5, 10)));
        assert_eq!(s.within_on(Source::Cold, 60.0, &off("a")), Some((1.0, 5)));
        assert_eq!(s.within_on(Source::Cold, 60.0, &off("b")), Some((0.0, 5)));
        assert_eq!(s.within_on(Source::Cold, 60.0, &off("c")), None);
        assert_eq!(s.quantile(Source::Cold, 0.95, Some(&off("b"))), Some(90.0));
    }

    #[test]
    fn the_window_keeps_a_bounded_number() {
        let mut s = Starts::default();
        let seen: Vec<HandOut> = (0..KEPT + 10)
            .map(|i| out(Source::Idle, 0.0, 100.0 + i as f64 * 0.01))
            .collect();
        s.add(&seen, 400.0);
        assert_eq!(s.figures().unwrap().idle.unwrap().runs, KEPT as i64);
    }
}
