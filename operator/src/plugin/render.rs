//! What `kubectl orca status` prints for a Scheduler or a WarmPool: read
//! from the object alone (its spec and the status the operator writes), so
//! that it needs nothing but the Kubernetes API. Pure: the object and the
//! time it is read at in, text out.
//!
//! The plugin's text for both kinds, with the
//! table, age and colour helpers they share, and their tests.

use std::fmt::Write;

use chrono::{DateTime, Utc};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::ResourceExt;

use crate::crd::{Scheduler, SchedulerStatus, WarmPool, WarmPoolSpec, WarmPoolStatus};

/// How the text is dressed: plain, or with ANSI colours (a terminal).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Plain,
    Colour,
}

impl Style {
    /// `text` in red (a problem), green (as it should be) or yellow (in
    /// motion), on a terminal.
    fn paint(self, text: &str, colour: Colour) -> String {
        match self {
            Style::Plain => text.to_string(),
            Style::Colour => format!("\x1b[{}m{text}\x1b[0m", colour as u8),
        }
    }
}

#[derive(Clone, Copy)]
enum Colour {
    Red = 31,
    Green = 32,
    Yellow = 33,
}

/// The status of Scheduler `s` as of `now`: its phase and why, the image,
/// the leader, each instance, the last handover's steps, its conditions.
pub fn scheduler(s: &Scheduler, now: DateTime<Utc>, style: Style) -> String {
    let status = s.status.clone().unwrap_or_default();
    let mut out = String::new();
    let phase = format!("{:?}", status.phase);
    let colour = match phase.as_str() {
        "Ready" => Colour::Green,
        "Degraded" => Colour::Red,
        _ => Colour::Yellow,
    };
    let _ = writeln!(
        out,
        "Scheduler {}/{}: {}{}",
        crate::crd::namespace_of(s),
        s.name_any(),
        style.paint(&phase, colour),
        why(&status.conditions)
            .map(|w| format!(" ({w})"))
            .unwrap_or_default()
    );
    if s.spec.paused {
        let _ = writeln!(out, "  paused: spec.paused is true, nothing is rolled out");
    }
    let current = status.current_image.as_deref().unwrap_or("-");
    let target = status.target_image.as_deref().unwrap_or(&s.spec.image);
    let _ = if current == target {
        writeln!(out, "Image:   {current}")
    } else {
        writeln!(out, "Image:   {current} -> {target}")
    };
    let _ = match &status.leader {
        Some(l) => writeln!(
            out,
            "Leader:  {} (instance {}, {}){}",
            l.pod,
            l.instance,
            l.image,
            l.since
                .as_deref()
                .map(|t| format!(", since {}", when(t, now)))
                .unwrap_or_default()
        ),
        None => writeln!(out, "Leader:  none"),
    };
    if status.draining > 0 {
        let _ = writeln!(out, "Draining: {} instance(s)", status.draining);
    }
    scheduler_instances(&mut out, &status, now);
    if let Some(h) = &status.last_handover {
        let _ = writeln!(out, "\nLast handover: {} -> {}", h.from, h.to);
        for (step, at) in [
            ("started", &h.started),
            ("joined", &h.joined),
            ("led", &h.led),
            ("registered", &h.registered),
            ("drained", &h.drained),
        ] {
            let shown = at.as_deref().map(|t| when(t, now)).unwrap_or("-".into());
            let _ = writeln!(out, "  {step:<11}{shown}");
        }
    }
    if let Some(next) = &status.next_window {
        let _ = writeln!(
            out,
            "\nWaiting for the next maintenance window: {} (kubectl orca rollout now starts it now)",
            when(next, now)
        );
    }
    if let Some(started) = &status.rollout_started {
        let _ = writeln!(out, "\nRollout in motion since {}", when(started, now));
    }
    if let Some(r) = &status.register {
        let _ = writeln!(
            out,
            "\nRegister: revision {}, {} attempt(s), {} failed in a row",
            r.revision, r.attempts, r.failures
        );
    }
    conditions(&mut out, &status.conditions, now, style);
    out
}

/// A Scheduler's pods, each with its revision and its instance.
fn scheduler_instances(out: &mut String, status: &SchedulerStatus, now: DateTime<Utc>) {
    let head = [
        "POD", "REVISION", "INSTANCE", "ROLE", "RUNS", "AGE", "IMAGE",
    ];
    section(out, "Instances", &head, &status.revisions, |r| {
        vec![
            r.pod.clone(),
            r.revision.clone(),
            r.instance.map(|i| i.to_string()).unwrap_or("-".into()),
            r.role.clone().unwrap_or("-".into()),
            r.runs.to_string(),
            r.since
                .as_deref()
                .map(|t| age(t, now))
                .unwrap_or("-".into()),
            r.image.clone(),
        ]
    });
}

