//! Which CRDs this operator was built for, and whether the ones installed
//! hold every field it writes. Pure.
//!
//! `orca-operator crds` stamps each CRD with [`SCHEMA_ANNOTATION`], a hash
//! of the CRD's spec as this build generates it. At start a replica reads
//! the installed CRDs (the operator's `runtime::crd_check`): the same stamp is the
//! same schema; another stamp (or none, from before stamps) is compared
//! field by field. CRDs that lack a field this build writes are *stale*:
//! the API server would prune that field from every status the operator
//! writes and every spec it reads, so the replica acts on nothing until
//! they are upgraded. CRDs with fields this build does not know (a newer
//! release's, after a rollback of the operator) lose it nothing, and are
//! accepted.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray, JSONSchemaPropsOrBool,
};
use sha2::{Digest, Sha256};

/// The annotation that names the schema a CRD was generated from.
pub const SCHEMA_ANNOTATION: &str = "orca.dev/schema";

/// Helm keeps a CRD so annotated when its release is uninstalled or a
/// later revision no longer has it: deleting a CRD deletes every object of
/// its kind.
pub const KEEP_ANNOTATION: (&str, &str) = ("helm.sh/resource-policy", "keep");

/// The stamp of `crd`'s spec: `sha256:` and 16 hex digits.
pub fn schema_hash(crd: &CustomResourceDefinition) -> String {
    let spec = serde_json::to_vec(&crd.spec).expect("invariant: a CRD's spec serialises");
    let digest = Sha256::digest(spec);
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// `crd` with its [`SCHEMA_ANNOTATION`] and Helm's keep policy.
pub fn stamped(mut crd: CustomResourceDefinition) -> CustomResourceDefinition {
    let hash = schema_hash(&crd);
    let annotations = crd
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(SCHEMA_ANNOTATION.into(), hash);
    annotations.insert(KEEP_ANNOTATION.0.into(), KEEP_ANNOTATION.1.into());
    crd
}

/// The stamp `crd` carries, if any.
pub fn stamp_of(crd: &CustomResourceDefinition) -> Option<&str> {
    crd.metadata
        .annotations
        .as_ref()?
        .get(SCHEMA_ANNOTATION)
        .map(String::as_str)
}

/// How an installed CRD stands to the one this build generates.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fit {
    /// The same stamp: the schema this build was made with.
    Same,
    /// Another stamp, or none, but every field this build writes is there
    /// (newer CRDs, after the operator was rolled back).
    Holds,
    /// Fields this build writes that the installed CRD does not have (at
    /// most a few named), or a version it does not serve.
    Stale(Vec<String>),
}

/// How `installed` stands to `ours` (both of one kind).
pub fn fit(ours: &CustomResourceDefinition, installed: &CustomResourceDefinition) -> Fit {
    if stamp_of(installed).is_some_and(|s| stamp_of(ours).unwrap_or_default() == s) {
        return Fit::Same;
    }
    let mut missing = Vec::new();
    for version in &ours.spec.versions {
        let Some(theirs) = installed
            .spec
            .versions
            .iter()
            .find(|v| v.name == version.name && v.served)
        else {
            missing.push(format!("version {} (not served)", version.name));
            continue;
        };
        let schema = |v: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionVersion| {
            v.schema.as_ref().and_then(|s| s.open_api_v3_schema.clone())
        };
        if let (Some(ours), Some(theirs)) = (schema(version), schema(theirs)) {
            missing_fields(&ours, &theirs, "", &mut missing);
        }
    }
    if missing.is_empty() {
        Fit::Holds
    } else {
        Fit::Stale(missing)
    }
}

