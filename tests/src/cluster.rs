//! A real Kubernetes control plane for the end-to-end tests: etcd,
//! kube-apiserver and kube-controller-manager built from Kubernetes' own Go
//! modules (`scripts/build-kube`, `tests/kube/`), started on loopback free
//! ports with certificates, a service-account signing key and an admin
//! token generated for the run, `--authorization-mode=RBAC`, and an audit
//! log of every write. There is no kubelet: [`crate::node`] stands in for
//! one, running pods as local processes.
//!
//! One control plane per test binary ([`ControlPlane::shared`]); each test
//! works in namespaces of its own. The servers die with the test process
//! (`PR_SET_PDEATHSIG`), never left running. A control plane that cannot
//! start fails the test and says what is missing.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{Arc, Mutex, OnceLock, PoisonError},
    time::{Duration, Instant},
};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::{
    api::{ObjectMeta, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
    Api, Client,
};
use orca_operator::local::spawn::{free_port, remove_stale_dirs, spawn_tied};

use crate::{
    image::OciImage,
    node::{Node, NodeImage, NodeOptions},
};

/// The Kubernetes release `tests/kube/go.mod` pins; k8s-openapi's
/// `v1_33` types, which the operator uses, are served by it unchanged.
pub const KUBERNETES: &str = "v1.36.3";

/// The name of the test node that runs every pod.
pub const NODE: &str = "orca-test-node";

/// Images the test node reports as unpullable (`ErrImagePull`).
pub const UNPULLABLE: &str = "unpullable.invalid/*";

/// The running control plane and its files.
pub struct ControlPlane {
    dir: PathBuf,
    port: u16,
    token: String,
    ca: String,
    children: Mutex<Vec<(&'static str, Child)>>,
    /// The fixture's own runtime, which lives as long as the process (tests
    /// come and go with their runtimes): the test node runs on it.
    runtime: tokio::runtime::Runtime,
    node: OnceLock<Node>,
    /// The test node's images and the loopback ports its image pods reach.
    images: Arc<Mutex<BTreeMap<String, NodeImage>>>,
    exposed: Arc<Mutex<BTreeSet<u16>>>,
}

static SHARED: OnceLock<ControlPlane> = OnceLock::new();

/// Where the three binaries are: `$ORCA_KUBE_BIN`, or what
/// `scripts/build-kube` builds into this checkout's `.cache/`.
fn bin_dir() -> PathBuf {
    let dir = std::env::var_os("ORCA_KUBE_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../.cache/kube")
                .join(KUBERNETES)
        });
    for bin in ["etcd", "kube-apiserver", "kube-controller-manager"] {
        if !dir.join(bin).exists() {
            panic!(
                "the test control plane is missing: no {} (scripts/test builds it with scripts/build-kube, \
                 which prints the directory to put in ORCA_KUBE_BIN)",
                dir.join(bin).display()
            );
        }
    }
    dir
}

