//! The thin EC2 adapter of the pool loop (docs/architecture.md#warmpool-controller-act): list the pool's
//! instances by its ownership tags, launch a batch, terminate a batch. The
//! SDK's own retries are off, so the controller sees every error code
//! itself: capacity errors move the launch on to the next offering,
//! `RequestLimitExceeded` backs off (see [`crate::backoff`]). Each call
//! checks the client's [`Fence`] just before it is sent: a replica that may
//! no longer lead calls nothing.
//!
//! Every EC2 call the pool makes, each fenced, with
//! its answers sorted into errors the loop acts on; and its tests.

use std::{collections::HashMap, sync::Mutex, time::Duration};

use aws_config::{retry::RetryConfig, timeout::TimeoutConfig, BehaviorVersion, Region};
use aws_sdk_ec2::{
    error::ProvideErrorMetadata,
    types::{
        Filter, HttpTokensState, IamInstanceProfileSpecification, InstanceInterruptionBehavior,
        InstanceLifecycleType, InstanceMarketOptionsRequest, InstanceMetadataEndpointState,
        InstanceMetadataOptionsRequest, InstanceStateName, InstanceType,
        LaunchTemplateSpecification, MarketType, ResourceType, ShutdownBehavior, SpotInstanceType,
        SpotMarketOptions, Tag, TagSpecification,
    },
    Client,
};
use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_smithy_types::error::display::DisplayErrorContext;
use chrono::{DateTime, Utc};
use sha2::{Digest, Sha256};

pub use super::holds::SUBNET_CODES;
use super::plan::{Ec2Instance, Ec2State, Offering};
pub use super::tags::{
    tag_value, Ownership, RESERVED_PREFIX, TAG_CLASS, TAG_CLUSTER, TAG_IMAGE, TAG_LAUNCH,
    TAG_NAMESPACE, TAG_OPERATOR, TAG_POOL, TAG_SCHEDULER, TAG_TEMPLATE_VERSION, TAG_VALUE_MAX,
};
use crate::crd::{Launch, LaunchTemplateRef};
use crate::fence::{Fence, Fenced};

/// TerminateInstances takes at most this many ids a call.
pub const TERMINATE_BATCH: usize = 1000;

/// EC2 error codes that mean "not here, not now": that (type, subnet) is
/// skipped for a while and the next one tried.
pub const CAPACITY_CODES: [&str; 8] = [
    "InsufficientInstanceCapacity",
    // The account's quota of instances of that type (the older,
    // per-type limits; vCPU quotas are VcpuLimitExceeded).
    "InstanceLimitExceeded",
    "InsufficientFreeAddressesInSubnet",
    "Unsupported",
    "VcpuLimitExceeded",
    "InsufficientCapacity",
    // Spot: the price limit is below the spot price, or the account's spot
    // quota is used up.
    "SpotMaxPriceTooLow",
    "MaxSpotInstanceCountExceeded",
];

/// EC2 error codes of a launch that pass by themselves (a fault on EC2's
/// side, a time-out, a token taken twice in one pass): the next pass tries
/// again. Any other code a launch is refused with, but for
/// [`CAPACITY_CODES`] and throttling, says it cannot work as it is.
pub const PASSING_CODES: [&str; 6] = [
    "InternalError",
    "InternalFailure",
    "ServiceUnavailable",
    "Unavailable",
    "RequestTimeout",
    "IdempotentParameterMismatch",
];

/// EC2 error codes that mean the call was not allowed: the credentials'
/// policy lacks the action (`UnauthorizedOperation`; `AccessDenied` from
/// other IAM-enforcing endpoints), or the credentials themselves were
/// rejected. Neither passes by waiting; the pool is `Degraded`
/// (`Unauthorized`) until a call of that action works.
pub const DENIED_CODES: [&str; 7] = [
    "UnauthorizedOperation",
    "AccessDenied",
    "AccessDeniedException",
    "AuthFailure",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
];

/// An instance of a listing, with the ownership tags that say whose it is.
#[derive(Clone, Debug, PartialEq)]
pub struct Tagged {
    /// Its `orca.dev/pool` tag, if it has one.
    pool: Option<String>,
    /// Its `orca.dev/scheduler` tag, if it has one.
    scheduler: Option<String>,
    /// Its `orca.dev/cluster` tag, if it has one (instances launched
    /// before that tag existed have none).
    cluster: Option<String>,
    /// Its `orca.dev/class` tag: the WarmPoolClass it counts in.
    class: Option<String>,
    /// Its `orca.dev/namespace` tag.
    namespace: Option<String>,
    /// The instance; `None` if EC2's answer lacked its id, state or launch
    /// time.
    instance: Option<Ec2Instance>,
}

impl Tagged {
    /// `instance` (`None`: EC2's answer lacked its id, state or launch
    /// time) with the ownership tags `tag` finds by their keys.
    pub fn new(instance: Option<Ec2Instance>, tag: impl Fn(&str) -> Option<String>) -> Tagged {
        Tagged {
            pool: tag(TAG_POOL),
            scheduler: tag(TAG_SCHEDULER),
            cluster: tag(TAG_CLUSTER),
            class: tag(TAG_CLASS),
            namespace: tag(TAG_NAMESPACE),
            instance,
        }
    }

