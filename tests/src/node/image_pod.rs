//! Pods of images the node has — the operator's own, as the chart deploys
//! it. As a kubelet with a container runtime does, as far as the tests need:
//!
//! - the container's root is a copy of the image's root file system (hard
//!   links: the image's files are root's and read-only to the container's
//!   user), with `/etc/hosts`, the usual `/dev` nodes (`null`, `zero`,
//!   `full`, `random`, `urandom`) and the volumes it mounts: `emptyDir`, and the
//!   projected one the API server adds for the ServiceAccount (its token
//!   from the TokenRequest API, bound to the pod; the cluster's CA; the
//!   namespace), at `/var/run/secrets/kubernetes.io/serviceaccount`;
//! - it runs `chroot`ed there (entered before its exec, so that it dies
//!   with the node like every other container), as the user of its
//!   `securityContext`, the
//!   pod's, or the image's, with the image's `Env` under the container's
//!   and `KUBERNETES_SERVICE_HOST`/`PORT`: the entrypoint and `Cmd` of the
//!   image unless `command`/`args` replace them;
//! - in a network namespace of its own (so two pods each listen on their
//!   port; made by `unshare --net`), where [`NodeOptions::exposed`] ports of this machine's loopback —
//!   the API server's among them — are forwarded, so that the same
//!   addresses reach them;
//! - `httpGet` readiness and liveness probes (delay, period, timeout,
//!   failure threshold) are run inside that network; readiness sets the
//!   container's and pod's `Ready`, a liveness failure restarts the
//!   container, as does its exit under `restartPolicy: Always` (or
//!   `OnFailure` and a failure), with the kubelet's back-off;
//! - one container per pod; no init containers, no other volumes, no
//!   resource limits, and `readOnlyRootFilesystem` is what the file modes
//!   make of it.

use std::{
    fs::File,
    io::{Read, Write},
    net::{TcpListener, TcpStream},
    os::{fd::AsRawFd, unix::fs::PermissionsExt},
};

use k8s_openapi::api::{
    authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec},
    core::v1::{PodSpec, Probe, ServiceAccount},
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::*;

/// Whether every container of `pod` is of an image the node has.
pub(super) fn of_images(ctx: &Ctx, pod: &Pod) -> bool {
    let containers = pod.spec.iter().flat_map(|s| &s.containers);
    let mut any = false;
    for c in containers {
        if ctx.image(c.image.as_deref().unwrap_or_default()).is_none() {
            return false;
        }
        any = true;
    }
    any
}

/// Runs the pod's container until it has exited for good, or the pod is
/// deleted (true) or gone from the API (false).
pub(super) async fn run(ctx: &Ctx, pod: &PodApi, rx: &mut Updates) -> bool {
    let start = now();
    let Some(current) = latest(rx) else {
        return false;
    };
    if deleting(&current) {
        return true;
    }
    let spec = current.spec.clone().unwrap_or_default();
    let [container] = spec.containers.as_slice() else {
        let waiting = State::Waiting {
            reason: "CreateContainerError".into(),
            message: "the test node runs image pods of one container".into(),
        };
        return report_one(
            pod,
            &start,
            "Pending",
            ContainerStatus::of(&spec.containers[0], waiting),
        )
        .await;
    };
    let image = ctx
        .image(container.image.as_deref().unwrap_or_default())
        .expect("invariant: of_images checked the image");
    // Its environment, once its Secrets and ConfigMaps are there.
    let env = loop {
        match container_env(ctx, &current, container).await {
            Ok(env) => break env,
            Err(message) => {
                let waiting = State::Waiting {
                    reason: "CreateContainerConfigError".into(),
                    message,
                };
                if !report_one(
                    pod,
                    &start,
                    "Pending",
                    ContainerStatus::of(container, waiting),
                )
                .await
                {
                    return false;
                }
                tokio::select! {
                    changed = rx.changed() => if changed.is_err() || latest(rx).is_none() { return false },
                    _ = tokio::time::sleep(RETRY) => {}
                }
            }
        }
    };
    let sandbox = match Sandbox::make(ctx, pod, &spec, container, &image).await {
        Ok(sandbox) => sandbox,
        Err(e) => {
            tracing::warn!(pod = %pod.key(), error = %format!("{e:#}"), "cannot make the pod's sandbox");
            let waiting = State::Waiting {
                reason: "CreateContainerError".into(),
                message: format!("{e:#}"),
            };
            return report_one(
                pod,
                &start,
                "Pending",
                ContainerStatus::of(container, waiting),
            )
            .await;
        }
    };
    let run = ImageRun::new(ctx, &spec, container, &image, env, pod.name());
    let outcome = supervise(ctx, pod, rx, &start, &sandbox, &run, &spec).await;
    sandbox.end(ctx);
    outcome
}

