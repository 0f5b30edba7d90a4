//! `kubectl orca`, the kubectl plugin (binary `kubectl-orca`): what a
//! Scheduler or WarmPool is doing and why ([`render`]), and the changes an
//! engineer makes to steer one — pause, resume, a rollout restart, a
//! rollout now outside the maintenance windows, a drain of instances —
//! each a patch of the resource the operator acts on, never a way around
//! it. It reads only the Kubernetes API, with the user's kubeconfig:
//! everything it shows is in the objects' status.
//!
//! The plugin's command line and what each
//! command does, a few lines each on the one client they share.

// render — what `kubectl orca status` prints for a Scheduler or a WarmPool.
pub(crate) mod render;

use std::io::IsTerminal;

use chrono::Utc;
use clap::{Parser, Subcommand, ValueEnum};
use futures::{StreamExt, TryStreamExt};
use kube::{
    api::{Patch, PatchParams},
    config::KubeConfigOptions,
    runtime::{watcher, WatchStreamExt},
    Api, Client, Config, Resource, ResourceExt,
};
use serde::{de::DeserializeOwned, Serialize};
use serde_json::json;

use crate::crd::{Scheduler, WarmPool};

/// The annotation `kubectl orca rollout restart` sets on a Scheduler's pod
/// template: a new revision of the same image.
pub const RESTARTED_AT: &str = "orca.dev/restartedAt";

/// The field manager of the plugin's patches.
const MANAGER: &str = "kubectl-orca";

/// See and steer orca Schedulers and WarmPools.
#[derive(Parser, Debug)]
#[command(name = "kubectl orca", bin_name = "kubectl orca", version)]
pub struct Cli {
    /// The namespace; default: the kubeconfig context's.
    #[arg(short, long, global = true)]
    namespace: Option<String>,
    /// The kubeconfig file; default: $KUBECONFIG, then ~/.kube/config.
    #[arg(long, global = true)]
    kubeconfig: Option<std::path::PathBuf>,
    /// The kubeconfig context; default: its current one.
    #[arg(long, global = true)]
    context: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// What it is doing and why: phase, leader, instances and the last
    /// handover of a Scheduler; instances by state, idle range, capacity
    /// holds, cost and runs served of a WarmPool; the conditions of either.
    Status {
        kind: Kind,
        name: String,
        /// `text` (default), `json` or `yaml`: the object as the API has it.
        #[arg(short, long, value_enum, default_value_t = Output::Text)]
        output: Output,
        /// Print it again at each change, until interrupted.
        #[arg(short, long)]
        watch: bool,
    },
    /// Sets spec.paused: a Scheduler rolls nothing out, a WarmPool
    /// launches and retires nothing (its instances stay).
    Pause { kind: Kind, name: String },
    /// Clears spec.paused.
    Resume { kind: Kind, name: String },
    /// Retires a WarmPool's instances once they are not in a run (the
    /// annotation orca.dev/drain): a busy one finishes its run first; each
    /// is replaced as any retirement is.
    Drain {
        /// `warmpool` (a Scheduler's pods are drained by its rollouts).
        kind: Kind,
        name: String,
        /// The instance ids, e.g. i-0123456789abcdef0.
        #[arg(required = true)]
        instances: Vec<String>,
    },
    /// Rollouts of a Scheduler.
    Rollout {
        #[command(subcommand)]
        command: RolloutCommand,
    },
    /// WarmPoolClasses.
    Class {
        #[command(subcommand)]
        command: ClassCommand,
    },
}

