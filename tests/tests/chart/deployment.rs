//! The Deployment, its ServiceAccount, and the metrics Service and ServiceMonitor.

use super::*;

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

#[test]
fn the_deployment_runs_two_locked_down_replicas_with_leader_election() {
    let docs = render(&[]);
    let deploy = deployment(&docs);
    assert_eq!(at(deploy, &["spec", "replicas"]), Some(&Value::from(2)));
    assert_eq!(
        args(&docs),
        strings(&[
            "--log-json",
            "run",
            "--namespace",
            RELEASE_NAMESPACE,
            "--role-binding",
            FULLNAME,
            "--listen",
            "0.0.0.0:8080",
            "--lease-name",
            FULLNAME,
            "--lease-namespace",
            RELEASE_NAMESPACE,
            "--cluster-name",
            "chart-test",
            "--database-ca-dir",
            "/etc/orca/db-ca",
        ])
    );
    let c = container(&docs);
    let image = format!("orca-operator:{}", env!("CARGO_PKG_VERSION"));
    assert_eq!(str_at(c, &["image"]), Some(image.as_str()));

    let pod = at(deploy, &["spec", "template", "spec"]).expect("a pod spec");
    assert_eq!(str_at(pod, &["serviceAccountName"]), Some(FULLNAME));
    assert_eq!(
        at(pod, &["securityContext", "runAsNonRoot"]),
        Some(&Value::from(true))
    );
    assert_eq!(
        str_at(pod, &["securityContext", "seccompProfile", "type"]),
        Some("RuntimeDefault")
    );
    let sc = at(c, &["securityContext"]).expect("a container securityContext");
    assert_eq!(at(sc, &["runAsNonRoot"]), Some(&Value::from(true)));
    assert_eq!(
        at(sc, &["readOnlyRootFilesystem"]),
        Some(&Value::from(true))
    );
    assert_eq!(
        at(sc, &["allowPrivilegeEscalation"]),
        Some(&Value::from(false))
    );
    assert_eq!(
        at(sc, &["capabilities", "drop"]),
        Some(&Value::Sequence(vec![Value::from("ALL")]))
    );
    assert!(at(sc, &["capabilities", "add"]).is_none(), "{sc:?}");
    assert!(at(sc, &["privileged"]).is_none(), "{sc:?}");
    assert_eq!(
        str_at(sc, &["seccompProfile", "type"]),
        Some("RuntimeDefault")
    );

    for (probe, path) in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")] {
        assert_eq!(
            str_at(c, &[probe, "httpGet", "path"]),
            Some(path),
            "{probe}"
        );
        assert_eq!(
            str_at(c, &[probe, "httpGet", "port"]),
            Some("http"),
            "{probe}"
        );
    }
    assert_eq!(str_at(c, &["ports", "0", "name"]), Some("http"));
    assert_eq!(
        at(c, &["ports", "0", "containerPort"]),
        Some(&Value::from(8080))
    );

    // Leader election needs each replica's identity from the downward API.
    let env = at(c, &["env"])
        .and_then(Value::as_sequence)
        .expect("the container has env");
    for (name, field) in [
        ("POD_NAME", "metadata.name"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ] {
        let var = env
            .iter()
            .find(|e| str_at(e, &["name"]) == Some(name))
            .unwrap_or_else(|| panic!("no {name} in {env:?}"));
        assert_eq!(
            str_at(var, &["valueFrom", "fieldRef", "fieldPath"]),
            Some(field),
            "{name}"
        );
    }
    assert!(
        at(c, &["resources", "requests"]).is_some(),
        "resource requests by default"
    );
}

#[test]
fn the_metrics_service_and_the_optional_service_monitor_select_the_operator() {
    let docs = render(&[]);
    assert!(
        !inventory(&docs)
            .iter()
            .any(|(k, _, _)| k == "ServiceMonitor"),
        "no ServiceMonitor unless enabled"
    );

    let docs = render(&["serviceMonitor.enabled=true"]);
    let metrics = format!("{FULLNAME}-metrics");
    let service = object(&docs, "Service", RELEASE_NAMESPACE, &metrics);
    assert_eq!(
        str_at(service, &["spec", "ports", "0", "name"]),
        Some("http")
    );
    assert_eq!(
        str_at(service, &["spec", "ports", "0", "targetPort"]),
        Some("http")
    );
    let pod_labels = at(
        deployment(&docs),
        &["spec", "template", "metadata", "labels"],
    )
    .and_then(Value::as_mapping)
    .expect("pod labels");
    let selector = at(service, &["spec", "selector"])
        .and_then(Value::as_mapping)
        .expect("a Service selector");
    for (k, v) in selector {
        assert_eq!(pod_labels.get(k), Some(v), "the Service selects {k:?}");
    }

    let monitor = object(&docs, "ServiceMonitor", RELEASE_NAMESPACE, FULLNAME);
    let service_labels = at(service, &["metadata", "labels"])
        .and_then(Value::as_mapping)
        .expect("Service labels");
    let wanted = at(monitor, &["spec", "selector", "matchLabels"])
        .and_then(Value::as_mapping)
        .expect("a ServiceMonitor selector");
    for (k, v) in wanted {
        assert_eq!(service_labels.get(k), Some(v), "the monitor selects {k:?}");
    }
    assert_eq!(
        str_at(monitor, &["spec", "endpoints", "0", "port"]),
        Some("http")
    );
    assert_eq!(
        str_at(monitor, &["spec", "endpoints", "0", "path"]),
        Some("/metrics")
    );
}

