//! What the Scheduler controller does when the API server refuses one of
//! its writes for good — a 4xx other than a conflict (409) or too many
//! requests (429): a pod name it will not take, a forbidden verb, a spec it
//! finds invalid. Retrying every few seconds changes nothing and shows the
//! user nothing; instead the Scheduler goes `Degraded` with the server's
//! own message (and a Warning Event), its status is still written, and the
//! write is tried again after a long pause. Transient errors (5xx, 409,
//! 429, the network) are retried with a growing back-off instead
//! ([`crate::backoff::PerObject`]).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::act::ActError;
use crate::crd::{set_degraded, Phase, SchedulerStatus};

/// How long a refused write waits before it is tried again: the user has
/// to change something first, and a change of the spec retriggers at once.
pub const REFUSED_RETRY: Duration = Duration::from_secs(60);

/// The condition reason and message for `error`, if it is a refusal.
pub fn refusal(error: &ActError) -> Option<(&'static str, String)> {
    let ActError::Write {
        what,
        refused,
        source,
    } = error
    else {
        return None;
    };
    match source {
        kube::Error::Api(status) if is_permanent(status.code) => Some((
            *refused,
            format!("the API server refused {what}: {}", status.message),
        )),
        _ => None,
    }
}

/// 4xx, less the codes that say "try again".
fn is_permanent(code: u16) -> bool {
    (400..500).contains(&code) && code != 409 && code != 429
}

/// `status` as a refusal leaves it: `Degraded` with `reason` and the
/// server's message.
pub fn degrade(
    status: &mut SchedulerStatus,
    reason: &str,
    message: &str,
    now: Time,
    generation: Option<i64>,
) {
    status.phase = Phase::Degraded;
    set_degraded(&mut status.conditions, reason, message, now, generation);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(
                "Pod \"x\" is invalid: spec.hostname: Invalid value",
                "Invalid",
            )
            .with_code(code)
            .boxed(),
        )
    }

    #[test]
    fn a_4xx_is_a_refusal_but_a_conflict_throttling_or_5xx_is_not() {
        let pod = |code| ActError::Write {
            what: "creating pod orca-x-1".into(),
            refused: "PodRefused",
            source: api_error(code),
        };
        let (reason, message) = refusal(&pod(422)).expect("422 is a refusal");
        assert_eq!(reason, "PodRefused");
        assert!(message.contains("creating pod orca-x-1"), "{message}");
        assert!(
            message.contains("spec.hostname"),
            "the server's own words: {message}"
        );
        assert!(refusal(&pod(403)).is_some());
        for code in [409, 429, 500, 503] {
            assert!(refusal(&pod(code)).is_none(), "{code}");
        }
    }
}