#[derive(Subcommand, Debug)]
enum ClassCommand {
    /// Prints a WarmPoolClass holding an inline WarmPool's region, endpoint
    /// and launch, and the patch that moves the pool onto it: its instances
    /// stay (their launch spec is the same), nothing is replaced.
    FromPool {
        /// The WarmPool (with an inline launch).
        name: String,
        /// The class's name; default: the pool's.
        #[arg(long)]
        class_name: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum RolloutCommand {
    /// A new revision of the same image (the annotation
    /// orca.dev/restartedAt on spec.podTemplate): handed over to as any
    /// rollout is.
    Restart {
        /// `scheduler` (the only kind with rollouts).
        kind: Kind,
        name: String,
    },
    /// Starts the revision that waits for a maintenance window now (the
    /// annotation orca.dev/rollout-now, naming that revision: once).
    Now {
        /// `scheduler` (the only kind with rollouts).
        kind: Kind,
        name: String,
    },
}

/// Which resource: `scheduler` (`schedulers`, `sched`) or `warmpool`
/// (`warmpools`, `wp`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Kind {
    #[value(alias = "schedulers", alias = "sched")]
    Scheduler,
    #[value(alias = "warmpools", alias = "wp")]
    Warmpool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Output {
    Text,
    Json,
    Yaml,
}

/// Why a command failed, in one line.
#[derive(Debug, thiserror::Error)]
pub enum PluginError {
    #[error("reading the kubeconfig: {0}")]
    Config(String),
    #[error("{kind} {namespace}/{name} not found")]
    NotFound {
        kind: &'static str,
        namespace: String,
        name: String,
    },
    #[error("{0}")]
    Api(String),
    #[error("rollout restart is for a scheduler; a warmpool has no rollouts")]
    NoRollouts,
    #[error("drain is for a warmpool's instances; a scheduler's pods are drained by its rollouts")]
    NoDrain,
    #[error("{0:?} is not an instance of warmpool {1}: its status lists {2}")]
    NotAnInstance(String, String, String),
    #[error("warmpool {0} has a class already (classRef {1}): nothing to move")]
    HasClass(String, String),
}

/// The cluster and namespace `cli` names (its kubeconfig, context and
/// namespace, or the defaults).
async fn connect(cli: &Cli) -> Result<At, PluginError> {
    let options = KubeConfigOptions {
        context: cli.context.clone(),
        ..KubeConfigOptions::default()
    };
    let config = match &cli.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| PluginError::Config(format!("{}: {e}", path.display())))?;
            Config::from_custom_kubeconfig(kubeconfig, &options).await
        }
        None => Config::from_kubeconfig(&options).await,
    }
    .map_err(|e| PluginError::Config(one_line(&e)))?;
    let namespace = cli
        .namespace
        .clone()
        .unwrap_or_else(|| config.default_namespace.clone());
    let client = Client::try_from(config).map_err(|e| PluginError::Config(one_line(&e)))?;
    Ok(At { client, namespace })
}

/// Runs the command `cli` names; what it prints goes to stdout.
pub async fn run(cli: Cli) -> Result<(), PluginError> {
    let at = connect(&cli).await?;
    match cli.command {
        Command::Status {
            kind,
            name,
            output,
            watch,
        } => {
            let style = if output == Output::Text
                && std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none()
            {
                render::Style::Colour
            } else {
                render::Style::Plain
            };
            match kind {
                Kind::Scheduler => {
                    at.status::<Scheduler>(&name, output, watch, |s| {
                        render::scheduler(s, Utc::now(), style)
                    })
                    .await
                }
                Kind::Warmpool => {
                    at.status::<WarmPool>(&name, output, watch, |p| {
                        render::warm_pool(p, Utc::now(), style)
                    })
                    .await
                }
            }
        }
        Command::Drain {
            kind,
            name,
            instances,
        } => {
            if kind != Kind::Warmpool {
                return Err(PluginError::NoDrain);
            }
            at.drain(&name, instances).await
        }
        Command::Pause { kind, name } => at.set_paused(kind, &name, true).await,
        Command::Resume { kind, name } => at.set_paused(kind, &name, false).await,
        Command::Rollout {
            command: RolloutCommand::Now { kind, name },
        } => {
            if kind != Kind::Scheduler {
                return Err(PluginError::NoRollouts);
            }
            let scheduler = at.get(&at.api::<Scheduler>(), &name).await?;
            let revision = crate::scheduler::revision_of(&scheduler.spec);
            let patch =
                json!({"metadata": {"annotations": {crate::scheduler::ROLLOUT_NOW: revision}}});
            at.patch::<Scheduler>(&name, &patch).await?;
            println!(
                "scheduler {}/{name}: revision {revision} ({}) rolls out now",
                at.namespace, scheduler.spec.image
            );
            Ok(())
        }
        Command::Class {
            command: ClassCommand::FromPool { name, class_name },
        } => {
            let pool = at.get(&at.api::<WarmPool>(), &name).await?;
            if let Some(class) = &pool.spec.class_ref {
                return Err(PluginError::HasClass(
                    format!("{}/{name}", at.namespace),
                    class.name.clone(),
                ));
            }
            print!(
                "{}",
                class_from_pool(&pool, class_name.as_deref().unwrap_or(&name))
            );
            Ok(())
        }
        Command::Rollout {
            command: RolloutCommand::Restart { kind, name },
        } => {
            if kind != Kind::Scheduler {
                return Err(PluginError::NoRollouts);
            }
            let now = Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            let patch = json!({"spec": {"podTemplate": {"annotations": {RESTARTED_AT: now}}}});
            at.patch::<Scheduler>(&name, &patch).await?;
            println!("scheduler {}/{name}: restarted at {now}", at.namespace);
            Ok(())
        }
    }
}

