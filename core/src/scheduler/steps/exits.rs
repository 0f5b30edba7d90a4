//! The exit step: the current pod exited — stop-the-world on 75 with
//! overlap on (overlap refused), else a restart after a back-off that
//! doubles while it dies young — or its container cannot start; and what
//! it says (`OverlapRefused`, `PodRestarted`, `PodFailed`, the kubelet's
//! reason).

use std::time::Duration;

use super::{drain::ask_drain, start::create_pod};
use super::{secs, Steps};
use crate::backoff::doubling;
use crate::crd::Phase;
use crate::scheduler::{
    draft::{first_line, StatusDraft},
    revision::new_pod,
    snapshot::*,
};

/// The current pod exited: stop-the-world on 75 (overlap refused),
/// else recreate it after a back-off. Either way it is current no more.
pub(in crate::scheduler) fn current_exited(s: &mut Steps<'_>, d: &mut StatusDraft) {
    let o = s.o;
    let Some(pod) = s.current else {
        return;
    };
    let PodState::Exited {
        code,
        message,
        finished,
    } = &pod.state()
    else {
        return;
    };
    s.handled.push(pod.name());
    s.current = None;
    if *code == 75 && o.spec().overlap {
        let live: Vec<&InstanceView> = s.instances.iter().filter(|i| i.live()).collect();
        stop_the_world(d, pod, message);
        for i in live.iter().filter(|i| i.drain_asked().is_none()) {
            ask_drain(
                d,
                i,
                "stop-the-world: the new image refused to start beside it",
            );
        }
        if live.is_empty() && s.may_start {
            d.act(Action::DeletePod {
                name: pod.name().to_string(),
            });
            create_pod(s, d);
        }
        return;
    }
    // The back-off doubles with each pod that died young, and starts
    // again once one ran stably: counted from its container's start, so
    // an image pull is not a run.
    let ran = *finished - pod.started().unwrap_or(pod.created());
    let stable = ran >= secs(STABLE_SECONDS);
    let restarts = if stable {
        0
    } else {
        d.recent_restarts().clamp(0, 5) as u32
    };
    let backoff = doubling(Duration::from_secs(10), restarts, Duration::from_secs(320));
    let due = *finished + secs(backoff.as_secs() as i64);
    if o.now() >= due && s.may_start {
        d.act(Action::DeletePod {
            name: pod.name().to_string(),
        });
        pod_restarted(d, pod, *code, stable, s.next_sequence);
        d.act(new_pod(o, s.target, s.next_sequence, &o.spec().image));
    } else {
        crash_backoff(
            d,
            pod,
            *code,
            message,
            (due - o.now()).to_std().unwrap_or(Duration::from_secs(1)),
        );
    }
}

/// A current container that cannot start (its image, its config) is
/// said at once, whatever the phase.
pub(in crate::scheduler) fn cannot_run(s: &Steps<'_>, d: &mut StatusDraft) {
    let Some(pod) = s.current else {
        return;
    };
    if let Some(waiting) = pod
        .waiting()
        .as_ref()
        .filter(|w| CANNOT_RUN.contains(&w.reason()))
    {
        cannot_start(d, pod, waiting);
    }
}

/// The dead current `pod` is replaced by pod `sequence` of its revision;
/// one that ran `stable` starts the back-off again.
pub(in crate::scheduler) fn pod_restarted(
    d: &mut StatusDraft,
    pod: &PodView,
    code: i32,
    stable: bool,
    sequence: u32,
) {
    d.status_mut().restarts += 1;
    d.status_mut().recent_restarts = if stable {
        1
    } else {
        d.status().recent_restarts.saturating_add(1)
    };
    d.event(Event::warning(
        "PodRestarted",
        format!(
            "pod {} exited with code {code}; starting its revision again (restart {})",
            pod.name(),
            d.status().restarts
        ),
    ));
    d.status_mut().last_sequence = sequence as i64;
    d.busy(Phase::Starting);
}

/// A pod that ran this long before it died was not crash-looping.
const STABLE_SECONDS: i64 = 600;
/// The kubelet's reasons for a container that will not run until someone
/// changes something (the image, a Secret): said at once as `Degraded`.
const CANNOT_RUN: [&str; 4] = [
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
];

pub(in crate::scheduler) fn crash_backoff(
    d: &mut StatusDraft,
    pod: &PodView,
    code: i32,
    message: &str,
    wait: Duration,
) {
    let why = if message.is_empty() {
        String::new()
    } else {
        format!(": {}", first_line(message))
    };
    d.degrade(
        "PodFailed",
        format!(
            "pod {} exited with code {code}{why}; starting it again in {}s",
            pod.name(),
            wait.as_secs().max(1)
        ),
    );
    d.requeue_within(wait.max(Duration::from_secs(1)));
}

pub(in crate::scheduler) fn stop_the_world(d: &mut StatusDraft, pod: &PodView, message: &str) {
    d.busy(Phase::HandingOver);
    let already = d
        .observed()
        .status()
        .conditions
        .iter()
        .any(|c| c.type_ == "Progressing" && c.reason == "StopTheWorld");
    if !already {
        d.event(Event::warning(
            "OverlapRefused",
            format!(
                "pod {} refused to start beside the running scheduler ({}); stop-the-world: the old instances drain and end first",
                pod.name(),
                first_line(message)
            ),
        ));
    }
    d.stop_the_world();
}

/// `pod`'s container cannot start until something is changed (its
/// image, a Secret), as the kubelet says.
pub(in crate::scheduler) fn cannot_start(d: &mut StatusDraft, pod: &PodView, waiting: &Waiting) {
    let why = if waiting.message().is_empty() {
        String::new()
    } else {
        format!(": {}", first_line(waiting.message()))
    };
    d.degrade(
        waiting.reason(),
        format!(
            "pod {} ({}) cannot start its container ({}){why}",
            pod.name(),
            pod.image(),
            waiting.reason()
        ),
    );
}
