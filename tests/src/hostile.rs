//! What a hostile tenant writes, for the tests and the bench that hold the
//! operator against it: a CA "file" that never ends or never answers, a
//! database whose rows are huge or slow to read, notifications flooding in
//! — and the Schedulers that point the operator at them.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::Secret;
use kube::{
    api::{ObjectMeta, PostParams},
    Api, Client,
};
use orca_operator::crd::Scheduler;

use crate::pg;

/// The chart's memory limit of the operator's container.
pub const CHART_MEMORY_LIMIT: u64 = 256 * 1024 * 1024;

/// A Scheduler `name` on Secret `secret`'s URL, whose pods only sleep (they
/// never join: the operator reads its database and waits).
pub fn sleeper(name: &str, secret: &str) -> Scheduler {
    let yaml = format!(
        "apiVersion: orca.dev/v1alpha1\nkind: Scheduler\nmetadata: {{name: {name}}}\n\
         spec:\n  image: v1\n  command: [\"sleep\", \"3600\"]\n\
         \x20 database:\n    urlSecretRef: {{name: {secret}, key: url}}\n\
         \x20 handover: {{joinTimeoutSeconds: 600}}\n"
    );
    serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("a Scheduler: {e}\n{yaml}"))
}

/// A paused Scheduler `name` on Secret `secret`'s URL: a pool's, with no
/// pods.
pub fn paused(name: &str, secret: &str) -> Scheduler {
    let yaml = format!(
        "apiVersion: orca.dev/v1alpha1\nkind: Scheduler\nmetadata: {{name: {name}}}\n\
         spec:\n  image: v1\n  paused: true\n\
         \x20 database:\n    urlSecretRef: {{name: {secret}, key: url}}\n"
    );
    serde_yaml::from_str(&yaml).unwrap_or_else(|e| panic!("a Scheduler: {e}\n{yaml}"))
}

/// Creates Secret `ns/name` holding `url` under `url`.
pub async fn secret(client: &Client, ns: &str, name: &str, url: &str) {
    let s = Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        string_data: Some([("url".to_string(), url.to_string())].into()),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &s)
        .await
        .unwrap_or_else(|e| panic!("Secret {ns}/{name}: {e}"));
}

/// `url` with `sslmode=verify-full&sslrootcert=<path>`.
pub fn with_ca(url: &str, path: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}sslmode=verify-full&sslrootcert={path}")
}

/// A FIFO `name` in `dir`, which nobody ever writes.
pub fn fifo(dir: &Path, name: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let path = dir.join(name);
    let _ = std::fs::remove_file(&path);
    let c = std::ffi::CString::new(path.to_str().expect("a UTF-8 path"))
        .expect("invariant: a path holds no NUL");
    // SAFETY: a valid C string naming a path in the caller's directory.
    let made = unsafe { libc::mkfifo(c.as_ptr(), 0o600) };
    assert_eq!(made, 0, "mkfifo {}", path.display());
    path
}

/// A fresh database whose `orca.schedulers` holds 1500 live rows, three of
/// them naming a 100 MB image.
pub async fn huge_database() -> String {
    let url = pg::Cluster::shared().migrated_db().await;
    // 300 MB written and compressed takes more than the default statement
    // time-out (10 s) on two busy cores.
    let db = orca_db::connect(
        &orca_db::DatabaseUrl::parse(&url).unwrap(),
        &orca_db::ConnectOptions::named("orca-tests")
            .with_statement_timeout(std::time::Duration::from_secs(300)),
    )
    .await
    .unwrap_or_else(|e| panic!("test connection: {e}"));
    db.execute(
        "insert into orca.schedulers (host, pid, image, migrations, role, running)
         select 'h-' || n, n, case when n <= 3 then repeat('x', 100 * 1024 * 1024) else 'v' end,
                1, 'waiting', ''
         from generate_series(1, 1500) n",
        &[],
    )
    .await
    .unwrap_or_else(|e| panic!("the huge rows: {e}"));
    url
}

/// A fresh database each of whose three `orca.schedulers` rows takes 3 s
/// to read: a statement 9 s long, within the statement time-out.
pub async fn slow_database() -> String {
    let url = pg::Cluster::shared().migrated_db().await;
    let db = pg::connect(&url).await;
    for sql in [
        "insert into orca.schedulers (host, pid, image, migrations, role, running)
         select 'h-' || n, n, 'v', 1, 'waiting', '' from generate_series(1, 3) n",
        "alter table orca.schedulers rename to schedulers_rows",
        "create view orca.schedulers as
         select * from orca.schedulers_rows where pg_sleep(3) is not null",
    ] {
        db.execute(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("the slow rows: {e}"));
    }
    url
}

/// Floods `url`'s database with `orca_pool` notifications naming `pool`
/// (another namespace's), `per_second` of them, until dropped.
pub async fn notify_flood(url: &str, pool: &str, per_second: u32) -> tokio::task::JoinHandle<()> {
    let db = pg::connect(url).await;
    let pool = pool.to_string();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(std::time::Duration::from_secs(1) / per_second.max(1));
        loop {
            tick.tick().await;
            let _ = db
                .execute("select pg_notify('orca_pool', $1)", &[&pool])
                .await;
        }
    })
}
