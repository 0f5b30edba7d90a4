//! The operator's IAM policy (`docs/iam-policy.json`) on moto enforcing
//! IAM: a pool run as a user with exactly the policy's actions launches,
//! keeps its stopped reserve, starts it for runs and terminates without one
//! refusal; a user without any one of those actions sees the pool
//! `Degraded` (`Unauthorized`) naming it. moto checks actions only (see
//! `orca_tests::iam`); the policy's scoping is checked here for naming the
//! tags the operator sets, and this cluster's name wherever it acts on or
//! tags an instance (what it allows and refuses, statement by statement,
//! in the operator's unit tests of `iam_policy`).

use orca_operator::crd::{StoppedRange, WarmPoolSpec};
use orca_operator::fence::Fence;
use orca_operator::warmpool::ec2::{TAG_CLUSTER, TAG_OPERATOR, TAG_POOL, TAG_SCHEDULER};
use orca_tests::iam;

use super::*;

/// A pool loop signing as an IAM user of moto with the policy's actions,
/// `without` one, moto enforcing IAM; its EC2 calls through a proxy that
/// logs them. The hosts and the test's own client sign as an admin.
struct AsPrincipal {
    _moto: orca_tests::moto::Moto,
    faults: Ec2Faults,
    url: String,
    admin: Ec2,
    running: Running,
}

async fn as_principal(pool: &str, without: Option<&str>, shape: Shape) -> AsPrincipal {
    let (moto, url, _, subnets) = warm::Stage::new().await.parts();
    let faults = Ec2Faults::start(&moto.endpoint());
    let everything = iam::everything();
    let admin_key = iam::user(&moto, "admin", &everything);
    let operator_key = iam::user(
        &moto,
        "orca-operator",
        &iam::as_moto_checks(&iam::policy(), without),
    );
    iam::enforce(&moto);
    let admin = warm::ec2_as(&moto.endpoint(), &admin_key).await;
    let spec = shape.spec(&faults.endpoint(), &subnets);
    let (ns, name) = pool.split_once('/').unwrap();
    let lp = PoolLoop::new(
        ns,
        name,
        spec,
        &url,
        warm::tuning(Duration::from_secs(60)),
        Fence::always(),
    )
    .await
    .unwrap()
    .with_ec2(warm::ec2_as(&faults.endpoint(), &operator_key).await);
    let hosts = warm::hosts_on(admin.clone(), &url, warm::owner(pool), "true", vec![]);
    AsPrincipal {
        _moto: moto,
        faults,
        url,
        admin,
        running: spawn_running(lp, hosts),
    }
}

/// The pool of a test: idle `min..=max`, a stopped reserve of `stopped`,
/// each instance retired after `max_uses` runs (0: never).
struct Shape {
    min: i32,
    max: i32,
    stopped: i32,
    max_uses: i32,
}

impl Shape {
    /// On `endpoint`, `t3.micro` in the first of `subnets`, at most 4.
    fn spec(&self, endpoint: &str, subnets: &[String]) -> WarmPoolSpec {
        let mut spec = warm::spec(
            endpoint,
            &["t3.micro"],
            &subnets[..1],
            self.min,
            self.max,
            4,
        );
        spec.stopped = (self.stopped > 0).then_some(StoppedRange {
            min: self.stopped,
            max: None,
        });
        spec.max_uses = self.max_uses;
        spec
    }
}

const fn shape(min: i32, max: i32, stopped: i32, max_uses: i32) -> Shape {
    Shape {
        min,
        max,
        stopped,
        max_uses,
    }
}

/// `Degraded` as the Kubernetes mode would write it: the last pass's
/// failure, else the status's condition; `(reason, message)` if True.
fn degraded(running: &Running) -> Option<(String, String)> {
    if let Some((reason, message)) = running.failed.lock().unwrap().clone() {
        return Some((reason.to_string(), message));
    }
    running
        .status()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "Degraded" && c.status == "True")
        .map(|c| (c.reason, c.message))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pool_runs_as_a_user_with_exactly_the_policys_actions() {
    let pool = "iam/all";
    let stage = as_principal(pool, None, shape(1, 1, 1, 1)).await;
    let running = &stage.running;
    eventually_true(
        "one idle and one stopped in the reserve",
        Duration::from_secs(60),
        || async {
            let s = running.status();
            s.idle == 1 && s.stopped == 1
        },
    )
    .await;
    // Two runs: the reserve is started, one more launched; each instance
    // is terminated after its one run.
    hand_out_all(&stage.url, pool, 1..=2).await;
    eventually_true(
        "each of the pool's EC2 actions called",
        Duration::from_secs(60),
        || async {
            [
                "DescribeInstances",
                "RunInstances",
                "StopInstances",
                "StartInstances",
                "TerminateInstances",
            ]
            .iter()
            .all(|a| !stage.faults.calls_of(a).is_empty())
        },
    )
    .await;
    let terminated = running.events_once(|e| e.reason() == "Terminated").await;
    assert!(
        terminated.iter().any(|e| e.reason() == "Terminated"),
        "{terminated:?}"
    );
    let denied: Vec<&PoolEvent> = terminated
        .iter()
        .filter(|e| e.reason() == "Unauthorized")
        .collect();
    assert!(denied.is_empty(), "refused with the policy: {denied:?}");
    assert_eq!(degraded(running), None);
    // The calls were the operator's, signed as its user: the proxy saw
    // its key.
    assert!(stage
        .faults
        .calls()
        .iter()
        .all(|c| c.key_id().is_some_and(|k| k.starts_with("AKIA"))));
}

