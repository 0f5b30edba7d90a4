//! Leader election on a `coordination.k8s.io/v1` Lease, and the [`Fence`]
//! that says until when this replica may act as the leader.
//!
//! Only the holder of the Lease runs the controllers. It renews the Lease
//! every `renew_period` by a merge patch carrying the `resourceVersion` it
//! last wrote (a 409 if anyone else wrote since). Each successful write
//! opens the fence until *the write's start + the lease duration − a
//! margin*, on this process's monotonic clock. Every externally visible
//! action of the controllers checks the fence first, so a replica frozen
//! past its lease (SIGSTOP, a stalled node, a partition) acts on nothing
//! once it thaws, even before it learns that it lost the lease; and
//! [`lead`] stops the controllers as soon as the fence closes.
//!
//! A standby takes a held Lease only once it has seen the same record
//! (holder, renewTime, …) for a full lease duration on its *own* clock —
//! never by comparing clocks with the holder's `renewTime` — and takes it
//! with the record's `resourceVersion` as a precondition too. Whenever a
//! standby's write succeeds, the holder it replaced started its last
//! successful write more than a lease duration earlier, so that holder's
//! fence closed at least `margin` before.
//!
//! On shutdown the holder stops its controllers, then clears
//! `holderIdentity`, so a standby takes over at its next look.
//!
//! The election — acquire, renew, stand by, give
//! up — and its fence, with its tests.

use std::{future::Future, pin::Pin, time::Duration};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::{
    api::{Patch, PatchParams, PostParams},
    Api, Client,
};
use serde_json::json;
use tokio::{
    task::{JoinError, JoinHandle},
    time::{sleep_until, Instant},
};
use tracing::{debug, info, warn};

use crate::fence::Fence;

use super::server::Readiness;

/// The lease duration when a Lease does not say.
pub const LEASE_DURATION: Duration = Duration::from_secs(15);

/// Which Lease, who this replica is, and the election's timings.
#[derive(Clone, Debug)]
pub struct Election {
    lease_name: String,
    namespace: String,
    /// Unique among the replicas: the pod's name.
    identity: String,
    /// The Lease's `leaseDurationSeconds` (whole seconds): a standby takes
    /// over once the record stood still this long on its own clock.
    duration: Duration,
    /// How often the holder renews, and a standby looks.
    renew_period: Duration,
    /// The fence closes this long before the lease would end: room for the
    /// time between a check and the call it guards, and for clocks that
    /// run at slightly different rates.
    margin: Duration,
    /// Each call to the API server gives up after this.
    call_timeout: Duration,
}

impl Election {
    /// 15 s leases, renewed every 2 s, the fence closing 3 s early: a
    /// holder that cannot renew stops acting 12 s after the start of its
    /// last successful renewal; a standby takes over at least 15 s after it
    /// last saw the Lease change.
    pub fn new(lease_name: &str, namespace: &str, identity: &str) -> Self {
        Election {
            lease_name: lease_name.into(),
            namespace: namespace.into(),
            identity: identity.into(),
            duration: LEASE_DURATION,
            renew_period: Duration::from_secs(2),
            margin: Duration::from_secs(3),
            call_timeout: Duration::from_secs(3),
        }
    }

    /// This election with other timings (tests shorten them): leases of
    /// `duration`, renewed every `renew_period`, the fence closing
    /// `margin` early, each call given up after `call_timeout`.
    pub fn with_timings(
        self,
        duration: Duration,
        renew_period: Duration,
        margin: Duration,
        call_timeout: Duration,
    ) -> Self {
        Election {
            duration,
            renew_period,
            margin,
            call_timeout,
            ..self
        }
    }

