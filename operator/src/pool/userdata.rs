//! The user-data script of a pool instance (docs/protocol.md#row-life-cycle):
//! install itself as a per-boot script (an instance of the stopped reserve
//! boots again on each start), learn the instance id from IMDSv2, then loop
//! `pool-next` → `runCommand` (with `pool-watch` beside it) → `pool-next`,
//! and power off when `pool-next` exits non-zero (1: the instance was
//! retired, left for a spot notice, or waited `idleSeconds` and a minute for
//! nothing).
//!
//! User-data is readable by anyone allowed `ec2:DescribeInstanceAttribute`,
//! so `launch.databaseUrlFile` (a file baked into the image) is the safer
//! way to give the agent its database URL: then the script only names the
//! file, and no password is in it.

use crate::crd::WarmPoolSpec;

/// Where the agent gets `ORCA_DATABASE_URL`.
#[derive(Clone, Copy, Debug)]
pub enum DatabaseSource<'a> {
    /// Written into the script: carries the password.
    Url(&'a str),
    /// A file on the image holding the URL.
    File(&'a str),
}

impl<'a> DatabaseSource<'a> {
    /// The spec's choice: its `databaseUrlFile` if set, else `url`.
    pub fn for_spec(spec: &'a WarmPoolSpec, url: &'a str) -> Self {
        match &spec.launch.database_url_file {
            Some(file) => DatabaseSource::File(file),
            None => DatabaseSource::Url(url),
        }
    }
}

/// Quotes `s` for a POSIX shell: one single-quoted word.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Renders the script for the pool `pool` (`namespace/name`).
pub fn render(spec: &WarmPoolSpec, pool: &str, db: DatabaseSource<'_>) -> String {
    let database = match db {
        DatabaseSource::Url(url) => format!("ORCA_DATABASE_URL={}", shell_quote(url)),
        DatabaseSource::File(file) => format!(
            "ORCA_DATABASE_URL=$(cat {}) || {{ echo 'orca: cannot read the database URL file' >&2; halt_now; }}",
            shell_quote(file)
        ),
    };
    format!(
        r#"#!/bin/sh
# orca warm pool instance of {pool_comment}: rendered by orca-operator.
set -u
halt_now() {{ shutdown -h now 2>/dev/null || poweroff; exit 1; }}
# cloud-init runs user-data on the first boot only; a reserve instance is
# stopped and started again, so the script copies itself to run on every boot.
PER_BOOT=${{ORCA_PER_BOOT_DIR:-/var/lib/cloud/scripts/per-boot}}
if [ -f "$0" ] && [ "$(dirname "$0")" != "$PER_BOOT" ]; then
    mkdir -p "$PER_BOOT" && cp "$0" "$PER_BOOT/orca-pool" && chmod 0700 "$PER_BOOT/orca-pool" \
        || echo 'orca: cannot install the script for later boots' >&2
fi
ORCA_POOL={pool}
export ORCA_POOL
{database}
export ORCA_DATABASE_URL
AGENT={agent}
RUN_COMMAND={run_command}
IMDS=http://169.254.169.254/latest
tries=0
until TOKEN=$(curl -sf -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' "$IMDS/api/token") \
    && ORCA_INSTANCE=$(curl -sf -H "X-aws-ec2-metadata-token: $TOKEN" "$IMDS/meta-data/instance-id"); do
    tries=$((tries + 1))
    [ "$tries" -lt 120 ] || halt_now
    sleep 1
done
export ORCA_INSTANCE
run=0
start=0
# pool-next prints `next <run> <start> <head address> <0|1>` and exits 0, or
# exits 1 when the instance is done: then it powers off (and terminates).
while line=$("$AGENT" pool-next "$ORCA_INSTANCE" "$run" "$start" {seconds}); do
    [ "$(echo "$line" | cut -d' ' -f1)" = next ] || break
    run=$(echo "$line" | cut -d' ' -f2)
    start=$(echo "$line" | cut -d' ' -f3)
    # While the run goes on, pool-watch records a spot notice on its row.
    "$AGENT" pool-watch "$ORCA_INSTANCE" &
    watch=$!
    ORCA_RUN=$run ORCA_START=$start \
        ORCA_HEAD=$(echo "$line" | cut -d' ' -f4) \
        ORCA_NEW_CODE=$(echo "$line" | cut -d' ' -f5) \
        sh -c "$RUN_COMMAND" || echo "orca: run $run at $start exited $?" >&2
    kill "$watch" 2>/dev/null
    wait "$watch" 2>/dev/null
done
halt_now
"#,
        pool_comment = pool.replace('\n', " "),
        pool = shell_quote(pool),
        database = database,
        agent = shell_quote(&spec.launch.agent_path),
        run_command = shell_quote(&spec.launch.run_command),
        seconds = spec.idle_seconds.max(1),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }
}
