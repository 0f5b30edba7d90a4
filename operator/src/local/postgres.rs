//! A throwaway PostgreSQL cluster: initdb into a temporary directory, a
//! free port on 127.0.0.1, its own socket directory; as root the server runs
//! as the `postgres` user, and it dies with this process. The local mode
//! runs on one when no Secret names a database; the tests share one per test
//! binary ([`Cluster::shared`]) and hand each test a fresh database.

use std::{
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        atomic::{AtomicU32, Ordering},
        Mutex, OnceLock,
    },
    time::{Duration, Instant},
};

use orca_db::{migrate, ConnectOptions, DatabaseUrl};

use super::spawn::{drop_to, free_port, remove_stale_dirs, spawn_tied};

/// The role whose members log in with a password over TCP; every other
/// connection to a throwaway cluster is trusted. Created by whoever needs
/// it (`create role orca_password_auth nologin`).
pub const PASSWORD_ROLE: &str = "orca_password_auth";

/// A PostgreSQL server of the test's own.
pub struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    user: Option<(u32, u32)>,
    server: Mutex<Option<Child>>,
    /// The server's `max_connections`.
    max_connections: u32,
}

/// The `max_connections` of the clusters the tests share, and of the local
/// mode's.
pub const MAX_CONNECTIONS: u32 = 700;

static SHARED: OnceLock<Cluster> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(1);

/// The directory holding `initdb` and `postgres`: `$ORCA_PG_BIN`, or the
/// newest `/usr/lib/postgresql/*/bin`, or `PATH`.
fn bin_dir() -> PathBuf {
    if let Ok(dir) = std::env::var("ORCA_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
        .filter(|p| p.join("initdb").exists())
        .collect();
    found.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or(0)
    });
    if let Some(dir) = found.pop() {
        return dir;
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .find(|d| d.join("initdb").exists() && d.join("postgres").exists())
        .unwrap_or_else(|| {
            panic!(
                "PostgreSQL is missing: no initdb in $ORCA_PG_BIN, /usr/lib/postgresql/*/bin or PATH \
                 (scripts/test installs Debian's postgresql package)"
            )
        })
}

