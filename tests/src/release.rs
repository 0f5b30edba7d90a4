//! The operator as a user installs it, on the test control plane: `helm
//! install` of the chart (CRDs, ServiceAccount, RBAC, the Lease's Role) with
//! no replicas of its own — there is no image to run — and the operator's
//! replicas as local processes, authenticated **as the chart's
//! ServiceAccount** with a token from the TokenRequest API, so that the
//! chart's RBAC is exactly what they may do. Their arguments are the ones
//! the chart's Deployment gives its container.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use k8s_openapi::api::{
    apps::v1::Deployment,
    authentication::v1::{TokenRequest, TokenRequestSpec},
    core::v1::ServiceAccount,
};
use kube::{api::PostParams, Api, Client};

use crate::{bins, cluster::ControlPlane};

/// Runs `program args…` (helm, kubectl) against the control plane as its
/// admin, `stdin` on its input; its stdout and stderr, or a panic with
/// them unless it succeeds.
pub fn run_as_admin(
    cp: &ControlPlane,
    program: &Path,
    args: &[&str],
    stdin: Option<&str>,
) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new(program)
        .args(args)
        .arg("--kubeconfig")
        .arg(cp.admin_kubeconfig())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} could not run: {e}", program.display()));
    let mut input = child.stdin.take().expect("invariant: stdin is piped");
    if let Some(text) = stdin {
        let _ = input.write_all(text.as_bytes());
    }
    drop(input);
    let out = child
        .wait_with_output()
        .unwrap_or_else(|e| panic!("{}: {e}", program.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{} {}: {text}",
        program.display(),
        args.join(" ")
    );
    text
}

/// `helm` from `$ORCA_HELM` (scripts/lib/setup.sh's `ensure_helm`).
pub fn helm() -> PathBuf {
    let Some(path) = std::env::var_os("ORCA_HELM") else {
        panic!(
            "ORCA_HELM is not set: the real-cluster tests install the chart with helm; run \
             `source scripts/lib/setup.sh && ensure_helm` first (scripts/test does)"
        );
    };
    let path = repo().join(path);
    assert!(path.is_file(), "ORCA_HELM={} is not a file", path.display());
    path
}

