//! Hand-outs racing the agent giving up: never lost.

use super::*;

/// Hand-outs that won after the agent had decided to give up.
static CLOSE_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Races run again as their agent never reached the database in time.
static RERUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// What an agent that never reached its database says as it powers off.
const UNREACHABLE: &str = "the database could not be reached by the deadline";

/// One race of a hand-out against the agent giving up: whether the
/// hand-out won, or what went wrong.
async fn race(url: String, db: &mut orca_db::Db, i: i64) -> Result<bool, String> {
    let run = 10_000 + i;
    // An agent that cannot reach the database within its second (60
    // starting at once on a loaded machine) powers off before it is
    // idle: no race was run, so it is run again, on a pool of its own.
    let mut attempt = 0;
    let (agent, instance, pool_name) = loop {
        let instance = format!("i-race{i}-{attempt}");
        let pool_name = format!("race/{i}/{attempt}");
        let mut agent = Agent::fresh(&url, &instance, &pool_name, "0", "1000");
        if agent.idle_within(Duration::from_secs(20)).await {
            break (agent, instance, pool_name);
        }
        let (code, out, err) = agent.exit_within(Duration::from_secs(1)).await;
        if attempt == 4 || !err.contains(UNREACHABLE) {
            return Err(format!(
                "race {i}: the agent exited {code} printing {out:?} before it was idle; stderr:\n{err}"
            ));
        }
        RERUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        attempt += 1;
    };
    // The agent gives up a second after going idle, by the database's
    // clock: the hand-out comes from 500 ms before that to 250 ms after,
    // timed by the database too (pg_sleep), since this test's own timers lag
    // under load. The second leaves room for the lag before the sleep.
    let offset = ((i * 7919) % 750 - 500) as f64 / 1000.0;
    db.execute(
        "select pg_sleep(greatest(0, extract(epoch from idle + interval '1 s' - clock_timestamp())::float8 + $2))
         from orca.instances where instance = $1",
        &[&instance, &offset],
    )
    .await
    .map_err(|e| e.to_string())?;
    let req = request(&pool_name, run, 0, "worker", "10.1.1.1:1", false);
    let handed = pool::hand_out(db, &req, FRESH)
        .await
        .map_err(|e| e.to_string())?;
    let (code, out, err) = agent.exit_within(Duration::from_secs(20)).await;
    if err.contains("handed out while giving up") {
        CLOSE_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
    match (handed, code) {
        (Some(h), 0)
            if h.instance() == instance && out == format!("next {run} 0 10.1.1.1:1 0\n") =>
        {
            Ok(true)
        }
        (None, 1) if out.is_empty() => Ok(false),
        (handed, code) => Err(format!(
            "race {i}: hand-out {handed:?}, agent exited {code} printing {out:?}; stderr:\n{err}"
        )),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_hand_outs_racing_the_agent_giving_up_are_never_lost() {
    let url = pg::Cluster::shared().migrated_db().await;
    const RACES: i64 = 1000;
    const AT_ONCE: i64 = 60;
    let mut lanes = Vec::new();
    for lane in 0..AT_ONCE {
        let url = url.clone();
        lanes.push(tokio::spawn(async move {
            let mut db = pg::connect(&url).await;
            let mut won = 0;
            let mut i = lane;
            while i < RACES {
                if race(url.clone(), &mut db, i).await? {
                    won += 1;
                }
                i += AT_ONCE;
            }
            Ok::<i64, String>(won)
        }));
    }
    let mut won = 0;
    for lane in lanes {
        won += lane.await.unwrap().unwrap_or_else(|e| panic!("{e}"));
    }
    eprintln!(
        "{won} of {RACES} hand-outs won the race, {} of them after the agent had decided to give up; {} races run again",
        CLOSE_CALLS.load(std::sync::atomic::Ordering::Relaxed),
        RERUNS.load(std::sync::atomic::Ordering::Relaxed)
    );
    // Both outcomes happened, so the races were real.
    assert!(won > 0 && won < RACES, "{won} of {RACES} hand-outs won");
    // And the database agrees: a joined row for every hand-out won, an
    // agent's end for every one lost.
    let db = pg::connect(&url).await;
    let row = db
        .query_one(
            "select count(*) filter (where pooled and joined is not null),
                    count(*) filter (where role = 'warm' and ended_by = 'agent'),
                    count(*) filter (where pooled and joined is null)
             from orca.instances",
            &[],
        )
        .await
        .unwrap();
    let (joined, gave_up, unjoined): (i64, i64, i64) = (row.get(0), row.get(1), row.get(2));
    assert_eq!((joined, gave_up, unjoined), (won, RACES - won, 0));
}