/// Adds to `out` the paths under `at` that `ours` has and `theirs` would
/// prune.
fn missing_fields(
    ours: &JSONSchemaProps,
    theirs: &JSONSchemaProps,
    at: &str,
    out: &mut Vec<String>,
) {
    if theirs.x_kubernetes_preserve_unknown_fields == Some(true) {
        return;
    }
    for (name, field) in ours.properties.iter().flatten() {
        let path = if at.is_empty() {
            name.clone()
        } else {
            format!("{at}.{name}")
        };
        match theirs.properties.as_ref().and_then(|p| p.get(name)) {
            Some(there) => missing_fields(field, there, &path, out),
            None => out.push(path),
        }
    }
    if let (
        Some(JSONSchemaPropsOrArray::Schema(ours)),
        Some(JSONSchemaPropsOrArray::Schema(theirs)),
    ) = (&ours.items, &theirs.items)
    {
        missing_fields(ours, theirs, &format!("{at}[]"), out);
    }
    if let (
        Some(JSONSchemaPropsOrBool::Schema(ours)),
        Some(JSONSchemaPropsOrBool::Schema(theirs)),
    ) = (&ours.additional_properties, &theirs.additional_properties)
    {
        missing_fields(ours, theirs, &format!("{at}.*"), out);
    }
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;

    use super::*;
    use crate::crd::{Scheduler, WarmPool};

    /// The schema of `crd`'s field at `path` (property names).
    fn field<'a>(crd: &'a mut CustomResourceDefinition, path: &[&str]) -> &'a mut JSONSchemaProps {
        let mut at = crd.spec.versions[0]
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .unwrap();
        for p in path {
            at = at.properties.as_mut().unwrap().get_mut(*p).unwrap();
        }
        at
    }

    /// `crd` with the field at `path` removed.
    fn without(mut crd: CustomResourceDefinition, path: &[&str]) -> CustomResourceDefinition {
        let (last, parents) = path.split_last().unwrap();
        let at = field(&mut crd, parents);
        assert!(
            at.properties.as_mut().unwrap().remove(*last).is_some(),
            "{path:?}"
        );
        crd
    }

    #[test]
    fn the_same_stamp_is_the_same_schema() {
        let ours = stamped(Scheduler::crd());
        assert_eq!(fit(&ours, &ours.clone()), Fit::Same);
        assert!(schema_hash(&ours).starts_with("sha256:"));
        assert_ne!(schema_hash(&ours), schema_hash(&WarmPool::crd()));
    }

    #[test]
    fn crds_without_a_field_this_build_writes_are_stale() {
        let ours = stamped(WarmPool::crd());
        // An older release's CRD: no stamp, and no field added since.
        let mut old = without(WarmPool::crd(), &["status", "conditions"]);
        old = without(old, &["spec", "launch", "databaseUrlIn"]);
        assert_eq!(
            fit(&ours, &old),
            Fit::Stale(vec![
                "spec.launch.databaseUrlIn".into(),
                "status.conditions".into()
            ])
        );
        // A stamp of its own does not make it current.
        let old = stamped(old);
        assert!(matches!(fit(&ours, &old), Fit::Stale(_)));
    }

    #[test]
    fn newer_crds_hold_every_field_and_are_accepted() {
        let ours = stamped(without(Scheduler::crd(), &["status", "conditions"]));
        let newer = stamped(Scheduler::crd());
        assert_eq!(fit(&ours, &newer), Fit::Holds);
        let mut unstamped = Scheduler::crd();
        unstamped.metadata.annotations = None;
        assert_eq!(fit(&stamped(Scheduler::crd()), &unstamped), Fit::Holds);
    }

    #[test]
    fn a_version_not_served_is_stale() {
        let ours = stamped(Scheduler::crd());
        let mut other = Scheduler::crd();
        other.spec.versions[0].served = false;
        assert_eq!(
            fit(&ours, &other),
            Fit::Stale(vec!["version v1alpha1 (not served)".into()])
        );
    }

    #[test]
    fn a_field_that_keeps_unknown_fields_prunes_nothing_under_it() {
        let ours = stamped(WarmPool::crd());
        let mut loose = without(WarmPool::crd(), &["spec", "launch", "databaseUrlIn"]);
        field(&mut loose, &["spec", "launch"]).x_kubernetes_preserve_unknown_fields = Some(true);
        assert_eq!(fit(&ours, &loose), Fit::Holds);
    }
}