impl ControlPlane {
    /// The control plane of this test binary, started on first use, with
    /// the test node registered and running pods.
    pub fn shared() -> &'static ControlPlane {
        let cp = SHARED.get_or_init(ControlPlane::start);
        cp.node.get_or_init(|| cp.start_node());
        cp
    }

    fn start() -> ControlPlane {
        let bin = bin_dir();
        remove_stale_dirs("orca-kube-");
        let dir = std::env::temp_dir().join(format!("orca-kube-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let token = random_hex(16);
        let ca = certificates(&dir);
        // Static tokens: the admin (system:masters) and the controller
        // manager, which RBAC's bootstrap roles know by name.
        write(
            &dir.join("tokens.csv"),
            &format!(
                "{token},orca-test-admin,orca-test-admin,\"system:masters\"\n{token}-kcm,system:kube-controller-manager,kcm,\n"
            ),
        );
        write(&dir.join("audit-policy.yaml"), AUDIT_POLICY);

        let etcd_port = free_port();
        let peer_port = free_port();
        let port = free_port();
        let mut cp = ControlPlane {
            dir: dir.clone(),
            port,
            token: token.clone(),
            ca,
            children: Mutex::new(Vec::new()),
            runtime: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .thread_name("test-control-plane")
                .enable_all()
                .build()
                .expect("invariant: a runtime can be built at fixture set-up"),
            node: OnceLock::new(),
            images: Arc::default(),
            exposed: Arc::default(),
        };

        let etcd_url = format!("http://127.0.0.1:{etcd_port}");
        let peer_url = format!("http://127.0.0.1:{peer_port}");
        cp.spawn(
            "etcd",
            Command::new(bin.join("etcd")).args([
                "--name=orca-test",
                &format!("--data-dir={}", dir.join("etcd").display()),
                &format!("--listen-client-urls={etcd_url}"),
                &format!("--advertise-client-urls={etcd_url}"),
                &format!("--listen-peer-urls={peer_url}"),
                &format!("--initial-advertise-peer-urls={peer_url}"),
                &format!("--initial-cluster=orca-test={peer_url}"),
                "--unsafe-no-fsync",
                "--log-level=warn",
            ]),
        );

        let d = |f: &str| dir.join(f).display().to_string();
        cp.spawn(
            "kube-apiserver",
            Command::new(bin.join("kube-apiserver")).args([
                &format!("--etcd-servers={etcd_url}"),
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                &format!("--secure-port={port}"),
                &format!("--cert-dir={}", d("apiserver-certs")),
                &format!("--tls-cert-file={}", d("apiserver.crt")),
                &format!("--tls-private-key-file={}", d("apiserver.key")),
                &format!("--client-ca-file={}", d("ca.crt")),
                &format!("--token-auth-file={}", d("tokens.csv")),
                "--authorization-mode=RBAC",
                &format!("--service-account-key-file={}", d("sa.pub")),
                &format!("--service-account-signing-key-file={}", d("sa.key")),
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.96.0.0/24",
                &format!("--audit-policy-file={}", d("audit-policy.yaml")),
                &format!("--audit-log-path={}", d("audit.log")),
                "--audit-log-mode=blocking",
                "--audit-log-maxsize=0",
                "--profiling=false",
                "--v=0",
            ]),
        );
        cp.wait_ready();

        write(
            &dir.join("kcm.kubeconfig"),
            &cp.kubeconfig_text(&format!("{token}-kcm"), "default"),
        );
        cp.spawn(
            "kube-controller-manager",
            Command::new(bin.join("kube-controller-manager")).args([
                &format!("--kubeconfig={}", d("kcm.kubeconfig")),
                "--bind-address=127.0.0.1",
                &format!("--secure-port={}", free_port()),
                &format!("--cert-dir={}", d("kcm-certs")),
                "--leader-elect=false",
                // Each controller as its own ServiceAccount, with the
                // bootstrap roles RBAC gives it (as clusters run it).
                "--use-service-account-credentials=true",
                &format!("--service-account-private-key-file={}", d("sa.key")),
                &format!("--root-ca-file={}", d("ca.crt")),
                "--profiling=false",
                "--v=0",
            ]),
        );
        write(
            &dir.join("admin.kubeconfig"),
            &cp.kubeconfig_text(&token, "default"),
        );
        cp.wait_default_service_account();
        cp
    }

    fn spawn(&mut self, name: &'static str, cmd: &mut Command) {
        let log = std::fs::File::create(self.dir.join(format!("{name}.log")))
            .unwrap_or_else(|e| panic!("creating {name}'s log: {e}"));
        let mut cmd = std::mem::replace(cmd, Command::new(""));
        cmd.stdin(Stdio::null())
            .stdout(
                log.try_clone()
                    .expect("invariant: a new file can be cloned"),
            )
            .stderr(log);
        let child = spawn_tied(cmd, None).unwrap_or_else(|e| panic!("{name} could not start: {e}"));
        self.children
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .push((name, child));
    }

    /// Panics with the tail of a server's log if it has exited.
    fn check_alive(&self) {
        let mut children = self.children.lock().unwrap_or_else(|p| p.into_inner());
        for (name, child) in children.iter_mut() {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "the test control plane's {name} exited ({status}): {}",
                    tail(&self.dir.join(format!("{name}.log")), 30)
                );
            }
        }
    }

    /// `/readyz` answers ok (within 120 s: a cold apiserver installs its
    /// bootstrap RBAC and priority levels first).
    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            self.check_alive();
            if self.get("/readyz").as_deref() == Some("ok") {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "the test kube-apiserver was not ready within 120 s: {}",
                    tail(&self.dir.join("kube-apiserver.log"), 30)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// The controller manager is up once the `default` ServiceAccount of
    /// `default` exists (its service-account controller makes it).
    fn wait_default_service_account(&self) {
        let deadline = Instant::now() + Duration::from_secs(120);
        loop {
            self.check_alive();
            if self
                .get("/api/v1/namespaces/default/serviceaccounts/default")
                .is_some()
            {
                return;
            }
            if Instant::now() > deadline {
                panic!(
                    "the test kube-controller-manager made no default ServiceAccount within 120 s: {}",
                    tail(&self.dir.join("kube-controller-manager.log"), 30)
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// A GET as the admin: the body if it answered 200.
    fn get(&self, path: &str) -> Option<String> {
        let request = http::Request::get(path).body(Vec::new()).ok()?;
        self.block_on(async {
            let client = self.client().await;
            tokio::time::timeout(Duration::from_secs(5), client.request_text(request))
                .await
                .ok()?
                .ok()
        })
    }

    /// Runs `work` on the fixture's runtime, from a thread of its own (the
    /// caller may be inside a test's runtime).
    fn block_on<T: Send>(&self, work: impl std::future::Future<Output = T> + Send) -> T {
        std::thread::scope(|s| {
            s.spawn(|| self.runtime.block_on(work))
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p))
        })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn server(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    /// The admin's kubeconfig file (for helm and kubectl).
    pub fn admin_kubeconfig(&self) -> PathBuf {
        self.dir.join("admin.kubeconfig")
    }

    /// The apiserver's audit log: a JSON line per write.
    pub fn audit_log(&self) -> PathBuf {
        self.dir.join("audit.log")
    }

    /// A kubeconfig that authenticates with `token`, `namespace` its default.
    pub fn kubeconfig_text(&self, token: &str, namespace: &str) -> String {
        use base64::Engine;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca);
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: orca-test\n  cluster:\n    server: {}\n    certificate-authority-data: {ca}\n\
             users:\n- name: user\n  user:\n    token: {token}\ncontexts:\n- name: orca-test\n  context:\n    cluster: orca-test\n    user: user\n    namespace: {namespace}\n\
             current-context: orca-test\n",
            self.server()
        )
    }

    /// A client as the admin.
    pub async fn client(&self) -> Client {
        client_from(&self.kubeconfig_text(&self.token, "default")).await
    }

    /// The admin's client configuration, for a client of one's own making
    /// (the benchmarks count its requests).
    pub async fn admin_config(&self) -> kube::Config {
        config_from(&self.kubeconfig_text(&self.token, "default")).await
    }

    /// A new namespace for a test, once its `default` ServiceAccount exists
    /// (pods are refused before).
    pub async fn namespace(&self, client: &Client, prefix: &str) -> String {
        let name = format!("{prefix}-{}", random_hex(3));
        self.namespace_named(client, &name).await;
        name
    }

    /// Creates namespace `name` (which must not exist yet), once it has
    /// its default ServiceAccount.
    pub async fn namespace_named(&self, client: &Client, name: &str) {
        let name = name.to_string();
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .unwrap_or_else(|e| panic!("creating namespace {name}: {e}"));
        let sas = Api::<ServiceAccount>::namespaced(client.clone(), &name);
        let deadline = Instant::now() + Duration::from_secs(60);
        while sas.get_opt("default").await.ok().flatten().is_none() {
            assert!(
                Instant::now() < deadline,
                "namespace {name} got no default ServiceAccount within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// What the test node's pod `namespace/pod` printed so far.
    pub fn pod_log(&self, namespace: &str, pod: &str) -> String {
        self.node
            .get()
            .map(|n| n.log(namespace, pod))
            .unwrap_or_default()
    }

    /// Gives the test node image `reference`: the OCI archive `archive`,
    /// unpacked once per reference; a pod of that image runs from it.
    pub fn load_image(&self, reference: &str, archive: &Path) -> OciImage {
        let dir = self.dir.join("images").join(random_hex(8));
        let image = OciImage::open(archive, &dir.join("archive"))
            .unwrap_or_else(|e| panic!("cannot read the image {}: {e:#}", archive.display()));
        let root = dir.join("root");
        image
            .unpack(&root)
            .unwrap_or_else(|e| panic!("cannot unpack the image {}: {e:#}", archive.display()));
        let node_image = NodeImage::new(
            root,
            image.strings("Entrypoint"),
            image.strings("Cmd"),
            image.strings("Env"),
            image.user(),
            image.config()["WorkingDir"]
                .as_str()
                .unwrap_or_default()
                .into(),
        );
        self.images
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(reference.into(), node_image);
        image
    }

    /// Makes loopback `port` of this machine reachable from the test
    /// node's image pods at the same address (a database's, moto's).
    pub fn expose(&self, port: u16) {
        self.exposed
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(port);
    }

    fn start_node(&self) -> Node {
        let options = NodeOptions::new(
            NODE.into(),
            self.dir.join("pods"),
            vec![UNPULLABLE.into()],
            self.images.clone(),
            self.exposed.clone(),
            self.port,
            self.dir.join("ca.crt"),
        );
        self.block_on(async {
            let client = self.client().await;
            Node::start(client, options)
                .await
                .unwrap_or_else(|e| panic!("the test node could not start: {e:#}"))
        })
    }
}

/// A client from kubeconfig text.
pub async fn client_from(kubeconfig: &str) -> Client {
    let config = config_from(kubeconfig).await;
    Client::try_from(config).unwrap_or_else(|e| panic!("a client for the test control plane: {e}"))
}

async fn config_from(kubeconfig: &str) -> kube::Config {
    let parsed =
        Kubeconfig::from_yaml(kubeconfig).expect("invariant: the fixture writes valid kubeconfigs");
    kube::Config::from_custom_kubeconfig(parsed, &KubeConfigOptions::default())
        .await
        .unwrap_or_else(|e| panic!("a kubeconfig for the test control plane: {e}"))
}

/// Every write, at Metadata level (who, what, when): the tests count the
/// writes of an operator replica that lost its Lease.
const AUDIT_POLICY: &str = "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  verbs: [create, update, patch, delete, deletecollection]
- level: None
";

/// A CA, the apiserver's serving certificate (for 127.0.0.1) and the
/// service-account key pair, by openssl; the CA's PEM.
fn certificates(dir: &Path) -> String {
    let run = |args: &[&str]| {
        let out = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| {
                panic!("openssl is missing (it makes the test control plane's certificates): {e}")
            });
        if !out.status.success() {
            panic!(
                "openssl {} failed: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    };
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    run(&[
        &["req", "-x509"],
        &ec[..],
        &[
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-days",
            "7",
            "-subj",
            "/CN=orca-test-ca",
        ],
    ]
    .concat());
    run(&[
        &["req", "-x509"],
        &ec[..],
        &[
            "-keyout", "apiserver.key", "-out", "apiserver.crt", "-days", "7",
            "-subj", "/CN=kube-apiserver", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc",
            "-addext", "extendedKeyUsage=serverAuth",
            "-addext", "basicConstraints=critical,CA:FALSE",
        ],
    ]
    .concat());
    run(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        "sa.key",
    ]);
    run(&["pkey", "-in", "sa.key", "-pubout", "-out", "sa.pub"]);
    std::fs::read_to_string(dir.join("ca.crt")).expect("invariant: openssl wrote ca.crt")
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// `n` random bytes as hex, from the kernel.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    use std::io::Read;
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .expect("invariant: /dev/urandom can be read");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The loopback port of an `http://127.0.0.1:<port>` endpoint.
pub fn port_of(endpoint: &str) -> u16 {
    endpoint
        .rsplit(':')
        .next()
        .and_then(|p| p.trim_end_matches('/').parse().ok())
        .unwrap_or_else(|| panic!("no port in {endpoint}"))
}
