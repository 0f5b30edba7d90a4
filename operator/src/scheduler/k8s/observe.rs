//! What a Scheduler reconcile observes: its pods and Jobs (from the
//! watches' stores, or listed by its label when the stores cannot be
//! believed), its Secret's database URL and the rows of `orca.schedulers`,
//! into the [`Observed`] that `decide` reads.

use std::{sync::Arc, time::Duration};

use k8s_openapi::api::{batch::v1::Job, core::v1::Pod, core::v1::Secret};
use kube::{api::ListParams, Api, ResourceExt};
use orca_db::Db;
use tracing::warn;

use super::{jobs, pods, Context, ObserveError};
use crate::crd::{Scheduler, SecretKeyRef};
use crate::runtime::{database, names::LABEL_SCHEDULER};
use crate::scheduler::{self, Observed, PodView};

/// The snapshot of `scheduler` (in `ns`) that `decide` reads, and the
/// database it was read from, if it could be reached.
pub(super) async fn observe(
    scheduler: &Scheduler,
    ctx: &Context,
    ns: &str,
) -> Result<(Observed, Option<Arc<Db>>), ObserveError> {
    ctx.fence().check()?;
    let name = scheduler.name_any();
    let (pods, jobs) = match ctx.watched().owned(ns, &name).await {
        Some(owned) => owned,
        None => list_owned(ctx, ns, &name).await?,
    };
    let spec = &scheduler.spec;
    let views: Vec<PodView> = pods.iter().filter_map(pods::pod_view).collect();
    let hosts: Vec<String> = views.iter().map(|p| p.host().to_string()).collect();
    let mut db = None;
    let mut db_now = None;
    let instances = match database_url(ctx, ns, &spec.database.url_secret_ref).await? {
        Err(problem) => Err(problem),
        Ok((text, url)) => match ctx.connections().get(ns, &name, &text, &url).await {
            Err(e) => Err(crate::scheduler::rows::db_problem(&e)),
            Ok(conn) => {
                let stale = Duration::from_secs(spec.handover.stale_seconds.max(1) as u64);
                ctx.fence().check()?;
                match crate::scheduler::rows::observe_instances(&conn, stale, &hosts).await {
                    Ok((rows, now)) => {
                        db = Some(conn);
                        db_now = Some(now);
                        Ok(rows)
                    }
                    Err(e) => {
                        if e.is_connection() {
                            ctx.connections().forget(ns, &name);
                        }
                        Err(crate::scheduler::rows::db_problem(&e))
                    }
                }
            }
        },
    };
    if let Err(p) = &instances {
        warn!(scheduler = %name, namespace = %ns, reason = %p.reason, "database not observed: {}", p.message);
    }
    let observed = Observed::new(
        ns.to_string(),
        name,
        spec.clone(),
        ctx.memory().status(
            ns,
            &scheduler.name_any(),
            scheduler.metadata.resource_version.as_deref(),
            &scheduler.status.clone().unwrap_or_default(),
        ),
        chrono::Utc::now(),
    )
    .with_generation(scheduler.metadata.generation)
    .with_pods(views)
    .with_jobs(jobs.iter().filter_map(jobs::job_view).collect())
    .with_instances(instances)
    .with_rollout_now(scheduler.annotations().get(scheduler::ROLLOUT_NOW).cloned());
    let observed = match db_now {
        Some(now) => observed.on_database_clock(now),
        None => observed,
    };
    Ok((observed, db))
}

/// The pods and Jobs of Scheduler `name`, listed from the API (by its
/// label), when the watches' stores cannot be believed.
async fn list_owned(
    ctx: &Context,
    ns: &str,
    name: &str,
) -> Result<(Vec<Pod>, Vec<Job>), ObserveError> {
    let mine = ListParams::default().labels(&format!(
        "{LABEL_SCHEDULER}={}",
        scheduler::scheduler_label(name)
    ));
    let (pod_api, job_api) = (
        Api::<Pod>::namespaced(ctx.client().clone(), ns),
        Api::<Job>::namespaced(ctx.client().clone(), ns),
    );
    let scheduler = || name.to_string();
    // Both at once: a pass waits for the slower only.
    let (pods, jobs) = futures::join!(pod_api.list(&mine), job_api.list(&mine));
    let pods = pods.map_err(|source| ObserveError::Pods {
        scheduler: scheduler(),
        source,
    })?;
    let jobs = jobs.map_err(|source| ObserveError::Jobs {
        scheduler: scheduler(),
        source,
    })?;
    Ok((pods.items, jobs.items))
}

/// The database URL in Scheduler `name`'s Secret (see
/// [`super::watched::Watched::read_url`]).
async fn database_url(
    ctx: &Context,
    ns: &str,
    secret_ref: &SecretKeyRef,
) -> Result<database::ReadUrl, database::SecretError> {
    let secrets = Api::<Secret>::namespaced(ctx.client().clone(), ns);
    ctx.watched().read_url(&secrets, ns, secret_ref).await
}
