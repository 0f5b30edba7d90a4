//! The WarmPool controller (docs/architecture.md#the-warmpool-controller)
//! against moto's EC2 server, a real PostgreSQL and real `orca-pool-agent`
//! processes on local hosts: the scheduler's side is `orca_db::pool`
//! (`hand_out`, `ask_for_instance`), as `orca-sim` uses it.
//!
//! Intervals are shortened through `warm::tuning` (resync 1 s, stale 5 s,
//! leak grace per test); the production defaults are in `warmpool::Tuning`.

use orca_operator::fence::Fence;
use std::{
    collections::HashSet,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use chrono::Utc;
use orca_db::pool::{ask_for_instance, hand_out, Request};
use orca_operator::crd::WarmPoolStatus;
use orca_operator::warmpool::{
    userdata::{self, DatabaseSource},
    Ec2, Ec2State, PoolEvent, PoolLoop,
};
use orca_tests::{
    ec2_faults::{Ec2Faults, Fault},
    eventually::eventually_true,
    pg, warm,
};
use tokio::sync::oneshot;

async fn present(ec2: &Ec2, pool: &str) -> Vec<orca_operator::warmpool::Ec2Instance> {
    ec2.describe(&warm::owner(pool))
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.state().is_present())
        .collect()
}

/// Plays the agent of `instance`: an idle warm row.
async fn report_idle(db: &orca_db::Db, pool: &str, instance: &str) {
    db.execute(
        "insert into orca.instances (instance, pool, role, idle, polled)
         values ($1, $2, 'warm', now(), now())",
        &[&instance, &pool],
    )
    .await
    .unwrap();
}

async fn state_of(ec2: &Ec2, pool: &str, id: &str) -> Option<Ec2State> {
    ec2.describe(&warm::owner(pool))
        .await
        .unwrap()
        .into_iter()
        .find(|i| i.id() == id)
        .map(|i| i.state())
}

/// Idle rows of `pool` whose agent polled within 3 s.
async fn idle_fresh(db: &orca_db::Db, pool: &str) -> Vec<String> {
    db.query(
        "select instance from orca.instances
         where pool = $1 and ended is null and idle is not null
           and polled > now() - interval '3 seconds'
         order by idle, id",
        &[&pool],
    )
    .await
    .unwrap()
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn request(pool: &str, run: i64, head: &str) -> Request<'static> {
    Request::new(
        Box::leak(pool.to_string().into_boxed_str()),
        run,
        1,
        "head",
        Box::leak(head.to_string().into_boxed_str()),
        true,
    )
}

/// Asks for an instance for `req`'s run, the run first made `running` at
/// that start in `orca.runs` as a scheduler's run is: demand of a run that
/// does not wait at its start counts for nothing (docs/protocol.md#demand).
async fn ask(db: &orca_db::Db, req: &Request<'_>) {
    db.execute(
        "insert into orca.runs (id, pipeline, status, start) values ($1, 'p', 'running', $2)
         on conflict (id) do nothing",
        &[&req.run(), &req.start()],
    )
    .await
    .unwrap();
    ask_for_instance(db, req).await.unwrap();
}

