//! The database URL in SSM Parameter Store (docs/operations.md#the-database-url-on-the-instances):
//! for each Scheduler whose pools launch with `databaseUrlIn: parameter`,
//! the operator keeps the URL as the `SecureString`
//! `/orca/<cluster>/<namespace>/<scheduler>/database-url` in each region
//! its pools run in, and the user-data names only the parameter. A write is
//! made only when the value differs from the one this process last wrote
//! there (a restart writes once more); the parameter is deleted when the
//! last pool of the Scheduler in that region is deleted with its instances.

use std::{
    collections::HashMap,
    sync::{Mutex, OnceLock},
    time::{Duration, Instant},
};

use aws_sdk_ssm::{
    config::{Region, StalledStreamProtectionConfig},
    error::{DisplayErrorContext, ProvideErrorMetadata},
    types::{ParameterType, Tag},
    Client,
};
use sha2::{Digest, Sha256};

use super::ec2::Ec2Config;
use crate::fence::{Fence, Fenced};

/// The parameter holding the database URL of Scheduler
/// `namespace/scheduler`, for the operator of `cluster`.
pub fn parameter_name(cluster: &str, namespace: &str, scheduler: &str) -> String {
    format!("/orca/{cluster}/{namespace}/{scheduler}/database-url")
}

/// Why an SSM call failed; never with the parameter's value.
#[derive(Debug, thiserror::Error)]
pub enum SsmError {
    #[error("ssm:{action} on {name}: {code}: {message}")]
    Refused {
        action: &'static str,
        name: String,
        code: String,
        message: String,
    },
    #[error("ssm:{action} on {name} failed: {reason}")]
    Transport {
        action: &'static str,
        name: String,
        reason: String,
    },
    #[error("ssm:{action} on {name} not sent: {source}")]
    Fenced {
        action: &'static str,
        name: String,
        #[source]
        source: Fenced,
    },
}

impl SsmError {
    /// A call the operator's credentials may not make: the `Unauthorized`
    /// condition's message, naming the action and what grants it, if this
    /// is one.
    pub fn denial(&self) -> Option<String> {
        match self {
            SsmError::Refused {
                action,
                name,
                code,
                message,
            } if super::ec2::DENIED_CODES.contains(&code.as_str()) => Some(format!(
                "{action}: the operator's AWS credentials may not call ssm:{action} on {name} \
                 ({code}: {message}); its IAM policy needs that action on this cluster's \
                 parameters (`orca-operator iam-policy --cluster-name <name>` prints it, \
                 `orca-operator preflight` checks it)"
            )),
            _ => None,
        }
    }

    /// The SSM action that failed.
    pub fn action(&self) -> &'static str {
        match self {
            SsmError::Refused { action, .. }
            | SsmError::Transport { action, .. }
            | SsmError::Fenced { action, .. } => action,
        }
    }
}

/// An SSM client for one region and endpoint (the pool's: moto's server
/// in the tests), behind a fence.
#[derive(Clone, Debug)]
pub struct Ssm {
    client: Client,
    config: Ec2Config,
    fence: Fence,
}

/// What this process last wrote to each parameter (region, endpoint,
/// name): the value's digest, and when.
type Written = HashMap<(Ec2Config, String), ([u8; 32], Instant)>;

/// A parameter is written again this long after this process last wrote
/// it, its value unchanged: one deleted by anyone else (another replica's
/// finalizer while it led, a hand, a clean-up) is back within this time,
/// and the instances launched meanwhile read it when they retry.
pub const REWRITE: Duration = Duration::from_secs(300);

/// What this process last wrote to each parameter, as a digest: a write is
/// made only when the value changes, or [`REWRITE`] after the last.
fn written() -> &'static Mutex<Written> {
    static WRITTEN: OnceLock<Mutex<Written>> = OnceLock::new();
    WRITTEN.get_or_init(Default::default)
}

/// Forgets what this process wrote: a term of leadership begins, and while
/// another replica led it may have deleted a parameter (its pools' last
/// one gone) that this process wrote in an earlier term.
pub fn new_term() {
    written().lock().unwrap_or_else(|e| e.into_inner()).clear();
}

/// Whether a parameter written `last` (a digest, when) holds the value of
/// digest `want` at `now` and need not be written again.
fn still_written(last: Option<&([u8; 32], Instant)>, want: &[u8; 32], now: Instant) -> bool {
    last.is_some_and(|(digest, at)| digest == want && now.saturating_duration_since(*at) < REWRITE)
}