/// Runs helm's `cmd` with `sets` (`key=value`) added; panics saying `what`
/// failed, with helm's message.
fn helm_with(mut cmd: Command, sets: &[&str], what: &str) {
    for set in sets {
        cmd.args(["--set", set]);
    }
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("helm could not run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
}

/// The repository's root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// An installed release of the chart.
#[derive(Clone, Debug)]
pub struct Release {
    name: String,
    namespace: String,
    /// The namespaces it watches.
    watch: Vec<String>,
}

impl Release {
    /// Release `name` in `namespace`, watching `watch`.
    pub fn new(name: String, namespace: String, watch: Vec<String>) -> Self {
        Release {
            name,
            namespace,
            watch,
        }
    }
}

impl Release {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Release {
    /// The namespaces it watches.
    pub fn watch(&self) -> &Vec<String> {
        &self.watch
    }
}

impl Release {
    /// The release's namespace.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }
}

/// The cluster name (`clusterName`) a release gets unless the test sets
/// another: the test control plane is one cluster.
pub const TEST_CLUSTER: &str = "test-cluster";

/// The CRDs on the test control plane, once per test binary (one control
/// plane each): the orca-operator-crds chart as a release of its own,
/// `orca-crds` in `default`, as a platform team that manages them apart
/// installs them. A cluster's CRDs have one owner; the tests' many releases
/// of the operator's chart leave them to it (`crds.install=false`).
fn crds_once(cp: &ControlPlane) {
    static INSTALLED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    INSTALLED.get_or_init(|| {
        let mut cmd = Command::new(helm());
        cmd.args(["install", "orca-crds"])
            .arg(repo().join("charts/orca-operator-crds"))
            .args(["--namespace", "default", "--wait", "--timeout", "60s"])
            .arg("--kubeconfig")
            .arg(cp.admin_kubeconfig());
        helm_with(cmd, &[], "helm install orca-crds");
    });
}

impl Release {
    /// `helm install <name> charts/orca-operator` into `namespace`, watching
    /// `watch`, with `sets` (`key=value`) added; no replicas of its own.
    /// The CRDs come from the test binary's one orca-operator-crds release
    /// (`crds_once`), unless `sets` says `crds.install=`: a test that
    /// does decides about the CRDs itself.
    pub fn install(
        cp: &ControlPlane,
        name: &str,
        namespace: &str,
        watch: &[&str],
        sets: &[&str],
    ) -> Release {
        let own_crds = sets.iter().any(|s| s.starts_with("crds.install="));
        if !own_crds {
            crds_once(cp);
        }
        let mut cmd = Command::new(helm());
        cmd.arg("install")
            .arg(name)
            .arg(repo().join("charts/orca-operator"))
            .args(["--namespace", namespace, "--kubeconfig"])
            .arg(cp.admin_kubeconfig())
            .args(["--set", "replicaCount=0"])
            .args(["--set", &format!("clusterName={TEST_CLUSTER}")])
            .args(["--set", &format!("watchNamespaces={{{}}}", watch.join(","))])
            // The tests of inline pools; those of classes set it true.
            .args(["--set", "tenancy.requireClass=false"]);
        if !own_crds {
            cmd.args(["--set", "crds.install=false"]);
        }
        helm_with(cmd, sets, &format!("helm install {name}"));
        Release {
            name: name.into(),
            namespace: namespace.into(),
            watch: watch.iter().map(|s| s.to_string()).collect(),
        }
    }

    /// `helm upgrade` of this release to the chart with its values kept and
    /// `sets` (`key=value`) changed, as a user rolls a new image out.
    pub fn upgrade(&self, cp: &ControlPlane, sets: &[&str]) {
        let mut cmd = Command::new(helm());
        cmd.arg("upgrade")
            .arg(&self.name)
            .arg(repo().join("charts/orca-operator"))
            .args([
                "--namespace",
                &self.namespace,
                "--reuse-values",
                "--kubeconfig",
            ])
            .arg(cp.admin_kubeconfig());
        helm_with(cmd, sets, &format!("helm upgrade {}", self.name));
    }

    /// The chart's full name for this release (its ServiceAccount, Lease).
    pub fn fullname(&self) -> String {
        if self.name.contains("orca-operator") {
            self.name.clone()
        } else {
            format!("{}-orca-operator", self.name)
        }
    }

    /// The arguments the chart's Deployment gives the operator's container.
    pub async fn container_args(&self, client: &Client) -> Vec<String> {
        let deployment = Api::<Deployment>::namespaced(client.clone(), &self.namespace)
            .get(&self.fullname())
            .await
            .unwrap_or_else(|e| panic!("the chart's Deployment {}: {e}", self.fullname()));
        deployment
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|s| s.containers.into_iter().next())
            .and_then(|c| c.args)
            .unwrap_or_default()
    }

    /// A token of the chart's ServiceAccount, from the TokenRequest API.
    pub async fn token(&self, client: &Client) -> String {
        token_of(client, &self.namespace, &self.fullname()).await
    }
}

/// A token (an hour's) of ServiceAccount `namespace/name`, from the
/// TokenRequest API.
pub async fn token_of(client: &Client, namespace: &str, name: &str) -> String {
    token_for(client, namespace, name, &[]).await
}

/// As [`token_of`], for `audiences` (e.g. `sts.amazonaws.com`, as EKS
/// projects it for IAM roles for service accounts).
pub async fn token_for(client: &Client, namespace: &str, name: &str, audiences: &[&str]) -> String {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: audiences.iter().map(|a| a.to_string()).collect(),
            expiration_seconds: Some(3600),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    let answer: TokenRequest = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_subresource("token", name, &PostParams::default(), &request)
        .await
        .unwrap_or_else(|e| panic!("a token for ServiceAccount {namespace}/{name}: {e}"));
    answer
        .status
        .map(|s| s.token)
        .expect("invariant: the API server answers a TokenRequest with a token")
}

/// The operator binary the replicas run: this workspace's, or
/// `$ORCA_OPERATOR_UNDER_TEST` — to run the same scenarios against another
/// build (an older one, to see a test fail against the bug it guards).
fn operator_binary() -> PathBuf {
    std::env::var_os("ORCA_OPERATOR_UNDER_TEST")
        .map(PathBuf::from)
        .unwrap_or_else(|| bins::path("orca-operator"))
}

/// How a replica is started.
struct How<'a> {
    /// The operator binary, if not [`operator_binary`].
    binary: Option<&'a Path>,
    extra: &'a [&'a str],
    env: &'a [(&'a str, &'a str)],
    keys: bool,
    memory: Option<u64>,
}

