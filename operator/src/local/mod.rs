//! The local mode (docs/architecture.md#the-local-mode): the same
//! reconcilers on the same YAML, with scheduler revisions as local
//! processes instead of pods, a throwaway PostgreSQL unless a URL is given,
//! and moto's EC2 server.

// host — local EC2 hosts.
pub mod host;
// manifests — the YAML of a local-mode directory.
pub(crate) mod manifests;
// moto — moto's EC2 server on a free port, from the venv the scripts make.
pub mod moto;
// pods — pods and Jobs as local processes.
pub(crate) mod pods;
// pools — WarmPools in the local mode.
pub(crate) mod pools;
// postgres — a throwaway PostgreSQL cluster.
pub mod postgres;
// scheduler — a Scheduler in the local mode.
mod scheduler;
// spawn — processes that die with the local mode or test binary that started them.
pub mod spawn;
// supervise — `orca-operator local-supervise`.
pub mod supervise;

use std::{collections::BTreeMap, path::PathBuf, time::Duration};

use anyhow::Context;
use orca_db::{migrate, ConnectOptions, DatabaseUrl};

use self::{
    manifests::Manifests,
    pods::Table,
    pools::LocalPools,
    scheduler::{database_url, LocalScheduler},
};

/// What `orca-operator local` runs: a directory of YAML, and the database
/// to fall back on.
pub struct LocalOptions {
    /// The directory of YAML files.
    dir: PathBuf,
    /// The database when no Secret names one; a throwaway cluster if none.
    database_url: Option<String>,
}

impl LocalOptions {
    /// The local mode on the manifests in `dir`, falling back on the
    /// database at `database_url` when no Secret names one (`None`: a
    /// throwaway cluster).
    pub fn new(dir: PathBuf, database_url: Option<String>) -> Self {
        LocalOptions { dir, database_url }
    }
}

/// How often the loop looks at files, processes and rows when nothing asks
/// for sooner.
const TICK: Duration = Duration::from_millis(500);
/// How long Ctrl-C waits for the schedulers to drain.
const DRAIN_WAIT: Duration = Duration::from_secs(120);

/// Runs the local mode on `opts.dir` until SIGTERM or Ctrl-C, applying each
/// edit of its YAML; at the stop the schedulers drain and everything it
/// started is stopped.
pub async fn run(opts: LocalOptions) -> anyhow::Result<()> {
    // Listening first: a signal from here on stops what was started in
    // order, rather than killing this process and leaving the rest.
    let mut stop = Box::pin(shutdown_signal()?);
    let state_dir = opts.dir.join(".status");
    std::fs::create_dir_all(&state_dir)
        .with_context(|| format!("creating {}", state_dir.display()))?;
    let mut manifests = manifests::load(&opts.dir)?;
    let mut stamp = manifests::stamp(&opts.dir);
    println!(
        "local: {} Scheduler(s), {} WarmPool(s) in {}",
        manifests.schedulers().len(),
        manifests.warm_pools().len(),
        opts.dir.display()
    );

    put_siblings_on_path()?;

    let (cluster, fallback_url) = fallback_database(&opts, &manifests, &state_dir).await?;

    let mut schedulers: BTreeMap<String, LocalScheduler> = BTreeMap::new();
    let mut pools = LocalPools::new(state_dir.clone());
    migrate_all(&manifests, &schedulers_urls(&manifests, &fallback_url)).await;

    loop {
        if manifests::stamp(&opts.dir) != stamp {
            stamp = manifests::stamp(&opts.dir);
            match manifests::load(&opts.dir) {
                Ok(m) => {
                    println!("local: {} changed; applying", opts.dir.display());
                    migrate_all(&m, &schedulers_urls(&m, &fallback_url)).await;
                    manifests = m;
                }
                // A bad edit is refused, as the API server would: the
                // running state is kept.
                Err(e) => println!("local: refused: {e}"),
            }
        }
        let mut next = TICK;
        for (key, s) in manifests.schedulers() {
            let local = schedulers
                .entry(key.clone())
                .or_insert_with(|| LocalScheduler::new(key, &state_dir, fallback_url.clone()));
            next = next.min(local.reconcile(s, &manifests).await);
        }
        let fallback = fallback_url.as_deref();
        pools
            .sync(manifests.warm_pools(), |p| {
                let ns = crate::crd::namespace_of(p);
                let scheduler = manifests
                    .schedulers()
                    .get(&format!("{ns}/{}", p.spec.scheduler))
                    .ok_or_else(|| format!("Scheduler {ns}/{} not found", p.spec.scheduler))?;
                let url = database_url(scheduler, &manifests, fallback).map_err(|e| e.message)?;
                let stale = scheduler.spec.handover.stale_seconds;
                Ok((
                    url,
                    Duration::from_secs(stale.clamp(1, crate::crd::MAX_SECONDS) as u64),
                ))
            })
            .await;
        // A Scheduler removed from the directory takes its processes and
        // its status along.
        let gone: Vec<String> = schedulers
            .keys()
            .filter(|k| !manifests.schedulers().contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            if let Some(s) = schedulers.remove(&key) {
                println!(
                    "scheduler {key}: removed; stopping {} process(es)",
                    s.remove()
                );
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(next.max(Duration::from_millis(100))) => {}
            _ = &mut stop => break,
        }
    }

    stop_all(&mut pools, &state_dir).await;
    // moto, then PostgreSQL: each is stopped and waited for.
    drop(pools);
    drop(cluster);
    println!("local: stopped");
    Ok(())
}

/// A process running a binary of this build finds its siblings
/// (orca-sim, orca-pool-agent) on PATH.
fn put_siblings_on_path() -> anyhow::Result<()> {
    if let Some(bin_dir) = std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.to_path_buf()))
    {
        let path = std::env::var_os("PATH").unwrap_or_default();
        let mut dirs = vec![bin_dir];
        dirs.extend(std::env::split_paths(&path));
        std::env::set_var("PATH", std::env::join_paths(dirs)?);
    }
    Ok(())
}

