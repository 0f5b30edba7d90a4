//! The Scheduler's database as the Kubernetes mode reaches it: the URL from
//! the Secret `spec.database.urlSecretRef` names, one connection kept per
//! database for the Schedulers on it (so a reconcile does not reconnect,
//! and a thousand Schedulers on one database make one connection), and the rows of
//! `orca.schedulers` as [`InstanceView`](crate::scheduler::InstanceView)s.
//!
//! Whatever goes wrong here that a user can fix (no Secret, no key, a bad
//! URL, a database that can't be reached) is a [`Problem`]: a `Degraded`
//! condition with its reason, never a crash loop, and never the password —
//! the URL text is kept only to connect and to notice that it changed.

use std::{collections::HashMap, sync::Arc};

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use orca_db::{DatabaseUrl, Db, DbError};

use crate::crd::{Problem, SecretKeyRef};

/// Reading the Secret failed for a reason other than its absence (the API
/// server, RBAC): the reconcile is retried.
#[derive(Debug, thiserror::Error)]
#[error("reading Secret {namespace}/{name}: {source}")]
pub struct SecretError {
    namespace: String,
    name: String,
    #[source]
    source: kube::Error,
}

fn problem(reason: &str, message: String) -> Problem {
    Problem {
        reason: reason.into(),
        message,
    }
}

/// The database URL in `secret_ref`'s Secret of `namespace`: the URL text
/// (to connect with; never shown) and its parse, or the [`Problem`].
pub async fn read_url(
    secrets: &Api<Secret>,
    namespace: &str,
    secret_ref: &SecretKeyRef,
) -> Result<Result<(String, DatabaseUrl), Problem>, SecretError> {
    let secret = match secrets.get_opt(&secret_ref.name).await {
        Ok(Some(secret)) => secret,
        Ok(None) => {
            return Ok(Err(problem(
                "SecretMissing",
                format!("Secret {namespace}/{} does not exist", secret_ref.name),
            )))
        }
        Err(source) => {
            return Err(SecretError {
                namespace: namespace.into(),
                name: secret_ref.name.clone(),
                source,
            })
        }
    };
    let value = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|b| b.0.clone())
            .or_else(|| {
                secret
                    .string_data
                    .as_ref()
                    .and_then(|d| d.get(key))
                    .map(|s| s.clone().into_bytes())
            })
    };
    let ca = match &secret_ref.ca_key {
        None => None,
        Some(key) => match value(key) {
            Some(pem) => Some(pem),
            None => {
                return Ok(Err(problem(
                    "SecretKeyMissing",
                    format!(
                        "Secret {namespace}/{} has no key {key:?} (urlSecretRef.caKey)",
                        secret_ref.name
                    ),
                )))
            }
        },
    };
    let Some(bytes) = value(&secret_ref.key) else {
        return Ok(Err(problem(
            "SecretKeyMissing",
            format!(
                "Secret {namespace}/{} has no key {:?}",
                secret_ref.name, secret_ref.key
            ),
        )));
    };
    let invalid = |why: String| {
        problem(
            "DatabaseUrlInvalid",
            format!(
                "the database URL in Secret {namespace}/{} key {:?} is not valid: {why}",
                secret_ref.name, secret_ref.key
            ),
        )
    };
    let Ok(text) = String::from_utf8(bytes) else {
        return Ok(Err(invalid("it is not UTF-8 text".into())));
    };
    Ok(match DatabaseUrl::parse(&text) {
        Ok(url) => Ok((text, ca.into_iter().fold(url, DatabaseUrl::with_root_pem))),
        // DbError hides the password; hide the whole text too, in case.
        Err(e) => Err(invalid(scrub(&e.to_string(), &text))),
    })
}

/// `message` without `secret` in it.
fn scrub(message: &str, secret: &str) -> String {
    let secret = secret.trim();
    if secret.is_empty() {
        message.to_string()
    } else {
        message.replace(secret, "<the URL>")
    }
}

/// What [`read_url`] read: the URL text and its parse, or the [`Problem`].
pub type ReadUrl = Result<(String, DatabaseUrl), Problem>;

/// The database URLs read from Secrets, each at the Secret's
/// `resourceVersion` as the watch of Secrets' metadata shows it, shared by
/// both controllers: the thousand Schedulers and WarmPools on one Secret
/// read it once, and those that ask at the same time (a replica's start)
/// wait for that one read rather than each making its own. A read that
/// fails is not kept: the next one tries again.
#[derive(Default)]
pub struct SecretUrls {
    read: std::sync::Mutex<HashMap<(String, SecretKeyRef), Arc<UrlSlot>>>,
}

/// One Secret key's last read and the version it was read at; its lock is
/// held while it is read.
type UrlSlot = tokio::sync::Mutex<Option<(String, ReadUrl)>>;

impl SecretUrls {
    /// The URL in `secret_ref`'s Secret of `namespace`, whose watch shows
    /// it at `version`: as read at that version, else read now.
    pub async fn read(
        &self,
        secrets: &Api<Secret>,
        namespace: &str,
        secret_ref: &SecretKeyRef,
        version: &str,
    ) -> Result<ReadUrl, SecretError> {
        let slot = self
            .read
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((namespace.to_string(), secret_ref.clone()))
            .or_default()
            .clone();
        let mut last = slot.lock().await;
        if let Some((at, read)) = last.as_ref() {
            if at == version {
                return Ok(read.clone());
            }
        }
        let read = read_url(secrets, namespace, secret_ref).await?;
        *last = Some((version.to_string(), read.clone()));
        Ok(read)
    }

    /// Secret `namespace/name` is gone: what was read of it is not kept.
    pub fn forget(&self, namespace: &str, name: &str) {
        self.read
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(ns, secret), _| !(ns == namespace && secret.name == name));
    }
}

/// The Scheduler controller's connections: one per database, shared by
/// the Schedulers on it (see [`crate::connections`]), made again when the
/// Secret's URL changes or the connection drops.
pub struct Connections(crate::connections::Connections);

impl Default for Connections {
    fn default() -> Self {
        Connections(crate::connections::Connections::named("orca-operator"))
    }
}

fn user(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

impl Connections {
    /// No connections yet, for operator replica `replica`: its connections
    /// carry the name in their `application_name`.
    pub fn of_replica(replica: &str) -> Self {
        Connections(crate::connections::Connections::named(&format!(
            "orca-operator/{replica}"
        )))
    }

    /// The connection of Scheduler `namespace/name` to `url`: its
    /// database's, if it is still open, else a new one.
    pub async fn get(
        &self,
        namespace: &str,
        name: &str,
        url_text: &str,
        url: &DatabaseUrl,
    ) -> Result<Arc<Db>, DbError> {
        self.0.get(&user(namespace, name), url_text, url).await
    }

    /// Scheduler `namespace/name` lets go of its connection (it failed, or
    /// the Scheduler is gone).
    pub fn forget(&self, namespace: &str, name: &str) {
        self.0.forget(&user(namespace, name));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrub_hides_the_whole_url() {
        let url = "postgres://u:hunter2@db/orca?sslmode=bogus";
        let msg = format!("bad URL {url}");
        assert_eq!(scrub(&msg, url), "bad URL <the URL>");
    }

    #[test]
    fn a_bad_url_is_refused_without_its_password() {
        let e = DatabaseUrl::parse("postgres://u:hunter2@db/orca?sslmode=bogus")
            .err()
            .unwrap();
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