/// Waits until the pool is `Degraded` (`Unauthorized`) naming `action`
/// (EC2's, or `service:Action`; 60 s at most); its message.
async fn degraded_without(action: &str, stage: &AsPrincipal) -> String {
    let named = if action.contains(':') {
        action.to_string()
    } else {
        format!("ec2:{action}")
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let seen = degraded(&stage.running);
        if let Some((reason, message)) = &seen {
            if reason == "Unauthorized" && message.contains(&named) {
                return message.clone();
            }
        }
        assert!(
            Instant::now() < deadline,
            "not Degraded Unauthorized naming {named} within 60 s: {seen:?}; events {:?}",
            stage.running.events()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_describe_instances_every_pass_fails_unauthorized() {
    let stage = as_principal(
        "iam/describe",
        Some("ec2:DescribeInstances"),
        shape(1, 1, 0, 0),
    )
    .await;
    let message = degraded_without("DescribeInstances", &stage).await;
    assert!(message.contains("docs/iam-policy.json"), "{message}");
    assert!(stage.faults.calls_of("RunInstances").is_empty());
}

/// Returns once the pool's loop made three passes more (each lists the
/// pool, once a second).
async fn three_passes_more(stage: &AsPrincipal) {
    let listed = stage.faults.calls_of("DescribeInstances").len();
    let deadline = Instant::now() + Duration::from_secs(30);
    while stage.faults.calls_of("DescribeInstances").len() < listed + 3 {
        assert!(Instant::now() < deadline, "the loop made no more passes");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Without `ec2:DescribeInstanceTypes` (the policy of an earlier release,
/// which did not call it): the pool says so, naming the action, and asks
/// again a minute on, not every pass. Once, a warning in the operator's
/// log was all, every pass, and a class's vCPU limit held every launch
/// with a message that never named the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_describe_instance_types_the_pool_says_so_and_asks_once_a_minute() {
    let stage = as_principal(
        "iam/types",
        Some("ec2:DescribeInstanceTypes"),
        shape(1, 1, 0, 0),
    )
    .await;
    degraded_without("DescribeInstanceTypes", &stage).await;
    three_passes_more(&stage).await;
    degraded_without("DescribeInstanceTypes", &stage).await;
    assert_eq!(
        stage.faults.calls_of("DescribeInstanceTypes").len(),
        1,
        "asked once, not every pass"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_run_instances_a_launch_is_unauthorized() {
    let stage = as_principal("iam/run", Some("ec2:RunInstances"), shape(1, 1, 0, 0)).await;
    degraded_without("RunInstances", &stage).await;
    // The launch waits: no pass makes it again (the preflight asks a
    // minute on). Once, every pass did, for as long as the pool lived.
    let launches = stage.faults.calls_of("RunInstances").len();
    three_passes_more(&stage).await;
    assert_eq!(
        stage.faults.calls_of("RunInstances").len(),
        launches,
        "a launch the credentials may not make was made again"
    );
    assert!(stage
        .admin
        .describe(&warm::owner("iam/run"))
        .await
        .unwrap()
        .is_empty());
}

/// An instance whose agent stopped answering must go, and only the
/// operator can make it: without the action the pool stays `Degraded`
/// pass after pass and the instance runs on, not forgotten. (A retirement
/// after `maxUses` would not show it: the host powers off by itself after
/// its last run and EC2 ends the instance without the operator.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_terminate_instances_a_retirement_is_unauthorized() {
    let pool = "iam/terminate";
    let mut stage = as_principal(pool, Some("ec2:TerminateInstances"), shape(1, 1, 0, 0)).await;
    eventually_true("one idle", Duration::from_secs(60), || async {
        stage.running.status().idle == 1
    })
    .await;
    stage.running.hang_hosts();
    // Tried, refused, and tried again a pass later: not forgotten.
    eventually_true("terminate tried twice", Duration::from_secs(60), || async {
        stage.faults.calls_of("TerminateInstances").len() >= 2
    })
    .await;
    degraded_without("TerminateInstances", &stage).await;
    let listed = stage.admin.describe(&warm::owner(pool)).await.unwrap();
    assert!(
        listed.iter().any(|i| i.state() == Ec2State::Running),
        "{listed:?}"
    );
}

/// Permissions before they are needed: a pool whose instances all serve
/// well, that has nothing to terminate, is `Unauthorized` naming
/// `ec2:TerminateInstances` as soon as it has an instance to ask about
/// (its preflight's dry run), not on the day an instance must go; and it
/// keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_terminate_instances_the_pool_says_so_before_anything_must_go() {
    let pool = "iam/before";
    let stage = as_principal(pool, Some("ec2:TerminateInstances"), shape(1, 1, 0, 0)).await;
    let message = degraded_without("TerminateInstances", &stage).await;
    assert!(stage.faults.calls_of("TerminateInstances").is_empty());
    assert!(
        stage
            .faults
            .dry_runs()
            .iter()
            .any(|a| a == "TerminateInstances"),
        "{:?}",
        stage.faults.dry_runs()
    );
    let said = stage
        .running
        .events_once(|e| e.reason() == "Unauthorized" && e.message().contains("asked before"))
        .await;
    assert!(
        said.iter()
            .any(|e| e.reason() == "Unauthorized" && e.message().contains("ec2:TerminateInstances")),
        "{message}: {said:?}"
    );
    eventually_true("one idle all the same", Duration::from_secs(60), || async {
        stage.running.status().idle == 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_stop_instances_the_reserve_is_unauthorized_and_nothing_churns() {
    let pool = "iam/stop";
    let stage = as_principal(pool, Some("ec2:StopInstances"), shape(0, 0, 1, 0)).await;
    degraded_without("StopInstances", &stage).await;
    // A stop the policy does not allow retires nothing: the instance stays
    // (running, for the reserve) and no other is launched in its place,
    // pass after pass.
    let launched = stage.faults.calls_of("RunInstances").len();
    let stops = stage.faults.calls_of("StopInstances").len();
    eventually_true(
        "three more stops tried",
        Duration::from_secs(30),
        || async { stage.faults.calls_of("StopInstances").len() >= stops + 3 },
    )
    .await;
    assert_eq!(stage.faults.calls_of("RunInstances").len(), launched);
    assert!(stage.faults.calls_of("TerminateInstances").is_empty());
    let present: Vec<_> = stage
        .admin
        .describe(&warm::owner(pool))
        .await
        .unwrap()
        .into_iter()
        .filter(|i| i.state() == Ec2State::Running)
        .collect();
    assert_eq!(present.len(), 1, "{present:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_start_instances_a_start_is_unauthorized_and_the_run_launched_for() {
    let pool = "iam/start";
    let stage = as_principal(pool, Some("ec2:StartInstances"), shape(0, 0, 1, 0)).await;
    eventually_true(
        "one stopped in the reserve",
        Duration::from_secs(60),
        || async { stage.running.status().stopped == 1 },
    )
    .await;
    let served = tokio::spawn({
        let url = stage.url.clone();
        async move { hand_out_all(&url, pool, [1]).await }
    });
    degraded_without("StartInstances", &stage).await;
    // The reserve that may not be started is retired; the run gets a
    // fresh launch.
    let served = served.await.unwrap();
    assert_eq!(served.len(), 1, "{served:?}");
    // No run asks for the reserve now, so no pass calls StartInstances:
    // the refusal still stands, for the next run would meet it.
    tokio::time::sleep(Duration::from_secs(3)).await;
    degraded_without("StartInstances", &stage).await;
}

/// Without `ssm:PutParameter` the database URL's parameter cannot be
/// written: the pool says so as `Unauthorized`, naming the action, in
/// every pass — here a pool that wants no launch at all, which said
/// nothing before — and launches nothing when it wants one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_put_parameter_every_pass_says_unauthorized_launching_or_not() {
    let quiet = as_principal("iam/quiet", Some("ssm:PutParameter"), shape(0, 0, 0, 0)).await;
    let message = degraded_without("ssm:PutParameter", &quiet).await;
    assert!(message.contains("orca-operator preflight"), "{message}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    degraded_without("ssm:PutParameter", &quiet).await;
    let wanting = as_principal("iam/parameter", Some("ssm:PutParameter"), shape(1, 1, 0, 0)).await;
    degraded_without("ssm:PutParameter", &wanting).await;
    let held = wanting
        .running
        .events_once(|e| e.reason() == "Unauthorized")
        .await;
    assert!(
        held.iter()
            .any(|e| e.reason() == "Unauthorized" && e.message().contains("launch(es) held")),
        "{held:?}"
    );
    assert!(wanting.faults.calls_of("RunInstances").is_empty());
}

#[test]
fn the_policy_allows_every_ec2_call_the_operator_makes_scoped_by_its_cluster() {
    let policy = iam::policy();
    // Each EC2 action the pool's adapter calls, as its source names them.
    let source = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../operator/src/warmpool/ec2.rs"),
    )
    .unwrap();
    let called: Vec<String> = source
        .lines()
        .filter_map(|l| l.trim().strip_prefix("const ACTION: &str = \""))
        .map(|rest| format!("ec2:{}", rest.trim_end_matches("\";")))
        .collect();
    assert!(called.len() >= 7, "{called:?}");
    // The database URL's parameter: each SSM call the operator makes (its
    // fence check names it), and the tags given at its creation.
    let ssm = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../operator/src/warmpool/ssm.rs"),
    )
    .unwrap();
    let mut called = called;
    for piece in ssm.split("self.check(\"").skip(1) {
        let action = format!("ssm:{}", &piece[..piece.find('"').unwrap()]);
        if !called.contains(&action) {
            called.push(action);
        }
    }
    assert!(
        ssm.contains(".set_tags("),
        "the parameter is no longer tagged at creation"
    );
    called.push("ssm:AddTagsToResource".into());
    let allowed = iam::actions(&policy);
    for action in &called {
        assert!(allowed.contains(action), "{action} is not in the policy");
    }
    // And nothing it does not call, but passing the instance profile's
    // role, and the encryption SSM asks of a customer key in the
    // operator's name.
    let beside = ["iam:PassRole", "kms:Encrypt"];
    for action in &allowed {
        assert!(
            called.contains(action) || beside.contains(&action.as_str()),
            "{action} is allowed but never called"
        );
    }
    // Every tag a condition names is one of the ownership tags, or the
    // one the platform team puts on the network its classes launch into.
    let ours = [TAG_POOL, TAG_SCHEDULER, TAG_OPERATOR, TAG_CLUSTER];
    let launch_from = orca_operator::iam_policy::launch_from_tag(iam::DOCS_CLUSTER);
    for statement in iam::statements(&policy) {
        for (_, keys) in statement["Condition"].as_object().into_iter().flatten() {
            for key in keys.as_object().unwrap().keys() {
                if let Some((_, tag)) = key.split_once("Tag/") {
                    assert!(
                        ours.contains(&tag) || tag == launch_from,
                        "{key}: not a tag the operator sets"
                    );
                }
            }
        }
    }
    // A launch carries all four, the cluster's with this cluster's name.
    let launch = iam::statements(&policy)
        .into_iter()
        .find(|s| s["Sid"] == "LaunchOwnedInstances")
        .expect("the launch statement");
    for tag in ours {
        let (operator, value) = if tag == TAG_CLUSTER {
            ("StringEquals", iam::DOCS_CLUSTER)
        } else {
            ("StringLike", "?*")
        };
        let key = format!("aws:RequestTag/{tag}");
        assert_eq!(
            launch["Condition"][operator][&key], value,
            "a launch need not carry {tag}"
        );
    }
    // Nothing acts on an instance but one tagged with this cluster's name,
    // and nothing tags one but with it.
    let cluster = |statement: &serde_json::Value, kind: &str| {
        statement["Condition"]["StringEquals"][format!("aws:{kind}Tag/{TAG_CLUSTER}")].clone()
    };
    for statement in iam::statements(&policy) {
        let actions = iam::strings(&statement["Action"]);
        let acts = actions.iter().any(|a| {
            [
                "ec2:TerminateInstances",
                "ec2:StopInstances",
                "ec2:StartInstances",
                "ec2:GetConsoleOutput",
            ]
            .contains(&a.as_str())
        });
        if acts {
            assert_eq!(
                cluster(&statement, "Resource"),
                iam::DOCS_CLUSTER,
                "{statement}"
            );
        }
        // A tag is put on with the cluster's name, or only on an instance
        // that carries it already (its class and namespace tags).
        if actions.iter().any(|a| a == "ec2:CreateTags") {
            assert!(
                cluster(&statement, "Request") == iam::DOCS_CLUSTER
                    || cluster(&statement, "Resource") == iam::DOCS_CLUSTER,
                "{statement}"
            );
        }
    }
}
