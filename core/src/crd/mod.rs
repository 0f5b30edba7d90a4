//! The custom resources, `orca.dev/v1alpha1` `Scheduler`, `WarmPool` and
//! `WarmPoolClass`
//! (docs/api.md). The CRD YAML in `crds/` is generated from these types
//! (`orca-operator crds`), with the validation the API server applies:
//! required fields, ranges, enums and CEL rules where fields relate.

// api_doc — `docs/api.md`, generated from the CRDs the Rust types make.
mod api_doc;
// class — the `WarmPoolClass`.
mod class;
// condition — one way to set a status condition, for both controllers.
mod condition;
// forecast — a WarmPool's forecast warm-up.
mod forecast;
// objective — a WarmPool's time-to-start objective.
mod objective;
// period — a period of the day or week.
mod period;
// roster — a WarmPool's instances one by one, as its status lists them.
mod roster;
// scheduler — the `Scheduler`.
mod scheduler;
// schema — which CRDs this build is for, and whether those installed hold what it writes.
pub mod schema;
// time_to_start — how long runs waited for an instance, as a WarmPool's status shows it.
mod time_to_start;
// warmpool — the `WarmPool`.
mod warmpool;

pub use api_doc::api_markdown;
pub use class::*;
pub use condition::{degraded_already, set_condition, set_degraded, Problem};
pub use forecast::{Forecast, ForecastHour, ForecastStatus};
pub use objective::{Objective, ObjectiveStatus, StartTarget, StaticFloor, TypePrice};
pub use period::Period;
pub use roster::PoolInstance;
pub use scheduler::*;
pub use time_to_start::{StartFigures, TimeToStart};
pub use warmpool::*;

use kube::CustomResourceExt;

/// The longest time-out, deadline or period in seconds any field takes: a
/// year. The CRDs refuse more; [`spec_seconds`] holds an object stored
/// before that to it.
pub const MAX_SECONDS: i64 = 31_536_000;

/// Which namespace `object` (of a namespaced kind) is in: its own, which
/// the API server always sets; `default` for one made without (a test's,
/// as `kubectl apply` without `-n` would put it there). The one place
/// that says so.
pub fn namespace_of<K: kube::Resource>(object: &K) -> String {
    object
        .meta()
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into())
}

/// `n` seconds of a spec field as a duration to add to or compare with a
/// time, held within 0..=[`MAX_SECONDS`]: no spec value, however it got
/// into the API server, can overflow a time computed from it.
pub fn spec_seconds(n: i64) -> chrono::TimeDelta {
    chrono::TimeDelta::seconds(n.clamp(0, MAX_SECONDS))
}

/// Every CRD of the project, stamped with the schema it is
/// ([`schema::SCHEMA_ANNOTATION`]) and kept by Helm when its release goes.
pub fn crds(
) -> Vec<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>
{
    [Scheduler::crd(), WarmPool::crd(), WarmPoolClass::crd()]
        .into_iter()
        .map(schema::stamped)
        .collect()
}

/// Every CRD of the project as one YAML stream, as `crds/` holds it.
pub fn crds_yaml() -> String {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_yaml::to_string(&crd).expect("invariant: a CRD serialises to YAML"));
    }
    out
}
