//! `docs/api.md`, generated from the CRDs the Rust types make: every field
//! of `Scheduler` and `WarmPool` with its type, default, validation and
//! description (`orca-operator api-docs`; a test fails when the file is
//! stale). Fields of Kubernetes' own types (`env`, `affinity`, …) are named
//! with their type rather than unfolded.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, JSONSchemaProps, JSONSchemaPropsOrArray,
};
use kube::CustomResourceExt;

use super::{class::WarmPoolClass, scheduler::Scheduler, warmpool::WarmPool};

/// Fields of Kubernetes' own types: shown by type, not field by field.
const KUBERNETES_TYPES: [(&str, &str); 8] = [
    ("env", "[]EnvVar (core/v1)"),
    ("resources", "ResourceRequirements (core/v1)"),
    ("affinity", "Affinity (core/v1)"),
    ("tolerations", "[]Toleration (core/v1)"),
    ("imagePullSecrets", "[]LocalObjectReference (core/v1)"),
    ("conditions", "[]Condition (meta/v1)"),
    ("securityContext", "SecurityContext (core/v1)"),
    ("podSecurityContext", "PodSecurityContext (core/v1)"),
];

/// The Markdown of `docs/api.md`.
pub fn api_markdown() -> String {
    let mut out = String::from(
        "# API reference\n\n\
         Every field of the project's custom resources, generated from the Rust types \
         (`orca-operator api-docs > docs/api.md`); `scripts/test` fails when this file is \
         stale. The API server enforces the validation column: `kubectl apply` of a spec \
         that breaks it is refused with a message naming the field. `kubectl explain` \
         shows the same descriptions.\n",
    );
    for crd in [Scheduler::crd(), WarmPool::crd(), WarmPoolClass::crd()] {
        kind_section(&crd, &mut out);
    }
    out
}

fn kind_section(crd: &CustomResourceDefinition, out: &mut String) {
    let names = &crd.spec.names;
    let Some(version) = crd.spec.versions.first() else {
        return;
    };
    out.push_str(&format!(
        "\n## {} (`{}/{}`)\n\n",
        names.kind, crd.spec.group, version.name
    ));
    let short = names.short_names.clone().unwrap_or_default().join(", ");
    out.push_str(&format!(
        "{}; plural `{}`, short name `{}`.",
        if crd.spec.scope == "Cluster" {
            "Cluster-scoped"
        } else {
            "Namespaced"
        },
        names.plural,
        short
    ));
    if let Some(columns) = &version.additional_printer_columns {
        let shown: Vec<String> = columns.iter().map(|c| c.name.clone()).collect();
        out.push_str(&format!(" `kubectl get` shows {}.", shown.join(", ")));
    }
    out.push('\n');
    let Some(root) = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
    else {
        return;
    };
    for part in ["spec", "status"] {
        let Some(schema) = root.properties.as_ref().and_then(|p| p.get(part)) else {
            continue;
        };
        out.push_str(&format!(
            "\n### `{part}`\n\n| field | type | default | validation | description |\n| --- | --- | --- | --- | --- |\n"
        ));
        let required = root
            .required
            .as_ref()
            .is_some_and(|r| r.iter().any(|f| f == part));
        let mut rows = Vec::new();
        walk(schema, part, required, &mut rows);
        for row in rows {
            out.push_str(&row);
            out.push('\n');
        }
    }
}

/// A table row for `schema` at `path`, then one per field beneath it.
fn walk(schema: &JSONSchemaProps, path: &str, required: bool, rows: &mut Vec<String>) {
    let name = path.rsplit('.').next().unwrap_or(path);
    let name = name.trim_end_matches("[]");
    let kubernetes = KUBERNETES_TYPES
        .iter()
        .find(|(field, _)| *field == name)
        .map(|(_, t)| *t);
    let type_ = kubernetes
        .map(String::from)
        .unwrap_or_else(|| type_of(schema));
    rows.push(format!(
        "| `{path}` | {type_} | {} | {} | {} |",
        default_of(schema),
        validation_of(schema, required),
        cell(schema.description.as_deref().unwrap_or(""))
    ));
    if kubernetes.is_some() {
        return;
    }
    walk_fields(schema, path, rows);
    if let Some(JSONSchemaPropsOrArray::Schema(item)) = &schema.items {
        if item.properties.is_some() {
            walk_fields(item, &format!("{path}[]"), rows);
        }
    }
}