/// The pod's own: its directory with the container's root, and the
/// network namespace (held by a process that only sleeps) with its
/// forwarders and its prober.
struct Sandbox {
    dir: PathBuf,
    root: PathBuf,
    holder: Child,
    net: PathBuf,
    forwarders: JoinSet<()>,
    prober: Prober,
}

impl Sandbox {
    async fn make(
        ctx: &Ctx,
        pod: &PodApi,
        spec: &PodSpec,
        container: &Container,
        image: &NodeImage,
    ) -> anyhow::Result<Sandbox> {
        let dir = pod.dir(ctx);
        fresh_dir(&dir).context("the pod's directory")?;
        let root = dir.join("root");
        copy_root(&image.root, &root)?;
        devices(&root)?;
        std::fs::write(
            root.join("etc/hosts"),
            format!(
                "127.0.0.1\tlocalhost\n::1\tlocalhost\n127.0.0.1\t{}\n",
                pod.name()
            ),
        )?;
        for mount in container.volume_mounts.iter().flatten() {
            let volume = spec
                .volumes
                .iter()
                .flatten()
                .find(|v| v.name == mount.name)
                .with_context(|| format!("no volume {:?}", mount.name))?;
            let path = root.join(mount.mount_path.trim_start_matches('/'));
            // A fresh directory, in place of what the image has there.
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path)?;
            let projects_token = volume.projected.as_ref().is_some_and(|p| {
                p.sources
                    .iter()
                    .flatten()
                    .any(|s| s.service_account_token.is_some())
            });
            if volume.empty_dir.is_some() {
                // The container's to write.
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o777))?;
            } else if projects_token {
                // The API server's admission made this one (kube-api-access-…):
                // the ServiceAccount's token, the cluster's CA, the namespace.
                let account = spec.service_account_name.as_deref().unwrap_or("default");
                std::fs::write(path.join("token"), token(ctx, pod, account).await?)?;
                std::fs::copy(&ctx.ca_file, path.join("ca.crt"))?;
                std::fs::write(path.join("namespace"), pod.namespace())?;
            } else {
                anyhow::bail!(
                    "volume {:?}: the test node makes only emptyDir volumes and the \
                     ServiceAccount token's projected one",
                    mount.name
                );
            }
        }

        // The network namespace, held by a sleeping process of its own.
        let mut holder = Command::new("unshare");
        holder
            .args(["--net", "--", "sleep", "infinity"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true);
        dies_with_the_node(&mut holder);
        let holder = spawn(ctx, holder).await.context("unshare --net")?;
        let pid = holder
            .id()
            .context("the namespace's holder exited at once")?;
        let net = PathBuf::from(format!("/proc/{pid}/ns/net"));
        let ours = std::fs::read_link("/proc/self/ns/net")?;
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::fs::read_link(&net).ok().as_ref() == Some(&ours) {
            anyhow::ensure!(
                std::time::Instant::now() < deadline,
                "unshare made no network namespace within 5 s"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let up = std::process::Command::new("nsenter")
            .arg(format!("--net={}", net.display()))
            .args(["ip", "link", "set", "lo", "up"])
            .output()
            .context("nsenter ip link set lo up")?;
        anyhow::ensure!(
            up.status.success(),
            "cannot bring the pod's loopback up: {}",
            String::from_utf8_lossy(&up.stderr).trim()
        );

        // The ports exposed now are forwarded before the container starts;
        // one exposed later (a test's moto, started after the operator), as
        // soon as it is.
        let wanted = {
            let exposed = ctx.exposed.clone();
            let api = ctx.api_port;
            move || -> BTreeSet<u16> {
                let mut ports = exposed
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .clone();
                ports.insert(api);
                ports
            }
        };
        let mut forwarders = JoinSet::new();
        let first = wanted();
        for (port, listener) in listen_in(&net, first.clone())? {
            forwarders.spawn(forward(listener, port));
        }
        forwarders.spawn(forward_new(net.clone(), first, wanted));
        let prober = Prober::start(&net)?;
        Ok(Sandbox {
            dir,
            root,
            holder,
            net,
            forwarders,
            prober,
        })
    }

    /// Ends the namespace's holder and its forwarders (the prober goes with
    /// the sandbox).
    fn end(mut self, ctx: &Ctx) {
        self.forwarders.abort_all();
        if let Some(pid) = self.holder.id() {
            ctx.groups.ended(pid as i32);
        }
        let _ = self.holder.start_kill();
    }
}

/// Runs `f` on a thread of its own inside network namespace `net`: the
/// sockets it makes stay there.
fn in_namespace<T: Send + 'static>(
    net: &Path,
    f: impl FnOnce() -> T + Send + 'static,
) -> anyhow::Result<T> {
    let file = File::open(net).with_context(|| format!("open {}", net.display()))?;
    std::thread::spawn(move || {
        // SAFETY: setns on an open namespace file changes only this thread.
        if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(f())
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the namespace's thread panicked"))?
    .context("setns")
}

/// Listeners on loopback `ports` inside network namespace `net`.
fn listen_in(
    net: &Path,
    ports: BTreeSet<u16>,
) -> anyhow::Result<Vec<(u16, tokio::net::TcpListener)>> {
    let listeners = in_namespace(net, move || {
        ports
            .iter()
            .map(|&port| {
                let listener = TcpListener::bind((LOOPBACK, port))?;
                listener.set_nonblocking(true)?;
                Ok((port, listener))
            })
            .collect::<io::Result<Vec<_>>>()
    })?
    .context("the pod's forwarders")?;
    listeners
        .into_iter()
        .map(|(port, l)| Ok((port, tokio::net::TcpListener::from_std(l)?)))
        .collect()
}

/// Forwards each port that `wanted` adds to `done`, as it appears.
async fn forward_new(net: PathBuf, mut done: BTreeSet<u16>, wanted: impl Fn() -> BTreeSet<u16>) {
    let mut forwarders = JoinSet::new();
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let new: BTreeSet<u16> = wanted().difference(&done).copied().collect();
        if new.is_empty() {
            continue;
        }
        match listen_in(&net, new.clone()) {
            Ok(listeners) => {
                for (port, listener) in listeners {
                    forwarders.spawn(forward(listener, port));
                }
                done.extend(new);
            }
            Err(e) => tracing::warn!(error = %format!("{e:#}"), "cannot forward into a pod"),
        }
    }
}

/// Passes each connection to `port` inside the pod's network to the same
/// port on this machine's loopback.
async fn forward(listener: tokio::net::TcpListener, port: u16) {
    loop {
        let Ok((mut inside, _)) = listener.accept().await else {
            return;
        };
        tokio::spawn(async move {
            if let Ok(mut outside) = tokio::net::TcpStream::connect((LOOPBACK, port)).await {
                let _ = tokio::io::copy_bidirectional(&mut inside, &mut outside).await;
            }
        });
    }
}

/// A thread inside the pod's network that answers HTTP probes.
struct Prober(std::sync::mpsc::Sender<(u16, String, Duration, oneshot::Sender<bool>)>);

impl Prober {
    fn start(net: &Path) -> anyhow::Result<Prober> {
        let file = File::open(net)?;
        let (tx, rx) = std::sync::mpsc::channel::<(u16, String, Duration, oneshot::Sender<bool>)>();
        std::thread::Builder::new()
            .name("orca-test-prober".into())
            .spawn(move || {
                // SAFETY: as in_namespace.
                if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return;
                }
                for (port, path, timeout, reply) in rx {
                    let _ = reply.send(http_ok(port, &path, timeout));
                }
            })?;
        Ok(Prober(tx))
    }

    async fn get(&self, port: u16, path: &str, timeout: Duration) -> bool {
        let (reply, answer) = oneshot::channel();
        if self
            .0
            .send((port, path.to_string(), timeout, reply))
            .is_err()
        {
            return false;
        }
        answer.await.unwrap_or(false)
    }
}