    fn duration_seconds(&self) -> i32 {
        i32::try_from(self.duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    /// The end of the fence for a write that started at `started`.
    fn fence_end(&self, started: Instant) -> Instant {
        let lease = Duration::from_secs(self.duration.as_secs().max(1));
        started + lease.saturating_sub(self.margin)
    }
}

/// Why a call on the leader-election Lease failed: the API server refused
/// it, or did not answer in time.
#[derive(Debug, thiserror::Error)]
pub enum LeaseError {
    #[error("Lease {lease}: {call}: {source}")]
    Call {
        lease: String,
        call: &'static str,
        #[source]
        source: kube::Error,
    },
    #[error("Lease {lease}: {call}: no answer within {after:?}")]
    Timeout {
        lease: String,
        call: &'static str,
        after: Duration,
    },
}

/// When this replica first saw a Lease's record as it is now: the
/// standby's own clock for the take-over rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Sighting {
    record: LeaseSpec,
    since: Instant,
}

impl Sighting {
    /// The sighting once `record` is read at `now`: the previous one while
    /// the record stands still, else a new one from `now`.
    pub fn update(previous: Option<Sighting>, record: &LeaseSpec, now: Instant) -> Sighting {
        match previous {
            Some(s) if s.record == *record => s,
            _ => Sighting {
                record: record.clone(),
                since: now,
            },
        }
    }
}

/// What to do about the Lease as read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseAction {
    /// There is no Lease: create it, held by this replica.
    Create,
    /// Nobody holds it, or its holder has not renewed it for a full lease
    /// duration (as this replica saw it): take it.
    Take,
    /// This replica holds it: renew it.
    Renew,
    /// Another replica holds it: look again; it is free at `until` unless
    /// it changes before.
    Wait { until: Instant },
}

/// The take-over rule: `lease` as read, by replica `me`, at `now`, with
/// `sighting` of that record (see [`Sighting::update`]; a sighting of
/// another record counts as first seen `now`).
pub fn decide_lease(
    lease: Option<&LeaseSpec>,
    me: &str,
    now: Instant,
    sighting: Option<&Sighting>,
) -> LeaseAction {
    let Some(lease) = lease else {
        return LeaseAction::Create;
    };
    match lease.holder_identity.as_deref() {
        None | Some("") => LeaseAction::Take,
        Some(holder) if holder == me => LeaseAction::Renew,
        Some(_) => {
            let duration = lease
                .lease_duration_seconds
                .and_then(|s| u64::try_from(s).ok())
                .filter(|s| *s > 0)
                .map_or(LEASE_DURATION, Duration::from_secs);
            let since = sighting
                .filter(|s| s.record == *lease)
                .map_or(now, |s| s.since);
            let until = since + duration;
            if now >= until {
                LeaseAction::Take
            } else {
                LeaseAction::Wait { until }
            }
        }
    }
}

/// Where this replica stands after a step of the election.
#[derive(Clone, Debug, PartialEq)]
enum Role {
    /// It holds the Lease; its fence may stay open until `until`.
    Leader { until: Instant },
    /// Another holds it (or nobody, for now).
    Standby { holder: Option<String> },
}

/// The election's state between steps.
struct Elector {
    api: Api<Lease>,
    election: Election,
    /// The `resourceVersion` of this replica's last successful write, while
    /// it holds the Lease: the precondition of its next renewal.
    held: Option<String>,
    sighting: Option<Sighting>,
}

fn now_micro() -> MicroTime {
    MicroTime(Timestamp::now())
}

fn is_code(e: &LeaseError, codes: &[u16]) -> bool {
    matches!(e, LeaseError::Call { source: kube::Error::Api(s), .. } if codes.contains(&s.code))
}

impl Elector {
    fn new(api: Api<Lease>, election: Election) -> Self {
        Elector {
            api,
            election,
            held: None,
            sighting: None,
        }
    }

    async fn call<T>(
        &self,
        call: &'static str,
        request: impl Future<Output = Result<T, kube::Error>>,
    ) -> Result<T, LeaseError> {
        let lease = || format!("{}/{}", self.election.namespace, self.election.lease_name);
        match tokio::time::timeout(self.election.call_timeout, request).await {
            Ok(Ok(t)) => Ok(t),
            Ok(Err(source)) => Err(LeaseError::Call {
                lease: lease(),
                call,
                source,
            }),
            Err(_) => Err(LeaseError::Timeout {
                lease: lease(),
                call,
                after: self.election.call_timeout,
            }),
        }
    }

    async fn read(&self) -> Result<Option<Lease>, LeaseError> {
        self.call("get", self.api.get_opt(&self.election.lease_name))
            .await
    }

    /// A merge patch of the Lease's spec, on the condition that its
    /// `resourceVersion` is still `version`.
    async fn write(
        &self,
        call: &'static str,
        version: &str,
        spec: serde_json::Value,
    ) -> Result<Lease, LeaseError> {
        let body = json!({
            "metadata": { "resourceVersion": version },
            "spec": spec,
        });
        let params = PatchParams::default();
        let patch = Patch::Merge(&body);
        self.call(
            call,
            self.api.patch(&self.election.lease_name, &params, &patch),
        )
        .await
    }

    /// This replica wrote the Lease in a call that started at `started`.
    fn leading(&mut self, written: Lease, started: Instant) -> Role {
        self.held = written.metadata.resource_version;
        self.sighting = None;
        Role::Leader {
            until: self.election.fence_end(started),
        }
    }