/// The WarmPoolClass `class` that holds `pool`'s region, endpoints and launch
/// (its instance types and capacity type the class's only ones; the
/// namespace alone admitted; no limits, to set before applying), then, as a
/// comment, the patch that moves the pool onto it. Launched from the class,
/// the pool's launch spec is the same as before: no instance drifts.
pub fn class_from_pool(pool: &WarmPool, class: &str) -> String {
    let ns = crate::crd::namespace_of(pool);
    let mut launch = pool.spec.launch.clone();
    let types = std::mem::take(&mut launch.instance_types);
    let capacity = std::mem::take(&mut launch.capacity_type);
    let object = json!({
        "apiVersion": "orca.dev/v1alpha1",
        "kind": "WarmPoolClass",
        "metadata": {"name": class},
        "spec": {
            "region": pool.spec.region,
            "endpoint": pool.spec.endpoint,
            "ssmEndpoint": pool.spec.ssm_endpoint,
            "launch": launch,
            "instanceTypes": types,
            "capacityTypes": [capacity],
            "namespaces": {"matchLabels": {"kubernetes.io/metadata.name": ns}},
        },
    });
    let mut object = object;
    for (unset, key) in [
        (pool.spec.endpoint.is_none(), "endpoint"),
        (pool.spec.ssm_endpoint.is_none(), "ssmEndpoint"),
    ] {
        if unset {
            object["spec"].as_object_mut().map(|s| s.remove(key));
        }
    }
    let yaml = serde_yaml::to_string(&object).unwrap_or_default();
    format!(
        "# The class holding WarmPool {ns}/{}'s launch; set spec.limits and\n\
         # spec.namespaceLimits, apply it, then move the pool onto it (its\n\
         # instances stay):\n\
         #   kubectl patch warmpool {} -n {ns} --type merge -p \\\n\
         #     '{{\"spec\":{{\"classRef\":{{\"name\":\"{class}\"}},\"region\":null,\"endpoint\":null,\"ssmEndpoint\":null,\"launch\":null}}}}'\n\
         {yaml}",
        pool.name_any(),
        pool.name_any(),
    )
}

/// The cluster and namespace a command works in.
struct At {
    client: Client,
    namespace: String,
}

impl At {
    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Prints `name` (as `text`, or the object as JSON or YAML), and with
    /// `watch` again at each change.
    async fn status<K>(
        &self,
        name: &str,
        output: Output,
        watch: bool,
        text: impl Fn(&K) -> String,
    ) -> Result<(), PluginError>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + Serialize
            + std::fmt::Debug
            + Send
            + 'static,
        K::DynamicType: Default,
    {
        let api = self.api::<K>();
        let show = |object: &K| -> Result<String, PluginError> {
            let mut object = object.clone();
            object.meta_mut().managed_fields = None;
            Ok(match output {
                Output::Text => text(&object),
                Output::Json => serde_json::to_string_pretty(&object)
                    .map(|s| s + "\n")
                    .map_err(|e| PluginError::Api(e.to_string()))?,
                Output::Yaml => {
                    serde_yaml::to_string(&object).map_err(|e| PluginError::Api(e.to_string()))?
                }
            })
        };
        let object = self.get(&api, name).await?;
        print!("{}", show(&object)?);
        if !watch {
            return Ok(());
        }
        let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let mut changes = watcher(api, config).applied_objects().boxed();
        let mut last = object.resource_version();
        while let Some(object) = changes
            .try_next()
            .await
            .map_err(|e| PluginError::Api(one_line(&e)))?
        {
            if object.resource_version() != last {
                last = object.resource_version();
                println!("---");
                print!("{}", show(&object)?);
            }
        }
        Ok(())
    }

