//! Containers: the pod's spec resolved into launches (or why they cannot
//! start yet), their commands and their termination messages.

use super::*;

/// A container ready to start.
pub(super) struct Launch {
    name: String,
    image: String,
    /// `command` then `args`, expanded.
    argv: Vec<String>,
    env: BTreeMap<String, String>,
    hostname: String,
    /// Where its termination message goes (`ORCA_TERMINATION_LOG`).
    termination_log: PathBuf,
    fallback_to_logs: bool,
}

impl Launch {
    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The container's image.
    pub fn image(&self) -> &str {
        &self.image
    }

    /// `command` then `args`, expanded.
    pub fn argv(&self) -> &Vec<String> {
        &self.argv
    }
}

impl Launch {
    pub(super) fn command(&self, dir: &Path) -> io::Result<Command> {
        let (program, args) = self
            .argv
            .split_first()
            .ok_or_else(|| io::Error::other("no command"))?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("log"))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(dir)
            .env_clear()
            .envs(std::env::vars_os().filter(|(k, _)| !k.to_string_lossy().starts_with("ORCA_")))
            .env("HOSTNAME", &self.hostname)
            .env("PATH", image_path())
            .envs(&self.env)
            .env("ORCA_TERMINATION_LOG", &self.termination_log)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        dies_with_the_node(&mut command);
        Ok(command)
    }

    /// The termination message of a container that exited with `code`: its
    /// termination log, else (with `FallbackToLogsOnError` and a failure)
    /// the tail of the pod's log.
    pub(super) fn message(&self, dir: &Path, code: i32) -> String {
        let written = std::fs::read(&self.termination_log)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        if !written.is_empty() {
            return head(&written, MESSAGE_BYTES).to_string();
        }
        if self.fallback_to_logs && code != 0 {
            let log = std::fs::read(dir.join("log"))
                .map(|b| String::from_utf8_lossy(&b).into_owned())
                .unwrap_or_default();
            return tail(&log, MESSAGE_LINES, MESSAGE_BYTES).to_string();
        }
        String::new()
    }
}

/// The `PATH` of every container: the workspace's binaries first, as an
/// image would have its programs, then the test's own.
fn image_path() -> std::ffi::OsString {
    let inherited = std::env::var_os("PATH").unwrap_or_default();
    let dirs = std::iter::once(crate::bins::dir()).chain(std::env::split_paths(&inherited));
    std::env::join_paths(dirs).unwrap_or(inherited)
}

fn head(text: &str, bytes: usize) -> &str {
    let mut end = bytes.min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The last `lines` lines of `text`, and at most its last `bytes` bytes.
fn tail(text: &str, lines: usize, bytes: usize) -> &str {
    let text = text.trim_end_matches('\n');
    let start = text
        .rmatch_indices('\n')
        .nth(lines.saturating_sub(1))
        .map_or(0, |(i, _)| i + 1);
    let mut start = start.max(text.len().saturating_sub(bytes));
    while !text.is_char_boundary(start) {
        start += 1;
    }
    &text[start..]
}

/// Why a pod's containers cannot start yet; `retry` if that may change
/// without the pod changing (a Secret or ConfigMap may appear).
pub(super) struct Waiting {
    containers: Vec<ContainerStatus>,
    retry: bool,
}

impl Waiting {
    /// The containers' statuses, and whether to retry.
    pub(super) fn into_parts(self) -> (Vec<ContainerStatus>, bool) {
        (self.containers, self.retry)
    }
}

/// Resolves every container of the pod, or says why some cannot start.
pub(super) async fn prepare(
    ctx: &Ctx,
    pod: &PodApi,
    current: &Pod,
) -> Result<Vec<Launch>, Waiting> {
    let spec = current.spec.clone().unwrap_or_default();
    let hostname = spec
        .hostname
        .clone()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| pod.name().to_string());
    let dir = pod.dir(ctx);
    let has_init = spec.init_containers.as_ref().is_some_and(|c| !c.is_empty());
    let mut launches = Vec::new();
    let mut waiting: Vec<Option<(&str, String)>> = Vec::new();
    let mut retry = false;
    for (i, c) in spec.containers.iter().enumerate() {
        let image = c.image.clone().unwrap_or_default();
        let command = c.command.clone().unwrap_or_default();
        let blocked = if has_init {
            Some((
                "CreateContainerError",
                "the test node does not run init containers".to_string(),
            ))
        } else if ctx.unpullable(&image) {
            Some((
                "ErrImagePull",
                format!("failed to pull image {image:?}: the test node treats it as unpullable"),
            ))
        } else if command.is_empty() {
            Some((
                "CreateContainerError",
                "the test node runs only containers with a command".to_string(),
            ))
        } else {
            match container_env(ctx, current, c).await {
                Ok(env) => {
                    let argv = command
                        .iter()
                        .chain(c.args.iter().flatten())
                        .map(|a| expand(a, &env))
                        .collect();
                    let termination_log = match i {
                        0 => dir.join("termination-log"),
                        _ => dir.join(format!("termination-log.{}", c.name)),
                    };
                    launches.push(Launch {
                        name: c.name.clone(),
                        image,
                        argv,
                        env,
                        hostname: hostname.clone(),
                        termination_log,
                        fallback_to_logs: c.termination_message_policy.as_deref()
                            == Some("FallbackToLogsOnError"),
                    });
                    None
                }
                Err(message) => {
                    retry = true;
                    Some(("CreateContainerConfigError", message))
                }
            }
        };
        waiting.push(blocked);
    }
    if waiting.iter().all(Option::is_none) {
        return Ok(launches);
    }
    let containers = spec
        .containers
        .iter()
        .zip(waiting)
        .map(|(c, blocked)| {
            let (reason, message) = blocked.unwrap_or(("ContainerCreating", String::new()));
            ContainerStatus::of(
                c,
                State::Waiting {
                    reason: reason.into(),
                    message,
                },
            )
        })
        .collect();
    Err(Waiting { containers, retry })
}
