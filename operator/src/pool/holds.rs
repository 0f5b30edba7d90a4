//! How far one refused launch or start reaches: which of the pool's
//! offerings a capacity or quota error holds.
//!
//! A capacity error is about one place (that type in that subnet, in that
//! market). A quota error is the account's: the older per-type instance
//! limit holds that type in every subnet; a vCPU limit holds every type of
//! the same quota class in the same market; the spot instance limit holds
//! every spot offering. Asking the other offerings the same quota only
//! spends API calls and time before the launch that can succeed.

use super::instance::Offering;

/// The offerings of `all` (and `refused` itself) that an error `code` on
/// `refused` holds.
pub fn held_by(refused: &Offering, code: &str, all: &[Offering]) -> Vec<Offering> {
    let reach = |o: &Offering| match code {
        "InstanceLimitExceeded" => {
            o.spot == refused.spot && o.instance_type == refused.instance_type
        }
        "VcpuLimitExceeded" => {
            o.spot == refused.spot
                && quota_class(&o.instance_type) == quota_class(&refused.instance_type)
        }
        "MaxSpotInstanceCountExceeded" => o.spot && refused.spot,
        _ => o == refused,
    };
    let mut held: Vec<Offering> = all.iter().filter(|o| reach(o)).cloned().collect();
    if !held.contains(refused) {
        held.push(refused.clone());
    }
    held
}

/// Whether `code` holds more than the offering it came from.
pub fn is_wide(code: &str) -> bool {
    matches!(
        code,
        "InstanceLimitExceeded" | "VcpuLimitExceeded" | "MaxSpotInstanceCountExceeded"
    )
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
        Offering {
            instance_type: instance_type.into(),
            subnet: subnet.into(),
            spot,
        }
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
        let table: [(&str, Vec<Offering>); 5] = [
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
        assert!(held.iter().all(|o| o.spot), "{held:?}");
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
