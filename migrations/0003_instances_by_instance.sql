-- The pool loop asks of an EC2 instance id across all of its rows, ended or
-- not: whether any row was ever written for it (an instance with none is a
-- leak) and how many runs it has served (maxUses). The partial index of
-- 0002 covers live rows only, so both were a scan of every row the pool has
-- ever had, one more per run.
create index instances_instance on orca.instances (instance);
