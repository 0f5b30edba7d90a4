//! Which of a WarmPool's `spec.schedules` is active at a moment, and so
//! which idle range the plan keeps: pure, table-tested. A period starts at
//! each time its cron expression names, read in its time zone, and lasts
//! its duration; the first schedule (in spec order) with a period under way
//! wins, and with none `spec.idle` holds.

use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use croner::Cron;

use crate::crd::{IdleRange, IdleSchedule, WarmPoolSpec};

/// A schedule the operator cannot read, named by its field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ScheduleError {
    #[error("spec.schedules[{index}].cron: {value:?} is not a cron expression: {reason}")]
    Cron {
        index: usize,
        value: String,
        reason: String,
    },
    #[error("spec.schedules[{index}].timezone: {value:?} is not a time zone of the IANA database (e.g. Europe/Berlin)")]
    Timezone { index: usize, value: String },
    #[error("spec.schedules[{index}].duration: {value:?} is not a duration (e.g. 10h, 30m, 1h30m): {reason}")]
    Duration {
        index: usize,
        value: String,
        reason: String,
    },
}

/// A schedule whose period is under way.
#[derive(Debug, Clone, PartialEq)]
pub struct Active {
    /// Its place in `spec.schedules`.
    pub index: usize,
    pub idle: IdleRange,
    /// When the period that is under way ends.
    pub until: DateTime<Utc>,
}

impl Active {
    /// What `status.activeSchedule` says.
    pub fn describe(&self, spec: &WarmPoolSpec) -> String {
        let s = &spec.schedules[self.index];
        format!(
            "schedules[{}] ({} {}, {}): idle {}..{} until {}",
            self.index,
            s.cron,
            s.timezone,
            s.duration,
            self.idle.min,
            self.idle.max,
            self.until.to_rfc3339()
        )
    }
}

struct Parsed {
    cron: Cron,
    tz: Tz,
    duration: Duration,
}

fn parse(index: usize, s: &IdleSchedule) -> Result<Parsed, ScheduleError> {
    let cron = Cron::from_str(&s.cron).map_err(|e| ScheduleError::Cron {
        index,
        value: s.cron.clone(),
        reason: e.to_string(),
    })?;
    let tz = Tz::from_str(&s.timezone).map_err(|_| ScheduleError::Timezone {
        index,
        value: s.timezone.clone(),
    })?;
    let bad_duration = |reason: String| ScheduleError::Duration {
        index,
        value: s.duration.clone(),
        reason,
    };
    let std = humantime::parse_duration(&s.duration).map_err(|e| bad_duration(e.to_string()))?;
    let duration = Duration::from_std(std).map_err(|e| bad_duration(e.to_string()))?;
    if duration <= Duration::zero() {
        return Err(bad_duration("it must be longer than zero".into()));
    }
    Ok(Parsed { cron, tz, duration })
}

/// Every schedule readable, or the first that is not.
pub fn check(schedules: &[IdleSchedule]) -> Result<(), ScheduleError> {
    for (i, s) in schedules.iter().enumerate() {
        parse(i, s)?;
    }
    Ok(())
}