/// Whether `GET path` on loopback `port` answers 200–399 within `timeout`.
fn http_ok(port: u16, path: &str, timeout: Duration) -> bool {
    let get = || -> io::Result<bool> {
        let address = (std::net::Ipv4Addr::LOCALHOST, port).into();
        let mut stream = TcpStream::connect_timeout(&address, timeout)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\nUser-Agent: kube-probe/orca-test\r\nConnection: close\r\n\r\n"
        )?;
        let mut head = [0u8; 12];
        stream.read_exact(&mut head)?;
        let code: u16 = String::from_utf8_lossy(&head[9..12]).parse().unwrap_or(0);
        Ok((200..400).contains(&code))
    };
    get().unwrap_or(false)
}

/// A token of ServiceAccount `account`, bound to the pod, as a kubelet
/// projects it.
async fn token(ctx: &Ctx, pod: &PodApi, account: &str) -> anyhow::Result<String> {
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: vec![],
            expiration_seconds: Some(3600),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.name().to_string()),
                uid: Some(pod.uid().to_string()),
            }),
        },
        ..Default::default()
    };
    let answer: TokenRequest =
        Api::<ServiceAccount>::namespaced(ctx.client.clone(), pod.namespace())
            .create_subresource("token", account, &PostParams::default(), &request)
            .await
            .with_context(|| format!("a token of ServiceAccount {account}"))?;
    answer
        .status
        .map(|s| s.token)
        .context("the API server answered a TokenRequest without a token")
}