/// One replica of the operator: `orca-operator` with the chart's arguments,
/// as the chart's ServiceAccount.
pub struct Replica {
    name: String,
    /// The access key id its EC2 calls are signed with (moto takes any):
    /// unique to the replica, so a proxy in front of EC2 tells who called.
    aws_key_id: String,
    /// The token's `jti`: the apiserver's audit log records it as the
    /// `authentication.kubernetes.io/credential-id` of every write.
    credential_id: String,
    metrics: String,
    log: PathBuf,
    child: Option<Child>,
}

impl Replica {
    /// The access key id its EC2 calls are signed with (moto takes any):
    /// unique to the replica, so a proxy in front of EC2 tells who called.
    pub fn aws_key_id(&self) -> &str {
        &self.aws_key_id
    }

    /// The token's `jti`: the apiserver's audit log records it as the
    /// `authentication.kubernetes.io/credential-id` of every write.
    pub fn credential_id(&self) -> &str {
        &self.credential_id
    }
}

impl Replica {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Replica {
    /// Starts replica `name` of `release`.
    pub async fn start(
        cp: &ControlPlane,
        client: &Client,
        release: &Release,
        name: &str,
    ) -> Replica {
        Replica::start_with(cp, client, release, name, &[]).await
    }

    /// As [`Replica::start`], with `extra` arguments after the chart's.
    pub async fn start_with(
        cp: &ControlPlane,
        client: &Client,
        release: &Release,
        name: &str,
        extra: &[&str],
    ) -> Replica {
        Replica::start_as(cp, client, release, name, extra, &[], true).await
    }

    /// As [`Replica::start_with`], `env` set last (`RUST_LOG=trace`, say);
    /// without `keys`, no AWS keys of its own: its AWS credentials come
    /// from `env` alone (web identity, say).
    pub async fn start_as(
        cp: &ControlPlane,
        client: &Client,
        release: &Release,
        name: &str,
        extra: &[&str],
        env: &[(&str, &str)],
        keys: bool,
    ) -> Replica {
        let how = How {
            binary: None,
            extra,
            env,
            keys,
            memory: None,
        };
        Replica::spawn(cp, client, release, name, how).await
    }

    /// As [`Replica::start_as`] without AWS keys of its own, running
    /// `binary` (an earlier release's operator, say): its credentials come
    /// from `env`.
    pub async fn start_binary(
        cp: &ControlPlane,
        client: &Client,
        release: &Release,
        name: &str,
        binary: &Path,
        env: &[(&str, &str)],
    ) -> Replica {
        let how = How {
            binary: Some(binary),
            extra: &[],
            env,
            keys: false,
            memory: None,
        };
        Replica::spawn(cp, client, release, name, how).await
    }

    /// As [`Replica::start_with`], held to `memory` bytes of data
    /// (`RLIMIT_DATA`: the heap and private mappings it writes) as a
    /// container's memory limit holds it: past it an allocation fails and
    /// the process ends, as the kernel's OOM kill would end the pod.
    pub async fn start_held(
        cp: &ControlPlane,
        client: &Client,
        release: &Release,
        name: &str,
        extra: &[&str],
        memory: u64,
    ) -> Replica {
        let how = How {
            binary: None,
            extra,
            env: &[],
            keys: true,
            memory: Some(memory),
        };
        Replica::spawn(cp, client, release, name, how).await
    }

