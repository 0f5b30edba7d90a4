//! WarmPools in the local mode: the same pool loop as in a cluster, on the
//! pool's `endpoint` or on a moto server of the local mode's own, with the
//! local mode playing each instance's host (`local::host`): a running moto
//! instance is an `orca-pool-agent` loop on this machine.
//!
//! A pool removed from the directory, or moved (another Scheduler, region
//! or endpoint), is not just stopped: its loop goes on in
//! deletion mode where it ran, terminating its idle instances at once and
//! its busy ones after their run (at most `drainTimeoutSeconds`), and stops
//! once EC2 lists none of them — as a deleted or moved WarmPool does in a
//! cluster.

use std::{
    collections::BTreeMap,
    path::PathBuf,
    sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
    time::Duration,
};

use chrono::Utc;

use tokio::{sync::watch, task::JoinHandle};

use super::moto::Moto;
use crate::{
    crd::{OnDelete, WarmPool, WarmPoolSpec, WarmPoolStatus},
    fence::Fence,
    local::host::{HostConfig, Hosts},
    warmpool::{
        drift::moved,
        ec2::{Ec2, Ec2Config},
        Deletion, Listings, PoolLoop, Tuning,
    },
};

struct Running {
    spec: WarmPoolSpec,
    url: String,
    stop: watch::Sender<bool>,
    /// Puts the loop in deletion mode.
    deletion: watch::Sender<Option<Deletion>>,
    /// Set once a pass in deletion mode found nothing left.
    emptied: Arc<AtomicBool>,
    /// Set when it was moved or removed: its loop no longer speaks for the
    /// pool's status.
    retiring: Arc<AtomicBool>,
    tasks: Vec<JoinHandle<()>>,
}

/// The WarmPools this local mode runs.
pub struct LocalPools {
    state_dir: PathBuf,
    running: BTreeMap<String, Running>,
    /// Loops in deletion mode where a pool ran before it was removed or
    /// moved, until nothing is left there.
    retiring: Vec<(String, Running)>,
    moto: Option<Moto>,
    /// The pools' shared EC2 listings.
    listings: Listings,
    /// Pools that could not start, and why (said once).
    refused: BTreeMap<String, String>,
}

impl LocalPools {
    /// No pools running yet; their status files and cluster name come from
    /// `state_dir`.
    pub fn new(state_dir: PathBuf) -> Self {
        LocalPools {
            state_dir,
            running: BTreeMap::new(),
            retiring: Vec::new(),
            moto: None,
            listings: Listings::default(),
            refused: BTreeMap::new(),
        }
    }

    /// Starts, restarts (on a change of spec or database) and stops pool
    /// loops to match `pools`; `url` is each pool's database and its
    /// Scheduler's stale limit, or why there is none.
    pub async fn sync(
        &mut self,
        pools: &BTreeMap<String, WarmPool>,
        url: impl Fn(&WarmPool) -> Result<(String, Duration), String>,
    ) {
        let gone: Vec<String> = self
            .running
            .keys()
            .filter(|k| !pools.contains_key(*k))
            .cloned()
            .collect();
        self.reap().await;
        for key in gone {
            let orphan = self
                .running
                .get(&key)
                .is_some_and(|r| r.spec.on_delete == OnDelete::Orphan);
            if orphan {
                self.stop(&key).await;
                println!("warmpool {key}: removed; onDelete: Orphan leaves its instances; its loop and hosts stopped");
            } else {
                self.retire(&key, "removed");
            }
            // A removed pool has no status: the last one its loop wrote
            // (two idle, say) would stand for it until it is put back and
            // its new loop writes its own. Its loop writes no more.
            let _ = std::fs::remove_file(self.status_file(&key));
        }
        for (key, pool) in pools {
            let (url, run_stale) = match url(pool) {
                Ok(u) => u,
                Err(why) => {
                    if self.refused.get(key) != Some(&why) {
                        println!("warmpool {key}: Warning NotStarted: {why}");
                        self.refused.insert(key.clone(), why);
                    }
                    continue;
                }
            };
            if let Some(r) = self.running.get(key) {
                if r.spec == pool.spec && r.url == url {
                    continue;
                }
                // Another database at the same place is no move: EC2 lists
                // the same instances, and the new loop takes them over.
                if moved(&r.spec, &pool.spec) {
                    self.retire(key, "moved");
                } else {
                    self.stop(key).await;
                }
            }
            if self.still_retiring(key, &pool.spec) {
                let why = "still terminating its instances where it ran; it starts once they are gone (as a deleted WarmPool must be gone before one of its name is made again)".to_string();
                if self.refused.get(key) != Some(&why) {
                    println!("warmpool {key}: Warning NotStarted: {why}");
                    self.refused.insert(key.clone(), why);
                }
                continue;
            }
            match self.start(key, pool, &url, run_stale).await {
                Ok(r) => {
                    self.refused.remove(key);
                    self.running.insert(key.clone(), r);
                }
                Err(why) => {
                    if self.refused.get(key) != Some(&why) {
                        println!("warmpool {key}: Warning NotStarted: {why}");
                        self.refused.insert(key.clone(), why);
                    }
                }
            }
        }
    }

