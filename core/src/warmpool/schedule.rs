//! Which of a WarmPool's `spec.schedules` is active at a moment, and so
//! which idle range the plan keeps: pure, table-tested. A period starts at
//! each time its cron expression names, read in its time zone, and lasts
//! its duration; the first schedule (in spec order) with a period under way
//! wins, and with none `spec.idle` holds.
//!
//! Reading a period is [`crate::window`]'s.

use chrono::{DateTime, Utc};

use crate::crd::{IdleRange, IdleSchedule, WarmPoolSpec};
use crate::window::{Window, WindowError};

/// A schedule the operator cannot read, named by its field
/// (`spec.schedules[2].timezone: …`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("spec.schedules[{index}].{source}")]
pub struct ScheduleError {
    index: usize,
    #[source]
    source: WindowError,
}

/// A schedule whose period is under way.
#[derive(Debug, Clone, PartialEq)]
pub struct Active {
    /// Its place in `spec.schedules`.
    index: usize,
    idle: IdleRange,
    /// When the period that is under way ends.
    until: DateTime<Utc>,
}

impl Active {
    /// The idle range the period under way asks for.
    pub fn idle(&self) -> &IdleRange {
        &self.idle
    }

    /// What `status.activeSchedule` says.
    pub fn describe(&self, spec: &WarmPoolSpec) -> String {
        let s = &spec.schedules[self.index];
        format!(
            "schedules[{}] ({} {}, {}): idle {}..{} until {}",
            self.index,
            s.period.cron,
            s.period.timezone,
            s.period.duration,
            self.idle.min,
            self.idle.max,
            self.until.to_rfc3339()
        )
    }
}

fn parse(index: usize, s: &IdleSchedule) -> Result<Window, ScheduleError> {
    Window::parse(&s.period).map_err(|source| ScheduleError { index, source })
}

/// Every schedule readable, or the first that is not.
pub fn check(schedules: &[IdleSchedule]) -> Result<(), ScheduleError> {
    for (i, s) in schedules.iter().enumerate() {
        parse(i, s)?;
    }
    Ok(())
}

/// The idle range `spec` keeps at `t`: the schedule under way's, else
/// `spec.idle` (also when a schedule cannot be read; the pass warns).
pub fn idle_at(spec: &WarmPoolSpec, t: DateTime<Utc>) -> IdleRange {
    idle_of(spec, &active(&spec.schedules, t))
}

/// The idle range of `spec` with `active` (what [`active`] said).
pub fn idle_of(spec: &WarmPoolSpec, active: &Result<Option<Active>, ScheduleError>) -> IdleRange {
    match active {
        Ok(Some(a)) => a.idle.clone(),
        _ => spec.idle.clone(),
    }
}