    /// One step: renew the Lease held; else read it, decide, and create,
    /// take or renew it, or wait.
    async fn step(&mut self) -> Result<Role, LeaseError> {
        let me = self.election.identity.clone();
        let seconds = self.election.duration_seconds();
        if let Some(version) = self.held.clone() {
            let started = Instant::now();
            let spec = json!({
                "holderIdentity": me,
                "leaseDurationSeconds": seconds,
                "renewTime": now_micro(),
            });
            match self.write("renew", &version, spec).await {
                Ok(lease) => return Ok(self.leading(lease, started)),
                // Written by someone else since, or gone: read it.
                Err(e) if is_code(&e, &[404, 409]) => {
                    debug!(lease = %self.election.lease_name, error = %e, "renewal refused; reading the lease");
                    self.held = None;
                }
                Err(e) => return Err(e),
            }
        }
        let lease = self.read().await?;
        let now = Instant::now();
        let record = lease.as_ref().map(|l| l.spec.clone().unwrap_or_default());
        self.sighting = record
            .as_ref()
            .map(|r| Sighting::update(self.sighting.take(), r, now));
        let action = decide_lease(record.as_ref(), &me, now, self.sighting.as_ref());
        let holder = record.as_ref().and_then(|r| r.holder_identity.clone());
        let version = lease
            .as_ref()
            .and_then(|l| l.metadata.resource_version.clone())
            .unwrap_or_default();
        let started = Instant::now();
        let written = match action {
            LeaseAction::Wait { .. } => return Ok(Role::Standby { holder }),
            LeaseAction::Create => {
                let lease = Lease {
                    metadata: ObjectMeta {
                        name: Some(self.election.lease_name.clone()),
                        namespace: Some(self.election.namespace.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(me.clone()),
                        lease_duration_seconds: Some(seconds),
                        acquire_time: Some(now_micro()),
                        renew_time: Some(now_micro()),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                self.call("create", self.api.create(&PostParams::default(), &lease))
                    .await
            }
            LeaseAction::Take => {
                let transitions = record
                    .as_ref()
                    .and_then(|r| r.lease_transitions)
                    .unwrap_or(0)
                    .saturating_add(1);
                let spec = json!({
                    "holderIdentity": me,
                    "leaseDurationSeconds": seconds,
                    "acquireTime": now_micro(),
                    "renewTime": now_micro(),
                    "leaseTransitions": transitions,
                });
                self.write("take", &version, spec).await
            }
            LeaseAction::Renew => {
                // Held in this replica's name by an earlier life of it.
                let spec = json!({
                    "holderIdentity": me,
                    "leaseDurationSeconds": seconds,
                    "renewTime": now_micro(),
                });
                self.write("renew", &version, spec).await
            }
        };
        match written {
            Ok(lease) => {
                if action == LeaseAction::Take {
                    info!(lease = %self.election.lease_name, identity = %me, previous = ?holder, "took the lease");
                }
                Ok(self.leading(lease, started))
            }
            // Another replica wrote (or created) it first.
            Err(e) if is_code(&e, &[404, 409]) => {
                debug!(lease = %self.election.lease_name, error = %e, "lost a race for the lease");
                Ok(Role::Standby { holder })
            }
            Err(e) => Err(e),
        }
    }

    /// Gives the Lease back if this replica holds it: a standby takes it at
    /// its next look instead of a lease duration later. Whether it did.
    async fn release(&mut self) -> Result<bool, LeaseError> {
        self.held = None;
        let Some(lease) = self.read().await? else {
            return Ok(false);
        };
        let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone());
        if holder.as_deref() != Some(self.election.identity.as_str()) {
            return Ok(false);
        }
        let version = lease.metadata.resource_version.unwrap_or_default();
        let spec = json!({
            "holderIdentity": null,
            "leaseDurationSeconds": 1,
            "renewTime": now_micro(),
        });
        self.write("release", &version, spec).await?;
        Ok(true)
    }
}

type Step = Pin<Box<dyn Future<Output = (Elector, Result<Role, LeaseError>)> + Send>>;

fn step(mut elector: Elector) -> Step {
    Box::pin(async move {
        let result = elector.step().await;
        (elector, result)
    })
}

/// The controllers' task, aborted when dropped: nothing of them outlives
/// [`lead`], whichever way it ends.
struct Controllers(JoinHandle<anyhow::Result<()>>);

impl Drop for Controllers {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs `work(fence)` while this replica holds the Lease, until `shutdown`
/// completes (then the work stops and the Lease is released, so a standby
/// takes over at once). The work is stopped as soon as the fence closes —
/// the Lease lost, or not renewed in time — and started again (with the
/// same fence) if this replica leads again. `ready` is set once the Lease
/// was read either way. Returns an error if the work ends on its own: the
/// process should exit.
pub async fn lead<W, F>(
    client: Client,
    election: Election,
    ready: Readiness,
    work: W,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<()>
where
    W: Fn(Fence) -> F,
    F: Future<Output = anyhow::Result<()>> + Send + 'static,
{
    let api: Api<Lease> = Api::namespaced(client, &election.namespace);
    let lease = election.lease_name.clone();
    let fence = Fence::new();
    let mut elector = Some(Elector::new(api.clone(), election.clone()));
    let mut pending: Option<(Instant, Step)> = None;
    let mut next = Instant::now();
    // The fence's end while the controllers run.
    let mut until: Option<Instant> = None;
    let mut running: Option<Controllers> = None;
    let mut last_holder: Option<Option<String>> = None;
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            biased;
            _ = &mut shutdown => {
                if stop(&mut running, &fence).await {
                    info!(lease = %lease, "shutting down: the controllers stopped");
                }
                drop(pending.take());
                let mut elector = elector
                    .take()
                    .unwrap_or_else(|| Elector::new(api.clone(), election.clone()));
                match elector.release().await {
                    Ok(true) => info!(lease = %lease, "released the lease"),
                    Ok(false) => {}
                    Err(e) => warn!(lease = %lease, error = %e, "cannot release the lease"),
                }
                return Ok(());
            }
            _ = sleep_until(until.unwrap_or_else(Instant::now)), if until.is_some() => {
                until = None;
                stop(&mut running, &fence).await;
                warn!(lease = %lease, "the lease was not renewed in time: the controllers stopped");
            }
            done = wait(&mut running) => {
                fence.close();
                drop(pending.take());
                let mut elector = elector
                    .take()
                    .unwrap_or_else(|| Elector::new(api.clone(), election.clone()));
                if let Err(e) = elector.release().await {
                    warn!(lease = %lease, error = %e, "cannot release the lease");
                }
                return match done {
                    Ok(Ok(())) => Err(anyhow::anyhow!("the controllers stopped")),
                    Ok(Err(e)) => Err(e.context("the controllers failed")),
                    Err(e) => Err(anyhow::anyhow!("the controllers' task failed: {e}")),
                };
            }
            (back, result) = poll(&mut pending) => {
                ready.looked();
                let started = pending.take().map_or_else(Instant::now, |(at, _)| at);
                elector = Some(back);
                next = started + election.renew_period;
                match result {
                    Ok(Role::Leader { until: end }) => {
                        ready.set(true);
                        fence.hold_until(end);
                        until = Some(end);
                        last_holder = None;
                        if running.is_none() && Instant::now() < end {
                            info!(lease = %lease, identity = %election.identity, "holds the lease: starting the controllers");
                            running = Some(Controllers(tokio::spawn(work(fence.clone()))));
                        }
                    }
                    Ok(Role::Standby { holder }) => {
                        ready.set(true);
                        until = None;
                        if stop(&mut running, &fence).await {
                            info!(lease = %lease, holder = ?holder, "lost the lease: the controllers stopped");
                        }
                        if last_holder.as_ref() != Some(&holder) {
                            info!(lease = %lease, holder = ?holder, "standing by");
                            last_holder = Some(holder);
                        }
                    }
                    // The fence stands until it closes on its own.
                    Err(e) => warn!(lease = %lease, error = %e, "lease call failed; trying again"),
                }
            }
            _ = sleep_until(next), if pending.is_none() => {
                if let Some(e) = elector.take() {
                    pending = Some((Instant::now(), step(e)));
                }
            }
        }
    }
}

/// Closes the fence and stops the controllers; whether they ran.
async fn stop(running: &mut Option<Controllers>, fence: &Fence) -> bool {
    fence.close();
    match running.take() {
        Some(mut task) => {
            task.0.abort();
            let _ = (&mut task.0).await;
            true
        }
        None => false,
    }
}

/// The step under way's end, or never when there is none.
async fn poll(pending: &mut Option<(Instant, Step)>) -> (Elector, Result<Role, LeaseError>) {
    match pending {
        Some((_, step)) => step.await,
        None => std::future::pending().await,
    }
}

/// The work's end, or never when there is none.
async fn wait(running: &mut Option<Controllers>) -> Result<anyhow::Result<()>, JoinError> {
    match running {
        Some(task) => {
            let done = (&mut task.0).await;
            *running = None;
            done
        }
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::Fenced;

    fn held_by(holder: &str, renewed: &str) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(renewed.parse().unwrap())),
            ..Default::default()
        }
    }

