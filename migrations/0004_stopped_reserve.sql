-- The stopped reserve: a pool may keep instances stopped (no compute bill)
-- and start them when runs need them. A `warm` row the operator took for
-- the reserve is `reserved` (no longer idle, so no hand-out takes it, and its
-- agent waits for the stop); one it started again is `woken` until the
-- instance's agent, booted again, marks it idle and clears both.
alter table orca.instances
    add column reserved timestamptz,
    add column woken timestamptz;
