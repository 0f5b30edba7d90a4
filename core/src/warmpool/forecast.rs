//! The forecast warm-up's arithmetic (`spec.forecast`): from the pool's
//! demand history, counted in slices of one boot (`leadSeconds`), the
//! idle floor of each hour of the week; and the floor at a moment, raised
//! one boot ahead of the hour that needs it. Pure: the history and the
//! clock come in.

use std::collections::BTreeMap;
use std::str::FromStr;

use chrono::{DateTime, Datelike, Duration, DurationRound, TimeZone, Timelike, Utc};
use chrono_tz::Tz;

use crate::crd::{Forecast, ForecastHour, ForecastStatus, IdleRange};

const WEEK_SECS: i64 = 7 * 24 * 3600;
const HOURS: usize = 7 * 24;

/// Runs that needed an instance, by slice: the slice `k` covers
/// `[k * slice_secs, (k + 1) * slice_secs)` in epoch seconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Demand {
    slice_secs: i64,
    counts: BTreeMap<i64, u32>,
}

impl Demand {
    /// These, with `slice_secs` set.
    pub fn with_slice_secs(self, slice_secs: i64) -> Self {
        Demand { slice_secs, ..self }
    }

    /// These, with `counts` set.
    pub fn with_counts(self, counts: BTreeMap<i64, u32>) -> Self {
        Demand { counts, ..self }
    }

    /// Runs that needed an instance, by slice of `slice_secs`.
    pub fn counts(&self) -> &BTreeMap<i64, u32> {
        &self.counts
    }

    /// The length of a slice, in seconds (at least one).
    pub fn slice_secs(&self) -> i64 {
        self.slice_secs.max(1)
    }

    /// No demand yet, counted in slices of `slice_secs`.
    pub fn new(slice_secs: i64) -> Self {
        Demand {
            slice_secs: slice_secs.max(1),
            counts: BTreeMap::new(),
        }
    }

    /// Counts one run that needed an instance at `at` (epoch seconds).
    pub fn add(&mut self, at: i64) {
        *self
            .counts
            .entry(at.div_euclid(self.slice_secs()))
            .or_default() += 1;
    }
}

/// The idle floor of each hour of the week, and what it came from.
#[derive(Clone, Debug, PartialEq)]
pub struct Floors {
    /// By hour of the week in `tz`: Monday 00:00 is 0.
    by_hour: [u32; HOURS],
    /// Weeks of history with demand in them.
    weeks: u32,
    lead: Duration,
    tz: Tz,
}

/// The hour of the week of `t` in `tz`: Monday 00:00–01:00 is 0.
fn hour_of_week(t: DateTime<Utc>, tz: Tz) -> usize {
    let local = t.with_timezone(&tz);
    local.weekday().num_days_from_monday() as usize * 24 + local.hour() as usize
}

/// The floors `spec` foresees at `now` from `demand`: for each of the
/// `spec.weeks` weeks back from `now` that has demand, the peak slice of
/// each hour of the week; for each hour, the `spec.percentile` of those
/// peaks (nearest rank). An unknown time zone reads as UTC (the API server
/// refuses one it does not know).
pub fn floors(spec: &Forecast, demand: &Demand, now: DateTime<Utc>) -> Floors {
    let tz = Tz::from_str(&spec.timezone).unwrap_or(Tz::UTC);
    let weeks = spec.weeks.clamp(1, 52) as usize;
    let mut peaks = vec![[0u32; HOURS]; weeks];
    let mut seen = vec![false; weeks];
    let now_secs = now.timestamp();
    for (&slice, &n) in &demand.counts {
        let at = slice * demand.slice_secs;
        let age = now_secs - at;
        if !(0..WEEK_SECS * weeks as i64).contains(&age) {
            continue;
        }
        let week = (age / WEEK_SECS) as usize;
        let Some(t) = Utc.timestamp_opt(at, 0).single() else {
            continue;
        };
        let h = hour_of_week(t, tz);
        peaks[week][h] = peaks[week][h].max(n);
        seen[week] = true;
    }
    let kept: Vec<&[u32; HOURS]> = peaks
        .iter()
        .zip(&seen)
        .filter(|(_, s)| **s)
        .map(|(p, _)| p)
        .collect();
    let mut by_hour = [0u32; HOURS];
    if !kept.is_empty() {
        let q = f64::from(spec.percentile.clamp(0, 100)) / 100.0;
        let rank = ((q * kept.len() as f64).ceil() as usize).clamp(1, kept.len());
        for (h, floor) in by_hour.iter_mut().enumerate() {
            let mut of_hour: Vec<u32> = kept.iter().map(|p| p[h]).collect();
            of_hour.sort_unstable();
            *floor = of_hour[rank - 1];
        }
    }
    Floors {
        by_hour,
        weeks: kept.len() as u32,
        lead: Duration::seconds(spec.lead_seconds.clamp(0, 3600)),
        tz,
    }
}

impl Floors {
    /// The forecast's floor at `t`: its hour's, or the next one's from one
    /// lead before that hour begins.
    pub fn at(&self, t: DateTime<Utc>) -> u32 {
        self.by_hour[hour_of_week(t, self.tz)]
            .max(self.by_hour[hour_of_week(t + self.lead, self.tz)])
    }

    /// The idle range to keep at `t` when `idle` is the spec's (or the
    /// schedule's) for that moment: the forecast's floor within idle.max,
    /// never below idle.min.
    pub fn raise(&self, idle: &IdleRange, t: DateTime<Utc>) -> IdleRange {
        let foreseen = i32::try_from(self.at(t)).unwrap_or(i32::MAX);
        IdleRange {
            min: idle.min.max(foreseen.min(idle.max)),
            max: idle.max,
        }
    }

