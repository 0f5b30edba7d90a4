//! Before a replica stands for the Lease: are the installed CRDs the ones
//! it was built for ([`crate::crd::schema`])? Stale ones (an upgrade of the
//! operator without its CRDs) would have the API server prune every field
//! this release added from what the operator writes, and hide them from
//! what it reads. So the replica waits, acting on nothing, and says why
//! where a platform engineer looks: its log, an Event on the Lease and
//! `/readyz`, with the command that upgrades them. It looks again every
//! few seconds and goes on once they are upgraded; newer CRDs (the
//! operator rolled back) are accepted. While it leads it keeps looking
//! ([`until_stale`]): CRDs made older under it (a rollback of the CRDs
//! alone, or of a release whose Deployment has not rolled yet) end its
//! term, and it waits again.

use std::time::Duration;

use k8s_openapi::{
    api::core::v1::ObjectReference,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    runtime::events::{Event, EventType, Recorder, Reporter},
    Api, Client,
};
use tracing::{info, warn};

use super::{names::MANAGER, server::Readiness, status::event_action};
use crate::crd::schema::{fit, Fit};

/// How often a waiting replica reads the CRDs again.
const LOOK_EVERY: Duration = Duration::from_secs(5);

/// The Event's reason while the CRDs are stale.
pub const STALE_REASON: &str = "CustomResourceDefinitionsStale";

/// What upgrades the CRDs, for the messages.
const UPGRADE: &str = "upgrade them with this release's chart (`helm upgrade` of orca-operator, \
     or of orca-operator-crds) or `kubectl apply --server-side -f crds/orca.dev.yaml` of this release";

/// Returns once every CRD of this build is installed with every field it
/// writes; meanwhile `/readyz` fails saying why, and each new reason is
/// logged and posted as an Event on `lease` (the replica's identity as the
/// reporter).
pub async fn wait_for_crds(
    client: &Client,
    ready: &Readiness,
    lease: ObjectReference,
    identity: &str,
) {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let recorder = Recorder::new(
        client.clone(),
        Reporter {
            controller: MANAGER.into(),
            instance: Some(identity.into()),
        },
    );
    let mut said: Option<String> = None;
    loop {
        ready.looked();
        let why: Vec<String> = problems(&api, true)
            .await
            .into_iter()
            .map(|p| p.message)
            .collect();
        if why.is_empty() {
            if said.is_some() {
                info!("the CustomResourceDefinitions hold every field this operator writes now: going on");
            }
            ready.hold(None);
            return;
        }
        let message = format!(
            "{}: acting on nothing until they are upgraded; {UPGRADE}",
            why.join("; ")
        );
        ready.hold(Some(message.clone()));
        if said.as_deref() != Some(message.as_str()) {
            warn!("{message}");
            let event = Event {
                type_: EventType::Warning,
                reason: STALE_REASON.into(),
                note: Some(message.chars().take(1000).collect()),
                action: event_action(STALE_REASON, &message),
                secondary: None,
            };
            if let Err(e) = recorder.publish(&event, &lease).await {
                warn!(error = %e, "cannot post an event on the lease");
            }
            said = Some(message);
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// The CRDs found older than this build, or gone, under a replica that
/// leads: its term ends ([`until_stale`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}: this replica stops acting and releases the lease until they are upgraded")]
pub struct Stale(String);

/// Returns once the installed CRDs are found older than this build or not
/// installed, looking every few seconds; meant to run beside the
/// controllers, whose term it then ends. A read that fails finds nothing
/// (the API server may be briefly away, which the Lease's renewal judges):
/// the next look tries again.
pub async fn until_stale(client: &Client) -> Stale {
    loop {
        tokio::time::sleep(LOOK_EVERY).await;
        if let Some(stale) = stale(client).await {
            return stale;
        }
    }
}

/// One look: the installed CRDs older than this build or not installed,
/// if they are found so (a read that fails finds nothing).
pub async fn stale(client: &Client) -> Option<Stale> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let found: Vec<String> = problems(&api, false)
        .await
        .into_iter()
        .filter(|p| p.found)
        .map(|p| p.message)
        .collect();
    (!found.is_empty()).then(|| Stale(found.join("; ")))
}

/// Something wrong with one installed CRD.
struct Problem {
    /// One phrase, with what it is about.
    message: String,
    /// The API server said so (older, or not installed), rather than a
    /// read that failed.
    found: bool,
}

/// What is wrong with the installed CRDs, one per CRD; empty when nothing
/// is. With `tell_newer`, a CRD that is not this release's but holds every
/// field it writes is logged (once a start, not at every look).
async fn problems(api: &Api<CustomResourceDefinition>, tell_newer: bool) -> Vec<Problem> {
    let mut out = Vec::new();
    for ours in crate::crd::crds() {
        let name = ours.metadata.name.clone().unwrap_or_default();
        let found = |message| Problem {
            message,
            found: true,
        };
        match api.get_opt(&name).await {
            Ok(Some(installed)) => match fit(&ours, &installed) {
                Fit::Same => {}
                Fit::Holds => {
                    if tell_newer {
                        info!(crd = %name, "the installed CustomResourceDefinition is not this release's but holds every field it writes (a newer one?)");
                    }
                }
                Fit::Stale(missing) => out.push(found(format!(
                    "the CustomResourceDefinition {name} is older than this operator (it lacks {})",
                    first_few(&missing)
                ))),
            },
            Ok(None) => out.push(found(format!(
                "the CustomResourceDefinition {name} is not installed"
            ))),
            Err(e) => out.push(Problem {
                message: format!(
                    "cannot read the CustomResourceDefinition {name} ({e}); the chart's ClusterRole <release>-classes grants get on it"
                ),
                found: false,
            }),
        }
    }
    out
}

/// `a, b, c and N more`.
fn first_few(missing: &[String]) -> String {
    const FEW: usize = 3;
    let shown = missing[..missing.len().min(FEW)].join(", ");
    match missing.len().saturating_sub(FEW) {
        0 => shown,
        more => format!("{shown} and {more} more"),
    }
}

/// The Lease `name` in `namespace`, for Events about this replica's start.
pub fn lease_reference(name: &str, namespace: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("coordination.k8s.io/v1".into()),
        kind: Some("Lease".into()),
        name: Some(name.into()),
        namespace: Some(namespace.into()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_list_names_three() {
        let v: Vec<String> = ["a", "b", "c", "d", "e"].map(String::from).to_vec();
        assert_eq!(first_few(&v[..2]), "a, b");
        assert_eq!(first_few(&v), "a, b, c and 2 more");
    }
}
