//! A container's environment: `envFrom` and `env` from Secrets, ConfigMaps
//! and the downward API, and Kubernetes' `$(VAR)` expansion.

use super::*;

/// The container's environment from `envFrom` and `env`, or why it cannot
/// be made (a kubelet's `CreateContainerConfigError`).
pub(super) async fn container_env(
    ctx: &Ctx,
    pod: &Pod,
    container: &Container,
) -> Result<BTreeMap<String, String>, String> {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    let mut env = BTreeMap::new();
    for from in container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let data = if let Some(r) = &from.config_map_ref {
            config_map_data(&config_maps, &r.name)
                .await?
                .or_else(|| r.optional.unwrap_or(false).then(BTreeMap::new))
                .ok_or_else(|| format!("configmap {:?} not found", r.name))?
        } else if let Some(r) = &from.secret_ref {
            secret_data(&secrets, &r.name)
                .await?
                .or_else(|| r.optional.unwrap_or(false).then(BTreeMap::new))
                .ok_or_else(|| format!("secret {:?} not found", r.name))?
        } else {
            BTreeMap::new()
        };
        for (key, value) in data {
            let name = format!("{prefix}{key}");
            if !name.is_empty() && !name.contains(['=', '\0']) {
                env.insert(name, value);
            }
        }
    }
    for var in container.env.iter().flatten() {
        let value = match (&var.value, &var.value_from) {
            (_, Some(from)) => {
                if let Some(r) = &from.secret_key_ref {
                    let data = secret_data(&secrets, &r.name).await?;
                    match data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => Some(v.clone()),
                        None if r.optional.unwrap_or(false) => None,
                        None if data.is_none() => {
                            return Err(format!("secret {:?} not found", r.name))
                        }
                        None => {
                            return Err(format!(
                                "couldn't find key {} in Secret {namespace}/{}",
                                r.key, r.name
                            ))
                        }
                    }
                } else if let Some(r) = &from.config_map_key_ref {
                    let data = config_map_data(&config_maps, &r.name).await?;
                    match data.as_ref().and_then(|d| d.get(&r.key)) {
                        Some(v) => Some(v.clone()),
                        None if r.optional.unwrap_or(false) => None,
                        None if data.is_none() => {
                            return Err(format!("configmap {:?} not found", r.name))
                        }
                        None => {
                            return Err(format!(
                                "couldn't find key {} in ConfigMap {namespace}/{}",
                                r.key, r.name
                            ))
                        }
                    }
                } else if let Some(r) = &from.field_ref {
                    Some(field(pod, &ctx.node, &r.field_path)?)
                } else {
                    return Err(format!(
                        "env {}: the test node supports only value, secretKeyRef, configMapKeyRef and fieldRef",
                        var.name
                    ));
                }
            }
            (Some(value), None) => Some(expand(value, &env)),
            (None, None) => Some(String::new()),
        };
        if let Some(value) = value {
            env.insert(var.name.clone(), value);
        }
    }
    Ok(env)
}

/// A Secret's data, `None` if there is no such Secret.
async fn secret_data(
    api: &Api<Secret>,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>, String> {
    let secret = api
        .get_opt(name)
        .await
        .map_err(|e| format!("cannot get secret {name:?}: {e}"))?;
    Ok(secret.map(|s| {
        let mut data: BTreeMap<String, String> = s
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect();
        data.extend(s.string_data.unwrap_or_default());
        data
    }))
}

/// A ConfigMap's data, `None` if there is no such ConfigMap.
async fn config_map_data(
    api: &Api<ConfigMap>,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>, String> {
    let map = api
        .get_opt(name)
        .await
        .map_err(|e| format!("cannot get configmap {name:?}: {e}"))?;
    Ok(map.map(|m| {
        let mut data: BTreeMap<String, String> = m
            .binary_data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
            .collect();
        data.extend(m.data.unwrap_or_default());
        data
    }))
}

/// A `fieldRef`'s value: the fields the downward API offers for env.
fn field(pod: &Pod, node: &str, path: &str) -> Result<String, String> {
    let meta = &pod.metadata;
    let spec = pod.spec.as_ref();
    let quoted = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|rest| rest.strip_prefix("['"))
            .and_then(|rest| rest.strip_suffix("']"))
            .map(str::to_string)
    };
    let value = match path {
        "metadata.name" => meta.name.clone(),
        "metadata.namespace" => meta.namespace.clone(),
        "metadata.uid" => meta.uid.clone(),
        "spec.nodeName" => Some(node.to_string()),
        "spec.serviceAccountName" => spec.and_then(|s| s.service_account_name.clone()),
        "status.podIP" | "status.hostIP" => Some(LOOPBACK.to_string()),
        _ => {
            if let Some(key) = quoted("metadata.labels") {
                meta.labels.as_ref().and_then(|l| l.get(&key).cloned())
            } else if let Some(key) = quoted("metadata.annotations") {
                meta.annotations.as_ref().and_then(|a| a.get(&key).cloned())
            } else {
                return Err(format!("fieldRef {path}: not supported by the test node"));
            }
        }
    };
    Ok(value.unwrap_or_default())
}

/// Kubernetes' `$(VAR)` expansion: a defined variable's value; `$$` is a
/// `$`; anything else is left as written.
pub(super) fn expand(text: &str, vars: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(r) = after.strip_prefix('$') {
            out.push('$');
            rest = r;
        } else if let Some((name, r)) = after.strip_prefix('(').and_then(|r| r.split_once(')')) {
            match vars.get(name) {
                Some(value) => out.push_str(value),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = r;
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}
