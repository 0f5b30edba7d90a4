//! Status: the containers' states and the pod's status, as a kubelet
//! reports them.

use super::*;

#[derive(Clone, Debug, PartialEq)]
pub(super) enum State {
    Waiting {
        reason: String,
        message: String,
    },
    Running {
        started: String,
    },
    Terminated {
        code: i32,
        reason: String,
        message: String,
        started: Option<String>,
        finished: String,
    },
}

impl State {
    pub(super) fn code(&self) -> Option<i32> {
        match self {
            State::Terminated { code, .. } => Some(*code),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub(super) struct ContainerStatus {
    name: String,
    image: String,
    pid: Option<u32>,
    state: State,
    /// Whether its readiness probe passes; `None`: it has none, and is
    /// ready while it runs.
    ready: Option<bool>,
    /// How often it was restarted (`restartCount`).
    restarts: u32,
}

impl ContainerStatus {
    /// Container `name` of `image`, its process `pid`, in `state`, its probe's
    /// last answer `ready` and `restarts` restarts.
    pub fn new(
        name: String,
        image: String,
        pid: Option<u32>,
        state: State,
        ready: Option<bool>,
        restarts: u32,
    ) -> Self {
        ContainerStatus {
            name,
            image,
            pid,
            state,
            ready,
            restarts,
        }
    }
}

impl ContainerStatus {
    /// The container's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its process, once started.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Waiting, running or terminated, as its status says.
    pub fn state(&self) -> &State {
        &self.state
    }
}

impl ContainerStatus {
    /// Container `c` in `state`, with no process yet, no probe and no
    /// restart.
    pub(super) fn of(c: &Container, state: State) -> Self {
        ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            pid: None,
            ready: None,
            restarts: 0,
            state,
        }
    }

    /// This, its readiness probe's last answer `ready`.
    pub(super) fn with_ready(mut self, ready: Option<bool>) -> Self {
        self.ready = ready;
        self
    }

    /// Its state is now `state`.
    pub(super) fn set_state(&mut self, state: State) {
        self.state = state;
    }

    pub(super) fn running(&self) -> bool {
        matches!(self.state, State::Running { .. })
    }

    /// Running, and its readiness probe (if any) passes.
    pub(super) fn is_ready(&self) -> bool {
        self.running() && self.ready.unwrap_or(true)
    }

    fn to_json(&self) -> Value {
        let with_message = |mut v: Value, message: &str| {
            if !message.is_empty() {
                v["message"] = json!(message);
            }
            v
        };
        let state = match &self.state {
            State::Waiting { reason, message } => {
                json!({"waiting": with_message(json!({"reason": reason}), message)})
            }
            State::Running { started } => json!({"running": {"startedAt": started}}),
            State::Terminated {
                code,
                reason,
                message,
                started,
                finished,
            } => {
                let mut t = with_message(
                    json!({"exitCode": code, "reason": reason, "finishedAt": finished}),
                    message,
                );
                if let Some(started) = started {
                    t["startedAt"] = json!(started);
                }
                json!({ "terminated": t })
            }
        };
        let mut status = json!({
            "name": self.name,
            "image": self.image,
            "imageID": self.image,
            "restartCount": self.restarts,
            "ready": self.is_ready(),
            "started": self.running(),
            "state": state,
        });
        if let Some(pid) = self.pid {
            status["containerID"] = json!(format!("orca-test://{pid}"));
        }
        status
    }
}

/// A status patch for the pod: `phase`, its addresses, conditions and
/// containers.
pub(super) fn pod_status(phase: &str, start: &str, containers: &[ContainerStatus]) -> Value {
    let ready = !containers.is_empty() && containers.iter().all(ContainerStatus::is_ready);
    let changed = now();
    let condition = |kind: &str, since: &str| {
        let mut c = json!({"type": kind, "status": "True", "lastTransitionTime": since});
        if !ready && matches!(kind, "ContainersReady" | "Ready") {
            c["status"] = json!("False");
            if matches!(phase, "Succeeded" | "Failed") {
                c["reason"] = json!("PodCompleted");
            } else {
                let unready: Vec<&str> = containers
                    .iter()
                    .filter(|c| !c.is_ready())
                    .map(|c| c.name.as_str())
                    .collect();
                c["reason"] = json!("ContainersNotReady");
                c["message"] = json!(format!(
                    "containers with unready status: [{}]",
                    unready.join(" ")
                ));
            }
        }
        c
    };
    json!({
        "status": {
            "phase": phase,
            "hostIP": LOOPBACK,
            "hostIPs": [{"ip": LOOPBACK}],
            "podIP": LOOPBACK,
            "podIPs": [{"ip": LOOPBACK}],
            "startTime": start,
            "conditions": [
                condition("PodScheduled", start),
                condition("Initialized", start),
                condition("ContainersReady", &changed),
                condition("Ready", &changed),
            ],
            "containerStatuses": containers.iter().map(ContainerStatus::to_json).collect::<Vec<_>>(),
        }
    })
}