#[test]
fn the_service_account_carries_the_iam_role_annotation() {
    let arn = "arn:aws:iam::111122223333:role/orca-operator";
    let role_arn = |sets: &[&str]| {
        let docs = render(sets);
        let sa = object(&docs, "ServiceAccount", RELEASE_NAMESPACE, FULLNAME);
        str_at(
            sa,
            &["metadata", "annotations", "eks.amazonaws.com/role-arn"],
        )
        .map(String::from)
    };
    assert_eq!(role_arn(&[]), None);
    let value = format!("serviceAccount.roleArn={arn}");
    assert_eq!(role_arn(&[&value]).as_deref(), Some(arn));
    // The annotation written out by hand, as before the value existed.
    let by_hand = format!("serviceAccount.annotations.eks\\.amazonaws\\.com/role-arn={arn}");
    assert_eq!(role_arn(&[&by_hand]).as_deref(), Some(arn));
    // Other annotations stay beside it.
    let docs = render(&[&value, "serviceAccount.annotations.team=ci"]);
    let sa = object(&docs, "ServiceAccount", RELEASE_NAMESPACE, FULLNAME);
    assert_eq!(str_at(sa, &["metadata", "annotations", "team"]), Some("ci"));
    // Not an IAM role's ARN: refused by the schema, naming the value.
    let out = helm_template(&["serviceAccount.roleArn=orca-operator"]);
    assert!(!out.status.success(), "a role name rendered as an ARN");
    assert!(String::from_utf8_lossy(&out.stderr).contains("roleArn"));
}

/// The pod labels of the chart's Deployment.
fn pod_labels(docs: &[Value]) -> &serde_yaml::Mapping {
    at(
        deployment(docs),
        &["spec", "template", "metadata", "labels"],
    )
    .and_then(Value::as_mapping)
    .expect("pod labels")
}

/// Whether `selector` (a `matchLabels`) picks the operator's pods.
fn selects_operator(docs: &[Value], selector: &Value) {
    let labels = pod_labels(docs);
    let wanted = selector.as_mapping().expect("matchLabels");
    assert!(!wanted.is_empty(), "an empty selector picks every pod");
    for (k, v) in wanted {
        assert_eq!(labels.get(k), Some(v), "selects {k:?}");
    }
}

#[test]
fn two_replicas_get_a_disruption_budget_of_one_pod_at_a_time() {
    let docs = render(&[]);
    let pdb = object(&docs, "PodDisruptionBudget", RELEASE_NAMESPACE, FULLNAME);
    assert_eq!(
        at(pdb, &["spec", "maxUnavailable"]).and_then(Value::as_u64),
        Some(1)
    );
    selects_operator(
        &docs,
        at(pdb, &["spec", "selector", "matchLabels"]).unwrap(),
    );
    for sets in [
        &["replicaCount=1"][..],
        &["podDisruptionBudget.enabled=false"][..],
    ] {
        let docs = render(sets);
        assert!(
            !inventory(&docs)
                .iter()
                .any(|(k, _, _)| k == "PodDisruptionBudget"),
            "{sets:?}: a budget would block every drain"
        );
    }
}