    /// Its `orca.dev/pool` tag, if it has one.
    pub fn pool(&self) -> Option<&str> {
        self.pool.as_deref()
    }

    /// Its `orca.dev/scheduler` tag, if it has one.
    pub fn scheduler(&self) -> Option<&str> {
        self.scheduler.as_deref()
    }

    /// Its `orca.dev/cluster` tag, if it has one.
    pub fn cluster(&self) -> Option<&str> {
        self.cluster.as_deref()
    }

    /// Its `orca.dev/class` tag, if it has one.
    pub fn class(&self) -> Option<&str> {
        self.class.as_deref()
    }

    /// Its `orca.dev/namespace` tag, if it has one.
    pub fn namespace(&self) -> Option<&str> {
        self.namespace.as_deref()
    }

    /// The instance, if EC2's answer had its id, state and launch time.
    pub fn instance(&self) -> Option<&Ec2Instance> {
        self.instance.as_ref()
    }

    /// The instance, for the pool it is sorted into.
    pub fn into_instance(self) -> Option<Ec2Instance> {
        self.instance
    }
}

/// Where the EC2 API is.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Ec2Config {
    region: String,
    /// Another endpoint (VPC endpoints, moto's server).
    endpoint: Option<String>,
    /// Each call as a whole.
    call_timeout: Duration,
}

impl Ec2Config {
    /// The region EC2 is asked in.
    pub fn region(&self) -> &String {
        &self.region
    }

    /// Another endpoint (VPC endpoints, moto's server).
    pub fn endpoint(&self) -> &Option<String> {
        &self.endpoint
    }

    /// Each call as a whole.
    pub fn call_timeout(&self) -> Duration {
        self.call_timeout
    }

    /// The EC2 API of `region`, at `endpoint` if one is given; each call
    /// limited to 30 s.
    pub fn new(region: &str, endpoint: Option<&str>) -> Self {
        Ec2Config {
            region: region.into(),
            endpoint: endpoint.map(Into::into),
            call_timeout: Duration::from_secs(30),
        }
    }
}

/// Why an EC2 call failed: not in that offering (no capacity, a quota, a
/// subnet EC2 does not know), throttled, not allowed, refused, no answer,
/// an answer missing a field, or not sent (fenced).
#[derive(Debug, thiserror::Error)]
pub enum Ec2Error {
    /// Not in that offering: the next is tried, and it is held (see
    /// [`CAPACITY_CODES`] and [`SUBNET_CODES`]).
    #[error("{action}: not in {offering}: {code}: {message}")]
    Capacity {
        action: &'static str,
        offering: Offering,
        code: String,
        message: String,
    },
    #[error("{action}: throttled (RequestLimitExceeded)")]
    Throttled { action: &'static str },
    /// The credentials may not make the call (see [`DENIED_CODES`]).
    #[error("{}", denied(action, code, message))]
    Denied {
        action: &'static str,
        code: String,
        message: String,
    },
    #[error("{action} refused: {code}: {message}")]
    Refused {
        action: &'static str,
        code: String,
        message: String,
    },
    /// No answer from EC2 (connection, time-out, a body it could not read):
    /// the call may or may not have been carried out.
    #[error("{action} failed: {}", DisplayErrorContext(source.as_ref()))]
    Transport {
        action: &'static str,
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    #[error("{action}: answer without {what}")]
    Malformed {
        action: &'static str,
        what: &'static str,
    },
    #[error("{action} not sent: {source}")]
    Fenced {
        action: &'static str,
        #[source]
        source: Fenced,
    },
}

/// The words of an [`Ec2Error::Denied`]: which IAM action, and where the
/// policy that allows it is described. AWS's own message is kept up to its
/// encoded authorization details, which only `sts:DecodeAuthorizationMessage`
/// reads.
fn denied(action: &str, code: &str, message: &str) -> String {
    let message = message
        .split("Encoded authorization failure message")
        .next()
        .unwrap_or_default()
        .trim();
    let said = if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    };
    match code {
        "UnauthorizedOperation" | "AccessDenied" | "AccessDeniedException" => format!(
            "{action}: the operator's AWS credentials may not call ec2:{action} ({code}{said}); \
             its IAM policy needs that action, for this cluster's name (`orca-operator iam-policy \
             --cluster-name <name>` prints it; docs/iam-policy.json)"
        ),
        _ => format!("{action}: AWS rejected the operator's credentials ({code}{said})"),
    }
}

impl Ec2Error {
    /// A call the credentials may not make: the `Unauthorized` condition's
    /// message, if this is one.
    pub fn denial(&self) -> Option<String> {
        matches!(self, Ec2Error::Denied { .. }).then(|| self.to_string())
    }
}

/// Sorts an error code into capacity, throttling, not allowed or any other
/// refusal.
pub fn classify(
    action: &'static str,
    offering: Option<&Offering>,
    code: &str,
    message: &str,
) -> Ec2Error {
    match (code, offering) {
        ("RequestLimitExceeded" | "Throttling", _) => Ec2Error::Throttled { action },
        (c, _) if DENIED_CODES.contains(&c) => Ec2Error::Denied {
            action,
            code: c.into(),
            message: message.into(),
        },
        (c, Some(o)) if CAPACITY_CODES.contains(&c) || SUBNET_CODES.contains(&c) => {
            Ec2Error::Capacity {
                action,
                offering: o.clone(),
                code: c.into(),
                message: message.into(),
            }
        }
        _ => Ec2Error::Refused {
            action,
            code: code.into(),
            message: message.into(),
        },
    }
}

fn sdk_error<E>(
    action: &'static str,
    offering: Option<&Offering>,
    e: aws_sdk_ec2::error::SdkError<E>,
) -> Ec2Error
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match e.code() {
        Some(code) => classify(action, offering, code, e.message().unwrap_or("")),
        None => Ec2Error::Transport {
            action,
            source: Box::new(e),
        },
    }
}