fn digest(value: &str) -> [u8; 32] {
    Sha256::digest(value.as_bytes()).into()
}

impl Ssm {
    /// The SSM API where `cfg` has EC2's: its region, and its endpoint if
    /// one is given. Credentials from the default chain, as for EC2; each
    /// call checks `fence` first.
    pub async fn new(cfg: &Ec2Config, fence: Fence) -> Ssm {
        static CLIENTS: OnceLock<Mutex<HashMap<Ec2Config, Client>>> = OnceLock::new();
        let clients = CLIENTS.get_or_init(Default::default);
        let kept = clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(cfg)
            .cloned();
        let client = match kept {
            Some(client) => client,
            None => {
                let made = Self::build(cfg, None).await;
                clients
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(cfg.clone())
                    .or_insert(made)
                    .clone()
            }
        };
        Ssm {
            client,
            config: cfg.clone(),
            fence,
        }
    }

    /// As [`Ssm::new`], signing with `credentials` (a loop given an EC2
    /// client of its own credentials); not kept for others.
    pub async fn with_credentials(
        cfg: &Ec2Config,
        credentials: aws_sdk_ssm::config::Credentials,
        fence: Fence,
    ) -> Ssm {
        Ssm {
            client: Self::build(cfg, Some(credentials)).await,
            config: cfg.clone(),
            fence,
        }
    }

    async fn build(
        cfg: &Ec2Config,
        credentials: Option<aws_sdk_ssm::config::Credentials>,
    ) -> Client {
        let mut loader = aws_config::defaults(aws_config::BehaviorVersion::latest())
            .region(Region::new(cfg.region().clone()))
            .http_client(super::ec2::http_client())
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
            .timeout_config(
                aws_config::timeout::TimeoutConfig::builder()
                    .operation_timeout(cfg.call_timeout())
                    .connect_timeout(Duration::from_secs(5))
                    .build(),
            );
        if let Some(endpoint) = &cfg.endpoint() {
            loader = loader.endpoint_url(endpoint);
        }
        if let Some(credentials) = credentials {
            loader = loader.credentials_provider(credentials);
        }
        Client::new(&loader.load().await)
    }

