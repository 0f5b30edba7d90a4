//! One way to set a status condition, for both controllers: Kubernetes API
//! conventions — one condition per type, `lastTransitionTime` moved only
//! when `status` changes, the generation it was computed for.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Why something a resource needs cannot be had (its database: the Secret,
/// the URL, the server): the `Degraded` condition it sets, for either
/// controller.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    /// CamelCase, e.g. `SecretMissing`, `DatabaseUnreachable`.
    pub reason: String,
    /// One line, never a password.
    pub message: String,
}

/// Sets condition `type_` in `conditions` to `on` with `reason` and
/// `message`; its transition time stays while its status does not change
/// (a failing pass repeated does not move it), else becomes `now`.
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: &str,
    on: bool,
    reason: &str,
    message: &str,
    now: Time,
    generation: Option<i64>,
) {
    let status = if on { "True" } else { "False" };
    let since = conditions
        .iter()
        .find(|c| c.type_ == type_ && c.status == status)
        .map(|c| c.last_transition_time.clone())
        .unwrap_or(now);
    let condition = Condition {
        type_: type_.into(),
        status: status.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: since,
        observed_generation: generation,
    };
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => *c = condition,
        None => conditions.push(condition),
    }
}

/// Sets `Degraded` True with `reason` and `message` (see
/// [`set_condition`]): both controllers' one way to say a problem.
pub fn set_degraded(
    conditions: &mut Vec<Condition>,
    reason: &str,
    message: &str,
    now: Time,
    generation: Option<i64>,
) {
    set_condition(
        conditions, "Degraded", true, reason, message, now, generation,
    );
}

/// Whether `conditions` say `Degraded` True with this `reason` and
/// `message` already: saying it again is no news (no Event, no write).
pub fn degraded_already(conditions: &[Condition], reason: &str, message: &str) -> bool {
    conditions.iter().any(|c| {
        c.type_ == "Degraded" && c.status == "True" && c.reason == reason && c.message == message
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Time {
        Time(s.parse().unwrap())
    }

    #[test]
    fn the_transition_time_moves_only_when_the_status_does() {
        let mut c = Vec::new();
        set_condition(
            &mut c,
            "Degraded",
            true,
            "A",
            "a",
            at("2026-01-01T00:00:00Z"),
            Some(1),
        );
        set_condition(
            &mut c,
            "Degraded",
            true,
            "B",
            "b",
            at("2026-01-01T00:01:00Z"),
            Some(2),
        );
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].reason.as_str(), c[0].message.as_str()), ("B", "b"));
        assert_eq!(c[0].last_transition_time, at("2026-01-01T00:00:00Z"));
        assert_eq!(c[0].observed_generation, Some(2));
        set_condition(
            &mut c,
            "Degraded",
            false,
            "AsExpected",
            "",
            at("2026-01-01T00:02:00Z"),
            Some(2),
        );
        assert_eq!(c[0].last_transition_time, at("2026-01-01T00:02:00Z"));
        assert_eq!(c[0].status, "False");
    }
}
