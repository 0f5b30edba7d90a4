//! Processes: the process groups of the running containers, and the thread
//! that spawns them.

use super::*;

/// The process groups of the running containers, each led by the container's
/// process. Once closed (the Node dropped), every group is killed, and so is
/// any group that starts after.
#[derive(Default)]
pub(super) struct Groups(Mutex<GroupSet>);

#[derive(Default)]
struct GroupSet {
    closed: bool,
    live: HashSet<i32>,
}

fn killpg(pgid: i32, signal: i32) {
    // SAFETY: killpg has no memory-safety preconditions.
    unsafe { libc::killpg(pgid, signal) };
}

impl Groups {
    fn lock(&self) -> std::sync::MutexGuard<'_, GroupSet> {
        // The set stays consistent whatever panicked while holding it.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, pgid: i32) {
        let mut set = self.lock();
        if set.closed {
            killpg(pgid, libc::SIGKILL);
        } else {
            set.live.insert(pgid);
        }
    }

    /// Signals a group whose leader has not been reaped (so its id cannot
    /// have been reused).
    pub(super) fn signal(&self, pgid: i32, signal: i32) {
        if self.lock().live.contains(&pgid) {
            killpg(pgid, signal);
        }
    }

    /// The leader was just reaped: what is left of its group dies with it,
    /// as the rest of a container does when its main process exits.
    pub(super) fn ended(&self, pgid: i32) {
        if self.lock().live.remove(&pgid) {
            killpg(pgid, libc::SIGKILL);
        }
    }

    pub(super) fn close(&self) {
        let mut set = self.lock();
        set.closed = true;
        for pgid in set.live.drain() {
            killpg(pgid, libc::SIGKILL);
        }
    }
}

pub(super) type SpawnRequest = (Command, oneshot::Sender<io::Result<Child>>);

/// A thread that spawns the containers' processes and lives as long as the
/// Node: `PR_SET_PDEATHSIG` fires when the *thread* that forked ends, so the
/// processes die when the Node goes (or the test process), and never
/// because a runtime's thread came and went.
pub(super) fn spawner(
    runtime: tokio::runtime::Handle,
    groups: Arc<Groups>,
) -> io::Result<mpsc::Sender<SpawnRequest>> {
    let (tx, rx) = mpsc::channel::<SpawnRequest>();
    std::thread::Builder::new()
        .name("orca-test-node".into())
        .spawn(move || {
            // tokio's child processes need its runtime to be reaped.
            let _runtime = runtime.enter();
            // Ends when the Node and all its tasks are gone.
            for (mut command, reply) in rx {
                let spawned = command.spawn().and_then(|child| match child.id() {
                    Some(pid) => {
                        groups.add(pid as i32);
                        Ok(child)
                    }
                    None => Err(io::Error::other(
                        "invariant: a child just spawned has not been reaped",
                    )),
                });
                if let Err(Ok(child)) = reply.send(spawned) {
                    // Its task was aborted meanwhile (kill_on_drop kills it).
                    if let Some(pid) = child.id() {
                        groups.ended(pid as i32);
                    }
                }
            }
        })?;
    Ok(tx)
}

/// Makes `command`'s process die with the spawner thread (the Node) or the
/// test process, whichever goes first.
pub(super) fn dies_with_the_node(command: &mut Command) {
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent died before the line above: nobody would kill it.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

/// Starts `command` through the spawner thread.
pub(super) async fn spawn(ctx: &Ctx, command: Command) -> io::Result<Child> {
    let (reply, answer) = oneshot::channel();
    ctx.spawner
        .send((command, reply))
        .map_err(|_| io::Error::other("the test node's spawner thread has ended"))?;
    answer
        .await
        .map_err(|_| io::Error::other("the test node's spawner thread has ended"))?
}

pub(super) fn exit_code(status: &io::Result<ExitStatus>) -> i32 {
    match status {
        Ok(s) => s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9)),
        Err(_) => 255,
    }
}