    /// Makes `name` hold `value` (a `SecureString` under the account's
    /// `aws/ssm` key, tagged with `tags` when created), unless this process
    /// wrote that value there in this term, less than [`REWRITE`] ago.
    /// Whether it wrote.
    pub async fn publish(
        &self,
        name: &str,
        value: &str,
        tags: &[(&str, &str)],
    ) -> Result<bool, SsmError> {
        let key = (self.config.clone(), name.to_string());
        let want = digest(value);
        let last = written()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .copied();
        if still_written(last.as_ref(), &want, Instant::now()) {
            return Ok(false);
        }
        self.check("PutParameter", name)?;
        // Tags may be given only to a new parameter, and Overwrite only
        // without them: create first, overwrite if it exists.
        let tags: Vec<Tag> = tags
            .iter()
            .filter_map(|(k, v)| Tag::builder().key(*k).value(*v).build().ok())
            .collect();
        let created = self
            .client
            .put_parameter()
            .name(name)
            .value(value)
            .r#type(ParameterType::SecureString)
            .description("orca: the database URL of a Scheduler's warm pool instances")
            .set_tags(Some(tags))
            .send()
            .await;
        let outcome = match created {
            Ok(_) => Ok(()),
            Err(e) if e.code() == Some("ParameterAlreadyExists") => {
                self.check("PutParameter", name)?;
                self.client
                    .put_parameter()
                    .name(name)
                    .value(value)
                    .r#type(ParameterType::SecureString)
                    .overwrite(true)
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| error("PutParameter", name, e))
            }
            Err(e) => Err(error("PutParameter", name, e)),
        };
        outcome?;
        written()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (want, Instant::now()));
        tracing::info!(parameter = %name, region = %self.config.region(), "database URL parameter written");
        Ok(true)
    }

    /// Deletes `name` (gone already is fine).
    pub async fn delete(&self, name: &str) -> Result<(), SsmError> {
        written()
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(self.config.clone(), name.to_string()));
        self.check("DeleteParameter", name)?;
        match self.client.delete_parameter().name(name).send().await {
            Ok(_) => {
                tracing::info!(parameter = %name, region = %self.config.region(), "database URL parameter deleted");
                Ok(())
            }
            Err(e) if e.code() == Some("ParameterNotFound") => Ok(()),
            Err(e) => Err(error("DeleteParameter", name, e)),
        }
    }

    /// Each call the database URL's parameters need, made on `name` (a
    /// parameter of no Scheduler's): written as theirs are (a
    /// `SecureString`, overwritten), tagged with `tags`, deleted. What
    /// each answered; a call after a refused write is made all the same,
    /// and a delete refused leaves `name` behind, holding no secret.
    pub async fn probe(
        &self,
        name: &str,
        tags: &[(&str, &str)],
    ) -> Vec<(&'static str, Result<(), SsmError>)> {
        let put = async {
            self.check("PutParameter", name)?;
            self.client
                .put_parameter()
                .name(name)
                .value("orca-operator preflight: no secret")
                .r#type(ParameterType::SecureString)
                .description("orca: what orca-operator preflight writes and deletes")
                .overwrite(true)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| error("PutParameter", name, e))
        }
        .await;
        let tag = async {
            self.check("AddTagsToResource", name)?;
            let tags: Vec<Tag> = tags
                .iter()
                .filter_map(|(k, v)| Tag::builder().key(*k).value(*v).build().ok())
                .collect();
            self.client
                .add_tags_to_resource()
                .resource_type(aws_sdk_ssm::types::ResourceTypeForTagging::Parameter)
                .resource_id(name)
                .set_tags(Some(tags))
                .send()
                .await
                .map(|_| ())
                .map_err(|e| error("AddTagsToResource", name, e))
        }
        .await;
        let delete = async {
            self.check("DeleteParameter", name)?;
            match self.client.delete_parameter().name(name).send().await {
                Ok(_) => Ok(()),
                Err(e) if e.code() == Some("ParameterNotFound") => Ok(()),
                Err(e) => Err(error("DeleteParameter", name, e)),
            }
        }
        .await;
        vec![
            ("PutParameter", put),
            ("AddTagsToResource", tag),
            ("DeleteParameter", delete),
        ]
    }

    fn check(&self, action: &'static str, name: &str) -> Result<(), SsmError> {
        self.fence.check().map_err(|source| SsmError::Fenced {
            action,
            name: name.to_string(),
            source,
        })
    }
}

fn error<E>(action: &'static str, name: &str, e: aws_sdk_ssm::error::SdkError<E>) -> SsmError
where
    E: ProvideErrorMetadata + std::error::Error + 'static,
{
    match e.code() {
        Some(code) => SsmError::Refused {
            action,
            name: name.to_string(),
            code: code.to_string(),
            message: e.message().unwrap_or_default().replace('\n', " "),
        },
        // An answer that is not SSM's JSON: an XML refusal (an IAM front
        // that speaks the query protocol) is read for its code and message;
        // anything else (a proxy's page) by its status, not its whole text.
        None => match e.raw_response() {
            Some(raw) => match raw.body().bytes().and_then(xml_error) {
                Some((code, message)) => SsmError::Refused {
                    action,
                    name: name.to_string(),
                    code,
                    message,
                },
                None => SsmError::Transport {
                    action,
                    name: name.to_string(),
                    reason: format!("an unreadable answer, HTTP {}", raw.status().as_u16()),
                },
            },
            None => SsmError::Transport {
                action,
                name: name.to_string(),
                reason: DisplayErrorContext(&e).to_string().replace('\n', " "),
            },
        },
    }
}

/// The `<Code>` and `<Message>` of an XML error answer, each at most 300
/// characters on one line.
pub(super) fn xml_error(body: &[u8]) -> Option<(String, String)> {
    let text = std::str::from_utf8(body).ok()?;
    let element = |name: &str| {
        let (_, rest) = text.split_once(&format!("<{name}>"))?;
        let (inner, _) = rest.split_once(&format!("</{name}>"))?;
        Some(
            inner
                .replace('\n', " ")
                .chars()
                .take(300)
                .collect::<String>(),
        )
    };
    let code = element("Code")?;
    (!code.is_empty() && code.chars().all(|c| c.is_ascii_alphanumeric() || c == '.'))
        .then(|| (code, element("Message").unwrap_or_default()))
}

#[cfg(test)]
#[path = "ssm_tests.rs"]
mod tests;