/// The `ClientToken` of launch batch number `batch` of the pool whose
/// launches are named `launch_id` (its uid in the Kubernetes mode): unique
/// to that batch for all time, since the count only grows and is kept in
/// the pool's status. A call retried (throttled, or its answer lost) keeps
/// its batch number, so EC2 answers the retry with the first call's
/// instances instead of launching again.
pub fn client_token(launch_id: &str, batch: u64) -> String {
    let mut h = Sha256::new();
    h.update(launch_id.as_bytes());
    h.update([0]);
    h.update(batch.to_be_bytes());
    let digest = h.finalize();
    let hex: String = digest.iter().take(24).map(|b| format!("{b:02x}")).collect();
    format!("orca-{hex}")
}

/// One `RunInstances` call.
#[derive(Clone, Debug)]
pub struct RunRequest<'a> {
    launch: &'a Launch,
    offering: &'a Offering,
    count: u32,
    token: &'a str,
    /// The rendered script (see [`super::userdata`]); base64-encoded here.
    user_data: &'a super::userdata::UserData,
    owner: &'a Ownership,
    /// The WarmPoolClass launched through ([`TAG_CLASS`]), if any.
    class: Option<&'a str>,
    /// The launch template's version as resolved to a number
    /// ([`Ec2::template_version`]), launched and tagged instead of the
    /// version as written; `None` when it could not be resolved.
    template_version: Option<&'a str>,
}

impl<'a> RunRequest<'a> {
    /// `count` instances of `launch` on `offering`, with `token` as the
    /// call's `ClientToken`, `user_data` and `owner`'s tags; no class, the
    /// launch template's version as written.
    pub fn new(
        launch: &'a Launch,
        offering: &'a Offering,
        count: u32,
        token: &'a str,
        user_data: &'a super::userdata::UserData,
        owner: &'a Ownership,
    ) -> Self {
        RunRequest {
            launch,
            offering,
            count,
            token,
            user_data,
            owner,
            class: None,
            template_version: None,
        }
    }

    /// This, launched through the WarmPoolClass `class` (if any).
    pub fn with_class(self, class: Option<&'a str>) -> Self {
        RunRequest { class, ..self }
    }

    /// This, launching the template's `version` (if resolved).
    pub fn with_template_version(self, template_version: Option<&'a str>) -> Self {
        RunRequest {
            template_version,
            ..self
        }
    }

    /// The launch.
    pub fn launch(&self) -> &'a Launch {
        self.launch
    }

    /// The offering (type and subnet) launched on.
    pub fn offering(&self) -> &'a Offering {
        self.offering
    }

    /// How many instances.
    pub fn count(&self) -> u32 {
        self.count
    }

    /// The call's `ClientToken`.
    pub fn token(&self) -> &'a str {
        self.token
    }
}

/// The AWS SDK's HTTP client as the operator uses it: rustls on ring.
pub(super) fn http_client() -> aws_sdk_ec2::config::SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https()
}

/// An EC2 client for one region and endpoint, behind a fence.
#[derive(Clone, Debug)]
pub struct Ec2 {
    client: Client,
    fence: Fence,
    /// The access key it signs with, when not the default chain's.
    keys: Option<aws_sdk_ec2::config::Credentials>,
}

/// An instance type as EC2 describes it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TypeFacts {
    name: String,
    /// Its default vCPUs, which a class's `limits.vcpus` counts.
    vcpus: Option<i64>,
    /// The architectures it runs (`x86_64`, `arm64`, ...).
    architectures: Vec<String>,
}

impl TypeFacts {
    /// The instance type, as EC2 names it.
    pub fn name(&self) -> &String {
        &self.name
    }

    /// Its default vCPUs, which a class's `limits.vcpus` counts.
    pub fn vcpus(&self) -> Option<i64> {
        self.vcpus
    }

    /// The architectures it runs (`x86_64`, `arm64`, ...).
    pub fn architectures(&self) -> &Vec<String> {
        &self.architectures
    }
}

/// The architecture the pool agent is built for (and the operator's
/// image): an instance type that does not run it cannot boot the agent.
pub const AGENT_ARCHITECTURE: &str = "x86_64";