/// The first schedule with a period under way at `now`: its latest start at
/// or before `now` is less than its duration ago. Of the periods under way
/// that latest one ends last, so it says until when the schedule holds.
pub fn active(
    schedules: &[IdleSchedule],
    now: DateTime<Utc>,
) -> Result<Option<Active>, ScheduleError> {
    for (index, s) in schedules.iter().enumerate() {
        if let Some(until) = parse(index, s)?.under_way(now) {
            return Ok(Some(Active {
                index,
                idle: s.idle.clone(),
                until,
            }));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use chrono::{Duration, TimeZone};

    use super::*;

    fn sched(cron: &str, tz: &str, duration: &str, min: i32) -> IdleSchedule {
        IdleSchedule {
            period: crate::crd::Period {
                cron: cron.into(),
                timezone: tz.into(),
                duration: duration.into(),
            },
            idle: IdleRange { min, max: min },
        }
    }

    fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(y, mo, d, h, mi, 0).unwrap()
    }

    /// (what, schedules, now) → the active one's (index, idle.min).
    type Case<'a> = (
        &'static str,
        Vec<&'a IdleSchedule>,
        DateTime<Utc>,
        Option<(usize, i32)>,
    );

    #[test]
    fn table() {
        let workdays = sched("0 8 * * 1-5", "Europe/Berlin", "10h", 5);
        let nights = sched("0 22 * * *", "UTC", "8h", 1);
        let every_minute = sched("* * * * *", "UTC", "1m", 9);
        let (w, n, m) = (&workdays, &nights, &every_minute);
        // 2026-12-01 is a Tuesday; Berlin is UTC+1 in December.
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            ("none",                                      vec![],     utc(2026, 12, 1, 9, 0),   None),
            ("Tuesday 08:00 Berlin is 07:00 UTC: starts", vec![w],    utc(2026, 12, 1, 7, 0),   Some((0, 5))),
            ("a minute before the start",                 vec![w],    utc(2026, 12, 1, 6, 59),  None),
            ("17:59 Berlin: still on",                    vec![w],    utc(2026, 12, 1, 16, 59), Some((0, 5))),
            ("18:00 Berlin: ended",                       vec![w],    utc(2026, 12, 1, 17, 0),  None),
            ("Saturday: off",                             vec![w],    utc(2026, 12, 5, 9, 0),   None),
            ("a period crossing midnight",                vec![n],    utc(2026, 12, 2, 3, 0),   Some((0, 1))),
            ("the first active wins",                     vec![w, n], utc(2026, 12, 1, 23, 0),  Some((1, 1))),
            ("both active: the first",                    vec![n, m], utc(2026, 12, 1, 23, 0),  Some((0, 1))),
        ];
        for (what, schedules, now, want) in cases {
            let schedules: Vec<IdleSchedule> = schedules.into_iter().cloned().collect();
            let got = active(&schedules, now)
                .unwrap_or_else(|e| panic!("{what}: {e}"))
                .map(|a| (a.index, a.idle.min));
            assert_eq!(got, want, "{what}");
        }
    }

    #[test]
    fn a_period_of_thousands_of_years_is_refused_not_computed() {
        // Once a panic (`DateTime - TimeDelta overflowed`) that stopped the
        // operator for every object: now the field is named.
        let s = sched("* * * * *", "UTC", "300000y", 1);
        let e = active(std::slice::from_ref(&s), utc(2026, 12, 1, 9, 0)).unwrap_err();
        assert!(e.to_string().contains("at most 366 days"), "{e}");
    }

    #[test]
    fn a_start_every_minute_for_a_year_is_one_lookup() {
        // The latest start is all that is looked for: a period of a year
        // started every minute costs what a daily one does.
        let s = sched("* * * * *", "UTC", "366d", 4);
        let a = active(std::slice::from_ref(&s), utc(2026, 12, 1, 9, 30))
            .unwrap()
            .unwrap();
        assert_eq!(a.until, utc(2026, 12, 1, 9, 30) + Duration::days(366));
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
        #[rustfmt::skip]
        let bad = [
            (sched("every day", "UTC", "1h", 1),          r#"spec.schedules[0].cron: "every day""#),
            (sched("0 8 * * *", "Mars/Olympus", "1h", 1), r#"spec.schedules[0].timezone: "Mars/Olympus""#),
            (sched("0 8 * * *", "UTC", "soon", 1),        r#"spec.schedules[0].duration: "soon""#),
            (sched("0 8 * * *", "UTC", "0s", 1),          r#"spec.schedules[0].duration: "0s""#),
            (sched("* * * * *", "UTC", "300000y", 1),     r#"spec.schedules[0].duration: "300000y""#),
            (sched("* * * * *", "UTC", "367d", 1),        r#"spec.schedules[0].duration: "367d""#),
            (sched("0 0 31 2 *", "UTC", "1h", 1),
             r#"spec.schedules[0].cron: "0 0 31 2 *" is not a cron expression: it never fires"#),
        ];
        for (s, want) in bad {
            let e = check(std::slice::from_ref(&s)).unwrap_err().to_string();
            assert!(e.starts_with(want), "{e}");
            assert!(!e.contains('\n'), "one line: {e}");
        }
        assert!(check(&[sched("30 7 * * mon-fri", "America/New_York", "1h30m", 1)]).is_ok());
    }
}
