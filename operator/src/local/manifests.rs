//! The YAML of a local-mode directory: Secrets, Schedulers and WarmPools,
//! as `kubectl apply -f <dir>` would take them (namespace `default` unless
//! a manifest names one).

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    time::SystemTime,
};

use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use serde::Deserialize;

use crate::crd::{Scheduler, WarmPool};

/// Why a directory's manifests could not be loaded: a file that cannot be
/// read, or a document that does not parse.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("reading {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: document {doc}: {message}")]
    Parse {
        path: PathBuf,
        doc: usize,
        message: String,
    },
}

/// Everything a directory declares, keyed by `namespace/name`.
#[derive(Clone, Debug, Default)]
pub struct Manifests {
    secrets: BTreeMap<String, Secret>,
    schedulers: BTreeMap<String, Scheduler>,
    warm_pools: BTreeMap<String, WarmPool>,
}

impl Manifests {
    /// The Schedulers, by `namespace/name`.
    pub fn schedulers(&self) -> &BTreeMap<String, Scheduler> {
        &self.schedulers
    }

    /// The WarmPools, by `namespace/name`.
    pub fn warm_pools(&self) -> &BTreeMap<String, WarmPool> {
        &self.warm_pools
    }
}

#[derive(Deserialize)]
struct Kind {
    kind: Option<String>,
}

/// The directory's YAML files, each with its modification time, to notice
/// an edit cheaply: an `apply` (a file written), a file added, and a file
/// removed — which the newest modification time alone would not show when
/// another file is newer.
pub fn stamp(dir: &Path) -> Option<Vec<(PathBuf, Option<SystemTime>)>> {
    let files = yaml_files(dir).ok()?;
    Some(
        files
            .into_iter()
            .map(|p| {
                let modified = p.metadata().and_then(|m| m.modified()).ok();
                (p, modified)
            })
            .collect(),
    )
}

fn yaml_files(dir: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let read = |source| ManifestError::Read {
        path: dir.to_path_buf(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml" || e == "yml"))
        .collect();
    files.sort();
    Ok(files)
}

/// Reads every YAML file of `dir`; a document that does not parse as the
/// kind it names is an error naming the file, the document and the field.
pub fn load(dir: &Path) -> Result<Manifests, ManifestError> {
    let mut all = Manifests::default();
    for path in yaml_files(dir)? {
        let text = std::fs::read_to_string(&path).map_err(|source| ManifestError::Read {
            path: path.clone(),
            source,
        })?;
        for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let fail = |message: String| ManifestError::Parse {
                path: path.clone(),
                doc: i + 1,
                message,
            };
            let value = serde_yaml::Value::deserialize(doc).map_err(|e| fail(e.to_string()))?;
            if value.is_null() {
                continue;
            }
            let kind: Kind =
                serde_yaml::from_value(value.clone()).map_err(|e| fail(e.to_string()))?;
            match kind.kind.as_deref() {
                Some("Secret") => {
                    let s: Secret =
                        serde_yaml::from_value(value).map_err(|e| fail(e.to_string()))?;
                    all.secrets.insert(key(&s.namespace(), &s.name_any()), s);
                }
                Some("Scheduler") => {
                    let s: Scheduler =
                        serde_yaml::from_value(value).map_err(|e| fail(e.to_string()))?;
                    all.schedulers.insert(key(&s.namespace(), &s.name_any()), s);
                }
                Some("WarmPool") => {
                    let p: WarmPool =
                        serde_yaml::from_value(value).map_err(|e| fail(e.to_string()))?;
                    all.warm_pools.insert(key(&p.namespace(), &p.name_any()), p);
                }
                Some(other) => {
                    return Err(fail(format!("kind {other} is not one the local mode runs")))
                }
                None => return Err(fail("it has no kind".into())),
            }
        }
    }
    Ok(all)
}

fn key(namespace: &Option<String>, name: &str) -> String {
    format!("{}/{name}", namespace.as_deref().unwrap_or("default"))
}

impl Manifests {
    /// The value of `key` in Secret `namespace/name`: `stringData` first,
    /// then `data`. `Err` says which of the two is missing.
    pub fn secret_value(
        &self,
        namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<String, SecretLookup> {
        let secret = self
            .secrets
            .get(&format!("{namespace}/{name}"))
            .ok_or(SecretLookup::NoSecret)?;
        if let Some(v) = secret.string_data.as_ref().and_then(|d| d.get(key)) {
            return Ok(v.clone());
        }
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .ok_or(SecretLookup::NoKey)
    }
}

/// Why [`Manifests::secret_value`] found no value: no such Secret, or no
/// such key in it.
#[derive(Debug, PartialEq)]
pub enum SecretLookup {
    NoSecret,
    NoKey,
}