/// The devices a container runtime gives every container in `/dev`
/// (`/dev/urandom` among them: a static binary's random numbers come from
/// there).
fn devices(root: &Path) -> anyhow::Result<()> {
    let dev = root.join("dev");
    std::fs::create_dir_all(&dev)?;
    for (name, minor) in [
        ("null", 3),
        ("zero", 5),
        ("full", 7),
        ("random", 8),
        ("urandom", 9),
    ] {
        let path = std::ffi::CString::new(dev.join(name).into_os_string().into_encoded_bytes())?;
        // SAFETY: mknod reads a valid C string; the mode and device are plain numbers.
        let made = unsafe {
            libc::mknod(
                path.as_ptr(),
                libc::S_IFCHR | 0o666,
                libc::makedev(1, minor),
            )
        };
        anyhow::ensure!(
            made == 0,
            "mknod /dev/{name}: {}",
            io::Error::last_os_error()
        );
        // mknod's mode is cut by the umask.
        std::fs::set_permissions(dev.join(name), std::fs::Permissions::from_mode(0o666))?;
    }
    Ok(())
}

/// `src`'s tree at `dst`, files hard-linked (or copied where they cannot
/// be), owners and modes kept.
fn copy_root(src: &Path, dst: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dst)?;
    let linked = std::process::Command::new("cp")
        .arg("-al")
        .arg(format!("{}/.", src.display()))
        .arg(dst)
        .status()?;
    if !linked.success() {
        let copied = std::process::Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", src.display()))
            .arg(dst)
            .status()?;
        anyhow::ensure!(
            copied.success(),
            "cannot copy the image's root to {}",
            dst.display()
        );
    }
    // The image's /etc/hosts, if any, is replaced: unlink the link.
    let _ = std::fs::remove_file(dst.join("etc/hosts"));
    std::fs::create_dir_all(dst.join("etc"))?;
    Ok(())
}