/// The code an offering of a type the agent cannot run on is held with
/// (`status.capacityErrors`), and the `Degraded` reason.
pub const UNSUPPORTED_ARCHITECTURE: &str = "UnsupportedArchitecture";

impl Ec2 {
    /// Credentials come from the default chain (environment, profile, IMDS,
    /// web identity); rustls on ring, like the rest of the operator. One
    /// client per `cfg` in the process, shared by the pools there (its
    /// connections, its TLS set-up and its credentials' cache). Each call
    /// checks `fence` first: the Lease's in the Kubernetes mode,
    /// [`Fence::always`] in the local mode, which has no election.
    pub async fn new(cfg: &Ec2Config, fence: Fence) -> Ec2 {
        static CLIENTS: Mutex<Option<HashMap<Ec2Config, Client>>> = Mutex::new(None);
        let kept = |clients: &Mutex<Option<HashMap<Ec2Config, Client>>>| {
            let clients = clients.lock().unwrap_or_else(|e| e.into_inner());
            clients.as_ref().and_then(|c| c.get(cfg).cloned())
        };
        if let Some(client) = kept(&CLIENTS) {
            return Ec2 {
                client,
                fence,
                keys: None,
            };
        }
        let made = Ec2::build(cfg, None, fence.clone()).await;
        let mut clients = CLIENTS.lock().unwrap_or_else(|e| e.into_inner());
        let client = clients
            .get_or_insert_with(HashMap::new)
            .entry(cfg.clone())
            .or_insert(made.client)
            .clone();
        Ec2 {
            client,
            fence,
            keys: None,
        }
    }

    /// As [`Ec2::new`], signing with this access key instead of the default
    /// chain's: one process acting as several IAM principals (the tests'
    /// operator and the hosts beside it).
    pub async fn with_credentials(
        cfg: &Ec2Config,
        access_key_id: &str,
        secret: &str,
        fence: Fence,
    ) -> Ec2 {
        let credentials =
            aws_sdk_ec2::config::Credentials::new(access_key_id, secret, None, None, "static");
        let mut ec2 = Ec2::build(cfg, Some(credentials.clone()), fence).await;
        ec2.keys = Some(credentials);
        ec2
    }

