-- The stopped reserve: a pool may keep instances stopped (no compute bill)
-- and start them when runs need them. A `warm` row the operator took for
-- the reserve is `reserved` (no longer idle, so no hand-out takes it, and its
-- agent waits for the stop); one it started again is `woken`. The
-- instance's agent, booted again, marks it idle and clears `reserved`;
-- `woken` stays, so a hand-out of the row counts as served from the reserve.
alter table orca.instances
    add column reserved timestamptz,
    add column woken timestamptz;
-- The pool loop counts the hand-outs since its last pass: idle, from the
-- reserve, or after a wait.
create index instances_handed_out on orca.instances (pool, ended) where ended_by = 'handout';
