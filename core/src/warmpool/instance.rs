//! What the pool is made of, as EC2 sees it: the offerings a launch spec
//! allows (an instance type in a subnet, spot or on-demand) and the
//! instances `DescribeInstances` lists. Pure data, read by the plan, the
//! drift check and the quota holds.

use chrono::{DateTime, Utc};

use crate::crd::{CapacityType, Launch};

/// Where an instance can be launched: an instance type in a subnet. An empty
/// field means "as the launch template says".
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Offering {
    pub instance_type: String,
    pub subnet: String,
    /// Spot capacity rather than on-demand.
    pub spot: bool,
}

impl std::fmt::Display for Offering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let or = |s: &str| if s.is_empty() { "template" } else { s }.to_string();
        write!(f, "{} in {}", or(&self.instance_type), or(&self.subnet))?;
        if self.spot {
            write!(f, " (spot)")?;
        }
        Ok(())
    }
}

/// The offerings of a launch spec in the order they are tried: each type
/// in every subnet, then the next type; with `spotThenOnDemand`, all of
/// them as spot first, then all of them on-demand.
pub fn offerings(launch: &Launch) -> Vec<Offering> {
    let markets: &[bool] = match launch.capacity_type {
        CapacityType::OnDemand => &[false],
        CapacityType::Spot => &[true],
        CapacityType::SpotThenOnDemand => &[true, false],
    };
    markets
        .iter()
        .flat_map(|spot| {
            in_market(launch)
                .into_iter()
                .map(move |o| Offering { spot: *spot, ..o })
        })
        .collect()
}

fn in_market(launch: &Launch) -> Vec<Offering> {
    let or_template = |v: &[String]| {
        if v.is_empty() {
            vec![String::new()]
        } else {
            v.to_vec()
        }
    };
    let subnets = or_template(&launch.subnet_ids);
    or_template(&launch.instance_types)
        .into_iter()
        .flat_map(|t| {
            subnets.iter().map(move |s| Offering {
                instance_type: t.clone(),
                subnet: s.clone(),
                spot: false,
            })
        })
        .collect()
}

/// EC2's instance states.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ec2State {
    Pending,
    Running,
    ShuttingDown,
    Terminated,
    Stopping,
    Stopped,
}

impl Ec2State {
    /// Whether the instance still exists (and counts against
    /// `maxInstances`): anything but shutting down or terminated.
    pub fn is_present(self) -> bool {
        !matches!(self, Ec2State::ShuttingDown | Ec2State::Terminated)
    }
}

/// An instance with the pool's ownership tags, as `DescribeInstances` lists it.
#[derive(Clone, Debug, PartialEq)]
pub struct Ec2Instance {
    pub id: String,
    pub state: Ec2State,
    pub launched: DateTime<Utc>,
    pub offering: Offering,
    /// The hash of the launch spec it came from (tag `orca.dev/launch`,
    /// see [`super::drift`]); `None` for one launched before instances
    /// carried it.
    pub launch: Option<String>,
    /// Which image that spec launched (tag `orca.dev/image`), for people;
    /// for one launched before instances carried the tag, its AMI as EC2
    /// reports it.
    pub image: Option<String>,
    /// The launch template version it was launched from, resolved to a
    /// number (tag `orca.dev/template-version`); `None` without a template,
    /// or for one launched before instances carried it.
    pub template_version: Option<String>,
}

impl Ec2Instance {
    /// One known only by its id and state (launched `launched`): no
    /// offering, launch spec, image or template version on record.
    pub fn bare(id: &str, state: Ec2State, launched: DateTime<Utc>) -> Self {
        Ec2Instance {
            id: id.into(),
            state,
            launched,
            offering: Offering::default(),
            launch: None,
            image: None,
            template_version: None,
        }
    }
}
