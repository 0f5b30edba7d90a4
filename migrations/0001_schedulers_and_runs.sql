-- Scheduler instances (seed 002, SPEC §2): a row per scheduler process
-- running with ORCA_OVERLAP=on.
create table orca.schedulers (
    id          bigserial primary key,
    host        text not null,
    pid         integer not null,
    backend_pid integer,
    image       text not null default '',
    migrations  integer not null,
    role        text not null default 'waiting'
                check (role in ('waiting', 'leading', 'draining')),
    running     text not null default '',
    drain_asked timestamptz,
    joined      timestamptz not null default now(),
    seen        timestamptz not null default now(),
    led         timestamptz,
    drained     timestamptz,
    ended       timestamptz
);
-- live_cond and newer look only at rows that have not ended.
create index schedulers_live on orca.schedulers (id) where ended is null;

-- The part of morca's runs that this project reads and writes.
create table orca.runs (
    id        bigserial primary key,
    pipeline  text not null,
    status    text not null default 'queued'
              check (status in ('queued', 'running', 'succeeded', 'failed', 'deferred', 'cancelled')),
    start     integer not null default 0,
    owner     text,
    heartbeat timestamptz,
    instance  bigint,
    created   timestamptz not null default now()
);
create index runs_active on orca.runs (status, id) where status in ('queued', 'running');

-- pool-wait and other waiters on a run: a change of status or start.
create function orca.runs_notify() returns trigger language plpgsql as $$
begin
    perform pg_notify('orca_run_' || new.id, new.status || ' ' || new.start);
    return null;
end $$;
create trigger runs_notify after update of status, start on orca.runs
    for each row
    when (old.status is distinct from new.status or old.start is distinct from new.start)
    execute function orca.runs_notify();
