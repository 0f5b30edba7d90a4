-- Spot notices: the instance's agent reads its metadata service and records
-- here that EC2 is about to interrupt the instance (`interruption`: the
-- two-minute notice to terminate, stop or hibernate it) or recommends
-- moving its work off (`rebalance`), so that the scheduler and the operator
-- can see it on the instance's live row. `noticed` is when the database
-- recorded it; an interruption replaces a rebalance, never the other way.
alter table orca.instances
    add column notice text check (notice in ('interruption', 'rebalance')),
    add column noticed timestamptz,
    add constraint instances_notice_noticed check ((notice is null) = (noticed is null));

-- The operator's pool loops wake on a notice as on any other change of a
-- pool's rows. A trigger of its own, so the one of 0002 stays as it is.
create function orca.instances_notice_notify() returns trigger language plpgsql as $$
begin
    perform pg_notify('orca_pool', new.pool);
    return null;
end $$;
create trigger instances_notice_notify after update of notice on orca.instances
    for each row when (old.notice is distinct from new.notice)
    execute function orca.instances_notice_notify();
