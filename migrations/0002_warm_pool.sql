-- The EC2 side of the warm pool (seed 000, SPEC §2): a row per
-- (instance, run, start).
create table orca.instances (
    id           bigserial primary key,
    instance     text not null,
    pool         text not null,
    run          bigint,
    start        integer not null default 0,
    role         text not null check (role in ('head', 'worker', 'warm')),
    head_address text not null default '',
    new_code     boolean not null default false,
    pooled       boolean not null default false,
    created      timestamptz not null default now(),
    joined       timestamptz,
    idle         timestamptz,
    polled       timestamptz,
    ended        timestamptz,
    ended_by     text check (ended_by in ('handout', 'scheduler', 'agent', 'operator')),
    check ((ended is null) = (ended_by is null))
);
-- At most one live row per instance: a double hand-out is impossible.
create unique index instances_one_live on orca.instances (instance) where ended is null;
-- hand_out and the pool loop: the live rows of a pool.
create index instances_pool_live on orca.instances (pool, idle) where ended is null;
create index instances_run on orca.instances (run, start);

-- Runs that found no idle instance; the operator launches for the unserved.
create table orca.pool_demand (
    id     bigserial primary key,
    pool   text not null,
    run    bigint not null,
    start  integer not null,
    role   text not null check (role in ('head', 'worker')),
    asked  timestamptz not null default now(),
    served timestamptz
);
-- A run asking again while it waits is the same demand.
create unique index pool_demand_open on orca.pool_demand (pool, run, start, role) where served is null;

-- The agent of an instance wakes on orca_i_<instance>; the operator's pool
-- loop on orca_pool (payload: the pool).
create function orca.instances_notify() returns trigger language plpgsql as $$
begin
    if tg_op = 'INSERT' or (old.ended is null and new.ended is not null) then
        perform pg_notify('orca_i_' || new.instance, new.id::text);
    end if;
    perform pg_notify('orca_pool', new.pool);
    return null;
end $$;
create trigger instances_notify after insert or update of ended, idle on orca.instances
    for each row execute function orca.instances_notify();

create function orca.pool_demand_notify() returns trigger language plpgsql as $$
begin
    perform pg_notify('orca_pool', new.pool);
    return null;
end $$;
create trigger pool_demand_notify after insert on orca.pool_demand
    for each row execute function orca.pool_demand_notify();
