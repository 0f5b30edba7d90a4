//! The pool agent's architecture against a pool's instance types. Pure.
//!
//! The agent is built for x86_64 only (as the operator's image is). An
//! instance type that does not run it would boot no agent and end as a
//! boot time-out, billed meanwhile. EC2 says which architectures each type
//! runs (`DescribeInstanceTypes`, [`super::ec2::TypeFacts`]): the
//! offerings of a type that does not run the agent's are held, like an
//! offering without capacity, for as long as the spec lists it, and the
//! pool is `Degraded` naming each.

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};

use super::{
    ec2::{TypeFacts, AGENT_ARCHITECTURE, UNSUPPORTED_ARCHITECTURE},
    holds::Holds,
    instance::offerings,
};
use crate::crd::Launch;

/// Of `launch`'s instance types, those `known` says do not run the
/// agent's architecture. A type EC2 did not describe, or described with no
/// architecture, is not known and not among them.
pub fn foreign<'a>(launch: &Launch, known: &'a HashMap<String, TypeFacts>) -> Vec<&'a TypeFacts> {
    launch
        .instance_types
        .iter()
        .filter_map(|t| known.get(t))
        .filter(|f| {
            !f.architectures().is_empty()
                && !f.architectures().iter().any(|a| a == AGENT_ARCHITECTURE)
        })
        .collect()
}

/// Holds (until `until`) every offering of `launch` of a `foreign` type,
/// with the code [`UNSUPPORTED_ARCHITECTURE`], after letting go of those
/// held so before (the spec may list them no more); what the pool's
/// `Degraded` condition says, if any is held.
pub fn hold(
    launch: &Launch,
    foreign: &[&TypeFacts],
    holds: &mut Holds,
    until: DateTime<Utc>,
) -> Option<String> {
    holds.release(UNSUPPORTED_ARCHITECTURE);
    if foreign.is_empty() {
        return None;
    }
    let names: HashSet<&str> = foreign.iter().map(|f| f.name().as_str()).collect();
    for o in offerings(launch) {
        if names.contains(o.instance_type()) {
            holds.insert(o, UNSUPPORTED_ARCHITECTURE, until);
        }
    }
    let named: Vec<String> = foreign
        .iter()
        .map(|f| format!("{} ({})", f.name(), f.architectures().join(", ")))
        .collect();
    let rest = if names.len() == launch.instance_types.len() {
        "nothing is launched"
    } else {
        "only the other types are launched"
    };
    Some(format!(
        "launch.instanceTypes lists {}, which cannot run the pool agent (built for {AGENT_ARCHITECTURE}): {rest}; list {AGENT_ARCHITECTURE} types",
        named.join(", ")
    ))
}