/// The first schedule with a period under way at `now`: one that started
/// after `now - duration` and not after `now`.
pub fn active(
    schedules: &[IdleSchedule],
    now: DateTime<Utc>,
) -> Result<Option<Active>, ScheduleError> {
    for (index, s) in schedules.iter().enumerate() {
        let p = parse(index, s)?;
        let local = now.with_timezone(&p.tz);
        let Ok(start) = p.cron.find_next_occurrence(&(local - p.duration), false) else {
            // No occurrence at all (say, the 31st of February): never active.
            continue;
        };
        if start <= local {
            // Of the periods under way, the latest ends last.
            let mut last = start;
            while let Ok(next) = p.cron.find_next_occurrence(&last, false) {
                if next > local {
                    break;
                }
                last = next;
            }
            return Ok(Some(Active {
                index,
                idle: s.idle.clone(),
                until: (last + p.duration).with_timezone(&Utc),
            }));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    fn sched(cron: &str, tz: &str, duration: &str, min: i32) -> IdleSchedule {
        IdleSchedule {
            cron: cron.into(),
            timezone: tz.into(),
            duration: duration.into(),
            idle: IdleRange { min, max: min },
        }
    }

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
    }

    /// (what, schedules, now) → the active one's (index, idle.min).
    type Case = (
        &'static str,
        Vec<IdleSchedule>,
        DateTime<Utc>,
        Option<(usize, i32)>,
    );

    #[test]
    fn table() {
        let workdays = sched("0 8 * * 1-5", "Europe/Berlin", "10h", 5);
        let nights = sched("0 22 * * *", "UTC", "8h", 1);
        // 2026-12-01 is a Tuesday; Berlin is UTC+1 in December.
        let cases: Vec<Case> = vec![
            ("none", vec![], utc(2026, 12, 1, 9, 0), None),
            (
                "Tuesday 08:00 Berlin is 07:00 UTC: starts",
                vec![workdays.clone()],
                utc(2026, 12, 1, 7, 0),
                Some((0, 5)),
            ),
            (
                "a minute before the start",
                vec![workdays.clone()],
                utc(2026, 12, 1, 6, 59),
                None,
            ),
            (
                "17:59 Berlin: still on",
                vec![workdays.clone()],
                utc(2026, 12, 1, 16, 59),
                Some((0, 5)),
            ),
            (
                "18:00 Berlin: ended",
                vec![workdays.clone()],
                utc(2026, 12, 1, 17, 0),
                None,
            ),
            (
                "Saturday: off",
                vec![workdays.clone()],
                utc(2026, 12, 5, 9, 0),
                None,
            ),
            (
                "a period crossing midnight",
                vec![nights.clone()],
                utc(2026, 12, 2, 3, 0),
                Some((0, 1)),
            ),
            (
                "the first active wins",
                vec![workdays.clone(), nights.clone()],
                utc(2026, 12, 1, 23, 0),
                Some((1, 1)),
            ),
            (
                "both active: the first",
                vec![nights.clone(), sched("* * * * *", "UTC", "1m", 9)],
                utc(2026, 12, 1, 23, 0),
                Some((0, 1)),
            ),
            (
                "never occurring",
                vec![sched("0 0 31 2 *", "UTC", "1h", 3)],
                utc(2026, 12, 1, 0, 30),
                None,
            ),
        ];
        for (what, schedules, now, want) in cases {
            let got = active(&schedules, now)
                .unwrap_or_else(|e| panic!("{what}: {e}"))
                .map(|a| (a.index, a.idle.min));
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn until_is_the_end_of_the_latest_period_under_way() {
        let every_hour = sched("0 * * * *", "UTC", "90m", 2);
        let a = active(&[every_hour], utc(2026, 12, 1, 10, 40))
            .unwrap()
            .unwrap();
        assert_eq!(a.until, utc(2026, 12, 1, 11, 30));
    }

    #[test]
    fn what_cannot_be_read_is_named_by_its_field() {
        let bad = [
            (
                sched("every day", "UTC", "1h", 1),
                "spec.schedules[0].cron: \"every day\"",
            ),
            (
                sched("0 8 * * *", "Mars/Olympus", "1h", 1),
                "spec.schedules[0].timezone: \"Mars/Olympus\"",
            ),
            (
                sched("0 8 * * *", "UTC", "soon", 1),
                "spec.schedules[0].duration: \"soon\"",
            ),
            (
                sched("0 8 * * *", "UTC", "0s", 1),
                "spec.schedules[0].duration: \"0s\"",
            ),
        ];
        for (s, want) in bad {
            let e = check(std::slice::from_ref(&s)).unwrap_err().to_string();
            assert!(e.starts_with(want), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        assert!(check(&[sched("30 7 * * mon-fri", "America/New_York", "1h30m", 1)]).is_ok());
    }
}
