//! Tables of (snapshot → plan) for the pool policy.

use std::collections::{BTreeMap, HashSet};

use chrono::{DateTime, Duration, TimeZone, Utc};

use super::*;
use crate::crd::{IdleRange, Launch, OnDelete, WarmPoolSpec};

mod bounds;
mod deletion;
mod drift;
mod gone;
mod launches;
mod reserve;
mod retirement;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap()
}

pub(in crate::pool) fn spec(min: i32, max: i32, max_instances: i32) -> WarmPoolSpec {
    WarmPoolSpec {
        scheduler: "sched".into(),
        region: "us-east-1".into(),
        endpoint: None,
        idle: IdleRange { min, max },
        schedules: vec![],
        stopped: None,
        max_instances,
        idle_seconds: 600,
        max_uses: 0,
        boot_timeout_seconds: 300,
        launch: Launch {
            launch_template: None,
            image_id: Some("ami-1".into()),
            instance_types: vec!["t3.small".into(), "t3.medium".into()],
            subnet_ids: vec!["subnet-a".into(), "subnet-b".into()],
            security_group_ids: vec![],
            iam_instance_profile: None,
            tags: Default::default(),
            agent_path: "/usr/local/bin/orca-pool-agent".into(),
            run_command: "run".into(),
            database_url_file: None,
            capacity_type: Default::default(),
        },
        paused: false,
        on_delete: OnDelete::Terminate,
        drain_timeout_seconds: 3600,
        disruption: Default::default(),
    }
}

fn off(t: &str, s: &str) -> Offering {
    Offering {
        instance_type: t.into(),
        subnet: s.into(),
        spot: false,
    }
}

/// An instance `age` seconds old.
fn inst(id: &str, age: i64) -> Ec2Instance {
    Ec2Instance {
        id: id.into(),
        state: Ec2State::Running,
        launched: now() - Duration::seconds(age),
        offering: off("t3.small", "subnet-a"),
        launch: None,
        image: None,
    }
}

fn idle_row(id: i64, instance: &str, idle: f64) -> PoolRow {
    PoolRow {
        id,
        instance: instance.into(),
        run: None,
        idle_secs: Some(idle),
        polled_secs: Some(0.5),
        uses: 0,
        claim: false,
        reserved: false,
        woken_secs: None,
        noticed: false,
        interrupted: false,
    }
}

fn busy_row(id: i64, instance: &str) -> PoolRow {
    PoolRow {
        idle_secs: None,
        run: Some(7),
        uses: 1,
        ..idle_row(id, instance, 0.0)
    }
}

fn snap(instances: Vec<Ec2Instance>, rows: Vec<PoolRow>) -> Snapshot {
    Snapshot {
        instances,
        rows,
        ..Default::default()
    }
}

fn run(spec: &WarmPoolSpec, snap: &Snapshot) -> PoolPlan {
    plan(spec, snap, &BTreeMap::new(), &Limits::default(), now())
}

fn retired(p: &PoolPlan) -> Vec<(&str, Reason)> {
    p.retirements
        .iter()
        .map(|r| (r.instance.as_str(), r.reason))
        .collect()
}
