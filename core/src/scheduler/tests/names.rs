//! The names of pods, Jobs and labels: valid, distinct, and recognised.

use super::fixtures::*;

#[test]
fn pod_names_fit_a_host_name() {
    let long = "a".repeat(80);
    let name = pod_name(&long, &rev("v1"), 123);
    assert!(name.len() <= 63, "{name}");
    assert!(name.ends_with(&format!("-{}-123", rev("v1"))));
}

/// A DNS-1123 label: 1–63 characters of a-z, 0-9 and '-', alphanumeric at
/// both ends (a pod's host name; also a Job's name, which becomes a label).
fn is_dns_label(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    (1..=63).contains(&s.len())
        && s.chars().all(|c| alnum(c) || c == '-')
        && s.starts_with(alnum)
        && s.ends_with(alnum)
}

/// A label value: at most 63 characters, empty or
/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`.
fn is_label_value(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.len() <= 63
        && (s.is_empty()
            || (s.chars().all(|c| alnum(c) || matches!(c, '-' | '_' | '.'))
                && s.starts_with(alnum)
                && s.ends_with(alnum)))
}

/// Every name the CRD accepts (a DNS subdomain, up to 253 characters)
/// gives valid pod, host and Job names and a valid label value, and
/// distinct Schedulers never share one.
#[test]
fn every_scheduler_name_gives_valid_distinct_names() {
    let long_dotted = format!(
        "{}.{}.{}.{}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61)
    );
    assert_eq!(long_dotted.len(), 253);
    let mut long_dotted_other = long_dotted.clone();
    long_dotted_other.replace_range(252.., "e");
    // The room a plain name has beside `-<revision>-<one digit>`.
    let room = 63 - format!("-{}-1", rev("v1")).len();
    let names: Vec<String> = vec![
        "a".into(),
        "orca".into(),
        "team.pipelines".into(),
        "team-pipelines".into(),
        "team.pipelines.prod".into(),
        long_dotted.clone(),
        long_dotted_other.clone(),
        format!("{}-one", "p".repeat(60)),
        format!("{}-two", "p".repeat(60)),
        format!("{}.x", "q".repeat(room)),
        format!("{}.y", "q".repeat(room)),
        "team--pipelines".into(),
        "xn--bcher-kva".into(),
        "a.-b".into(),
        "1st".into(),
        "0".into(),
        "42.7".into(),
        "l".repeat(63),
        format!("{}.{}", "m".repeat(31), "n".repeat(31)),
        "r".repeat(room),
        "r".repeat(room + 1),
        "s".repeat(64),
    ];
    let revision = rev("v1");
    let mut pods = std::collections::BTreeMap::new();
    let mut jobs = std::collections::BTreeMap::new();
    let mut labels = std::collections::BTreeMap::new();
    for name in &names {
        for sequence in [1, 12, 4_000, u32::MAX] {
            let pod = pod_name(name, &revision, sequence);
            assert!(is_dns_label(&pod), "{name}: pod {pod}");
            assert!(
                pod.ends_with(&format!("-{revision}-{sequence}")),
                "{name}: pod {pod}"
            );
            assert!(
                pods.insert((pod.clone(), sequence), name).is_none(),
                "{name}: pod {pod} is another Scheduler's too"
            );
        }
        let job = job_name(name, &revision);
        assert!(is_dns_label(&job), "{name}: job {job}");
        assert!(
            jobs.insert(job.clone(), name).is_none(),
            "{name}: job {job} is another Scheduler's too"
        );
        let label = scheduler_label(name);
        assert!(is_label_value(&label), "{name}: label {label}");
        assert!(
            labels.insert(label.clone(), name).is_none(),
            "{name}: label {label} is another Scheduler's too"
        );
        // Readable: what the name starts with survives.
        let head: String = name
            .chars()
            .take(5)
            .map(|c| if c == '.' { '-' } else { c })
            .collect();
        let head = head.trim_end_matches('-');
        assert!(pod_name(name, &revision, 1).starts_with(head), "{name}");
    }

    // A name that already fits is kept as it was: existing pods, Jobs and
    // label selectors keep working.
    assert_eq!(pod_name("orca", &revision, 7), format!("orca-{revision}-7"));
    assert_eq!(
        job_name("orca", &revision),
        format!("orca-register-{revision}")
    );
    assert_eq!(scheduler_label("orca"), "orca");
    let edge = "r".repeat(room);
    assert_eq!(
        pod_name(&edge, &revision, 1),
        format!("{edge}-{revision}-1")
    );
    assert_eq!(scheduler_label("team.pipelines"), "team.pipelines");
    assert_eq!(scheduler_label(&"l".repeat(63)), "l".repeat(63));
    // One that had to change: dots to '-', and a short hash of the name.
    let dotted = pod_name("team.pipelines", &revision, 1);
    let hash = dotted
        .strip_prefix("team-pipelines-")
        .and_then(|rest| rest.strip_suffix(&format!("-{revision}-1")))
        .unwrap_or_else(|| panic!("{dotted}"));
    assert!(
        hash.len() == 6 && hash.chars().all(|c| c.is_ascii_hexdigit()),
        "{dotted}"
    );
    assert_eq!(pod_name("team.pipelines", &revision, 1), dotted, "stable");
}

#[test]
fn register_job_names_are_labels_and_name_their_attempt() {
    for name in ["orca", "team.pipelines", &"s".repeat(64), &"a.b".repeat(80)] {
        let revision = rev("v1");
        assert_eq!(
            register_job_name(name, &revision, 1),
            job_name(name, &revision)
        );
        for attempt in [1, 2, 17, u32::MAX] {
            let job = register_job_name(name, &revision, attempt);
            assert!(is_dns_label(&job), "{name}: {job}");
            assert_eq!(register_attempt(&job, &revision), attempt, "{job}");
        }
        assert_ne!(
            register_job_name(name, &revision, 2),
            register_job_name(name, &revision, 3)
        );
    }
    let mut other = spec("v1").register.unwrap_or_else(|| unreachable!());
    let first = register_hash(&other);
    assert!(is_label_value(&first) && first.len() == 10, "{first}");
    other.timeout_seconds += 1;
    assert_eq!(register_hash(&other), first, "the time-out is no new step");
    other.args.push("--again".into());
    assert_ne!(register_hash(&other), first);
}

#[test]
fn a_scheduler_knows_its_own_host_names_in_its_own_namespace() {
    let revision = rev("v1");
    let long_ns = "n".repeat(63);
    for ns in ["team-a", long_ns.as_str()] {
        for name in ["orca", "team.pipelines", &"s".repeat(64), &"a.b".repeat(80)] {
            for sequence in [1, 42, u32::MAX] {
                let host = host_name(ns, name, &revision, sequence);
                assert!(is_dns_label(&host), "{ns}/{name}: host {host}");
                assert!(is_host_of(ns, name, &host), "{ns}/{name}: {host}");
            }
            let host = host_name(ns, name, &revision, 1);
            assert!(!is_host_of(ns, "other", &host));
            assert!(!is_host_of(ns, &format!("{name}-x"), &host));
            // The same name in another namespace: another Scheduler, and
            // another host name, so neither takes the other's rows.
            assert!(!is_host_of("team-b", name, &host), "{ns}/{name}");
            assert_ne!(host, host_name("team-b", name, &revision, 1));
            // A pod name (the host name pods had before) is no host name.
            assert!(!is_host_of(ns, name, &pod_name(name, &revision, 1)));
        }
    }
    let host = host_name("team-a", "orca", &revision, 3);
    assert!(host.starts_with("team-a-orca-"), "readable: {host}");
    assert!(host.ends_with(&format!("-{revision}-3")), "{host}");
    // A later release's hashing scheme marks its revisions: their pods'
    // rows are still the Scheduler's own (after a rollback to this one).
    for name in ["orca", "team.pipelines"] {
        let later = host_name("team-a", name, &format!("{revision}-s2"), 7);
        assert!(is_host_of("team-a", name, &later), "{later}");
        assert!(!is_host_of("team-b", name, &later), "{later}");
    }
    assert!(!is_host_of("team-a", "orca", "orca-zzzzzzzzzz-1"));
    assert!(!is_host_of("team-a", "orca", "ip-10-0-0-1"));
    // A namespace and name that run into each other differently.
    assert_ne!(
        host_name("a-b", "c", &revision, 1),
        host_name("a", "b-c", &revision, 1)
    );
}