/// The uid and gid the container runs as: its `securityContext`, the
/// pod's, else the image's `User`.
fn ids(spec: &PodSpec, container: &Container, image: &NodeImage) -> (u32, u32) {
    let (image_uid, image_gid) = match image.user.split_once(':') {
        Some((u, g)) => (u.parse().unwrap_or(0), g.parse().unwrap_or(0)),
        None => {
            let u = image.user.parse().unwrap_or(0);
            (u, u)
        }
    };
    let own = container.security_context.as_ref();
    let pods = spec.security_context.as_ref();
    let uid = own
        .and_then(|s| s.run_as_user)
        .or_else(|| pods.and_then(|s| s.run_as_user))
        .map_or(image_uid, |u| u as u32);
    let gid = own
        .and_then(|s| s.run_as_group)
        .or_else(|| pods.and_then(|s| s.run_as_group))
        .map_or(image_gid, |g| g as u32);
    (uid, gid)
}

/// The container as it is started each time.
struct ImageRun {
    name: String,
    image: String,
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    uid: u32,
    gid: u32,
    working_dir: String,
    readiness: Option<HttpProbe>,
    liveness: Option<HttpProbe>,
}

/// An `httpGet` probe, resolved.
#[derive(Clone)]
struct HttpProbe {
    port: u16,
    path: String,
    delay: Duration,
    period: Duration,
    timeout: Duration,
    failures: u32,
}

impl HttpProbe {
    fn of(probe: Option<&Probe>, container: &Container) -> Option<Self> {
        let probe = probe?;
        let get = probe.http_get.as_ref()?;
        let port = match &get.port {
            IntOrString::Int(p) => *p as u16,
            IntOrString::String(name) => container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name))
                .map(|p| p.container_port as u16)?,
        };
        let secs =
            |v: Option<i32>, default: i32| Duration::from_secs(v.unwrap_or(default).max(0) as u64);
        Some(HttpProbe {
            port,
            path: get.path.clone().unwrap_or_else(|| "/".into()),
            delay: secs(probe.initial_delay_seconds, 0),
            period: secs(probe.period_seconds, 10).max(Duration::from_secs(1)),
            timeout: secs(probe.timeout_seconds, 1).max(Duration::from_secs(1)),
            failures: probe.failure_threshold.unwrap_or(3).max(1) as u32,
        })
    }
}

impl ImageRun {
    fn new(
        ctx: &Ctx,
        spec: &PodSpec,
        c: &Container,
        image: &NodeImage,
        own_env: BTreeMap<String, String>,
        hostname: &str,
    ) -> ImageRun {
        let mut env: BTreeMap<String, String> = image
            .env
            .iter()
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        env.insert("HOSTNAME".into(), hostname.into());
        env.insert("KUBERNETES_SERVICE_HOST".into(), LOOPBACK.into());
        env.insert("KUBERNETES_SERVICE_PORT".into(), ctx.api_port.to_string());
        env.extend(own_env);
        let command = c.command.clone().filter(|c| !c.is_empty());
        let args = c.args.clone();
        let argv: Vec<String> = match (command, args) {
            (Some(command), args) => command
                .into_iter()
                .chain(args.into_iter().flatten())
                .collect(),
            (None, Some(args)) => image.entrypoint.iter().cloned().chain(args).collect(),
            (None, None) => image.entrypoint.iter().chain(&image.cmd).cloned().collect(),
        };
        let argv = argv.iter().map(|a| expand(a, &env)).collect();
        let (uid, gid) = ids(spec, c, image);
        ImageRun {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            argv,
            env,
            uid,
            gid,
            working_dir: c
                .working_dir
                .clone()
                .or_else(|| Some(image.working_dir.clone()).filter(|w| !w.is_empty()))
                .unwrap_or_else(|| "/".into()),
            readiness: HttpProbe::of(c.readiness_probe.as_ref(), c),
            liveness: HttpProbe::of(c.liveness_probe.as_ref(), c),
        }
    }

