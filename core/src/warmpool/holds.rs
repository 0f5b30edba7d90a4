//! The pool's capacity holds ([`Holds`]), and how far one refused launch
//! or start reaches: which of the pool's offerings a capacity, quota or
//! subnet error holds.
//!
//! A capacity error is about one place (that type in that subnet, in that
//! market). A quota error is the account's: the older per-type instance
//! limit holds that type in every subnet; a vCPU limit holds every type of
//! the same quota class in the same market; the spot instance limit holds
//! every spot offering. Asking the other offerings the same quota only
//! spends API calls and time before the launch that can succeed. A subnet
//! EC2 does not know ([`SUBNET_CODES`]) holds every offering in it: the
//! pool's other subnets launch, and that one is not asked again for long
//! (it does not come back by waiting; a spec without it does).

use std::collections::{BTreeMap, HashMap};

use chrono::{DateTime, Utc};

use super::instance::Offering;
use crate::crd::CapacityError;

/// EC2 error codes of a launch into a subnet it does not know: deleted
/// (its id is never used again), malformed, or not one a launch may use.
/// Every offering in that subnet is held, and the pool's other subnets
/// tried: one bad subnet in a list (a class's, shared by many pools) keeps
/// none of the pools from launching in the others.
pub const SUBNET_CODES: [&str; 3] = [
    "InvalidSubnetID.NotFound",
    "InvalidSubnetID.Malformed",
    "InvalidSubnet",
];

/// The pool's offerings held for want of capacity (or of an architecture
/// the agent runs on), until when, and the code that holds each: what the
/// plan's launches and starts skip and `status.capacityErrors` shows. They
/// outlast the pass that met the error, and through the status the
/// operator that did.
#[derive(Clone, Debug, Default)]
pub struct Holds {
    until: BTreeMap<Offering, DateTime<Utc>>,
    codes: HashMap<Offering, String>,
}

impl Holds {
    /// The holds a status shows (`status.capacityErrors`), as a restarted
    /// or newly elected operator takes them up; one with no valid time is
    /// dropped, and its time returned for the caller to say.
    pub fn restore(&mut self, held: &[CapacityError]) -> Vec<String> {
        let mut dropped = Vec::new();
        for h in held {
            let Ok(until) = DateTime::parse_from_rfc3339(&h.until) else {
                dropped.push(h.until.clone());
                continue;
            };
            let offering = Offering::new(h.instance_type.clone(), h.subnet.clone(), h.spot);
            self.insert(offering, &h.code, until.with_timezone(&Utc));
        }
        dropped
    }

    /// Holds `offering` for `code` until `until`.
    pub fn insert(&mut self, offering: Offering, code: &str, until: DateTime<Utc>) {
        self.codes.insert(offering.clone(), code.to_string());
        self.until.insert(offering, until);
    }

    /// Holds `refused`, refused with `code`, and with it every offering of
    /// `all` the same quota covers ([`held_by`]), until `until`: how many
    /// are held.
    pub fn hold(
        &mut self,
        refused: &Offering,
        code: &str,
        all: &[Offering],
        until: DateTime<Utc>,
    ) -> usize {
        let held = held_by(refused, code, all);
        for o in &held {
            self.insert(o.clone(), code, until);
        }
        held.len()
    }

    /// Lets go of every hold of `code`.
    pub fn release(&mut self, code: &str) {
        let codes = &mut self.codes;
        self.until.retain(|o, _| {
            let held = codes.get(o).is_some_and(|c| c == code);
            if held {
                codes.remove(o);
            }
            !held
        });
    }

    /// Lets go of the holds that ended by `now`.
    pub fn expire(&mut self, now: DateTime<Utc>) {
        self.until.retain(|_, until| *until > now);
        let until = &self.until;
        self.codes.retain(|o, _| until.contains_key(o));
    }

    /// Whether `offering` is held at `now`.
    pub fn is_held(&self, offering: &Offering, now: DateTime<Utc>) -> bool {
        self.until.get(offering).is_some_and(|u| *u > now)
    }

    /// Each held offering and until when (what the plan skips).
    pub fn until(&self) -> &BTreeMap<Offering, DateTime<Utc>> {
        &self.until
    }

    /// Each subnet held at `now` for a [`SUBNET_CODES`] refusal, with its
    /// code and until when (the latest of its offerings').
    pub fn refused_subnets(&self, now: DateTime<Utc>) -> BTreeMap<&str, (&str, DateTime<Utc>)> {
        let mut subnets: BTreeMap<&str, (&str, DateTime<Utc>)> = BTreeMap::new();
        for (o, until) in self.until.iter().filter(|(_, u)| **u > now) {
            let Some(code) = self
                .codes
                .get(o)
                .filter(|c| SUBNET_CODES.contains(&c.as_str()))
            else {
                continue;
            };
            let entry = subnets.entry(o.subnet()).or_insert((code, *until));
            entry.1 = entry.1.max(*until);
        }
        subnets
    }