    async fn build(
        cfg: &Ec2Config,
        credentials: Option<aws_sdk_ec2::config::Credentials>,
        fence: Fence,
    ) -> Ec2 {
        let http = http_client();
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(cfg.region.clone()))
            .http_client(http)
            .retry_config(RetryConfig::disabled())
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .operation_timeout(cfg.call_timeout)
                    .build(),
            );
        if let Some(endpoint) = &cfg.endpoint {
            loader = loader.endpoint_url(endpoint);
        }
        if let Some(credentials) = credentials {
            loader = loader.credentials_provider(credentials);
        }
        Ec2 {
            client: Client::new(&loader.load().await),
            fence,
            keys: None,
        }
    }

    /// The same client behind `fence` instead of its own: a loop given a
    /// client puts it behind the loop's fence.
    pub(crate) fn behind(mut self, fence: Fence) -> Ec2 {
        self.fence = fence;
        self
    }

    fn check(&self, action: &'static str) -> Result<(), Ec2Error> {
        self.fence
            .check()
            .map_err(|source| Ec2Error::Fenced { action, source })
    }

    /// The SDK client behind the fence: `Fenced` once it has closed (the
    /// preflight's dry runs, which have no method of their own here).
    pub(crate) fn fenced_client(&self, action: &'static str) -> Result<&Client, Ec2Error> {
        self.check(action).map(|()| &self.client)
    }

    /// The SDK client, for what the pool loop does not need (the local
    /// mode and the tests: subnets, instances made by hand); not fenced.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The access key its calls are signed with, when not the default
    /// chain's ([`Ec2::with_credentials`]).
    pub fn credentials(&self) -> Option<aws_sdk_ec2::config::Credentials> {
        self.keys.clone()
    }

    /// The user-data instance `id` boots with, decoded (what anyone
    /// allowed `ec2:DescribeInstanceAttribute` reads); `None` if it has
    /// none. Not the operator's own call: for the tests and the local
    /// mode, to see what an instance was given.
    pub async fn user_data(&self, id: &str) -> Result<Option<String>, Ec2Error> {
        // Not a call of the operator's: no ACTION constant (the IAM test
        // reads those as the operator's calls).
        let action = "DescribeInstanceAttribute";
        self.check(action)?;
        let out = self
            .client
            .describe_instance_attribute()
            .instance_id(id)
            .attribute(aws_sdk_ec2::types::InstanceAttributeName::UserData)
            .send()
            .await
            .map_err(|e| sdk_error(action, None, e))?;
        let Some(encoded) = out.user_data.and_then(|u| u.value) else {
            return Ok(None);
        };
        let bytes =
            aws_smithy_types::base64::decode(&encoded).map_err(|_| Ec2Error::Malformed {
                action,
                what: "base64 user-data",
            })?;
        Ok(Some(String::from_utf8_lossy(&bytes).into_owned()))
    }

    /// Every instance with all the ownership tags, in any state.
    pub async fn describe(&self, owner: &Ownership) -> Result<Vec<Ec2Instance>, Ec2Error> {
        self.list(&owner.tags())
            .await?
            .iter()
            .map(|i| {
                instance(i).ok_or(Ec2Error::Malformed {
                    action: "DescribeInstances",
                    what: "an instance id, state or launch time",
                })
            })
            .collect()
    }

    /// Every instance with the tags `filter`, in any state, each with the
    /// values of its pool's, Scheduler's and cluster's tags: one listing,
    /// page by page, for as many pools as the filter covers (see
    /// [`super::listings`]).
    pub async fn describe_tagged(&self, filter: &[(&str, &str)]) -> Result<Vec<Tagged>, Ec2Error> {
        Ok(self
            .list(filter)
            .await?
            .iter()
            .map(|i| Tagged::new(instance(i), |key| tag(i, key)))
            .collect())
    }

    /// The version number `template`'s version (`$Default` when none is
    /// written) stands for now (`DescribeLaunchTemplateVersions`): the
    /// number itself when one is written, with no call.
    pub async fn template_version(&self, template: &LaunchTemplateRef) -> Result<String, Ec2Error> {
        const ACTION: &str = "DescribeLaunchTemplateVersions";
        let written = template.version.as_deref().unwrap_or("$Default");
        if written.chars().all(|c| c.is_ascii_digit()) && !written.is_empty() {
            return Ok(written.to_string());
        }
        self.check(ACTION)?;
        let answer = self
            .client
            .describe_launch_template_versions()
            .set_launch_template_id(template.id.clone())
            .set_launch_template_name(template.name.clone())
            .versions(written)
            .send()
            .await
            .map_err(|e| sdk_error(ACTION, None, e))?;
        answer
            .launch_template_versions()
            .first()
            .and_then(|v| v.version_number())
            .map(|n| n.to_string())
            .ok_or(Ec2Error::Malformed {
                action: ACTION,
                what: "the version's number",
            })
    }

    /// What EC2 says of each of `types` (`DescribeInstanceTypes`): its
    /// default vCPUs and the architectures it runs; a type EC2 does not
    /// describe is left out.
    pub async fn describe_types(&self, types: &[String]) -> Result<Vec<TypeFacts>, Ec2Error> {
        const ACTION: &str = "DescribeInstanceTypes";
        let mut out = Vec::new();
        for chunk in types.chunks(100) {
            self.check(ACTION)?;
            let answer = self
                .client
                .describe_instance_types()
                .set_instance_types(Some(
                    chunk
                        .iter()
                        .map(|t| InstanceType::from(t.as_str()))
                        .collect(),
                ))
                .send()
                .await
                .map_err(|e| sdk_error(ACTION, None, e))?;
            for t in answer.instance_types() {
                let Some(name) = t.instance_type() else {
                    continue;
                };
                out.push(TypeFacts {
                    name: name.as_str().to_string(),
                    vcpus: t
                        .v_cpu_info()
                        .and_then(|v| v.default_v_cpus())
                        .map(i64::from),
                    architectures: t
                        .processor_info()
                        .map(|p| {
                            p.supported_architectures()
                                .iter()
                                .map(|a| a.as_str().to_string())
                                .collect()
                        })
                        .unwrap_or_default(),
                });
            }
        }
        Ok(out)
    }

    /// The last three lines of instance `id`'s console (`GetConsoleOutput`),
    /// each at most 400 characters from its start, joined by ` / ` into
    /// one line; empty if EC2 has none yet.
    pub async fn console_tail(&self, id: &str) -> Result<String, Ec2Error> {
        const ACTION: &str = "GetConsoleOutput";
        self.check(ACTION)?;
        let out = self
            .client
            .get_console_output()
            .instance_id(id)
            .latest(true)
            .send()
            .await
            .map_err(|e| sdk_error(ACTION, None, e))?;
        let bytes = out
            .output()
            .map(|b64| aws_smithy_types::base64::decode(b64).unwrap_or_default())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        // Each line kept from its start, where the script's `orca: ` is.
        Ok(lines[lines.len().saturating_sub(3)..]
            .iter()
            .map(|l| l.chars().take(400).collect::<String>())
            .collect::<Vec<_>>()
            .join(" / "))
    }

    /// Tags `ids` with `owner`'s cluster (`CreateTags`).
    pub async fn tag_cluster(&self, ids: &[String], owner: &Ownership) -> Result<(), Ec2Error> {
        self.add_tags(ids, &[(TAG_CLUSTER, owner.cluster())]).await
    }

    /// Adds `tags` to `ids` (`CreateTags`), batch by batch.
    pub async fn add_tags(&self, ids: &[String], tags: &[(&str, &str)]) -> Result<(), Ec2Error> {
        let tags: Vec<Tag> = tags
            .iter()
            .map(|(k, v)| Tag::builder().key(*k).value(*v).build())
            .collect();
        const ACTION: &str = "CreateTags";
        self.each_batch(ACTION, ids, None, |batch| {
            self.client
                .create_tags()
                .set_resources(Some(batch))
                .set_tags(Some(tags.clone()))
                .send()
        })
        .await
    }

    /// Every instance with the tags `tags`, in any state, page by page.
    async fn list(
        &self,
        tags: &[(&str, &str)],
    ) -> Result<Vec<aws_sdk_ec2::types::Instance>, Ec2Error> {
        const ACTION: &str = "DescribeInstances";
        let mut out = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let mut call = self.client.describe_instances().max_results(1000);
            for (k, v) in tags {
                call = call.filters(
                    Filter::builder()
                        .name(format!("tag:{k}"))
                        .values(*v)
                        .build(),
                );
            }
            self.check(ACTION)?;
            let page = call
                .set_next_token(next.take())
                .send()
                .await
                .map_err(|e| sdk_error(ACTION, None, e))?;
            for r in page.reservations() {
                out.extend(r.instances().iter().cloned());
            }
            match page.next_token() {
                Some(t) if !t.is_empty() => next = Some(t.to_string()),
                _ => return Ok(out),
            }
        }
    }

    /// Launches `count` instances, all or none (`MinCount = MaxCount`);
    /// their ids.
    pub async fn run(&self, req: &RunRequest<'_>) -> Result<Vec<String>, Ec2Error> {
        const ACTION: &str = "RunInstances";
        let call = self.run_call(req);
        self.check(ACTION)?;
        let out = call
            .send()
            .await
            .map_err(|e| sdk_error(ACTION, Some(req.offering), e))?;
        Ok(out
            .instances()
            .iter()
            .filter_map(|i| i.instance_id().map(String::from))
            .collect())
    }

    /// The `RunInstances` call of `req`, not sent (a preflight dry-runs it).
    pub fn run_call(
        &self,
        req: &RunRequest<'_>,
    ) -> aws_sdk_ec2::operation::run_instances::builders::RunInstancesFluentBuilder {
        let count = i32::try_from(req.count).unwrap_or(i32::MAX);
        let mut call = self
            .client
            .run_instances()
            .min_count(count)
            .max_count(count)
            .client_token(req.token)
            .instance_initiated_shutdown_behavior(ShutdownBehavior::Terminate)
            .metadata_options(
                InstanceMetadataOptionsRequest::builder()
                    .http_tokens(HttpTokensState::Required)
                    .http_endpoint(InstanceMetadataEndpointState::Enabled)
                    .build(),
            )
            .tag_specifications(run_tags(req))
            .user_data(aws_smithy_types::base64::encode(req.user_data.as_str()));
        let launch = req.launch;
        if let Some(t) = &launch.launch_template {
            let mut spec = LaunchTemplateSpecification::builder()
                .set_launch_template_id(t.id.clone())
                .set_launch_template_name(t.name.clone());
            spec = spec.version(
                req.template_version
                    .or(t.version.as_deref())
                    .unwrap_or("$Default"),
            );
            call = call.launch_template(spec.build());
        }
        if let Some(image) = &launch.image_id {
            call = call.image_id(image);
        }
        if !req.offering.instance_type().is_empty() {
            call = call.instance_type(InstanceType::from(req.offering.instance_type()));
        }
        if !req.offering.subnet().is_empty() {
            call = call.subnet_id(req.offering.subnet());
        }
        if req.offering.spot() {
            // One-time spot, terminated when EC2 takes it back: the agent
            // acts on the two-minute notice.
            call = call.instance_market_options(
                InstanceMarketOptionsRequest::builder()
                    .market_type(MarketType::Spot)
                    .spot_options(
                        SpotMarketOptions::builder()
                            .spot_instance_type(SpotInstanceType::OneTime)
                            .instance_interruption_behavior(InstanceInterruptionBehavior::Terminate)
                            .build(),
                    )
                    .build(),
            );
        }
        for sg in &launch.security_group_ids {
            call = call.security_group_ids(sg);
        }
        if let Some(profile) = &launch.iam_instance_profile {
            let p = IamInstanceProfileSpecification::builder();
            call = call.iam_instance_profile(if profile.starts_with("arn:") {
                p.arn(profile).build()
            } else {
                p.name(profile).build()
            });
        }
        call
    }

    /// Terminates `ids`, at most [`TERMINATE_BATCH`] a call.
    pub async fn terminate(&self, ids: &[String]) -> Result<(), Ec2Error> {
        const ACTION: &str = "TerminateInstances";
        self.each_batch(ACTION, ids, None, |batch| {
            self.client
                .terminate_instances()
                .set_instance_ids(Some(batch))
                .send()
        })
        .await
    }

    /// `call` on `ids`, [`TERMINATE_BATCH`] at a time, each call first
    /// checked as `action` ([`Ec2::check`]: the fence, the tests' faults),
    /// its error `action`'s (naming `offering`, if any); stops at the
    /// first that fails.
    async fn each_batch<T, E, Fut>(
        &self,
        action: &'static str,
        ids: &[String],
        offering: Option<&Offering>,
        call: impl Fn(Vec<String>) -> Fut,
    ) -> Result<(), Ec2Error>
    where
        Fut: std::future::Future<Output = Result<T, aws_sdk_ec2::error::SdkError<E>>>,
        E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    {
        for batch in ids.chunks(TERMINATE_BATCH) {
            self.check(action)?;
            call(batch.to_vec())
                .await
                .map_err(|e| sdk_error(action, offering, e))?;
        }
        Ok(())
    }

    /// `StopInstances`: the stopped reserve's stop (EBS kept, no compute).
    pub async fn stop(&self, ids: &[String]) -> Result<(), Ec2Error> {
        const ACTION: &str = "StopInstances";
        self.each_batch(ACTION, ids, None, |batch| {
            self.client
                .stop_instances()
                .set_instance_ids(Some(batch))
                .send()
        })
        .await
    }

    /// `StartInstances` of stopped instances of one offering, so that a
    /// capacity error names it.
    pub async fn start(&self, ids: &[String], offering: &Offering) -> Result<(), Ec2Error> {
        const ACTION: &str = "StartInstances";
        self.each_batch(ACTION, ids, Some(offering), |batch| {
            self.client
                .start_instances()
                .set_instance_ids(Some(batch))
                .send()
        })
        .await
    }
}

