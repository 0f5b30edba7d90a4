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
    instance_type: String,
    subnet: String,
    /// Spot capacity rather than on-demand.
    spot: bool,
}

impl Offering {
    /// Of its parts, as the fields say.
    pub fn new(instance_type: String, subnet: String, spot: bool) -> Self {
        Offering {
            instance_type,
            subnet,
            spot,
        }
    }

    /// The instance type; empty: the launch template's.
    pub fn instance_type(&self) -> &str {
        &self.instance_type
    }

    /// The subnet; empty: the launch template's.
    pub fn subnet(&self) -> &str {
        &self.subnet
    }

    /// Spot capacity rather than on-demand.
    pub fn spot(&self) -> bool {
        self.spot
    }
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
    id: String,
    state: Ec2State,
    launched: DateTime<Utc>,
    offering: Offering,
    /// The hash of the launch spec it came from (tag `orca.dev/launch`,
    /// see [`super::drift`]); `None` for one launched before instances
    /// carried it.
    launch: Option<String>,
    /// Which image that spec launched (tag `orca.dev/image`), for people;
    /// for one launched before instances carried the tag, its AMI as EC2
    /// reports it.
    image: Option<String>,
    /// The launch template version it was launched from, resolved to a
    /// number (tag `orca.dev/template-version`); `None` without a template,
    /// or for one launched before instances carried it.
    template_version: Option<String>,
}

impl Ec2Instance {
    /// These, with `state` set.
    pub fn with_state(self, state: Ec2State) -> Self {
        Ec2Instance { state, ..self }
    }

    /// These, with `offering` set.
    pub fn with_offering(self, offering: Offering) -> Self {
        Ec2Instance { offering, ..self }
    }

    /// These, with `launch` set.
    pub fn with_launch(self, launch: Option<String>) -> Self {
        Ec2Instance { launch, ..self }
    }

    /// These, with `image` set.
    pub fn with_image(self, image: Option<String>) -> Self {
        Ec2Instance { image, ..self }
    }

    /// These, with `template_version` set.
    pub fn with_template_version(self, template_version: Option<String>) -> Self {
        Ec2Instance {
            template_version,
            ..self
        }
    }

    /// The instance's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// Its state as EC2 last listed it.
    pub fn state(&self) -> Ec2State {
        self.state
    }

    /// When EC2 launched it, by EC2's clock.
    pub fn launched(&self) -> DateTime<Utc> {
        self.launched
    }

    /// What it was launched as: type, subnet, spot or not.
    pub fn offering(&self) -> &Offering {
        &self.offering
    }

    /// The hash of the launch spec it came from (tag `orca.dev/launch`,
    /// see [`super::drift`]); `None` for one launched before instances
    /// carried it.
    pub fn launch(&self) -> Option<&str> {
        self.launch.as_deref()
    }

    /// Which image that spec launched (tag `orca.dev/image`), for people;
    /// for one launched before instances carried the tag, its AMI as EC2
    /// reports it.
    pub fn image(&self) -> Option<&str> {
        self.image.as_deref()
    }

    /// The launch template version it was launched from, resolved to a
    /// number (tag `orca.dev/template-version`); `None` without a template,
    /// or for one launched before instances carried it.
    pub fn template_version(&self) -> Option<&str> {
        self.template_version.as_deref()
    }

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