    /// What the status shows: the floor kept in each of the `n` hours from
    /// the one under way at `now` (the highest it gets within the hour),
    /// `idle_at` giving the idle range of the spec or schedule at a moment.
    pub fn status(
        &self,
        now: DateTime<Utc>,
        n: usize,
        idle_at: impl Fn(DateTime<Utc>) -> IdleRange,
    ) -> ForecastStatus {
        let hour = now.duration_trunc(Duration::hours(1)).unwrap_or(now);
        let next = (0..n as i64)
            .map(|i| {
                let from = hour + Duration::hours(i);
                let last = from + Duration::seconds(3599);
                let min = [from, last]
                    .into_iter()
                    .map(|t| self.raise(&idle_at(t), t).min)
                    .max()
                    .unwrap_or(0);
                ForecastHour {
                    from: from.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                    idle_min: min,
                }
            })
            .collect();
        ForecastStatus {
            weeks: self.weeks as i32,
            next,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    fn spec(percentile: i32, weeks: i32) -> Forecast {
        Forecast {
            percentile,
            weeks,
            lead_seconds: 300,
            timezone: "UTC".into(),
        }
    }

    /// Three weeks of Mondays at 09:00 with `runs[w]` runs within five
    /// minutes in week `w` (0 the latest), each at 09:10.
    fn mondays(runs: &[u32], now: DateTime<Utc>) -> Demand {
        let mut d = Demand::new(300);
        for (w, n) in runs.iter().enumerate() {
            let monday = t("2026-11-30T09:10:00Z") - Duration::weeks(w as i64);
            assert!(monday < now);
            for i in 0..*n {
                d.add(monday.timestamp() + i64::from(i % 60));
            }
        }
        d
    }

    #[test]
    fn an_hours_floor_is_the_percentile_of_its_weekly_peaks_raised_one_lead_ahead() {
        let now = t("2026-12-02T12:00:00Z");
        let demand = mondays(&[6, 2, 4], now);
        let idle = |_| IdleRange { min: 1, max: 5 };
        // The busiest Monday of three at 90 %, the middle one at 50 %.
        let f = floors(&spec(90, 4), &demand, now);
        assert_eq!(f.weeks, 3);
        assert_eq!(f.at(t("2026-12-07T09:30:00Z")), 6);
        assert_eq!(
            floors(&spec(50, 4), &demand, now).at(t("2026-12-07T09:30:00Z")),
            4
        );
        // One lead (5 minutes) before 09:00, not earlier; after 10:00, none.
        assert_eq!(f.at(t("2026-12-07T08:54:00Z")), 0);
        assert_eq!(f.at(t("2026-12-07T08:55:00Z")), 6);
        assert_eq!(f.at(t("2026-12-07T10:00:00Z")), 0);
        // Within idle.max, never below idle.min.
        assert_eq!(f.raise(&idle(()), t("2026-12-07T09:30:00Z")).min, 5);
        assert_eq!(f.raise(&idle(()), t("2026-12-07T11:00:00Z")).min, 1);
        // Only the weeks asked for: the last one alone saw 6.
        assert_eq!(
            floors(&spec(100, 1), &demand, now).at(t("2026-12-07T09:30:00Z")),
            6
        );
        assert_eq!(floors(&spec(100, 1), &demand, now).weeks, 1);
    }

    #[test]
    fn no_history_foresees_nothing() {
        let now = t("2026-12-02T12:00:00Z");
        let f = floors(&spec(90, 4), &Demand::new(300), now);
        assert_eq!((f.weeks, f.at(now)), (0, 0));
        let s = f.status(now, 3, |_| IdleRange { min: 2, max: 4 });
        assert_eq!(
            s.next.iter().map(|h| h.idle_min).collect::<Vec<_>>(),
            [2, 2, 2]
        );
        assert_eq!(s.next[0].from, "2026-12-02T12:00:00Z");
    }

    #[test]
    fn the_status_shows_the_hours_ahead_with_their_schedules() {
        let now = t("2026-12-07T07:30:00Z");
        let demand = mondays(&[3], now - Duration::weeks(1) + Duration::days(7));
        let f = floors(&spec(90, 4), &demand, now);
        // A schedule from 10:00 keeps 4.
        let s = f.status(now, 4, |at| IdleRange {
            min: if at.hour() >= 10 { 4 } else { 0 },
            max: 8,
        });
        let shown: Vec<(String, i32)> = s.next.into_iter().map(|h| (h.from, h.idle_min)).collect();
        assert_eq!(
            shown,
            [
                ("2026-12-07T07:00:00Z".to_string(), 0),
                // From 08:55, one lead before 09:00.
                ("2026-12-07T08:00:00Z".to_string(), 3),
                ("2026-12-07T09:00:00Z".to_string(), 3),
                ("2026-12-07T10:00:00Z".to_string(), 4),
            ]
        );
    }

    #[test]
    fn hours_are_local_to_the_time_zone() {
        let now = t("2026-12-02T12:00:00Z");
        // 09:10 UTC is 10:10 in Berlin in winter.
        let demand = mondays(&[5], now);
        let berlin = Forecast {
            timezone: "Europe/Berlin".into(),
            ..spec(90, 4)
        };
        let f = floors(&berlin, &demand, now);
        assert_eq!(f.by_hour[10], 5);
        assert_eq!(f.at(t("2026-12-07T09:30:00Z")), 5);
    }
}