#[test]
fn the_network_policy_lets_in_the_metrics_port_and_out_dns_the_api_ec2_and_databases() {
    let docs = render(&["networkPolicy.databasePorts={5432,6432}"]);
    let policy = object(&docs, "NetworkPolicy", RELEASE_NAMESPACE, FULLNAME);
    selects_operator(
        &docs,
        at(policy, &["spec", "podSelector", "matchLabels"]).unwrap(),
    );
    let ports = |rule: &Value| -> Vec<String> {
        at(rule, &["ports"])
            .and_then(Value::as_sequence)
            .into_iter()
            .flatten()
            .map(|p| {
                let port = match at(p, &["port"]) {
                    Some(Value::Number(n)) => n.to_string(),
                    Some(Value::String(s)) => s.clone(),
                    other => panic!("a port {other:?}"),
                };
                format!("{}/{port}", str_at(p, &["protocol"]).unwrap_or("TCP"))
            })
            .collect()
    };
    let ingress = at(policy, &["spec", "ingress"])
        .and_then(Value::as_sequence)
        .expect("ingress rules");
    assert_eq!(ingress.len(), 1);
    assert_eq!(ports(&ingress[0]), ["TCP/http"], "the metrics port only");
    let egress: Vec<String> = at(policy, &["spec", "egress"])
        .and_then(Value::as_sequence)
        .expect("egress rules")
        .iter()
        .flat_map(ports)
        .collect();
    assert_eq!(
        egress,
        ["UDP/53", "TCP/53", "TCP/443", "TCP/6443", "TCP/5432", "TCP/6432", "TCP/80"]
    );
    // Port 80 to the documented credential sources alone: the node's
    // metadata service and EKS Pod Identity's agent.
    let credentials = at(policy, &["spec", "egress"])
        .and_then(Value::as_sequence)
        .and_then(|rules| rules.last())
        .expect("the credential sources' rule");
    let cidrs: Vec<&str> = at(credentials, &["to"])
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .filter_map(|peer| str_at(peer, &["ipBlock", "cidr"]))
        .collect();
    assert_eq!(
        cidrs,
        [
            "169.254.169.254/32",
            "169.254.170.23/32",
            "fd00:ec2::254/128",
            "fd00:ec2::23/128"
        ]
    );
    let without = render(&["networkPolicy.credentialSources=false"]);
    let policy = object(&without, "NetworkPolicy", RELEASE_NAMESPACE, FULLNAME);
    assert!(!serde_yaml::to_string(policy).unwrap().contains("169.254"));
    let docs = render(&["networkPolicy.enabled=false"]);
    assert!(!inventory(&docs)
        .iter()
        .any(|(k, _, _)| k == "NetworkPolicy"));
}

fn pod_spec(docs: &[Value]) -> &Value {
    at(deployment(docs), &["spec", "template", "spec"]).expect("a pod spec")
}

/// The entries of a list in the pod spec (or its container) named `name`.
fn named<'a>(list: Option<&'a Value>, name: &str) -> Option<&'a Value> {
    list.and_then(Value::as_sequence)?
        .iter()
        .find(|v| str_at(v, &["name"]) == Some(name))
}

#[test]
fn extra_volumes_mounts_environment_and_arguments_are_rendered_when_set() {
    // The CA bundle of a Scheduler's database, as operations.md shows it.
    let docs = render(&[
        "extraVolumes[0].name=db-ca",
        "extraVolumes[0].secret.secretName=orca-db-ca",
        "extraVolumeMounts[0].name=db-ca",
        "extraVolumeMounts[0].mountPath=/etc/orca/db-ca",
        "extraVolumeMounts[0].readOnly=true",
        "envFrom[0].configMapRef.name=orca-operator-aws",
        "envFrom[1].secretRef.name=orca-operator-keys",
        "envFrom[1].prefix=ORCA_",
        "extraArgs[0]=--stuck-after-seconds=600",
        // A word YAML would read as a boolean stays a string.
        "extraArgs[1]=yes",
    ]);
    let yaml = |text: &str| serde_yaml::from_str::<Value>(text).unwrap();
    let pod = pod_spec(&docs);
    assert_eq!(
        named(at(pod, &["volumes"]), "db-ca"),
        Some(&yaml("{name: db-ca, secret: {secretName: orca-db-ca}}"))
    );
    assert!(
        named(at(pod, &["volumes"]), "tmp").is_some(),
        "the chart's own /tmp stays beside it"
    );
    let c = container(&docs);
    assert_eq!(
        named(at(c, &["volumeMounts"]), "db-ca"),
        Some(&yaml(
            "{name: db-ca, mountPath: /etc/orca/db-ca, readOnly: true}"
        ))
    );
    assert!(named(at(c, &["volumeMounts"]), "tmp").is_some());
    assert_eq!(
        at(c, &["envFrom"]),
        Some(&yaml(
            "[{configMapRef: {name: orca-operator-aws}}, \
              {secretRef: {name: orca-operator-keys}, prefix: ORCA_}]"
        ))
    );
    // Appended to `run`'s own, which stay as they were.
    let args = args(&docs);
    assert_eq!(
        args[args.len() - 4..],
        strings(&[
            "--database-ca-dir",
            "/etc/orca/db-ca",
            "--stuck-after-seconds=600",
            "yes"
        ])
    );

    let docs = render(&[]);
    let c = container(&docs);
    assert!(at(c, &["envFrom"]).is_none(), "{c:?}");
    let volumes = at(pod_spec(&docs), &["volumes"]).and_then(Value::as_sequence);
    assert_eq!(volumes.map(Vec::len), Some(1), "only tmp by default");
}