/// Hands each of `runs` of `pool` an instance as a scheduler would: a
/// hand-out, else the run asks and tries again every 100 ms, for up to a
/// minute. Which instance each run was handed, in the order handed.
async fn hand_out_all(
    url: &str,
    pool: &str,
    runs: impl IntoIterator<Item = i64>,
) -> Vec<(i64, String)> {
    let mut sched = pg::connect(url).await;
    let mut waiting: Vec<i64> = runs.into_iter().collect();
    let mut served_by = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !waiting.is_empty() {
        assert!(
            Instant::now() < deadline,
            "runs never handed out: {waiting:?}"
        );
        let mut still = Vec::new();
        for run in waiting {
            let req = request(pool, run, "");
            match hand_out(&mut sched, &req, Duration::from_secs(3))
                .await
                .unwrap()
            {
                Some(h) => served_by.push((run, h.instance().to_string())),
                None => {
                    ask(&sched, &req).await;
                    still.push(run);
                }
            }
        }
        waiting = still;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    served_by
}

/// A pool loop running in the background; its events are collected.
struct Running {
    stop_loop: Option<oneshot::Sender<()>>,
    /// Stops the hosts: their agents are killed, as a machine that hangs,
    /// and EC2 still lists their instances running.
    stop_hosts: Option<oneshot::Sender<()>>,
    events: Arc<Mutex<Vec<PoolEvent>>>,
    status: Arc<Mutex<WarmPoolStatus>>,
    /// The last pass's failure, if it failed: its `Degraded` reason (as the
    /// Kubernetes mode writes it) and message.
    failed: Arc<Mutex<Option<(&'static str, String)>>>,
}

impl Running {
    /// Hangs every host: their agents stop answering, their instances run
    /// on until the pool terminates them.
    fn hang_hosts(&mut self) {
        if let Some(s) = self.stop_hosts.take() {
            let _ = s.send(());
        }
    }

    fn events(&self) -> Vec<PoolEvent> {
        self.events.lock().unwrap().clone()
    }

    /// The status the last pass wrote.
    fn status(&self) -> WarmPoolStatus {
        self.status.lock().unwrap().clone()
    }

    /// The events so far, once one that is `what` is among them, or after
    /// 10 s without: a pass reports its events when it ends, after its EC2
    /// calls, so EC2 may show a termination a moment before its event.
    async fn events_once(&self, what: impl Fn(&PoolEvent) -> bool) -> Vec<PoolEvent> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let events = self.events();
            if events.iter().any(&what) || Instant::now() > deadline {
                return events;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

async fn start(
    pool: &str,
    spec: orca_operator::crd::WarmPoolSpec,
    url: &str,
    endpoint: &str,
    run_command: &str,
) -> Running {
    start_with(pool, spec, url, endpoint, run_command, vec![]).await
}

/// [`start`], the agents on the local hosts given `env` too.
async fn start_with(
    pool: &str,
    spec: orca_operator::crd::WarmPoolSpec,
    url: &str,
    endpoint: &str,
    run_command: &str,
    env: Vec<(String, String)>,
) -> Running {
    let (ns, name) = pool.split_once('/').unwrap();
    warm::aws_env();
    let lp = PoolLoop::new(
        ns,
        name,
        spec,
        url,
        warm::tuning(Duration::from_secs(60)),
        Fence::always(),
    )
    .await
    .unwrap();
    let hosts = warm::hosts_with(endpoint, url, warm::owner(pool), run_command, env).await;
    spawn_running(lp, hosts)
}

/// `lp` and `hosts` running in the background until the [`Running`] is
/// dropped.
fn spawn_running(lp: PoolLoop, hosts: orca_operator::local::host::Hosts) -> Running {
    let events = Arc::new(Mutex::new(Vec::new()));
    let status = Arc::new(Mutex::new(WarmPoolStatus::default()));
    let failed = Arc::new(Mutex::new(None));
    let (sink, status_sink, failed_sink) = (events.clone(), status.clone(), failed.clone());
    let (stop_loop, stopped_loop) = oneshot::channel::<()>();
    tokio::spawn(lp.run(
        move |r| match r {
            Ok(r) => {
                sink.lock().unwrap().extend(r.events().iter().cloned());
                *status_sink.lock().unwrap() = r.status().clone();
                *failed_sink.lock().unwrap() = None;
            }
            Err(e) => *failed_sink.lock().unwrap() = Some((e.degraded_reason(), e.to_string())),
        },
        async move {
            let _ = stopped_loop.await;
        },
    ));
    let (stop_hosts, stopped_hosts) = oneshot::channel::<()>();
    tokio::spawn(hosts.run(async move {
        let _ = stopped_hosts.await;
    }));
    Running {
        stop_loop: Some(stop_loop),
        stop_hosts: Some(stop_hosts),
        events,
        status,
        failed,
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        for s in [self.stop_loop.take(), self.stop_hosts.take()]
            .into_iter()
            .flatten()
        {
            let _ = s.send(());
        }
    }
}

/// Writes `n` hand-outs of `pool` at `at` (seconds apart) as the database
/// keeps them: each an idle warm row ended by the hand-out, and its run's
/// row made at the same moment, since ended.
pub(crate) async fn hand_outs_at(db: &orca_db::Db, pool: &str, at: chrono::DateTime<Utc>, n: i64) {
    for k in 0..n {
        let instance = format!("i-history-{k}");
        let t = at + chrono::Duration::seconds(k);
        db.execute(
            "insert into orca.instances (instance, pool, role, idle, polled, ended, ended_by)
             values ($1, $2, 'warm', $3::timestamptz - interval '1 minute', $3, $3, 'handout')",
            &[&instance, &pool, &t],
        )
        .await
        .unwrap();
        db.execute(
            "insert into orca.instances (instance, pool, run, start, role, pooled, created, ended, ended_by)
             values ($1, $2, $3, 1, 'head', true, $4, $4::timestamptz + interval '10 minutes', 'agent')",
            &[&instance, &pool, &(1000 + k), &t],
        )
        .await
        .unwrap();
    }
}

mod boots;
mod convergence;
mod database_parameter;
mod drain;
mod forecast;
mod iam;
mod launches;
mod objective;
mod refusals;
mod reserve;
mod retirement;
mod schedules;
mod shared_listing;
mod sizing;
mod spot;
mod tenancy;
mod time_to_start;
mod user_data;
