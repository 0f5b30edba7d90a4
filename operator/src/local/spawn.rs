//! Servers started by the local mode or a test binary must die with it, even
//! when it is killed. `PR_SET_PDEATHSIG` does that, but it fires when the
//! *thread* that forked exits, and tokio's and the test harness's threads
//! come and go; so every server is forked from one thread that lives as
//! long as the process.

use std::{
    process::{Child, Command},
    sync::{mpsc, Mutex, OnceLock},
};

type Request = (
    Command,
    Option<(u32, u32)>,
    mpsc::Sender<std::io::Result<Child>>,
);

static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();

/// Spawns `cmd` (as `user` = (uid, gid) if given) so that it gets SIGQUIT
/// when this process ends.
pub fn spawn_tied(cmd: Command, user: Option<(u32, u32)>) -> std::io::Result<Child> {
    let sender = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("fixture-spawner".into())
            .spawn(move || {
                for (mut cmd, user, reply) in rx {
                    let _ = reply.send(spawn_now(&mut cmd, user));
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
        .send((cmd, user, reply))
        .expect("invariant: the spawner thread never exits");
    answer
        .recv()
        .expect("invariant: the spawner always replies")
}

fn spawn_now(cmd: &mut Command, user: Option<(u32, u32)>) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            if let Some((uid, gid)) = user {
                if libc::setgroups(0, std::ptr::null()) != 0
                    || libc::setgid(gid) != 0
                    || libc::setuid(uid) != 0
                {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // After setuid: a change of credentials clears the setting.
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGQUIT) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    cmd.spawn()
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

/// A port nothing listens on just now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("invariant: the loopback interface can bind a free port")
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