#[test]
fn the_replicas_prefer_different_nodes_unless_the_values_say_otherwise() {
    let docs = render(&[]);
    let pod = pod_spec(&docs);
    let term = at(
        pod,
        &[
            "affinity",
            "podAntiAffinity",
            "preferredDuringSchedulingIgnoredDuringExecution",
            "0",
        ],
    )
    .expect("a preferred anti-affinity by default");
    assert_eq!(
        str_at(term, &["podAffinityTerm", "topologyKey"]),
        Some("kubernetes.io/hostname")
    );
    selects_operator(
        &docs,
        at(term, &["podAffinityTerm", "labelSelector", "matchLabels"]).unwrap(),
    );
    assert!(
        at(
            pod,
            &[
                "affinity",
                "podAntiAffinity",
                "requiredDuringSchedulingIgnoredDuringExecution"
            ]
        )
        .is_none(),
        "a required anti-affinity would leave the second replica pending on one node"
    );
    let (key, when, spread) = only_spread(pod);
    assert_eq!((key, when), ("kubernetes.io/hostname", "ScheduleAnyway"));
    assert_eq!(at(spread, &["maxSkew"]), Some(&Value::from(1)));
    // A rolling update's new pods spread among themselves, not by the old.
    assert_eq!(
        at(spread, &["matchLabelKeys"]),
        Some(&Value::Sequence(vec![Value::from("pod-template-hash")]))
    );
    selects_operator(
        &docs,
        at(spread, &["labelSelector", "matchLabels"]).unwrap(),
    );

    // The user's affinity and constraints replace the defaults whole.
    let docs = render(&[
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].key=pool",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator=In",
        "affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].values[0]=system",
        "topologySpreadConstraints[0].maxSkew=1",
        "topologySpreadConstraints[0].topologyKey=topology.kubernetes.io/zone",
        "topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
    ]);
    let pod = pod_spec(&docs);
    let affinity = at(pod, &["affinity"])
        .and_then(Value::as_mapping)
        .expect("the user's affinity");
    assert_eq!(
        affinity.keys().collect::<Vec<_>>(),
        [&Value::from("nodeAffinity")],
        "no default anti-affinity beside the user's"
    );
    let (key, when, _) = only_spread(pod);
    assert_eq!(
        (key, when),
        ("topology.kubernetes.io/zone", "DoNotSchedule")
    );
}

/// The pod's one spread constraint: its topologyKey, its
/// whenUnsatisfiable, and the whole of it.
fn only_spread(pod: &Value) -> (&str, &str, &Value) {
    let spread = at(pod, &["topologySpreadConstraints"])
        .and_then(Value::as_sequence)
        .expect("spread constraints");
    assert_eq!(spread.len(), 1, "{spread:?}");
    let only = &spread[0];
    let field = |name| str_at(only, &[name]).unwrap_or_default();
    (field("topologyKey"), field("whenUnsatisfiable"), only)
}

#[test]
fn the_pods_go_to_amd64_nodes_beside_the_users_node_selector() {
    let node_selector = |sets: &[&str]| {
        let docs = render(sets);
        at(pod_spec(&docs), &["nodeSelector"])
            .and_then(Value::as_mapping)
            .expect("a nodeSelector")
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().unwrap().to_string(),
                    v.as_str().unwrap().to_string(),
                )
            })
            .collect::<Vec<_>>()
    };
    let pair = |k: &str, v: &str| (k.to_string(), v.to_string());
    assert_eq!(node_selector(&[]), [pair("kubernetes.io/arch", "amd64")]);
    assert_eq!(
        node_selector(&["nodeSelector.pool=system"]),
        [pair("kubernetes.io/arch", "amd64"), pair("pool", "system")]
    );
    // The user's value wins (an image of their own build, say).
    assert_eq!(
        node_selector(&["nodeSelector.kubernetes\\.io/arch=arm64"]),
        [pair("kubernetes.io/arch", "arm64")]
    );
}

#[test]
fn a_priority_class_is_rendered_when_set() {
    let docs = render(&[]);
    assert!(at(pod_spec(&docs), &["priorityClassName"]).is_none());
    let docs = render(&["priorityClassName=system-cluster-critical"]);
    assert_eq!(
        str_at(pod_spec(&docs), &["priorityClassName"]),
        Some("system-cluster-critical")
    );
}