/// The fields of `item` (an object, or an array's item), each a row of
/// its own.
fn walk_fields(item: &JSONSchemaProps, path: &str, rows: &mut Vec<String>) {
    if let Some(props) = &item.properties {
        for (field, child) in props {
            let required = item
                .required
                .as_ref()
                .is_some_and(|r| r.iter().any(|f| f == field));
            walk(child, &format!("{path}.{field}"), required, rows);
        }
    }
}

fn type_of(schema: &JSONSchemaProps) -> String {
    let base = schema.type_.clone().unwrap_or_else(|| {
        if schema.x_kubernetes_int_or_string == Some(true) {
            "int-or-string".into()
        } else {
            "any".into()
        }
    });
    match base.as_str() {
        "array" => match &schema.items {
            Some(JSONSchemaPropsOrArray::Schema(item)) => format!("[]{}", type_of(item)),
            _ => "[]any".into(),
        },
        "object" if schema.properties.is_none() => match &schema.additional_properties {
            Some(_) => "map[string]string".into(),
            None => "object".into(),
        },
        "integer" | "number" => match &schema.format {
            Some(f) => format!("{base} ({f})"),
            None => base,
        },
        _ => base,
    }
}

fn default_of(schema: &JSONSchemaProps) -> String {
    schema
        .default
        .as_ref()
        .map(|d| cell(&format!("`{}`", d.0)))
        .unwrap_or_default()
}

fn validation_of(schema: &JSONSchemaProps, required: bool) -> String {
    let mut rules = Vec::new();
    if required {
        rules.push("required".to_string());
    }
    if let Some(min) = schema.minimum {
        rules.push(format!("≥ {min}"));
    }
    if let Some(max) = schema.maximum {
        rules.push(format!("≤ {max}"));
    }
    if let Some(n) = schema.min_length {
        rules.push(format!("length ≥ {n}"));
    }
    if let Some(n) = schema.max_length {
        rules.push(format!("length ≤ {n}"));
    }
    if let Some(n) = schema.min_items {
        rules.push(format!("items ≥ {n}"));
    }
    if let Some(values) = &schema.enum_ {
        let values: Vec<String> = values.iter().map(|v| format!("`{}`", v.0)).collect();
        rules.push(format!("one of {}", values.join(", ")));
    }
    if let Some(pattern) = &schema.pattern {
        rules.push(format!("matches `{pattern}`"));
    }
    for rule in schema.x_kubernetes_validations.iter().flatten() {
        let message = rule
            .message
            .as_deref()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default();
        rules.push(format!("CEL `{}`{message}", rule.rule));
    }
    cell(&rules.join("; "))
}

/// Text fit for a table cell: one line, no bare pipes.
fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spec_field_has_a_row_and_kubernetes_types_stay_folded() {
        let md = api_markdown();
        for field in [
            "`spec.image`",
            "`spec.handover.joinTimeoutSeconds`",
            "`spec.database.urlSecretRef.name`",
            "`spec.idle.min`",
            "`spec.launch.instanceTypes`",
            "`status.phase`",
        ] {
            assert!(md.contains(field), "no row for {field}");
        }
        assert!(md.contains("[]EnvVar (core/v1)"));
        assert!(!md.contains("`spec.env[].valueFrom"), "env is unfolded");
        assert!(!md.contains("`spec.podTemplate.affinity.nodeAffinity"));
    }
}