/// The status of WarmPool `p` as of `now`: its instances by state, the
/// idle range it keeps and why, capacity holds, cost and runs served,
/// where it ran before, its conditions.
pub fn warm_pool(p: &WarmPool, now: DateTime<Utc>, style: Style) -> String {
    let status = p.status.clone().unwrap_or_default();
    let mut out = String::new();
    pool_head(&mut out, p, &status, style);
    pool_sizes(&mut out, &p.spec, &status);
    pool_instances(&mut out, &status, now);
    pool_holds(&mut out, &status, now);
    pool_cost(&mut out, &status);
    for f in &status.retiring {
        let _ = writeln!(
            out,
            "\nRetiring: instances of Scheduler {} in {} (since {}), drained and terminated",
            f.scheduler,
            f.region,
            when(&f.since, now)
        );
    }
    conditions(&mut out, &status.conditions, now, style);
    out
}

/// The pool's headline, whether it is paused, and where it runs.
fn pool_head(out: &mut String, p: &WarmPool, status: &WarmPoolStatus, style: Style) {
    let spec = &p.spec;
    let available = status.conditions.iter().find(|c| c.type_ == "Available");
    let headline = match available {
        Some(c) if c.status == "True" => style.paint(&c.reason, Colour::Green),
        Some(c) => style.paint(&c.reason, Colour::Yellow),
        None => style.paint("Pending", Colour::Yellow),
    };
    let _ = writeln!(
        out,
        "WarmPool {}/{}: {headline}{}",
        crate::crd::namespace_of(p),
        p.name_any(),
        why(&status.conditions)
            .map(|w| format!(" ({w})"))
            .unwrap_or_default()
    );
    if spec.paused {
        let _ = writeln!(
            out,
            "  paused: spec.paused is true, nothing is launched or retired"
        );
    }
    let _ = writeln!(
        out,
        "Scheduler: {}   Region: {}{}",
        spec.scheduler,
        spec.region,
        spec.endpoint
            .as_deref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default()
    );
}

/// How many instances the pool has, by what they do, and what it wants.
fn pool_sizes(out: &mut String, spec: &WarmPoolSpec, status: &WarmPoolStatus) {
    let _ = writeln!(
        out,
        "Instances: {} idle, {} busy, {} launching, {} stopped, {} terminating ({} drifted), at most {}",
        status.idle,
        status.busy,
        status.launching,
        status.stopped,
        status.terminating,
        status.drifted,
        spec.max_instances
    );
    let _ = match &status.active_schedule {
        Some(s) => writeln!(out, "Idle:      {s}"),
        None => writeln!(
            out,
            "Idle:      {}..{} (spec.idle; no schedule under way)",
            spec.idle.min, spec.idle.max
        ),
    };
    if let Some(f) = &status.forecast {
        // Each hour ahead by its local start, e.g. `15:00 3`.
        let hours: Vec<String> = f
            .next
            .iter()
            .map(|h| {
                let at = DateTime::parse_from_rfc3339(&h.from)
                    .map(|t| t.format("%H:%M").to_string())
                    .unwrap_or_else(|_| h.from.clone());
                format!("{at} {}", h.idle_min)
            })
            .collect();
        let _ = writeln!(
            out,
            "Forecast:  idle floor {} (UTC; from {} week(s) of history)",
            hours.join(", "),
            f.weeks
        );
    }
    if let (Some(o), Some(st)) = (&spec.objective, &status.objective) {
        let attained = |p: Option<f64>, runs: i64, when: &str| {
            p.map(|p| format!("{p:.1} % of {runs} run(s) in the last {when}"))
                .unwrap_or_else(|| format!("no runs in the last {when}"))
        };
        let priced = |cost: Option<f64>| match (cost, &st.priced_as) {
            (Some(c), Some(t)) => format!(" ({c:.2} at {t}'s price)"),
            _ => String::new(),
        };
        let against = st
            .static_floor
            .as_ref()
            .map(|f| {
                format!(
                    " against {:.0}{} for a static idle.min {}",
                    f.instance_hours,
                    priced(f.cost),
                    f.idle
                )
            })
            .unwrap_or_else(|| ", no static idle.min would meet it".into());
        let _ = writeln!(
            out,
            "Objective: {} % within {} s: {}, {}; keeping {} idle, {} stopped \
             (expected {:.1} %); next 24 h {:.1} instance-h{}{against}",
            o.time_to_start.percentile,
            o.time_to_start.seconds,
            attained(st.attained_percent, st.runs, "hour"),
            attained(st.day_attained_percent, st.day_runs, "day"),
            st.idle,
            st.stopped,
            st.expected_percent,
            st.expected_instance_hours,
            priced(st.expected_cost),
        );
    }
    if let Some(r) = &spec.stopped {
        let _ = writeln!(
            out,
            "Reserve:   {} stopped wanted{}",
            r.min,
            r.max.map(|m| format!(", at most {m}")).unwrap_or_default()
        );
    }
}

