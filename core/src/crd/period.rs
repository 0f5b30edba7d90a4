//! A period of the day or week: when it starts (a cron expression read in
//! a time zone) and how long it lasts. A WarmPool's idle schedules and a
//! Scheduler's maintenance windows are periods; `crate::window` reads them.

use kube::KubeSchema;
use serde::{Deserialize, Serialize};

/// When a period starts, and for how long.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
pub struct Period {
    /// When each period starts: a cron expression of five fields (minute, hour,
    /// day of month, month, day of week), e.g. "0 8 * * 1-5" for 08:00 on
    /// workdays. Required.
    #[x_kube(validation = Rule::new(r"self.matches('^\\S+( +\\S+){4}$')").message("cron must be a cron expression of five fields, e.g. 0 8 * * 1-5"))]
    #[x_kube(validation = cron_field(0, "minute", "[0-5]?[0-9]", ""))]
    #[x_kube(validation = cron_field(1, "hour", "2[0-3]|[01]?[0-9]", ""))]
    #[x_kube(validation = cron_field(2, "day of month", DAY, DAY_EXTRA))]
    #[x_kube(validation = cron_field(3, "month", MONTH, ""))]
    #[x_kube(validation = cron_field(4, "day of week", WEEKDAY, WEEKDAY_EXTRA))]
    #[schemars(length(max = 100))]
    pub cron: String,
    /// The IANA time zone the cron expression is read in, e.g. Europe/Berlin.
    /// Default UTC.
    #[serde(default = "default_timezone")]
    #[x_kube(validation = Rule::new(r"self.matches('^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$')").message("timezone must be an IANA time zone name, e.g. Europe/Berlin"))]
    #[x_kube(validation = Rule::new(r"!self.matches('^[A-Za-z0-9_+-]+(/[A-Za-z0-9_+-]+)*$') || timestamp('2001-01-01T00:00:00Z').getHours(self) >= 0").message("timezone must be a time zone the API server knows, e.g. Europe/Berlin"))]
    #[schemars(length(max = 64))]
    pub timezone: String,
    /// How long each period lasts from its start, e.g. 10h, 30m or 1h30m;
    /// at most 366 days. Required.
    #[x_kube(validation = Rule::new(DURATION_SHAPE).message("duration must be a duration in weeks, days, hours, minutes or seconds, e.g. 10h, 30m or 1h30m"))]
    #[x_kube(validation = Rule::new(PERIOD_AT_MOST_366_DAYS).message("duration must be at most 366 days"))]
    #[schemars(length(max = 32))]
    pub duration: String,
}

// A period's duration: numbers of at most six digits, each with a unit
// humantime reads, none longer than a week (a period is at most 366 days).
const DURATION_SHAPE: &str = "self.matches('^( *[0-9]{1,6} *(ns|nsec|nanos|us|usec|micros|ms|msec|millis|s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?|d|days?|w|weeks?))+ *$')";

// The duration in seconds, each `<number> <unit>` of it summed (units below
// a second counted as seconds, which only errs long), against 366 days: the
// operator refuses a longer period too.
const PERIOD_AT_MOST_366_DAYS: &str = "!self.matches('^( *[0-9]{1,6} *[a-z]+)+ *$') \
    || self.findAll('[0-9]+ *[a-z]+').map(t, int(t.findAll('[0-9]+')[0]) * \
       (t.matches('[0-9] *(w|weeks?)$') ? 604800 \
       : t.matches('[0-9] *(d|days?)$') ? 86400 \
       : t.matches('[0-9] *(h|hrs?|hours?)$') ? 3600 \
       : t.matches('[0-9] *(m|mins?|minutes?)$') ? 60 : 1)).sum() <= 31622400";

// What each field of a cron expression may hold, so the API server refuses
// a value out of range (minute 99, month 13) naming the field. croner still
// reads the expression; this only checks its fields' values.
const DAY: &str = "3[01]|[12][0-9]|0?[1-9]";
const DAY_EXTRA: &str = "[?]|LW?|(3[01]|[12][0-9]|0?[1-9])W";
const MONTH: &str = "1[0-2]|0?[1-9]|jan|feb|mar|apr|may|jun|jul|aug|sep|oct|nov|dec";
const WEEKDAY: &str = "[0-7]|sun|mon|tue|wed|thu|fri|sat";
const WEEKDAY_EXTRA: &str = "[?]|([0-7]|sun|mon|tue|wed|thu|fri|sat)(L|#[1-5])";

/// The rule for field `i` of a period's cron expression: `*` or a value
/// of `value` or a range of them, each with an optional step, in a list;
/// or one of `extra` (the day fields' `?`, `L`, `W` and `#`).
fn cron_field(i: usize, name: &str, value: &str, extra: &str) -> kube::core::Rule {
    let atom = format!("([*]|({value})(-({value}))?)(/[0-9]+)?");
    let atom = if extra.is_empty() {
        atom
    } else {
        format!("({extra}|{atom})")
    };
    kube::core::Rule::new(format!(
        "self.split(' ').filter(f, f != '').size() != 5 \
         || self.split(' ').filter(f, f != '')[{i}].matches('^(?i){atom}(,{atom})*$')"
    ))
    .message(kube::core::Message::Message(format!(
        "cron's {name} field must be *, a value, a range or a list of them, each with an optional /step"
    )))
}

fn default_timezone() -> String {
    "UTC".into()
}