    async fn start(
        &mut self,
        key: &str,
        pool: &WarmPool,
        url: &str,
        run_stale: Duration,
    ) -> Result<Running, String> {
        let (namespace, name) = key.split_once('/').unwrap_or(("default", key));
        let mut spec = pool.spec.clone();
        if spec.endpoint.is_none() {
            spec = super::moto::onto(&mut self.moto, key, spec).await?;
        }
        let endpoint = spec.endpoint.clone();
        let tuning = Tuning::default().with_cluster(cluster_of(&self.state_dir));
        // The local mode has no election: its loops act whenever they run.
        let mut pool_loop =
            PoolLoop::new(namespace, name, spec.clone(), url, tuning, Fence::always())
                .await
                .map_err(|e| e.to_string())?
                .with_listings(&self.listings);
        pool_loop.set_run_stale(run_stale);
        let hosts = hosts_of(&pool_loop, &spec, key, url).await?;
        let (deletion, deleting) = watch::channel(None);
        let pool_loop = pool_loop.with_deletion(deleting);
        let emptied = Arc::new(AtomicBool::new(false));
        let nothing_left = emptied.clone();
        let retiring = Arc::new(AtomicBool::new(false));
        let moved_away = retiring.clone();
        let place = format!(
            "{} in {} on {}",
            pool.spec.scheduler,
            spec.region,
            endpoint.as_deref().unwrap_or("EC2")
        );
        let (stop, watch) = watch::channel(false);
        let stopped = |mut w: watch::Receiver<bool>| async move {
            let _ = w.changed().await;
        };
        let status_file = self.status_file(key);
        let generation = pool.metadata.generation;
        let key_owned = key.to_string();
        let mut last = String::new();
        let loop_task = tokio::spawn(pool_loop.run(
            move |outcome| match outcome {
                Ok(report) => {
                    if report.deleted() {
                        nothing_left.store(true, Ordering::Relaxed);
                    }
                    // Where a pool ran before it was moved or removed: its
                    // lines say so, and the status is the new place's.
                    let retiring = moved_away.load(Ordering::Relaxed);
                    let who = if retiring {
                        format!("{key_owned} (where it ran: {place})")
                    } else {
                        key_owned.clone()
                    };
                    for e in report.events() {
                        let kind = if e.is_warning() { "Warning" } else { "Normal" };
                        println!("warmpool {who}: {kind} {}: {}", e.reason(), e.message());
                    }
                    if retiring {
                        return;
                    }
                    let mut status: WarmPoolStatus = report.status().clone();
                    status.observed_generation = generation;
                    let line = summary(&status);
                    if line != last {
                        println!("warmpool {key_owned}: {line}");
                        if let Ok(text) = serde_yaml::to_string(&status) {
                            let _ = std::fs::write(&status_file, text);
                        }
                        last = line;
                    }
                }
                Err(e) => println!("warmpool {key_owned} ({place}): Warning PassFailed: {e}"),
            },
            stopped(watch.clone()),
        ));
        let hosts_task = tokio::spawn(hosts.run(stopped(watch)));
        println!(
            "warmpool {key}: running on {}",
            endpoint.as_deref().unwrap_or("EC2")
        );
        Ok(Running {
            spec: pool.spec.clone(),
            url: url.to_string(),
            stop,
            deletion,
            emptied,
            retiring,
            tasks: vec![loop_task, hosts_task],
        })
    }

    /// Where `key`'s status is written.
    fn status_file(&self, key: &str) -> PathBuf {
        self.state_dir
            .join(format!("warmpool-{}.yaml", key.replace('/', "-")))
    }

    /// Puts `key`'s loop in deletion mode where it runs now (`why`: it was
    /// removed or moved), to stop once nothing is left there.
    fn retire(&mut self, key: &str, why: &str) {
        let Some(r) = self.running.remove(key) else {
            return;
        };
        r.retiring.store(true, Ordering::Relaxed);
        let _ = r.deletion.send(Some(Deletion::new(
            Utc::now(),
            r.spec.drain_timeout_seconds,
            true,
        )));
        println!(
            "warmpool {key}: {why}; terminating its instances where it ran (busy ones after their run, at most {} s)",
            r.spec.drain_timeout_seconds
        );
        self.retiring.push((key.to_string(), r));
    }