/// The instances one by one (`status.instances`).
fn pool_instances(out: &mut String, status: &WarmPoolStatus, now: DateTime<Utc>) {
    if status.instances.is_empty() {
        return;
    }
    let head = ["ID", "STATE", "AGE", "TYPE", "USES", "DRIFTED"];
    section(out, "Instances", &head, &status.instances, |i| {
        vec![
            i.id.clone(),
            i.state.clone(),
            age(&i.launched, now),
            format!("{}{}", i.instance_type, if i.spot { " (spot)" } else { "" }),
            i.uses.map_or("-".into(), |u| u.to_string()),
            if i.drifted { "yes" } else { "no" }.into(),
        ]
    });
    let listed = status.instances.len() as i64;
    let all = i64::from(status.idle)
        + i64::from(status.busy)
        + i64::from(status.launching)
        + i64::from(status.stopped)
        + i64::from(status.terminating);
    if listed >= crate::warmpool::roster::LISTED as i64 && all > listed {
        let _ = writeln!(out, "  … and {} more", all - listed);
    }
}

/// The offerings held for want of capacity.
fn pool_holds(out: &mut String, status: &WarmPoolStatus, now: DateTime<Utc>) {
    if status.capacity_errors.is_empty() {
        return;
    }
    let head = ["TYPE", "SUBNET", "CAPACITY", "CODE", "UNTIL"];
    section(out, "Capacity holds", &head, &status.capacity_errors, |c| {
        vec![
            c.instance_type.clone(),
            c.subnet.clone(),
            if c.spot { "spot" } else { "onDemand" }.into(),
            c.code.clone(),
            when(&c.until, now),
        ]
    });
}

/// The instance-hours, the runs served and the time to start.
fn pool_cost(out: &mut String, status: &WarmPoolStatus) {
    if !status.instance_seconds.is_empty() {
        let hours = |s: i64| format!("{:.1}", s as f64 / 3600.0);
        let head = ["TYPE", "CAPACITY", "IDLE", "BUSY", "STOPPED", "BOOTING"];
        section(
            out,
            "Instance-hours",
            &head,
            &status.instance_seconds,
            |c| {
                vec![
                    c.instance_type.clone(),
                    c.capacity_type.clone(),
                    hours(c.idle),
                    hours(c.busy),
                    hours(c.stopped),
                    hours(c.booting),
                ]
            },
        );
    }
    if let Some(r) = &status.runs_served {
        let _ = writeln!(
            out,
            "\nRuns served: {} from idle, {} from the reserve, {} by a cold launch",
            r.idle, r.reserve, r.cold
        );
    }
    if let Some(t) = &status.time_to_start {
        let _ = writeln!(
            out,
            "\nTime to start (the last {}):",
            match t.window_seconds {
                3600 => "hour".to_string(),
                s => span(s),
            }
        );
        let rows: Vec<Vec<String>> = [
            ("idle", &t.idle),
            ("reserve", &t.reserve),
            ("cold", &t.cold),
        ]
        .into_iter()
        .filter_map(|(source, f)| {
            let f = f.as_ref()?;
            Some(vec![
                source.to_string(),
                f.runs.to_string(),
                millis(f.p50_millis),
                millis(f.p95_millis),
                millis(f.max_millis),
            ])
        })
        .collect();
        table(out, &["SOURCE", "RUNS", "P50", "P95", "MAX"], &rows);
    }
}

/// Why an object is as it is: a True `Degraded`'s message, else a True
/// `Deferred`'s (a revision waiting for a maintenance window), else a True
/// `Progressing`'s, else `Available`'s.
fn why(conditions: &[Condition]) -> Option<String> {
    let find = |t: &str, status: Option<&str>| {
        conditions
            .iter()
            .find(|c| c.type_ == t && status.is_none_or(|s| c.status == s))
    };
    find("Degraded", Some("True"))
        .or_else(|| find("Deferred", Some("True")))
        .or_else(|| find("Progressing", Some("True")))
        .or_else(|| find("Available", None))
        .map(|c| format!("{}: {}", c.reason, c.message))
}

fn conditions(out: &mut String, conditions: &[Condition], now: DateTime<Utc>, style: Style) {
    if conditions.is_empty() {
        return;
    }
    out.push_str("\nConditions:\n");
    let rows: Vec<Vec<String>> = conditions
        .iter()
        .map(|c| {
            let bad = (c.type_ == "Degraded") == (c.status == "True");
            let status = if bad {
                style.paint(&c.status, Colour::Red)
            } else {
                c.status.clone()
            };
            vec![
                c.type_.clone(),
                status,
                c.reason.clone(),
                age(&c.last_transition_time.0.to_string(), now),
                c.message.clone(),
            ]
        })
        .collect();
    table(out, &["TYPE", "STATUS", "REASON", "AGE", "MESSAGE"], &rows);
}