/// The tags a launch gives its instances: the spec's own (but those the
/// operator sets), whose they are, the launch spec's hash and image, and
/// the template version it resolved to.
fn run_tags(req: &RunRequest<'_>) -> TagSpecification {
    let mut tags = TagSpecification::builder().resource_type(ResourceType::Instance);
    // The spec's own, but none under the operator's prefix: those say
    // whose an instance is and what its class counts (the CRD refuses
    // them too; an object written before that is held here).
    for (k, v) in &req.launch.tags {
        if !k.starts_with(RESERVED_PREFIX) {
            tags = tags.tags(Tag::builder().key(k).value(v).build());
        }
    }
    let tenancy = [
        (TAG_NAMESPACE, Some(req.owner.namespace().as_str())),
        (TAG_CLASS, req.class),
    ];
    let owned = req
        .owner
        .tags()
        .into_iter()
        .chain(tenancy.into_iter().filter_map(|(k, v)| Some((k, v?))));
    for (k, v) in owned {
        tags = tags.tags(Tag::builder().key(k).value(v).build());
    }
    let launch_tags = [
        (TAG_LAUNCH, super::drift::launch_hash(req.launch)),
        (TAG_IMAGE, tag_value(&super::drift::image_label(req.launch))),
    ];
    for (k, v) in launch_tags {
        tags = tags.tags(Tag::builder().key(k).value(v).build());
    }
    if let (Some(_), Some(version)) = (&req.launch.launch_template, req.template_version) {
        tags = tags.tags(
            Tag::builder()
                .key(TAG_TEMPLATE_VERSION)
                .value(version)
                .build(),
        );
    }
    tags.build()
}