    /// Whether a loop of `key` still terminates its instances where `spec`
    /// may start it: the same Scheduler in the same region, whatever the
    /// endpoint (removed and put back, moved there and back, or given its
    /// moto's endpoint by name: another endpoint may be the same EC2; on
    /// whichever database). Both loops would list the same instances and
    /// fight, the old one terminating what the new one launches, so the
    /// new one waits until the old place is empty.
    fn still_retiring(&self, key: &str, spec: &WarmPoolSpec) -> bool {
        self.retiring.iter().any(|(k, r)| {
            k == key && r.spec.scheduler == spec.scheduler && r.spec.region == spec.region
        })
    }

    /// Stops the retiring loops that have nothing left.
    async fn reap(&mut self) {
        let (done, going): (Vec<_>, Vec<_>) = std::mem::take(&mut self.retiring)
            .into_iter()
            .partition(|(_, r)| r.emptied.load(Ordering::Relaxed));
        self.retiring = going;
        for (key, r) in done {
            stop_running(r).await;
            println!("warmpool {key}: nothing left where it ran; its loop and hosts stopped");
        }
    }

    async fn stop(&mut self, key: &str) {
        if let Some(r) = self.running.remove(key) {
            stop_running(r).await;
        }
    }

    /// Stops every pool loop and its hosts (their agents end), retiring
    /// ones too: their instances are left for the next start to find only
    /// if the pool is back where it ran (a stopped local mode keeps no
    /// record of where its pools ran before).
    pub async fn stop_all(&mut self) {
        let keys: Vec<String> = self.running.keys().cloned().collect();
        for key in keys {
            self.stop(&key).await;
        }
        for (key, r) in std::mem::take(&mut self.retiring) {
            println!("warmpool {key}: stopped while terminating its instances where it ran");
            stop_running(r).await;
        }
    }
}

/// Stops a loop and its hosts.
async fn stop_running(r: Running) {
    let _ = r.stop.send(true);
    for mut t in r.tasks {
        // A task still busy (an EC2 call that hangs) is aborted, not left
        // behind: the hosts' processes go with its future.
        if tokio::time::timeout(Duration::from_secs(10), &mut t)
            .await
            .is_err()
        {
            t.abort();
            let _ = t.await;
        }
    }
}

fn summary(s: &WarmPoolStatus) -> String {
    format!(
        "launching {}, idle {}, busy {}, terminating {}",
        s.launching, s.idle, s.busy, s.terminating
    )
}

/// A binary beside this one (`orca-pool-agent` next to `orca-operator`).
fn sibling(name: &str) -> Option<PathBuf> {
    let path = std::env::current_exe().ok()?.parent()?.join(name);
    path.exists().then_some(path)
}

/// The local mode's cluster name (the `orca.dev/cluster` tag of its pools'
/// instances): `local-` and a hash of its directory, so that two local
/// modes on one EC2 endpoint never touch each other's instances, and one
/// restarted on the same directory finds its own again.
pub fn cluster_of(state_dir: &std::path::Path) -> String {
    use sha2::{Digest, Sha256};
    let dir = std::fs::canonicalize(state_dir).unwrap_or_else(|_| state_dir.to_path_buf());
    let digest = Sha256::digest(dir.to_string_lossy().as_bytes());
    let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
    format!("local-{hex}")
}

/// The stand-ins for the pool's EC2 instances: each a real agent, over
/// `url`, for each instance that `pool_loop` launches on `spec`'s place.
async fn hosts_of(
    pool_loop: &PoolLoop,
    spec: &WarmPoolSpec,
    key: &str,
    url: &str,
) -> Result<Hosts, String> {
    let ec2 = Ec2::new(
        &Ec2Config::new(&spec.region, spec.endpoint.as_deref()),
        Fence::always(),
    )
    .await;
    let agent = sibling("orca-pool-agent")
        .ok_or("orca-pool-agent is not beside orca-operator; build the workspace")?;
    Ok(Hosts::new(
        ec2,
        pool_loop.ownership().clone(),
        HostConfig::new(agent, url, key, spec.idle_seconds, &spec.launch.run_command)
            // The hosts are no EC2 instances: the machine's own spot notices,
            // if it has any, are not theirs.
            .with_env(vec![("AWS_EC2_METADATA_DISABLED".into(), "true".into())]),
    ))
}