/// A section `title` of the output: a row of each of `items` under `head`
/// (see [`table`]).
fn section<T>(
    out: &mut String,
    title: &str,
    head: &[&str],
    items: &[T],
    row: impl Fn(&T) -> Vec<String>,
) {
    let _ = writeln!(out, "\n{title}:");
    let rows: Vec<Vec<String>> = items.iter().map(row).collect();
    table(out, head, &rows);
}

/// `rows` under `head`, in columns two spaces apart (the last unpadded);
/// a row of `-` when there are none.
fn table(out: &mut String, head: &[&str], rows: &[Vec<String>]) {
    let width = |i: usize| {
        rows.iter()
            .map(|r| visible_len(&r[i]))
            .chain([head[i].len()])
            .max()
            .unwrap_or(0)
    };
    let widths: Vec<usize> = (0..head.len()).map(width).collect();
    let head: Vec<String> = head.iter().map(|h| h.to_string()).collect();
    let none: Vec<String> = vec!["-".to_string(); head.len()];
    let body = if rows.is_empty() {
        std::slice::from_ref(&none)
    } else {
        rows
    };
    for row in std::iter::once(&head).chain(body) {
        let mut line = String::from("  ");
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                line.push_str(&" ".repeat(widths[i] - visible_len(cell) + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

/// Characters a terminal shows: ANSI colour codes take no room.
fn visible_len(s: &str) -> usize {
    let mut n = 0;
    let mut escaped = false;
    for c in s.chars() {
        match (escaped, c) {
            (false, '\x1b') => escaped = true,
            (true, 'm') => escaped = false,
            (true, _) => {}
            (false, _) => n += 1,
        }
    }
    n
}

/// `at` (RFC 3339) and how long ago (or ahead) it is.
fn when(at: &str, now: DateTime<Utc>) -> String {
    format!("{at} ({})", relative(at, now))
}

/// How long ago `at` (RFC 3339) was: `5m`; `-` if it is not a time.
fn age(at: &str, now: DateTime<Utc>) -> String {
    match DateTime::parse_from_rfc3339(at) {
        Ok(t) => span((now - t.with_timezone(&Utc)).num_seconds()),
        Err(_) => "-".into(),
    }
}

fn relative(at: &str, now: DateTime<Utc>) -> String {
    match DateTime::parse_from_rfc3339(at) {
        Ok(t) => {
            let secs = (now - t.with_timezone(&Utc)).num_seconds();
            if secs >= 0 {
                format!("{} ago", span(secs))
            } else {
                format!("in {}", span(-secs))
            }
        }
        Err(_) => "?".into(),
    }
}

/// `secs` as kubectl shows an age: `42s`, `5m`, `3h`, `2d`.
fn span(secs: i64) -> String {
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// A wait in milliseconds as a person reads it: `0s`, `850ms`, `4.2s`,
/// `1m05s`.
fn millis(ms: i64) -> String {
    match ms {
        0 => "0s".into(),
        m if m < 1000 => format!("{m}ms"),
        m if m < 60_000 => format!("{:.1}s", m as f64 / 1000.0),
        m => format!("{}m{:02}s", m / 60_000, (m % 60_000) / 1000),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_read_in_the_unit_that_fits() {
        let shown: Vec<String> = [0, 850, 4210, 65_000].into_iter().map(millis).collect();
        assert_eq!(shown, ["0s", "850ms", "4.2s", "1m05s"]);
    }

    #[test]
    fn ages_read_as_kubectl_shows_them() {
        let now = DateTime::parse_from_rfc3339("2026-12-02T12:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        for (at, shown) in [
            ("2026-12-02T11:59:30Z", "30s"),
            ("2026-12-02T11:55:00Z", "5m"),
            ("2026-12-02T09:00:00Z", "3h"),
            ("2026-11-28T12:00:00Z", "4d"),
            ("not a time", "-"),
        ] {
            assert_eq!(age(at, now), shown, "{at}");
        }
        assert_eq!(
            when("2026-12-02T12:03:00Z", now),
            "2026-12-02T12:03:00Z (in 3m)"
        );
    }

    #[test]
    fn colours_take_no_room_in_a_column() {
        let mut out = String::new();
        let red = Style::Colour.paint("True", Colour::Red);
        table(
            &mut out,
            &["A", "B"],
            &[vec![red, "x".into()], vec!["False".into(), "y".into()]],
        );
        let plain: String = out.replace("\x1b[31m", "").replace("\x1b[0m", "");
        assert_eq!(plain, "  A      B\n  True   x\n  False  y\n");
    }
}