    async fn get<K>(&self, api: &Api<K>, name: &str) -> Result<K, PluginError>
    where
        K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
        K::DynamicType: Default,
    {
        match api.get_opt(name).await {
            Ok(Some(object)) => Ok(object),
            Ok(None) => Err(self.not_found::<K>(name)),
            Err(e) => Err(PluginError::Api(one_line(&e))),
        }
    }

    /// Adds `instances` to the WarmPool's drain annotation. While its
    /// status lists every instance, an id it does not list is refused (a
    /// typo would drain nothing) and ids of instances gone are dropped.
    async fn drain(&self, name: &str, instances: Vec<String>) -> Result<(), PluginError> {
        let pool = self.get(&self.api::<WarmPool>(), name).await?;
        let listed: Vec<String> = pool
            .status
            .as_ref()
            .map(|s| s.instances.iter().map(|i| i.id.clone()).collect())
            .unwrap_or_default();
        let complete = !listed.is_empty() && listed.len() < crate::warmpool::roster::LISTED;
        if complete {
            if let Some(unknown) = instances.iter().find(|i| !listed.contains(i)) {
                return Err(PluginError::NotAnInstance(
                    unknown.clone(),
                    format!("{}/{name}", self.namespace),
                    listed.join(", "),
                ));
            }
        }
        let mut drain: std::collections::BTreeSet<String> = pool
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(crate::warmpool::DRAIN))
            .map(|v| crate::warmpool::drain_of(v).into_iter().collect())
            .unwrap_or_default();
        if complete {
            drain.retain(|i| listed.contains(i));
        }
        drain.extend(instances.iter().cloned());
        let value = drain.into_iter().collect::<Vec<_>>().join(",");
        let patch = json!({"metadata": {"annotations": {crate::warmpool::DRAIN: value}}});
        self.patch::<WarmPool>(name, &patch).await?;
        println!(
            "warmpool {}/{name}: draining {} (each retired once it is not in a run)",
            self.namespace,
            instances.join(", ")
        );
        Ok(())
    }

    async fn set_paused(&self, kind: Kind, name: &str, paused: bool) -> Result<(), PluginError> {
        let patch = json!({"spec": {"paused": paused}});
        match kind {
            Kind::Scheduler => self.patch::<Scheduler>(name, &patch).await?,
            Kind::Warmpool => self.patch::<WarmPool>(name, &patch).await?,
        }
        let word = if paused { "paused" } else { "resumed" };
        println!("{} {}/{name}: {word}", kind_word(kind), self.namespace);
        Ok(())
    }

    /// A merge patch of `name`; a missing object is [`PluginError::NotFound`]
    /// (the API server's 404: a merge patch never creates one).
    async fn patch<K>(&self, name: &str, patch: &serde_json::Value) -> Result<(), PluginError>
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        let api = self.api::<K>();
        match api
            .patch(name, &PatchParams::apply(MANAGER), &Patch::Merge(patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Err(self.not_found::<K>(name)),
            Err(e) => Err(PluginError::Api(one_line(&e))),
        }
    }

    fn not_found<K: Resource>(&self, name: &str) -> PluginError
    where
        K::DynamicType: Default,
    {
        PluginError::NotFound {
            kind: kind_name::<K>(),
            namespace: self.namespace.clone(),
            name: name.into(),
        }
    }
}

fn kind_name<K: Resource>() -> &'static str
where
    K::DynamicType: Default,
{
    if K::kind(&K::DynamicType::default()) == "Scheduler" {
        "scheduler"
    } else {
        "warmpool"
    }
}

fn kind_word(kind: Kind) -> &'static str {
    match kind {
        Kind::Scheduler => "scheduler",
        Kind::Warmpool => "warmpool",
    }
}

/// `e` and its sources on one line.
fn one_line(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let more = s.to_string();
        if !text.contains(&more) {
            text = format!("{text}: {more}");
        }
        source = s.source();
    }
    text.replace('\n', " ")
}
