//! Processes started by the local mode or a test binary must die with it,
//! even when it is killed. `PR_SET_PDEATHSIG` does that, but it fires when
//! the *thread* that forked exits, and tokio's and the test harness's
//! threads come and go; so every such process is forked from one thread
//! that lives as long as the process.

use std::{
    process::{Child, Command},
    sync::{mpsc, Mutex, OnceLock},
};

/// Work for the spawner thread.
type Job = Box<dyn FnOnce() + Send>;

static SPAWNER: OnceLock<Mutex<mpsc::Sender<Job>>> = OnceLock::new();

/// Runs `f` on the spawner thread, which lives as long as this process,
/// and returns its result.
fn on_spawner<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("fixture-spawner".into())
            .spawn(move || {
                for job in rx {
                    job();
                }
                // The channel lives in a static: never closed, so this
                // thread outlives every test.
            })
            .expect("invariant: a thread can be started at fixture set-up");
        Mutex::new(tx)
    });
    let (reply, answer) = mpsc::channel();
    sender
        .lock()
        .expect("invariant: the spawner lock is never poisoned")
        .send(Box::new(move || {
            let _ = reply.send(f());
        }))
        .expect("invariant: the spawner thread never exits");
    answer
        .recv()
        .expect("invariant: the spawner always replies")
}

/// Spawns `cmd` (as `user` = (uid, gid) if given) so that it gets SIGQUIT
/// when this process ends.
pub fn spawn_tied(cmd: Command, user: Option<(u32, u32)>) -> std::io::Result<Child> {
    spawn_tied_with(cmd, user, libc::SIGQUIT)
}

/// As [`spawn_tied`], with `signal` as the signal it gets when this process
/// ends.
pub fn spawn_tied_with(
    mut cmd: Command,
    user: Option<(u32, u32)>,
    signal: libc::c_int,
) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let hook = tie(user, signal);
    // SAFETY: the hook makes only async-signal-safe calls (see `tie`).
    unsafe {
        cmd.pre_exec(hook);
    }
    on_spawner(move || cmd.spawn())
}

/// As [`spawn_tied_with`], for a tokio process (the local hosts' agents and
/// run commands, which are awaited): it gets `signal` when this process
/// ends. Must be called within a tokio runtime.
pub fn spawn_tied_async(
    mut cmd: tokio::process::Command,
    signal: libc::c_int,
) -> std::io::Result<tokio::process::Child> {
    let hook = tie(None, signal);
    // SAFETY: as in `spawn_tied_with`.
    unsafe {
        cmd.pre_exec(hook);
    }
    // The child is registered with this runtime (its exit is reaped there),
    // though forked by the spawner thread.
    let runtime = tokio::runtime::Handle::current();
    on_spawner(move || {
        let _in_runtime = runtime.enter();
        cmd.spawn()
    })
}

/// What runs in the child between fork and exec: drops to `user`, asks for
/// `signal` when the parent (the spawner thread, so: this process) ends,
/// and gives up if the parent has already ended. Only async-signal-safe
/// calls.
fn tie(
    user: Option<(u32, u32)>,
    signal: libc::c_int,
) -> impl FnMut() -> std::io::Result<()> + Send + Sync + 'static {
    let parent = std::process::id() as libc::pid_t;
    move || {
        // SAFETY: setgroups, setgid, setuid, signal, prctl, getppid and
        // _exit are async-signal-safe.
        unsafe {
            if let Some((uid, gid)) = user {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // An ignored signal stays ignored across exec: a process started
            // from a background job of a non-interactive shell ignores
            // SIGQUIT (and SIGINT), and would then never get its death signal.
            if signal != libc::SIGKILL {
                libc::signal(signal, libc::SIG_DFL);
            }
            // After setuid: a change of credentials clears the setting.
            if libc::prctl(libc::PR_SET_PDEATHSIG, signal) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
        }
        Ok(())
    }
}

/// The (uid, gid) of `name`, when this process runs as root and must drop
/// to it (PostgreSQL refuses to run as root).
pub fn drop_to(name: &str) -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let f: Vec<&str> = line.split(':').collect();
        (f.len() > 3 && f[0] == name).then(|| Some((f[2].parse().ok()?, f[3].parse().ok()?)))?
    })
}

/// A loopback port nothing listens on just now, for a server about to
/// start on it; never the same twice in one process.
///
/// Taken below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`),
/// from which every outgoing connection takes its own port: a port of that
/// range (what binding port 0 gives) can be taken by a connection before
/// the server binds it, which then exits "Address already in use" — moto's
/// did, under the tests' thousands of connections.
pub fn free_port() -> u16 {
    static HANDED_OUT: Mutex<Vec<u16>> = Mutex::new(Vec::new());
    let mut handed_out = HANDED_OUT
        .lock()
        .expect("invariant: the ports' lock is never poisoned");
    let (first, end) = (10_000u16, ephemeral_start().unwrap_or(32_768));
    let span = end.saturating_sub(first);
    // A random start (std's hasher keys are), so that processes started
    // together seldom try the same ports.
    let start = {
        use std::hash::{BuildHasher, Hasher};
        std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish()
    };
    let below = (0..u64::from(span))
        .map(|i| first + ((start + i) % u64::from(span)) as u16)
        .find(|port| {
            !handed_out.contains(port) && std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok()
        });
    let port = below.unwrap_or_else(|| {
        std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("invariant: the loopback interface can bind a free port")
    });
    handed_out.push(port);
    port
}

/// The first port of the kernel's ephemeral range.
fn ephemeral_start() -> Option<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// Removes the temporary directories `<prefix><pid>…` of processes that
/// have ended (test binaries killed before they could clean up).
pub fn remove_stale_dirs(prefix: &str) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix(prefix)
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A connection's own port can never be the one a server is about to
    /// take: the ports are below the ephemeral range, free, and new.
    #[test]
    fn free_ports_are_below_the_ephemeral_range_free_and_never_twice() {
        let end = ephemeral_start().expect("this machine's ephemeral range");
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        for port in &ports {
            assert!(*port < end, "{port} is in the ephemeral range from {end}");
            std::net::TcpListener::bind(("127.0.0.1", *port))
                .unwrap_or_else(|e| panic!("{port} is not free: {e}"));
        }
        let mut distinct = ports.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), ports.len(), "{ports:?}");
    }
}