    /// The container's argv with only its environment, in the pod's
    /// network and root and as its user — entered in the child before the
    /// exec, not by `nsenter`: a change of user clears the parent-death
    /// signal, so it is set after the change, and the container dies with
    /// the node (or the test process) whatever ends it.
    fn command(&self, sandbox: &Sandbox) -> io::Result<Command> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(sandbox.dir.join("log"))?;
        let (program, args) = self
            .argv
            .split_first()
            .ok_or_else(|| io::Error::other("no command"))?;
        let net = File::open(&sandbox.net)?;
        let root = std::ffi::CString::new(sandbox.root.as_os_str().as_encoded_bytes())?;
        let wd = std::ffi::CString::new(self.working_dir.as_bytes())?;
        let (uid, gid) = (self.uid, self.gid);
        let parent = std::process::id() as libc::pid_t;
        // An absolute path, found in the new root after the chroot.
        let mut command = Command::new(program);
        command
            .args(args)
            .env_clear()
            .envs(&self.env)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        // SAFETY: only async-signal-safe calls (system calls) between fork
        // and exec; the strings and the namespace's file were made before.
        unsafe {
            command.pre_exec(move || {
                let fail = || Err(io::Error::last_os_error());
                if libc::setns(net.as_raw_fd(), libc::CLONE_NEWNET) != 0
                    || libc::chroot(root.as_ptr()) != 0
                    || libc::chdir(wd.as_ptr()) != 0
                    || libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                    || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
                {
                    return fail();
                }
                // The node went before the line above: nobody would kill it.
                if libc::getppid() != parent {
                    libc::_exit(1);
                }
                Ok(())
            });
        }
        Ok(command)
    }
}

async fn report_one(pod: &PodApi, start: &str, phase: &str, status: ContainerStatus) -> bool {
    pod.report(&pod_status(phase, start, std::slice::from_ref(&status)))
        .await
}

/// The kubelet's restart back-off: 10 s, doubling to 5 min.
fn backoff(restarts: u32) -> Duration {
    Duration::from_secs(10u64.saturating_mul(1 << restarts.min(5)).min(300))
}