/// The database of the Schedulers no Secret names a database for:
/// `--database-url`, or a throwaway PostgreSQL (kept running as long as
/// the returned cluster is) when one needs it.
async fn fallback_database(
    opts: &LocalOptions,
    manifests: &Manifests,
    state_dir: &std::path::Path,
) -> anyhow::Result<(Option<postgres::Cluster>, Option<String>)> {
    let mut cluster = None;
    let needs_fallback = manifests
        .schedulers()
        .values()
        .any(|s| database_url(s, manifests, None).is_err_and(|p| p.reason == "SecretMissing"));
    let fallback_url = match (&opts.database_url, needs_fallback) {
        (Some(url), _) => Some(url.clone()),
        (None, true) => {
            println!("local: no Secret names a database; starting a throwaway PostgreSQL");
            let c = tokio::task::spawn_blocking(postgres::Cluster::private).await?;
            let url = c.fresh_db().await;
            // Its URL carries no password (trust on loopback): written down
            // for `orca-operator instances --database-url …`.
            std::fs::write(state_dir.join("database-url"), &url)?;
            println!(
                "local: PostgreSQL on 127.0.0.1:{} (URL in {})",
                c.port(),
                state_dir.join("database-url").display()
            );
            cluster = Some(c);
            Some(url)
        }
        (None, false) => None,
    };
    Ok((cluster, fallback_url))
}

/// At the stop: the pools' hosts stop, then every pod and job of the
/// directory is asked to drain, and what has not after [`DRAIN_WAIT`] is
/// killed.
async fn stop_all(pools: &mut LocalPools, state_dir: &std::path::Path) {
    println!("local: stopping: the pools' hosts stop, the schedulers drain their runs and exit");
    pools.stop_all().await;
    // Every pod and job in the directory, not only those of the Schedulers
    // in it now: one whose file was removed while no local mode ran is
    // this directory's too.
    let tables = [
        Table::new(state_dir.join("pods")),
        Table::new(state_dir.join("jobs")),
    ];
    let running = || -> Vec<pods::Local> {
        tables
            .iter()
            .flat_map(|t| t.list().into_values())
            .filter(|l| l.running())
            .collect()
    };
    for local in running() {
        local.delete();
    }
    let deadline = tokio::time::Instant::now() + DRAIN_WAIT;
    while !running().is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Their supervisors kill what has not drained after a grace period far
    // shorter than this; whatever is still there goes now, as a pod does
    // at the end of its grace period, so that nothing outlives the stop.
    for local in running() {
        println!(
            "local: {} did not stop within {} s; killed",
            local.name(),
            DRAIN_WAIT.as_secs()
        );
        local.kill();
    }
}

fn schedulers_urls(m: &Manifests, fallback: &Option<String>) -> Vec<String> {
    let mut urls: Vec<String> = m
        .schedulers()
        .values()
        .filter_map(|s| {
            let r = &s.spec.database.url_secret_ref;
            let ns = s
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into());
            m.secret_value(&ns, &r.name, &r.key)
                .ok()
                .or_else(|| fallback.clone())
        })
        .collect();
    urls.sort();
    urls.dedup();
    urls
}

/// Applies the migrations to each database at start (and on change); a
/// database that can't be reached is reported and left to the reconcile,
/// which shows it as `Degraded`.
async fn migrate_all(_m: &Manifests, urls: &[String]) {
    for url in urls {
        let Ok(parsed) = DatabaseUrl::parse(url) else {
            continue;
        };
        let result = async {
            let mut db =
                orca_db::connect(&parsed, &ConnectOptions::named("orca-operator local")).await?;
            migrate::migrate(&mut db, &migrate::Migrations::embedded()).await
        }
        .await;
        match result {
            Ok(applied) if !applied.is_empty() => {
                println!("local: {}: applied {}", parsed.target(), applied.join(", "))
            }
            Ok(_) => {}
            Err(e) => println!("local: {}: cannot migrate: {e}", parsed.target()),
        }
    }
}

/// SIGTERM or Ctrl-C (SIGINT); both listened to from this call on.
fn shutdown_signal() -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).context("listening for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("listening for SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = int.recv() => {}
            _ = term.recv() => {}
        }
    })
}