fn instance(i: &aws_sdk_ec2::types::Instance) -> Option<Ec2Instance> {
    let state = match i.state()?.name()? {
        InstanceStateName::Pending => Ec2State::Pending,
        InstanceStateName::Running => Ec2State::Running,
        InstanceStateName::ShuttingDown => Ec2State::ShuttingDown,
        InstanceStateName::Terminated => Ec2State::Terminated,
        InstanceStateName::Stopping => Ec2State::Stopping,
        InstanceStateName::Stopped => Ec2State::Stopped,
        _ => Ec2State::Pending,
    };
    let t = i.launch_time()?;
    let launch = tag(i, TAG_LAUNCH);
    // An instance from before the tags: its AMI, which is what a pool on
    // `imageId` launched it from (see `drift`).
    let image = tag(i, TAG_IMAGE).or_else(|| {
        launch
            .is_none()
            .then(|| i.image_id().map(str::to_string))
            .flatten()
    });
    let launched = DateTime::<Utc>::from_timestamp(t.secs(), t.subsec_nanos())?;
    let offering = Offering::new(
        i.instance_type()
            .map(|t| t.as_str().to_string())
            .unwrap_or_default(),
        i.subnet_id().unwrap_or_default().to_string(),
        i.instance_lifecycle() == Some(&InstanceLifecycleType::Spot),
    );
    Some(
        Ec2Instance::bare(i.instance_id()?, state, launched)
            .with_offering(offering)
            .with_image(image)
            .with_launch(launch)
            .with_template_version(tag(i, TAG_TEMPLATE_VERSION)),
    )
}

