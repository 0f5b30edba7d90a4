//! Periods read: when a cron expression's period is under way and when the
//! next one starts, in its time zone (see [`crate::crd::Period`]). Pure;
//! the WarmPool's idle schedules and the Scheduler's maintenance windows
//! both ask it.
//!
//! Periods are user input read at every pass, so nothing here may panic or
//! take long whatever the spec says: a period is at most
//! [`MAX_PERIOD_DAYS`] long (a longer one is refused, naming the field), and
//! each question is one search of the cron expression, never a walk over
//! the starts within a period.

use std::str::FromStr;

use chrono::{DateTime, Duration, Utc};
use chrono_tz::Tz;
use croner::Cron;

use crate::crd::Period;

/// The longest period: a year and a day. Longer ones are refused (the CRD
/// already refuses most), so that no time computed from a period can leave
/// chrono's range.
pub const MAX_PERIOD_DAYS: i64 = 366;

/// A field of a period the operator cannot read; the field's name is the
/// caller's to add (`spec.schedules[0].`).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WindowError {
    #[error("cron: {value:?} is not a cron expression: {reason}")]
    Cron { value: String, reason: String },
    #[error("timezone: {value:?} is not a time zone of the IANA database (e.g. Europe/Berlin)")]
    Timezone { value: String },
    #[error("duration: {value:?} is not a duration (e.g. 10h, 30m, 1h30m): {reason}")]
    Duration { value: String, reason: String },
}

/// A period, read.
#[derive(Debug, Clone)]
pub struct Window {
    cron: Cron,
    tz: Tz,
    duration: Duration,
}

impl Window {
    /// `p` read, or the first of its fields that cannot be.
    pub fn parse(p: &Period) -> Result<Window, WindowError> {
        let cron = Cron::from_str(&p.cron).map_err(|e| WindowError::Cron {
            value: p.cron.clone(),
            reason: e.to_string(),
        })?;
        if let Some(why) = never_fires(&cron, &p.cron) {
            return Err(WindowError::Cron {
                value: p.cron.clone(),
                reason: why,
            });
        }
        let tz = Tz::from_str(&p.timezone).map_err(|_| WindowError::Timezone {
            value: p.timezone.clone(),
        })?;
        let bad_duration = |reason: String| WindowError::Duration {
            value: p.duration.clone(),
            reason,
        };
        let std =
            humantime::parse_duration(&p.duration).map_err(|e| bad_duration(e.to_string()))?;
        let duration = Duration::from_std(std).map_err(|e| bad_duration(e.to_string()))?;
        if duration <= Duration::zero() {
            return Err(bad_duration("it must be longer than zero".into()));
        }
        if duration > Duration::days(MAX_PERIOD_DAYS) {
            return Err(bad_duration(format!(
                "a period lasts at most {MAX_PERIOD_DAYS} days"
            )));
        }
        Ok(Window { cron, tz, duration })
    }

    /// When the period under way at `now` ends, if one is: its latest
    /// start at or before `now` is less than its duration ago. Of the
    /// periods under way that latest one ends last.
    pub fn under_way(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = now.with_timezone(&self.tz);
        // No start at all before now (say, the 31st of February).
        let start = self.cron.find_previous_occurrence(&local, true).ok()?;
        // Past chrono's last year: not a period of this world.
        let until = start.checked_add_signed(self.duration)?;
        (until > local).then(|| until.with_timezone(&Utc))
    }

    /// When the next period starts after `now`; none if it never does.
    pub fn next_start(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = now.with_timezone(&self.tz);
        self.cron
            .find_next_occurrence(&local, false)
            .ok()
            .map(|t| t.with_timezone(&Utc))
    }
}

/// How far ahead a cron expression must fire once: the Gregorian
/// calendar's days of the week and leap years repeat every 28 years (in
/// any one century), so an expression that fires at all fires within them.
const CYCLE_YEARS: i32 = 28;

