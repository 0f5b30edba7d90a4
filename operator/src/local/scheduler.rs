//! A Scheduler in the local mode: observe (processes, rows) → `decide` →
//! act (processes, `ask_drain`), then print and write the status.

use std::{path::PathBuf, time::Duration};

use orca_db::{schedulers, ConnectOptions, DatabaseUrl, Db};

use super::{
    manifests::{Manifests, SecretLookup},
    pods::{PodMeta, Table},
};
use crate::{
    crd::{Scheduler, SchedulerStatus},
    scheduler::{self, Action, Decision, Event, Observed, PodView, Problem},
};

/// One Scheduler's loop state: its database connection and its status.
pub struct LocalScheduler {
    key: String,
    pods: Table,
    jobs: Table,
    status_file: PathBuf,
    status: SchedulerStatus,
    db: Option<(String, Db)>,
    /// Where the database is when no Secret names one (the throwaway
    /// cluster's).
    fallback_url: Option<String>,
}

impl LocalScheduler {
    /// The loop of Scheduler `key` (`namespace/name`), carrying on from the
    /// status last saved in `state_dir`; `fallback_url` when no Secret names
    /// a database.
    pub fn new(key: &str, state_dir: &std::path::Path, fallback_url: Option<String>) -> Self {
        let status_file = state_dir.join(format!("scheduler-{}.yaml", key.replace('/', "-")));
        // The status is the operator's memory, as in a cluster: a restarted
        // local mode carries on from it.
        let status = std::fs::read_to_string(&status_file)
            .ok()
            .and_then(|t| serde_yaml::from_str(&t).ok())
            .unwrap_or_default();
        LocalScheduler {
            key: key.to_string(),
            pods: Table::new(state_dir.join("pods")),
            jobs: Table::new(state_dir.join("jobs")),
            status_file,
            status,
            db: None,
            fallback_url,
        }
    }

    async fn connect(&mut self, url: &str) -> Result<&Db, Problem> {
        let fresh = !matches!(&self.db, Some((u, db)) if u == url && !db.is_closed());
        if fresh {
            self.db = None;
            let parsed = DatabaseUrl::parse(url).map_err(|e| Problem {
                reason: "DatabaseUrlInvalid".into(),
                message: e.to_string(),
            })?;
            let db = orca_db::connect(&parsed, &ConnectOptions::named("orca-operator local"))
                .await
                .map_err(|e| Problem {
                    reason: "DatabaseUnreachable".into(),
                    message: e.to_string(),
                })?;
            self.db = Some((url.to_string(), db));
        }
        Ok(&self.db.as_ref().expect("invariant: connected just above").1)
    }