/// The value of `i`'s tag `key`.
fn tag(i: &aws_sdk_ec2::types::Instance, key: &str) -> Option<String> {
    i.tags()
        .iter()
        .find(|t| t.key() == Some(key))
        .and_then(|t| t.value())
        .map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn off() -> Offering {
        Offering::new("t3.small".into(), "subnet-a".into(), false)
    }

    #[test]
    fn error_codes_are_classified() {
        let o = off();
        for code in CAPACITY_CODES.into_iter().chain(SUBNET_CODES) {
            assert!(
                matches!(classify("RunInstances", Some(&o), code, "m"), Ec2Error::Capacity { ref offering, .. } if *offering == o),
                "{code}"
            );
        }
        assert!(matches!(
            classify("RunInstances", Some(&o), "RequestLimitExceeded", ""),
            Ec2Error::Throttled { .. }
        ));
        assert!(matches!(
            classify("DescribeInstances", None, "RequestLimitExceeded", ""),
            Ec2Error::Throttled { .. }
        ));
        assert!(matches!(
            classify("RunInstances", Some(&o), "InvalidAMIID.NotFound", ""),
            Ec2Error::Refused { .. }
        ));
        for code in DENIED_CODES {
            assert!(
                matches!(
                    classify("StartInstances", Some(&o), code, "m"),
                    Ec2Error::Denied { .. }
                ),
                "{code}"
            );
        }
    }

    #[test]
    fn a_denial_names_the_iam_action_without_the_encoded_details() {
        let e = classify(
            "RunInstances",
            None,
            "UnauthorizedOperation",
            "You are not authorized to perform this operation. User: arn:aws:sts::1:assumed-role/orca/x \
             is not authorized to perform: ec2:RunInstances on resource: arn:aws:ec2:eu-west-1:1:instance/* \
             Encoded authorization failure message: AbCdEf0123",
        );
        let said = e.denial().expect("a denial");
        assert!(said.contains("may not call ec2:RunInstances"), "{said}");
        assert!(said.contains("docs/iam-policy.json"), "{said}");
        assert!(!said.contains("AbCdEf0123"), "{said}");
        let e = classify("DescribeInstances", None, "AuthFailure", "");
        assert_eq!(
            e.to_string(),
            "DescribeInstances: AWS rejected the operator's credentials (AuthFailure)"
        );
        assert_eq!(classify("RunInstances", None, "Blocked", "").denial(), None);
    }

    #[tokio::test]
    async fn a_fenced_client_sends_nothing() {
        // Nothing listens on port 9: a call that went out would fail as a
        // transport error, not as fenced.
        let ec2 = Ec2::new(
            &Ec2Config::new("us-east-1", Some("http://127.0.0.1:9")),
            Fence::new(),
        )
        .await;
        let owner = Ownership::new("ns", "p", "s", "o", "c");
        assert!(matches!(
            ec2.describe(&owner).await,
            Err(Ec2Error::Fenced {
                action: "DescribeInstances",
                ..
            })
        ));
        assert!(matches!(
            ec2.terminate(&["i-1".to_string()]).await,
            Err(Ec2Error::Fenced {
                action: "TerminateInstances",
                ..
            })
        ));
        let launch: Launch = serde_json::from_value(serde_json::json!({
            "imageId": "ami-1", "instanceTypes": ["t3.micro"], "subnetIds": ["subnet-a"],
            "runCommand": "true"
        }))
        .unwrap();
        let req = RunRequest {
            launch: &launch,
            offering: &off(),
            count: 1,
            token: "t",
            user_data: &"".into(),
            owner: &owner,
            class: None,
            template_version: None,
        };
        assert!(matches!(
            ec2.run(&req).await,
            Err(Ec2Error::Fenced {
                action: "RunInstances",
                ..
            })
        ));
    }

    #[test]
    fn every_name_the_crds_accept_gives_tag_values_ec2_takes() {
        // The longest namespace (a label, 63) and WarmPool and Scheduler
        // names (subdomains, 253): EC2 refuses a value over 256 characters.
        let ns = "n".repeat(63);
        let long = format!(
            "{}.{}.{}.{}",
            "a".repeat(63),
            "b".repeat(63),
            "c".repeat(63),
            "d".repeat(61)
        );
        let mut other = long.clone();
        other.replace_range(252.., "e");
        let cases = [
            ("default", "runners", "orca"),
            (ns.as_str(), long.as_str(), long.as_str()),
            (ns.as_str(), other.as_str(), "orca"),
            (ns.as_str(), "p", long.as_str()),
        ];
        let mut pools = std::collections::HashSet::new();
        for (ns, pool, scheduler) in cases {
            let o = Ownership::new(ns, pool, scheduler, "orca-operator", &"c".repeat(63));
            for (k, v) in o.tags() {
                assert!(k.len() <= 128, "{k}");
                assert!(
                    v.chars().count() <= TAG_VALUE_MAX,
                    "{k}={v} ({} characters)",
                    v.len()
                );
                assert!(!v.is_empty());
            }
            assert!(
                pools.insert(o.pool().clone()),
                "two pools share {}",
                o.pool()
            );
        }
        // A short one is its name, as tags always were.
        assert_eq!(
            Ownership::new("default", "runners", "orca", "o", "c").pool(),
            "default/runners"
        );
    }

    #[test]
    fn a_token_is_one_batch_of_one_pool() {
        let t = client_token("uid-1", 3);
        assert_eq!(t, client_token("uid-1", 3), "a retry repeats it");
        assert!(t.len() <= 64 && t.is_ascii());
        assert_ne!(t, client_token("uid-1", 4));
        assert_ne!(t, client_token("uid-2", 3));
        // The parts are kept apart: no two (id, batch) pairs run together.
        assert_ne!(client_token("uid-1", 0), client_token("uid-", 0));
    }
}