/// Starts the container, probes it, restarts it as its pod's
/// `restartPolicy` says, and passes the pod's deletion on.
async fn supervise(
    ctx: &Ctx,
    pod: &PodApi,
    rx: &mut Updates,
    start: &str,
    sandbox: &Sandbox,
    c: &ImageRun,
    spec: &PodSpec,
) -> bool {
    let policy = spec
        .restart_policy
        .clone()
        .unwrap_or_else(|| "Always".into());
    let mut restarts = 0u32;
    loop {
        let child = match c.command(sandbox) {
            Ok(command) => spawn(ctx, command).await,
            Err(e) => Err(e),
        };
        let mut child = match child {
            Ok(child) => child,
            Err(e) => {
                tracing::info!(pod = %pod.key(), container = %c.name, error = %e, "cannot start");
                let state = State::Terminated {
                    code: 128,
                    reason: "StartError".into(),
                    message: format!("cannot start {:?}: {e}", c.argv.first()),
                    started: None,
                    finished: now(),
                };
                return report_one(pod, start, "Failed", status(c, None, state, restarts)).await;
            }
        };
        let pid = child.id();
        tracing::info!(pod = %pod.key(), container = %c.name, pid, restarts, "started from its image");
        let started = now();
        let running = |ready: bool| {
            status(
                c,
                pid,
                State::Running {
                    started: started.clone(),
                },
                restarts,
            )
            .with_ready(c.readiness.as_ref().map(|_| ready))
        };
        if !report_one(pod, start, "Running", running(false)).await {
            kill(ctx, pid, libc::SIGKILL);
            return false;
        }
        let began = Instant::now();
        let first = |p: &Option<HttpProbe>| p.as_ref().map(|p| began + p.delay);
        let (mut next_ready, mut next_live) = (first(&c.readiness), first(&c.liveness));
        let (mut ready, mut unready_in_row, mut dead_in_row) = (false, 0u32, 0u32);
        let mut deleted_at: Option<(Instant, Duration)> = None;
        let mut live_failed = false;
        let exit = loop {
            let kill_at = deleted_at.map(|(at, grace)| at + grace);
            tokio::select! {
                exit = child.wait() => break exit,
                _ = sleep_until(next_ready), if next_ready.is_some() && deleted_at.is_none() => {
                    let p = c.readiness.as_ref().expect("invariant: a readiness time has a probe");
                    next_ready = Some(Instant::now() + p.period);
                    let ok = sandbox.prober.get(p.port, &p.path, p.timeout).await;
                    unready_in_row = if ok { 0 } else { unready_in_row + 1 };
                    let now_ready = ok || (ready && unready_in_row < p.failures);
                    if now_ready != ready {
                        ready = now_ready;
                        tracing::info!(pod = %pod.key(), ready, "readiness changed");
                        if !report_one(pod, start, "Running", running(ready)).await {
                            kill(ctx, pid, libc::SIGKILL);
                            return false;
                        }
                    }
                }
                _ = sleep_until(next_live), if next_live.is_some() && deleted_at.is_none() && !live_failed => {
                    let p = c.liveness.as_ref().expect("invariant: a liveness time has a probe");
                    next_live = Some(Instant::now() + p.period);
                    let ok = sandbox.prober.get(p.port, &p.path, p.timeout).await;
                    dead_in_row = if ok { 0 } else { dead_in_row + 1 };
                    if dead_in_row >= p.failures {
                        tracing::info!(pod = %pod.key(), container = %c.name, "liveness probe failed: restarting");
                        live_failed = true;
                        kill(ctx, pid, libc::SIGTERM);
                        let grace = spec.termination_grace_period_seconds.unwrap_or(DEFAULT_GRACE_SECONDS);
                        deleted_at = Some((Instant::now(), Duration::from_secs(grace.max(0) as u64)));
                    }
                }
                changed = rx.changed() => {
                    let current = if changed.is_ok() { latest(rx) } else { None };
                    match current {
                        None => {
                            tracing::info!(pod = %pod.key(), "gone from the API: killing its processes");
                            kill(ctx, pid, libc::SIGKILL);
                            let _ = child.wait().await;
                            end(ctx, pid);
                            return false;
                        }
                        Some(p) if deleting(&p) && (deleted_at.is_none() || live_failed) => {
                            tracing::info!(pod = %pod.key(), grace = ?grace(&p), "deleted: SIGTERM");
                            kill(ctx, pid, libc::SIGTERM);
                            live_failed = false;
                            deleted_at = Some((Instant::now(), grace(&p)));
                        }
                        Some(_) => {}
                    }
                }
                _ = sleep_until(kill_at), if kill_at.is_some() => {
                    tracing::info!(pod = %pod.key(), "grace period over: SIGKILL");
                    kill(ctx, pid, libc::SIGKILL);
                    deleted_at = None;
                }
            }
        };
        end(ctx, pid);
        let code = exit_code(&exit);
        tracing::info!(pod = %pod.key(), container = %c.name, code, "exited");
        let terminated = State::Terminated {
            code,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: String::new(),
            started: Some(started.clone()),
            finished: now(),
        };
        let deleted = latest(rx).is_none_or(|p| deleting(&p));
        let again =
            !deleted && (live_failed || policy == "Always" || (policy == "OnFailure" && code != 0));
        if !again {
            let phase = if code == 0 { "Succeeded" } else { "Failed" };
            return report_one(pod, start, phase, status(c, None, terminated, restarts)).await;
        }
        let wait = if live_failed {
            Duration::ZERO
        } else {
            backoff(restarts)
        };
        restarts += 1;
        let waiting = State::Waiting {
            reason: "CrashLoopBackOff".into(),
            message: format!("back-off {wait:?} restarting failed container {}", c.name),
        };
        if !wait.is_zero()
            && !report_one(pod, start, "Running", status(c, None, waiting, restarts)).await
        {
            return false;
        }
        let until = Instant::now() + wait;
        loop {
            tokio::select! {
                _ = tokio::time::sleep_until(until) => break,
                changed = rx.changed() => {
                    match if changed.is_ok() { latest(rx) } else { None } {
                        None => return false,
                        Some(p) if deleting(&p) => return true,
                        Some(_) => {}
                    }
                }
            }
        }
    }
}

fn status(c: &ImageRun, pid: Option<u32>, state: State, restarts: u32) -> ContainerStatus {
    ContainerStatus::new(c.name.clone(), c.image.clone(), pid, state, None, restarts)
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn kill(ctx: &Ctx, pid: Option<u32>, signal: i32) {
    if let Some(pid) = pid {
        ctx.groups.signal(pid as i32, signal);
    }
}

fn end(ctx: &Ctx, pid: Option<u32>) {
    if let Some(pid) = pid {
        ctx.groups.ended(pid as i32);
    }
}