impl Cluster {
    /// The cluster this process shares; started on first use.
    pub fn shared() -> &'static Cluster {
        SHARED.get_or_init(|| Cluster::start_new(MAX_CONNECTIONS))
    }

    /// A cluster of the caller's own (the local mode's; tests that stop the
    /// server); stopped and removed when dropped.
    pub fn private() -> Cluster {
        Cluster::start_new(MAX_CONNECTIONS)
    }

    /// A cluster of the caller's own that takes `max_connections` (the
    /// benchmarks' thousands of agents, each a backend).
    pub fn private_for(max_connections: u32) -> Cluster {
        Cluster::start_new(max_connections)
    }

    fn start_new(max_connections: u32) -> Cluster {
        let bin = bin_dir();
        remove_stale_dirs("orca-pg-");
        let n = NEXT_DB.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("orca-pg-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("sock"))
            .unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
        let user = drop_to("postgres");
        if let Some((uid, gid)) = user {
            for p in [dir.clone(), dir.join("sock")] {
                std::os::unix::fs::chown(&p, Some(uid), Some(gid))
                    .unwrap_or_else(|e| panic!("chown {} to postgres: {e}", p.display()));
            }
        } else if unsafe { libc::geteuid() } == 0 {
            panic!("running as root, PostgreSQL needs the `postgres` user to run as, and there is none");
        }
        let mut initdb = Command::new(bin.join("initdb"));
        initdb
            .args([
                "--auth=trust",
                "--username=postgres",
                "--no-sync",
                "--encoding=UTF8",
                "--locale=C",
                "-D",
            ])
            .arg(dir.join("data"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        let out = spawn_tied(initdb, user)
            .and_then(|c| c.wait_with_output())
            .unwrap_or_else(|e| {
                panic!("PostgreSQL's initdb ({}) could not run: {e}", bin.display())
            });
        if !out.status.success() {
            panic!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        // Every local connection is trusted, but for the members of
        // PASSWORD_ROLE over TCP: they log in with their password, so a
        // rotated one is refused (what the agent's re-read of its URL meets).
        let hba = dir.join("data/pg_hba.conf");
        let trusted = std::fs::read_to_string(&hba)
            .unwrap_or_else(|e| panic!("reading {}: {e}", hba.display()));
        std::fs::write(
            &hba,
            format!("host all +{PASSWORD_ROLE} 127.0.0.1/32 scram-sha-256\n{trusted}"),
        )
        .unwrap_or_else(|e| panic!("writing {}: {e}", hba.display()));
        let cluster = Cluster {
            bin,
            dir,
            port: free_port(),
            user,
            server: Mutex::new(None),
            max_connections,
        };
        cluster.start();
        cluster
    }

    /// Starts the server (again), on the same port, and waits until it
    /// accepts connections.
    pub fn start(&self) {
        let mut server = self.server.lock().unwrap();
        assert!(server.is_none(), "the test cluster is already running");
        let log =
            std::fs::File::create(self.dir.join("server.log")).expect("creating the server log");
        if let Some((uid, gid)) = self.user {
            let _ = std::os::unix::fs::chown(self.dir.join("server.log"), Some(uid), Some(gid));
        }
        let mut cmd = Command::new(self.bin.join("postgres"));
        cmd.arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string(), "-k"])
            .arg(self.dir.join("sock"))
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                "fsync=off",
                "-c",
                "synchronous_commit=off",
                "-c",
                "full_page_writes=off",
                "-c",
                &format!("max_connections={}", self.max_connections),
                "-c",
                "shared_buffers=64MB",
                "-c",
                "log_min_messages=warning",
                // Which database and client each line is of: the
                // operator's connections name their replica.
                "-c",
                "log_line_prefix=%m [%p] %d %a ",
                "-c",
                "log_timezone=UTC",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            // A group of its own: a terminal's Ctrl-C is for the program
            // that started it — the local mode, which drains its schedulers
            // while they can still reach the database, then stops it.
            .process_group(0);
        let child = spawn_tied(cmd, self.user).unwrap_or_else(|e| {
            panic!(
                "PostgreSQL's server ({}) could not start: {e}",
                self.bin.display()
            )
        });
        *server = Some(child);
        drop(server);
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = Command::new(self.bin.join("pg_isready"))
                .args(["-q", "-h", "127.0.0.1", "-p", &self.port.to_string()])
                .status()
                .map(|s| s.success())
                .unwrap_or(false);
            if ok {
                return;
            }
            let exited = self
                .server
                .lock()
                .unwrap()
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            if exited.is_some() || Instant::now() > deadline {
                let log = std::fs::read_to_string(self.dir.join("server.log")).unwrap_or_default();
                panic!("the test PostgreSQL server did not start: {}", log.trim());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server at once (SIGQUIT, no shutdown checkpoint), as a
    /// crash or a failover would look to clients.
    pub fn stop(&self) {
        if let Some(mut child) = self.server.lock().unwrap().take() {
            unsafe { libc::kill(child.id() as i32, libc::SIGQUIT) };
            let _ = child.wait();
            // The postmaster's children may still hold the port briefly.
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The port the server listens on, on 127.0.0.1.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// PostgreSQL's program `name` (`psql`, `pg_dump`), of the same version
    /// as the server.
    pub fn program(&self, name: &str) -> PathBuf {
        self.bin.join(name)
    }

    /// A URL for database `db`.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/{db}?sslmode=disable",
            self.port
        )
    }

    /// A new, empty database; its URL.
    pub async fn fresh_db(&self) -> String {
        let name = format!(
            "t{}_{}",
            std::process::id(),
            NEXT_DB.fetch_add(1, Ordering::Relaxed)
        );
        let admin = orca_db::connect(
            &DatabaseUrl::parse(&self.url("postgres")).unwrap(),
            &ConnectOptions::named("orca-operator local"),
        )
        .await
        .unwrap_or_else(|e| panic!("the test cluster does not answer: {e}"));
        admin
            .batch(&format!("create database {name}"))
            .await
            .unwrap_or_else(|e| panic!("creating database {name}: {e}"));
        self.url(&name)
    }

    /// A new database with the orca schema; its URL.
    pub async fn migrated_db(&self) -> String {
        let url = self.fresh_db().await;
        let mut db = orca_db::connect(
            &DatabaseUrl::parse(&url).unwrap(),
            &ConnectOptions::named("orca-operator local"),
        )
        .await
        .unwrap();
        migrate::migrate(&mut db, &migrate::Migrations::embedded())
            .await
            .unwrap_or_else(|e| panic!("migrating a fresh test database: {e}"));
        url
    }

    /// The server's log (`stderr`).
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("server.log")
    }

    /// The cluster's temporary directory: its `data`, its socket directory
    /// `sock` and its log; removed when the cluster is dropped.
    pub fn data_dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