    /// The holds standing at `now`, as `status.capacityErrors` shows them.
    pub fn status(&self, now: DateTime<Utc>) -> Vec<CapacityError> {
        self.until
            .iter()
            .filter(|(_, until)| **until > now)
            .map(|(o, until)| CapacityError {
                instance_type: o.instance_type().to_string(),
                subnet: o.subnet().to_string(),
                spot: o.spot(),
                code: self
                    .codes
                    .get(o)
                    .cloned()
                    .unwrap_or_else(|| "InsufficientCapacity".into()),
                until: until.to_rfc3339(),
            })
            .collect()
    }
}

/// The offerings of `all` (and `refused` itself) that an error `code` on
/// `refused` holds.
pub fn held_by(refused: &Offering, code: &str, all: &[Offering]) -> Vec<Offering> {
    let reach = |o: &Offering| match code {
        "InstanceLimitExceeded" => {
            o.spot() == refused.spot() && o.instance_type() == refused.instance_type()
        }
        "VcpuLimitExceeded" => {
            o.spot() == refused.spot()
                && quota_class(o.instance_type()) == quota_class(refused.instance_type())
        }
        "MaxSpotInstanceCountExceeded" => o.spot() && refused.spot(),
        c if SUBNET_CODES.contains(&c) => o.subnet() == refused.subnet(),
        _ => o == refused,
    };
    let mut held: Vec<Offering> = all.iter().filter(|o| reach(o)).cloned().collect();
    if !held.contains(refused) {
        held.push(refused.clone());
    }
    held
}

/// The vCPU quota an instance type counts against: EC2 keeps one for the
/// standard families (A, C, D, H, I, M, R, T, Z) and one for each other
/// class (F, G and VT, P, X, Inf, DL, Trn, HPC, high memory). A type named
/// by the launch template (empty) is its own class.
fn quota_class(instance_type: &str) -> &str {
    let family_end = instance_type
        .find(|c: char| !c.is_ascii_alphabetic())
        .unwrap_or(instance_type.len());
    let family = &instance_type[..family_end];
    match family {
        "inf" | "dl" | "trn" | "hpc" | "mac" => family,
        "g" | "vt" => "g",
        _ if family.starts_with(|c: char| "acdhimrtz".contains(c)) => "standard",
        _ => family,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn o(instance_type: &str, subnet: &str, spot: bool) -> Offering {
        Offering::new(instance_type.into(), subnet.into(), spot)
    }

    fn all() -> Vec<Offering> {
        let mut all = Vec::new();
        for spot in [true, false] {
            for t in ["t3.small", "m5.large", "g4dn.xlarge"] {
                for s in ["subnet-a", "subnet-b"] {
                    all.push(o(t, s, spot));
                }
            }
        }
        all
    }

    #[test]
    fn each_code_holds_what_it_is_about() {
        let refused = o("t3.small", "subnet-a", false);
        let table: [(&str, Vec<Offering>); 6] = [
            ("InsufficientInstanceCapacity", vec![refused.clone()]),
            ("Unsupported", vec![refused.clone()]),
            (
                "InstanceLimitExceeded",
                vec![refused.clone(), o("t3.small", "subnet-b", false)],
            ),
            (
                "VcpuLimitExceeded",
                vec![
                    refused.clone(),
                    o("t3.small", "subnet-b", false),
                    o("m5.large", "subnet-a", false),
                    o("m5.large", "subnet-b", false),
                ],
            ),
            // On-demand refused for a spot quota: only itself.
            ("MaxSpotInstanceCountExceeded", vec![refused.clone()]),
            // A subnet EC2 does not know: every type in it, both markets.
            (
                "InvalidSubnetID.NotFound",
                vec![
                    refused.clone(),
                    o("m5.large", "subnet-a", false),
                    o("g4dn.xlarge", "subnet-a", false),
                    o("t3.small", "subnet-a", true),
                    o("m5.large", "subnet-a", true),
                    o("g4dn.xlarge", "subnet-a", true),
                ],
            ),
        ];
        for (code, want) in table {
            let mut got = held_by(&refused, code, &all());
            got.sort();
            let mut want = want;
            want.sort();
            assert_eq!(got, want, "{code}");
        }
        let spot = o("g4dn.xlarge", "subnet-b", true);
        let held = held_by(&spot, "MaxSpotInstanceCountExceeded", &all());
        assert_eq!(held.len(), 6);
        assert!(held.iter().all(|o| o.spot()), "{held:?}");
    }

    #[test]
    fn quota_classes() {
        for (t, class) in [
            ("t3.small", "standard"),
            ("m7gd.large", "standard"),
            ("c6in.xlarge", "standard"),
            ("g4dn.xlarge", "g"),
            ("vt1.3xlarge", "g"),
            ("p4d.24xlarge", "p"),
            ("inf2.xlarge", "inf"),
            ("x2iedn.xlarge", "x"),
            ("u-6tb1.metal", "u"),
            ("trn1.2xlarge", "trn"),
            ("is4gen.large", "standard"),
            ("hpc7g.4xlarge", "hpc"),
            ("", ""),
        ] {
            assert_eq!(quota_class(t), class, "{t}");
        }
    }
}
