//! `decide` as a table: a snapshot in, the actions, phase and reason out.
//! Each phase's cases are in a file of their own; [`fixtures`] makes the
//! snapshots they start from.

// fixtures — what the cases of the decide table are made of.
mod fixtures;

// conditions — the status conditions.
mod conditions;
// database — what the database shows.
mod database;
// deadlines — the progress deadline, the join time-out, and an image that cannot run.
mod deadlines;
// handover — an overlapping handover.
mod handover;
// names — the names of pods, Jobs and labels.
mod names;
// recreate — overlap off.
mod recreate;
// registration — the register Job.
mod registration;
// restarts — a pod that died.
mod restarts;
// start — a first start, from the first pod to `Ready`.
mod start;
// supersede — a rollout aborted at its join time-out, or overtaken by another spec.
mod supersede;
// windows — maintenance windows.
mod windows;

use fixtures::*;

/// Every case of every phase, as one table.
fn cases() -> Vec<Case> {
    start::first_start_cases()
        .into_iter()
        .chain(handover::handover_cases())
        .chain(supersede::supersede_cases())
        .chain(recreate::overlap_off_cases())
        .chain(restarts::died_cases())
        .chain(restarts::restart_cases())
        .chain(database::stale_cases())
        .chain(database::shared_database_cases())
        .chain(deadlines::deadline_cases())
        .chain(registration::register_cases())
        .chain(windows::window_cases())
        .collect()
}

/// Every case is run, and every case that does not hold is named.
#[test]
fn decide_table() {
    let all = cases();
    assert!(all.len() >= 30, "the table keeps at least 30 cases");
    let mut wrong = Vec::new();
    for case in all {
        let d = decide(&case.observed);
        let reason = degraded_reason(&d);
        let got = (d.actions().to_vec(), d.status().phase, reason);
        let want = (case.actions, case.phase, case.degraded.map(String::from));
        if got != want {
            wrong.push(format!("{}:\n  want {want:?}\n  got  {got:?}", case.name));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} case(s):\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
