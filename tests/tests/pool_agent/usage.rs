//! Usage: bad arguments and URLs are one-line errors without the password;
//! the shipped agent is static and runs.

use super::*;

/// (arguments, ORCA_DATABASE_URL, further environment)
type Case<'a> = (&'a [&'a str], Option<&'a str>, &'a [(&'a str, &'a str)]);

#[tokio::test]
async fn bad_arguments_and_urls_are_one_line_usage_errors_without_the_password() {
    let url = with_password(&pg::Cluster::shared().migrated_db().await);
    let bad_urls = [
        format!("postgres://postgres:{SECRET}@127.0.0.1:notaport/db"),
        format!("postgres://postgres:{SECRET}@127.0.0.1/db?sslmode=sometimes"),
        "host=".to_string(),
    ];
    let wait: &[&str] = &["pool-wait", "i-1", "2", "3"];
    let fresh: &[&str] = &["pool-next", "i-1", "0", "0", "60"];
    let mut cases: Vec<Case> = vec![
        (&[], Some(&url), &[]),
        (&["pool-sleep", "i-1"], Some(&url), &[]),
        (&["pool-wait", "i-1", "2"], Some(&url), &[]),
        (&["pool-next", "i-1", "2", "3"], Some(&url), &[]),
        (&["pool-next", "i-1", "2", "3", "4", "5"], Some(&url), &[]),
        (&["pool-wait", "i 1", "2", "3"], Some(&url), &[]),
        (&["pool-wait", "i-1", "two", "3"], Some(&url), &[]),
        (&["pool-wait", "i-1", "2", "-3"], Some(&url), &[]),
        (&["pool-next", "i-1", "2", "3", "soon"], Some(&url), &[]),
        // A fresh instance without ORCA_POOL.
        (fresh, Some(&url), &[]),
        (
            &["pool-next", "i-1", "2", "3", "60"],
            Some(&url),
            &[("ORCA_POOL_AGENT_GRACE_MS", "a minute")],
        ),
        (wait, None, &[]),
        (wait, Some(""), &[]),
    ];
    for u in &bad_urls {
        cases.push((wait, Some(u), &[]));
        cases.push((fresh, Some(u), &[("ORCA_POOL", "ns/p")]));
    }
    for (args, url, env) in cases {
        let mut cmd = std::process::Command::new(bins::path("orca-pool-agent"));
        cmd.args(args)
            .env_remove("ORCA_DATABASE_URL")
            .env_remove("ORCA_POOL")
            .env_remove("ORCA_POOL_AGENT_GRACE_MS")
            .envs(env.iter().copied());
        if let Some(u) = url {
            cmd.env("ORCA_DATABASE_URL", u);
        }
        let out = cmd.output().unwrap();
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stdout, "", "{args:?}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(!stderr.contains(SECRET), "{args:?}: {stderr}");
    }
}

#[test]
fn the_shipped_agent_is_static_and_runs() {
    let path = std::env::var("ORCA_STATIC_AGENT").unwrap_or_else(|_| {
        panic!("ORCA_STATIC_AGENT is not set: export scripts/build-static's directory/orca-pool-agent (scripts/test does)")
    });
    let file = std::process::Command::new("file")
        .arg("-b")
        .arg(&path)
        .output()
        .unwrap_or_else(|e| panic!("`file` is needed to check the static agent: {e}"));
    let kind = String::from_utf8_lossy(&file.stdout);
    assert!(
        kind.contains("statically linked") || kind.contains("static-pie linked"),
        "{path}: {kind}"
    );
    let usage = std::process::Command::new(&path).output().unwrap();
    assert_eq!(usage.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&usage.stderr).lines().count(), 1);
    let help = std::process::Command::new(&path)
        .arg("--help")
        .output()
        .unwrap();
    assert_eq!(help.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&help.stdout).contains("ORCA_POOL_AGENT_GRACE_MS"));
}