/// Why `cron` never fires, if it does not: no day of the 28-year cycle of
/// weekdays and leap years matches its days, months and weekdays, however
/// written (a list, a range, a step, `L`, `W`, `#`: `0 0 30-31 2 *`, `0 0
/// 31 */2 *` with odd months only). Each day of the cycle is asked of the
/// expression once, from a fixed start, and the answer is kept: a spec's
/// expression costs one scan of about 10 000 days per process, and a
/// search for its next start never walks the calendar for centuries.
fn never_fires(cron: &Cron, text: &str) -> Option<String> {
    static SEEN: std::sync::Mutex<Option<std::collections::HashMap<String, bool>>> =
        std::sync::Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let seen = seen.get_or_insert_with(Default::default);
    let fires = match seen.get(text) {
        Some(fires) => *fires,
        None => {
            let fires = fires_in_a_cycle(cron);
            if seen.len() >= 10_000 {
                seen.clear();
            }
            seen.insert(text.to_string(), fires);
            fires
        }
    };
    (!fires).then(|| {
        format!("it never fires: no day of {CYCLE_YEARS} years matches its days and months")
    })
}

fn fires_in_a_cycle(cron: &Cron) -> bool {
    let Some(mut day) = chrono::NaiveDate::from_ymd_opt(2001, 1, 1) else {
        return true;
    };
    let end = chrono::NaiveDate::from_ymd_opt(2001 + CYCLE_YEARS, 1, 1).unwrap_or(day);
    let p = &cron.pattern;
    while day < end {
        use chrono::Datelike;
        let month = p.month_match(day.month()).unwrap_or(false);
        if month
            && p.day_match(day.year(), day.month(), day.day())
                .unwrap_or(false)
        {
            return true;
        }
        let Some(next) = day.succ_opt() else {
            return true;
        };
        day = next;
    }
    false
}

/// Where `now` stands among a list of periods (`spec.maintenanceWindows`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Standing {
    /// One of them is under way.
    open: bool,
    /// When the next one starts; none if none ever starts again.
    next: Option<DateTime<Utc>>,
}

impl Standing {
    /// One of them is under way.
    pub fn open(&self) -> bool {
        self.open
    }

    /// When the next one starts; none if none ever starts again.
    pub fn next(&self) -> Option<DateTime<Utc>> {
        self.next
    }
}

/// Where `now` stands among `periods`, or the first that cannot be read
/// (its place in the list, and why).
pub fn standing(periods: &[Period], now: DateTime<Utc>) -> Result<Standing, (usize, WindowError)> {
    let mut next: Option<DateTime<Utc>> = None;
    let mut open = false;
    for (i, p) in periods.iter().enumerate() {
        let w = Window::parse(p).map_err(|e| (i, e))?;
        open |= w.under_way(now).is_some();
        if let Some(start) = w.next_start(now) {
            next = Some(next.map_or(start, |n| n.min(start)));
        }
    }
    Ok(Standing { open, next })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn period(cron: &str) -> Period {
        Period {
            cron: cron.into(),
            timezone: "UTC".into(),
            duration: "1h".into(),
        }
    }

    #[test]
    fn an_expression_that_never_fires_is_refused_however_written() {
        for cron in [
            "* * 31 4,2 *",
            "38 */20 31 6,11 *",
            "0 0 30 feb *",
            "0 0 31 2,4,6 ?",
            "0 0 30-31 2 *",
            "0 0 30-31 feb-feb ?",
            "0 0 31 4-6/2 *",
            "0 0 30,31 2 *",
        ] {
            let e = Window::parse(&period(cron)).expect_err(cron);
            assert!(e.to_string().contains("never fires"), "{cron}: {e}");
        }
        for cron in [
            "0 0 29 2 *",
            "0 0 31 1,2 *",
            "0 0 31 2 1",
            "0 0 L 2 *",
            "0 0 30 */2 *",
            // The fifth Friday of February: leap years whose February
            // starts on a Friday, every 28 years.
            "0 0 ? 2 5#5",
        ] {
            assert!(Window::parse(&period(cron)).is_ok(), "{cron}");
        }
    }

    #[test]
    fn the_rarest_expression_that_fires_is_found_within_the_cycle() {
        let w = Window::parse(&period("0 0 ? 2 5#5")).unwrap();
        let now = DateTime::parse_from_rfc3339("2026-12-06T00:00:00Z")
            .unwrap()
            .to_utc();
        let next = w.next_start(now).expect("it fires");
        assert_eq!(next.to_rfc3339(), "2036-02-29T00:00:00+00:00");
    }
}