    /// One pass; returns when to look again.
    pub async fn reconcile(&mut self, s: &Scheduler, manifests: &Manifests) -> Duration {
        let stale = Duration::from_secs(s.spec.handover.stale_seconds.max(1) as u64);
        let url = database_url(s, manifests, self.fallback_url.as_deref());
        let (pods, jobs) = (self.pods.of(&self.key), self.jobs.of(&self.key));
        let views: Vec<PodView> = pods.iter().map(|p| p.pod_view()).collect();
        let hosts: Vec<String> = views.iter().map(|p| p.host().to_string()).collect();
        let observed_db = match &url {
            Ok(url) => match self.connect(url).await {
                Ok(db) => crate::scheduler::rows::observe_instances(db, stale, &hosts)
                    .await
                    .map_err(|e| crate::scheduler::rows::db_problem(&e)),
                Err(p) => Err(p),
            },
            Err(p) => Err(p.clone()),
        };
        if observed_db.is_err() {
            self.db = None;
        }
        let (instances, db_now) = match observed_db {
            Ok((rows, db_now)) => (Ok(rows), Some(db_now)),
            Err(p) => (Err(p), None),
        };
        let observed = Observed::new(
            namespace(s),
            s.metadata.name.clone().unwrap_or_default(),
            s.spec.clone(),
            self.status.clone(),
            chrono::Utc::now(),
        )
        .with_generation(s.metadata.generation)
        .with_pods(views)
        .with_jobs(jobs.iter().map(|j| j.job_view()).collect())
        .with_instances(instances)
        .with_rollout_now(
            s.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(crate::scheduler::ROLLOUT_NOW).cloned()),
        );
        let observed = match db_now {
            Some(now) => observed.on_database_clock(now),
            None => observed,
        };
        let decision = scheduler::decide(&observed);
        for event in decision.events() {
            print_event(&self.key, event);
        }
        for action in decision.actions() {
            if let Err(e) = self
                .act(s, manifests, url.as_ref().ok(), action, stale)
                .await
            {
                print_event(&self.key, &Event::warning("ActionFailed", e));
            }
        }
        self.publish(&decision);
        decision.requeue()
    }

    async fn act(
        &mut self,
        s: &Scheduler,
        manifests: &Manifests,
        url: Option<&String>,
        action: &Action,
        stale: Duration,
    ) -> Result<(), String> {
        match action {
            // A local pod is named by its host name: pod names of two
            // namespaces meet in one directory here.
            Action::CreatePod {
                host: name,
                revision,
                sequence,
                image,
                ..
            } => {
                let url = url.ok_or("no database URL")?;
                let meta = self.meta(revision, *sequence, image);
                let mut command = s.spec.command.clone();
                command.extend(s.spec.args.iter().cloned());
                if command.is_empty() {
                    return Err(format!(
                        "Scheduler {} has no command; the local mode has no image entrypoint",
                        self.key
                    ));
                }
                let env = self.env(s, manifests, url, image, name);
                self.pods
                    .start(name, &meta, &command, &env, None)
                    .map_err(|e| format!("starting pod {name}: {e}"))
            }
            Action::DeletePod { name } => {
                if let Some(p) = self.pods.list().get(name) {
                    p.delete();
                }
                Ok(())
            }
            Action::AskDrain { instance } => {
                let db = &self.db.as_ref().ok_or("no database connection")?.1;
                match schedulers::ask_drain(db, *instance, stale).await {
                    Ok(_) => Ok(()),
                    Err(e) => Err(format!("asking instance {instance} to drain: {e}")),
                }
            }
            Action::CreateRegisterJob {
                name,
                revision,
                image,
            } => {
                let url = url.ok_or("no database URL")?;
                let register = s.spec.register.as_ref().ok_or("no register command")?;
                let meta = self
                    .meta(revision, scheduler::register_attempt(name, revision), image)
                    .with_register(scheduler::register_hash(register));
                let mut command = register.command.clone();
                command.extend(register.args.iter().cloned());
                let env = self.env(s, manifests, url, image, name);
                self.jobs
                    .start(
                        name,
                        &meta,
                        &command,
                        &env,
                        Some(register.timeout_seconds.max(1) as u64),
                    )
                    .map_err(|e| format!("starting job {name}: {e}"))
            }
            Action::DeleteJob { name } => {
                if let Some(j) = self.jobs.list().get(name) {
                    j.delete();
                }
                Ok(())
            }
        }
    }

    fn meta(&self, revision: &str, sequence: u32, image: &str) -> PodMeta {
        PodMeta::new(
            self.key.clone(),
            revision.to_string(),
            sequence,
            image.to_string(),
            chrono::Utc::now(),
            None,
        )
    }

    /// The image contract's environment, as the pod would have it.
    fn env(
        &self,
        s: &Scheduler,
        manifests: &Manifests,
        url: &str,
        image: &str,
        host: &str,
    ) -> Vec<(String, String)> {
        let mut env = vec![
            ("ORCA_DATABASE_URL".to_string(), url.to_string()),
            (
                "ORCA_OVERLAP".into(),
                if s.spec.overlap { "on" } else { "off" }.into(),
            ),
            ("ORCA_IMAGE".into(), image.to_string()),
            ("HOSTNAME".into(), host.to_string()),
        ];
        let ns = namespace(s);
        for var in &s.spec.env {
            let value = match (&var.value, &var.value_from) {
                (Some(v), _) => Some(v.clone()),
                (None, Some(from)) => from
                    .secret_key_ref
                    .as_ref()
                    .and_then(|r| manifests.secret_value(&ns, &r.name, &r.key).ok()),
                (None, None) => Some(String::new()),
            };
            if let Some(v) = value {
                env.push((var.name.clone(), v));
            }
        }
        env
    }

    /// Prints the status when it changed and writes it to the status file.
    fn publish(&mut self, decision: &Decision) {
        let new = decision.status();
        if summary(new) != summary(&self.status) {
            println!("scheduler {}: {}", self.key, summary(new));
        }
        if *new != self.status {
            if let Ok(text) = serde_yaml::to_string(new) {
                let tmp = self.status_file.with_extension("yaml.tmp");
                if std::fs::write(&tmp, text).is_ok() {
                    let _ = std::fs::rename(&tmp, &self.status_file);
                }
            }
            self.status = new.clone();
        }
    }

    /// The Scheduler was removed from the directory: stops its processes
    /// (as the owner references would) and removes its status file. A
    /// removed object has no status; the last one written (Ready, its
    /// leader) would stand for it while it is gone, and a Scheduler of its
    /// name put back would carry on from it, where one made again in a
    /// cluster starts with none. Returns how many processes it stopped.
    pub fn remove(self) -> usize {
        let stopped = self.stop_all();
        let _ = std::fs::remove_file(&self.status_file);
        stopped
    }

    /// Stops every process of this Scheduler: SIGTERM, which a scheduler
    /// takes as "drain".
    fn stop_all(&self) -> usize {
        let mut n = 0;
        for local in self.pods.list().values().chain(self.jobs.list().values()) {
            if *local.meta().scheduler() == self.key && local.running() {
                local.delete();
                n += 1;
            }
        }
        n
    }
}