    async fn spawn(
        cp: &ControlPlane,
        client: &Client,
        release: &Release,
        name: &str,
        how: How<'_>,
    ) -> Replica {
        let How {
            binary,
            extra,
            env,
            keys,
            memory,
        } = how;
        let token = release.token(client).await;
        let dir = std::env::temp_dir().join(format!(
            "orca-replica-{}-{}-{name}",
            std::process::id(),
            release.name
        ));
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let kubeconfig = dir.join("kubeconfig");
        std::fs::write(&kubeconfig, cp.kubeconfig_text(&token, &release.namespace))
            .unwrap_or_else(|e| panic!("writing {}: {e}", kubeconfig.display()));
        let port = orca_operator::local::spawn::free_port();
        let mut args = release.container_args(client).await;
        // The chart listens on 0.0.0.0:8080 in its pod; here, a free port.
        if let Some(i) = args.iter().position(|a| a == "--listen") {
            args[i + 1] = format!("127.0.0.1:{port}");
        }
        let aws_key_id = format!("AKIA{}", name.to_uppercase().replace('-', ""));
        let log = dir.join("log");
        let out = std::fs::File::create(&log)
            .unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        args.extend(extra.iter().map(|a| a.to_string()));
        let mut cmd = Command::new(binary.map_or_else(operator_binary, Path::to_path_buf));
        cmd.args(&args)
            .env("KUBECONFIG", &kubeconfig)
            .env("POD_NAME", name)
            .env("POD_NAMESPACE", &release.namespace)
            .env("RUST_LOG", "info")
            .env_remove("AWS_PROFILE")
            .env_remove("ORCA_DATABASE_URL")
            .stdin(Stdio::null())
            .stdout(
                out.try_clone()
                    .expect("invariant: a new file can be cloned"),
            )
            .stderr(out);
        if keys {
            cmd.env("AWS_ACCESS_KEY_ID", &aws_key_id)
                .env("AWS_SECRET_ACCESS_KEY", "test-secret");
        } else {
            for key in [
                "AWS_ACCESS_KEY_ID",
                "AWS_SECRET_ACCESS_KEY",
                "AWS_SESSION_TOKEN",
            ] {
                cmd.env_remove(key);
            }
        }
        cmd.envs(env.iter().copied());
        if let Some(bytes) = memory {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe; nothing else runs.
            unsafe {
                cmd.pre_exec(move || {
                    let limit = libc::rlimit {
                        rlim_cur: bytes,
                        rlim_max: bytes,
                    };
                    if libc::setrlimit(libc::RLIMIT_DATA, &limit) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        let child = orca_operator::local::spawn::spawn_tied(cmd, None)
            .unwrap_or_else(|e| panic!("orca-operator could not start: {e}"));
        Replica {
            name: name.into(),
            aws_key_id,
            credential_id: format!("JTI={}", jti(&token)),
            metrics: format!("http://127.0.0.1:{port}/metrics"),
            log,
            child: Some(child),
        }
    }

    /// Its process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Its `/metrics`, as Prometheus would scrape it.
    pub fn scrape(&self) -> String {
        self.get("/metrics")
            .unwrap_or_else(|e| panic!("replica {}'s /metrics: {e}", self.name))
            .1
    }

    /// Its `/healthz`: (status code, body), or why it could not be asked.
    pub fn health(&self) -> Result<(u16, String), String> {
        self.get("/healthz")
            .map_err(|e| format!("replica {}'s /healthz: {e}", self.name))
    }

    /// Its `/readyz`: (status code, body), or why it could not be asked.
    pub fn readiness(&self) -> Result<(u16, String), String> {
        self.get("/readyz")
            .map_err(|e| format!("replica {}'s /readyz: {e}", self.name))
    }

    /// `GET path` of its HTTP server: (status code, body).
    fn get(&self, path: &str) -> std::io::Result<(u16, String)> {
        use std::io::{Read, Write};
        let address = self
            .metrics
            .trim_start_matches("http://")
            .trim_end_matches("/metrics");
        let mut stream = std::net::TcpStream::connect(address)?;
        let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
        write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n")?;
        let mut text = String::new();
        let _ = stream.read_to_string(&mut text);
        let code = text
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let body = text
            .split_once("\r\n\r\n")
            .map(|(_, body)| body.to_string())
            .unwrap_or_default();
        Ok((code, body))
    }

    /// What it logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    fn signal(&self, signal: i32) {
        if let Some(child) = &self.child {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(child.id() as i32, signal) };
        }
    }

    /// SIGSTOP: frozen, as a stuck node or a long GC pause would leave it.
    pub fn freeze(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// SIGCONT.
    pub fn thaw(&self) {
        self.signal(libc::SIGCONT);
    }

    /// SIGTERM, then waits for it to exit (SIGKILL after 10 s).
    pub fn stop(&mut self) {
        self.signal(libc::SIGTERM);
        if let Some(mut child) = self.child.take() {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while child.try_wait().ok().flatten().is_none() {
                if std::time::Instant::now() > deadline {
                    let _ = child.kill();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.wait();
        }
    }

    /// Whether it still runs.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.thaw();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The `jti` claim of a service-account token (a JWT).
fn jti(token: &str) -> String {
    use base64::Engine;
    let payload = token
        .split('.')
        .nth(1)
        .and_then(|p| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(p)
                .ok()
        })
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok());
    payload
        .and_then(|p| p.get("jti").and_then(|j| j.as_str()).map(String::from))
        .expect("invariant: a service-account token carries a jti")
}

/// The audit log's entries of requests that took effect (the API server
/// answered below 400). A write the server refused — a Lease renewal that
/// lost to the new holder's, say — changed nothing.
fn took_effect(cp: &ControlPlane) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(cp.audit_log()).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|e| {
            e["responseStatus"]["code"]
                .as_i64()
                .is_some_and(|c| c < 400)
        })
        .collect()
}

/// `verb resource[/subresource] ` of an audit entry.
fn verb_and_resource(e: &serde_json::Value) -> String {
    let o = &e["objectRef"];
    format!(
        "{} {}{}",
        e["verb"].as_str().unwrap_or(""),
        o["resource"].as_str().unwrap_or(""),
        o["subresource"]
            .as_str()
            .map(|s| format!("/{s}"))
            .unwrap_or_default(),
    )
}

/// The writes that took effect in `namespace`, Leases aside, which the
/// audit log records for a token bound to a pod (the test node's image pods
/// have one each): `(pod, time, "verb resource name")`, in order.
pub fn writes_by_pods(cp: &ControlPlane, namespace: &str) -> Vec<(String, String, String)> {
    took_effect(cp)
        .into_iter()
        .filter(|e| {
            matches!(
                e["verb"].as_str(),
                Some("create" | "update" | "patch" | "delete")
            ) && e["objectRef"]["namespace"] == namespace
                && e["objectRef"]["resource"] != "leases"
        })
        .filter_map(|e| {
            let pod = e["user"]["extra"]["authentication.kubernetes.io/pod-name"][0].as_str()?;
            Some((
                pod.to_string(),
                e["requestReceivedTimestamp"]
                    .as_str()
                    .unwrap_or("")
                    .to_string(),
                format!(
                    "{} {}",
                    verb_and_resource(&e),
                    e["objectRef"]["name"].as_str().unwrap_or("")
                ),
            ))
        })
        .collect()
}

/// Each pod's writes as one span `(first, last)`; every two spans must be
/// apart: one leader's writes all come before the next one's.
pub fn overlapping_leaders(writes: &[(String, String, String)]) -> Vec<String> {
    let mut spans: std::collections::BTreeMap<&str, (&str, &str)> = Default::default();
    for (pod, at, _) in writes {
        let span = spans.entry(pod).or_insert((at, at));
        span.0 = span.0.min(at.as_str());
        span.1 = span.1.max(at.as_str());
    }
    let mut spans: Vec<(&str, (&str, &str))> = spans.into_iter().collect();
    spans.sort_by_key(|(_, (first, _))| *first);
    spans
        .windows(2)
        .filter(|w| w[1].1 .0 <= w[0].1 .1)
        .map(|w| {
            format!(
                "{} wrote until {} but {} from {}",
                w[0].0, w[0].1 .1, w[1].0, w[1].1 .0
            )
        })
        .collect()
}

/// The writes that took effect which the audit log records for credential
/// `credential_id`, as `verb resource namespace/name at time` lines, in
/// order.
pub fn writes_by(cp: &ControlPlane, credential_id: &str) -> Vec<String> {
    took_effect(cp)
        .into_iter()
        .filter(|e| {
            e["user"]["extra"]["authentication.kubernetes.io/credential-id"]
                .as_array()
                .is_some_and(|ids| ids.iter().any(|id| id == credential_id))
        })
        .map(|e| {
            let o = &e["objectRef"];
            format!(
                "{} {}/{} at {}",
                verb_and_resource(&e),
                o["namespace"].as_str().unwrap_or(""),
                o["name"].as_str().unwrap_or(""),
                e["requestReceivedTimestamp"].as_str().unwrap_or("")
            )
        })
        .collect()
}
