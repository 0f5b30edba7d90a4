//! The user-data script the instances boot with.

use super::*;

#[test]
fn user_data_passes_sh_n_and_holds_no_password_unless_asked() {
    let secret = "postgres://orca:s3cr3t-pw@db.internal:5432/orca";
    let parameter = "/orca/c1/ns/sched/database-url";
    let mut spec = warm::spec(
        "http://unused",
        &["t3.micro"],
        &["subnet-1".into()],
        0,
        0,
        1,
    );
    let render = |spec: &orca_operator::crd::WarmPoolSpec| {
        userdata::render(
            spec,
            "ns/pool",
            DatabaseSource::for_spec(spec, secret, parameter),
        )
    };
    let by_default = render(&spec).as_str().to_string();
    assert!(!by_default.contains("s3cr3t-pw"), "{by_default}");
    assert!(by_default.contains(&format!("ORCA_DATABASE_URL_PARAMETER='{parameter}'")));
    spec.launch.database_url_in = orca_operator::crd::DatabaseUrlIn::UserData;
    let asked = render(&spec);
    assert!(
        !format!("{asked:?}").contains("s3cr3t"),
        "the user-data's Debug shows its text"
    );
    let asked = asked.as_str().to_string();
    assert!(
        asked.contains(secret),
        "databaseUrlIn: userData puts the URL in user-data"
    );
    spec.launch.database_url_file = Some("/etc/orca/database-url".into());
    let with_file = render(&spec).as_str().to_string();
    assert!(!with_file.contains("s3cr3t-pw"), "{with_file}");
    assert!(with_file.contains("/etc/orca/database-url"));
    for script in [&by_default, &asked, &with_file] {
        let out = std::process::Command::new("sh")
            .args(["-n", "-c", script])
            .output()
            .expect("sh is needed to check the user-data");
        assert!(
            out.status.success(),
            "sh -n: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The script itself, run with stand-ins for IMDS (curl), the agent and
/// the power-off: it serves one run with the run's environment, calls
/// `pool-next` for that run, and powers off when it exits 1; it installs
/// itself to run again on the next boot.
#[test]
fn user_data_serves_a_run_then_powers_off() {
    serves_a_run_then_powers_off(false);
}

/// As above, with the URL read from its parameter by `database-url` at
/// the start and again before the run.
#[test]
fn user_data_reads_the_parameter_and_serves_a_run() {
    serves_a_run_then_powers_off(true);
}

fn serves_a_run_then_powers_off(parameter: bool) {
    let dir =
        std::env::temp_dir().join(format!("orca-userdata-{}-{parameter}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let d = dir.display();
    let stub = |name: &str, body: &str| {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::process::Command::new("chmod")
            .arg("+x")
            .arg(&p)
            .status()
            .unwrap();
    };
    stub(
        "curl",
        r#"case "$*" in *api/token*) echo tok ;; *) echo i-0stub ;; esac"#,
    );
    stub(
        "agent",
        &format!(
            r#"if [ "$1" = database-url ]; then echo "$ORCA_DATABASE_URL_PARAMETER $ORCA_DATABASE_URL_REGION" >> {d}/url.calls; echo postgres://u:p@h/db; exit 0; fi
if [ "$1" = pool-watch ]; then echo "$*" >> {d}/watch.calls; echo $$ > {d}/watch.pid; exec sleep 30; fi
echo "$*" >> {d}/agent.calls
if [ ! -e {d}/served ]; then touch {d}/served; echo "next 42 1 10.0.0.1:7077 1"; exit 0; fi
exit 1"#
        ),
    );
    stub("shutdown", &format!("touch {d}/halted"));
    std::fs::write(dir.join("url"), "postgres://u:p@h/db\n").unwrap();
    let mut spec = warm::spec(
        "http://unused",
        &["t3.micro"],
        &["subnet-1".into()],
        0,
        0,
        1,
    );
    spec.launch.agent_path = dir.join("agent").display().to_string();
    if !parameter {
        spec.launch.database_url_file = Some(dir.join("url").display().to_string());
    }
    // Long enough for pool-watch to start beside it.
    spec.launch.run_command = format!("sleep 0.5; env | grep ^ORCA_ | sort > {d}/env");
    let script = userdata::render(
        &spec,
        "ns/pool",
        DatabaseSource::for_spec(&spec, "unused", "/orca/c1/ns/sched/database-url"),
    );
    let script = script.as_str();
    // cloud-init runs the user-data as a file of its own.
    let first = dir.join("part-001");
    std::fs::write(&first, script).unwrap();
    let per_boot = dir.join("per-boot");
    let boot = |file: &std::path::Path| {
        let out = std::process::Command::new("sh")
            .arg(file)
            .env(
                "PATH",
                format!("{d}:{}", std::env::var("PATH").unwrap_or_default()),
            )
            .env("ORCA_PER_BOOT_DIR", &per_boot)
            .output()
            .unwrap();
        assert!(
            out.status.code() == Some(1),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    boot(&first);
    let env = std::fs::read_to_string(dir.join("env")).unwrap();
    for want in [
        "ORCA_RUN=42",
        "ORCA_START=1",
        "ORCA_HEAD=10.0.0.1:7077",
        "ORCA_NEW_CODE=1",
        "ORCA_INSTANCE=i-0stub",
        "ORCA_POOL=ns/pool",
        "ORCA_DATABASE_URL=postgres://u:p@h/db",
    ] {
        assert!(env.lines().any(|l| l == want), "{want} not in\n{env}");
    }
    let calls = std::fs::read_to_string(dir.join("agent.calls")).unwrap();
    assert_eq!(
        calls.lines().collect::<Vec<_>>(),
        ["pool-next i-0stub 0 0 600", "pool-next i-0stub 42 1 600"]
    );
    let url_reads = std::fs::read_to_string(dir.join("url.calls")).unwrap_or_default();
    if parameter {
        let read = format!("/orca/c1/ns/sched/database-url {}", spec.region);
        assert_eq!(url_reads.lines().collect::<Vec<_>>(), [&read, &read]);
    } else {
        assert_eq!(url_reads, "", "a URL file needs no parameter");
    }
    assert!(dir.join("halted").exists(), "no power-off");
    // pool-watch ran beside the run, and not past it.
    let watched = std::fs::read_to_string(dir.join("watch.calls")).unwrap();
    assert_eq!(watched.lines().collect::<Vec<_>>(), ["pool-watch i-0stub"]);
    let watcher: i32 = std::fs::read_to_string(dir.join("watch.pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: kill(2) with signal 0 only asks whether the process exists.
    let alive = unsafe { libc::kill(watcher, 0) } == 0;
    assert!(!alive, "pool-watch outlived its run");

    // The next boot (a reserve instance started again) runs the copy, and
    // its agent starts from the warm row again.
    let again = per_boot.join("orca-pool");
    assert_eq!(
        std::fs::read_to_string(&again).expect("the script installed itself for later boots"),
        script
    );
    boot(&again);
    let calls = std::fs::read_to_string(dir.join("agent.calls")).unwrap();
    assert_eq!(calls.lines().last(), Some("pool-next i-0stub 0 0 600"));
    let _ = std::fs::remove_dir_all(&dir);
}