    #[test]
    fn the_fence_closes_without_a_renewal_and_opens_with_one() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let fence = Fence::new();
        assert_eq!(fence.check_at(t0), Err(Fenced), "closed until a renewal");
        fence.hold_until(t0 + s(12));
        assert_eq!(fence.check_at(t0 + s(11)), Ok(()));
        assert_eq!(fence.check_at(t0 + s(12)), Err(Fenced), "expired");
        assert_eq!(fence.clone().check_at(t0 + s(20)), Err(Fenced));
        // A renewal at t0 + 10 s: valid again, until 22 s, for every clone.
        let clone = fence.clone();
        fence.hold_until(t0 + s(22));
        assert_eq!(clone.check_at(t0 + s(20)), Ok(()));
        assert_eq!(clone.check_at(t0 + s(23)), Err(Fenced));
        fence.close();
        assert_eq!(clone.check_at(t0 + s(13)), Err(Fenced));
        assert_eq!(Fence::always().check_at(t0 + s(1_000_000)), Ok(()));
    }

    #[test]
    fn the_fence_ends_a_margin_before_the_lease() {
        let e = Election::new("l", "ns", "a");
        let t0 = Instant::now();
        assert_eq!(e.fence_end(t0), t0 + Duration::from_secs(12));
    }

    #[test]
    fn the_take_over_rule() {
        let t0 = Instant::now();
        let s = Duration::from_secs;
        let b = held_by("b", "2000-01-01T00:00:00Z");
        let seen_t0 = Sighting {
            record: b.clone(),
            since: t0,
        };
        let free = LeaseSpec {
            holder_identity: Some(String::new()),
            ..b.clone()
        };
        // (what, the lease, me, now, the sighting, what to do)
        type Case<'a> = (
            &'a str,
            Option<&'a LeaseSpec>,
            &'a str,
            Instant,
            Option<&'a Sighting>,
            LeaseAction,
        );
        let cases: Vec<Case> = vec![
            ("no lease", None, "a", t0, None, LeaseAction::Create),
            ("released", Some(&free), "a", t0, None, LeaseAction::Take),
            ("ours", Some(&b), "b", t0, None, LeaseAction::Renew),
            // An old renewTime says nothing: the clock starts when seen.
            (
                "first seen",
                Some(&b),
                "a",
                t0,
                None,
                LeaseAction::Wait { until: t0 + s(15) },
            ),
            (
                "seen 14 s",
                Some(&b),
                "a",
                t0 + s(14),
                Some(&seen_t0),
                LeaseAction::Wait { until: t0 + s(15) },
            ),
            (
                "seen 15 s",
                Some(&b),
                "a",
                t0 + s(15),
                Some(&seen_t0),
                LeaseAction::Take,
            ),
        ];
        for (what, lease, me, now, sighting, want) in cases {
            assert_eq!(decide_lease(lease, me, now, sighting), want, "{what}");
        }
        // Renewed at 10 s: a new record, and the clock starts again.
        let renewed = held_by("b", "2000-01-01T00:00:02Z");
        let seen = Sighting::update(Some(seen_t0.clone()), &renewed, t0 + s(10));
        assert_eq!(seen.since, t0 + s(10));
        assert_eq!(
            decide_lease(Some(&renewed), "a", t0 + s(20), Some(&seen)),
            LeaseAction::Wait { until: t0 + s(25) }
        );
        // A sighting of another record does not count.
        assert_eq!(
            decide_lease(Some(&renewed), "a", t0 + s(20), Some(&seen_t0)),
            LeaseAction::Wait { until: t0 + s(35) }
        );
        // The same record again keeps its first sighting.
        let again = Sighting::update(Some(seen_t0.clone()), &b, t0 + s(9));
        assert_eq!(again.since, t0);
        // The Lease's own duration counts.
        let short = LeaseSpec {
            lease_duration_seconds: Some(2),
            ..b.clone()
        };
        let seen_short = Sighting::update(None, &short, t0);
        assert_eq!(
            decide_lease(Some(&short), "a", t0 + s(2), Some(&seen_short)),
            LeaseAction::Take
        );
    }
}