/// The database URL Scheduler `s` uses — its Secret's, else the local
/// mode's own — or the problem with it.
pub(super) fn database_url(
    s: &Scheduler,
    manifests: &Manifests,
    fallback: Option<&str>,
) -> Result<String, Problem> {
    let ns = namespace(s);
    let r = &s.spec.database.url_secret_ref;
    match (manifests.secret_value(&ns, &r.name, &r.key), fallback) {
        (Ok(url), _) => Ok(url),
        (Err(SecretLookup::NoSecret), Some(url)) => Ok(url.to_string()),
        (Err(SecretLookup::NoSecret), None) => Err(Problem {
            reason: "SecretMissing".into(),
            message: format!("Secret {ns}/{} not found", r.name),
        }),
        (Err(SecretLookup::NoKey), _) => Err(Problem {
            reason: "SecretKeyMissing".into(),
            message: format!("Secret {ns}/{} has no key {}", r.name, r.key),
        }),
    }
}

fn namespace(s: &Scheduler) -> String {
    s.metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".into())
}

fn summary(s: &SchedulerStatus) -> String {
    let leader = match &s.leader {
        // Overlap off: the pod leads alone, with no row.
        Some(l) if l.instance == 0 => format!("leader pod {} ({})", l.pod, l.image),
        Some(l) => format!("leader instance {} ({}, {})", l.instance, l.pod, l.image),
        None => "no leader".into(),
    };
    let degraded = s
        .conditions
        .iter()
        .find(|c| c.type_ == "Degraded" && c.status == "True")
        .map(|c| format!(", degraded: {} ({})", c.reason, c.message))
        .unwrap_or_default();
    format!(
        "phase {}, {leader}, draining {}{degraded}",
        s.phase.as_str(),
        s.draining
    )
}

fn print_event(key: &str, e: &Event) {
    let kind = if e.is_warning() { "Warning" } else { "Normal" };
    println!("scheduler {key}: {kind} {}: {}", e.reason(), e.message());
}
