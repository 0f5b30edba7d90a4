//! maxInstances over every small pool, and a pool of ten thousand.

use super::*;

// Not a row: a property of the plan over every small pool, not one snapshot's.
#[test]
fn retirements_and_launches_together_never_exceed_max_instances() {
    // Every combination of a small pool: whatever the plan does, the
    // instances left plus those launched stay within maxInstances.
    for cap in 1..6 {
        for idle in 0..6usize {
            for busy in 0..4usize {
                for demand in 0..6i64 {
                    let s = spec(2, 3, cap);
                    let mut instances = Vec::new();
                    let mut rows = Vec::new();
                    for k in 0..idle {
                        let id = format!("i-i{k}");
                        instances.push(inst(&id, 100));
                        rows.push(idle_row(k as i64, &id, k as f64));
                    }
                    for k in 0..busy {
                        let id = format!("i-b{k}");
                        instances.push(inst(&id, 100));
                        rows.push(busy_row(50 + k as i64, &id));
                    }
                    let sn = Snapshot::default()
                        .with_instances(instances)
                        .with_rows(rows)
                        .with_demand(demand);
                    let p = run(&s, &sn);
                    let after = (idle + busy) as i64 - p.retirements.len() as i64
                        + i64::from(p.launch_count());
                    assert!(
                        after <= i64::from(cap).max((idle + busy) as i64),
                        "cap {cap} idle {idle} busy {busy} demand {demand}: {after}"
                    );
                    assert!(i64::from(p.counts.idle) <= 3 + demand);
                }
            }
        }
    }
}

// Not a row: a plan at scale, checked in the aggregate.
#[test]
fn ten_thousand_instances_plan_quickly_enough_to_matter_only_in_the_bench() {
    // Correctness at scale; the timing is `bench pool`'s job.
    let s = spec(100, 200, 20_000);
    let mut instances = Vec::new();
    let mut rows = Vec::new();
    for k in 0..10_000 {
        let id = format!("i-{k:017x}");
        instances.push(inst(&id, 1000));
        if k % 2 == 0 {
            rows.push(idle_row(k, &id, k as f64));
        } else {
            rows.push(busy_row(k, &id));
        }
    }
    let p = run(&s, &snap(instances, rows));
    assert_eq!(p.counts.idle, 200);
    assert_eq!(p.counts.busy, 5000);
    assert_eq!(p.retirements.len(), 4800);
    // The longest idle go: the rows with the largest idle_secs.
    assert!(p
        .retirements
        .iter()
        .all(|r| r.instance.as_str() >= "i-00000000000000190"));
}
