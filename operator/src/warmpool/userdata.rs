//! The user-data script of a pool instance (docs/protocol.md#row-life-cycle):
//! install itself as a per-boot script (an instance of the stopped reserve
//! boots again on each start), learn the instance id from IMDSv2, then loop
//! `pool-next` → `runCommand` (with `pool-watch` beside it) → `pool-next`,
//! and power off when `pool-next` exits non-zero (1: the instance was
//! retired, left for a spot notice, or waited `idleSeconds` and a minute for
//! nothing).
//!
//! User-data is readable by anyone allowed `ec2:DescribeInstanceAttribute`
//! and by every process on the instance, so by default it holds no
//! password: it names the SSM parameter the operator keeps the URL in
//! (see [`super::ssm`]), which `orca-pool-agent database-url` reads with
//! the instance's role; or a file baked into the image
//! (`launch.databaseUrlFile`). Only `databaseUrlIn: userData` writes the
//! URL itself into the script.

use std::fmt;

use crate::crd::{DatabaseUrlIn, WarmPoolSpec};

/// Where the agent gets `ORCA_DATABASE_URL`.
#[derive(Clone, Copy)]
pub enum DatabaseSource<'a> {
    /// Written into the script: carries the password.
    Url(&'a str),
    /// A file on the image holding the URL.
    File(&'a str),
    /// An SSM parameter of `region` (at `endpoint`, if not SSM's own).
    Parameter {
        name: &'a str,
        region: &'a str,
        endpoint: Option<&'a str>,
    },
}

impl fmt::Debug for DatabaseSource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DatabaseSource::Url(_) => f.write_str("Url(***)"),
            DatabaseSource::File(file) => write!(f, "File({file:?})"),
            DatabaseSource::Parameter { name, region, .. } => {
                write!(f, "Parameter({name:?} in {region})")
            }
        }
    }
}

impl<'a> DatabaseSource<'a> {
    /// The spec's choice: its `databaseUrlFile` if set, else the parameter
    /// `parameter` of the spec's region, or `url` itself with
    /// `databaseUrlIn: userData`.
    pub fn for_spec(spec: &'a WarmPoolSpec, url: &'a str, parameter: &'a str) -> Self {
        match (&spec.launch.database_url_file, spec.launch.database_url_in) {
            (Some(file), _) => DatabaseSource::File(file),
            (None, DatabaseUrlIn::UserData) => DatabaseSource::Url(url),
            (None, DatabaseUrlIn::Parameter) => DatabaseSource::Parameter {
                name: parameter,
                region: &spec.region,
                endpoint: spec.ssm_endpoint.as_deref(),
            },
        }
    }
}

/// A rendered script. It may carry the database URL (`databaseUrlIn:
/// userData`), so its `Debug` shows only its size.
#[derive(Clone, PartialEq, Eq)]
pub struct UserData(String);

impl UserData {
    /// The script's text, for `RunInstances` only.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for UserData {
    /// A script written by hand (the tests' launches as another launcher).
    fn from(text: &str) -> Self {
        UserData(text.to_string())
    }
}

impl fmt::Debug for UserData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UserData({} bytes)", self.0.len())
    }
}

/// Quotes `s` for a POSIX shell: one single-quoted word.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Renders the script for the pool `pool` (`namespace/name`).
pub fn render(spec: &WarmPoolSpec, pool: &str, db: DatabaseSource<'_>) -> UserData {
    // Each way ends with ORCA_DATABASE_URL set (the agent and the run
    // command read it); the parameter's is read again before each run, so
    // that a run gets the URL as it is now.
    let (database, refresh) = match db {
        DatabaseSource::Url(url) => (format!("ORCA_DATABASE_URL={}", shell_quote(url)), ""),
        DatabaseSource::File(file) => (
            format!(
                "ORCA_DATABASE_URL=$(cat {file}) || halt_now \"cannot read the database URL file {file} (launch.databaseUrlFile)\"",
                file = shell_quote(file)
            ),
            "",
        ),
        DatabaseSource::Parameter {
            name,
            region,
            endpoint,
        } => (
            format!(
                "ORCA_DATABASE_URL_PARAMETER={name}\nORCA_DATABASE_URL_REGION={region}\n{endpoint}\
                 export ORCA_DATABASE_URL_PARAMETER ORCA_DATABASE_URL_REGION\n\
                 # The agent retries for a minute, with the instance role's credentials;\n\
                 # giving up, its last line says why. An agent without the command (an\n\
                 # older release's) says so with a usage error, exit 2.\n\
                 ERR=$(mktemp)\n\
                 ORCA_DATABASE_URL=$(\"$AGENT\" database-url 2>\"$ERR\") || {{\n    \
                 [ $? = 2 ] && halt_now \"the image's orca-pool-agent has no database-url command (an older release's): bake this release's agent into the image, or set launch.databaseUrlIn: userData\"\n    \
                 halt_now \"cannot read the database URL parameter: $(tail -n 1 \"$ERR\")\"\n\
                 }}",
                name = shell_quote(name),
                region = shell_quote(region),
                endpoint = endpoint
                    .map(|e| format!(
                        "ORCA_DATABASE_URL_ENDPOINT={}\nexport ORCA_DATABASE_URL_ENDPOINT\n",
                        shell_quote(e)
                    ))
                    .unwrap_or_default(),
            ),
            "    url=$(\"$AGENT\" database-url) && ORCA_DATABASE_URL=$url\n",
        ),
    };
    UserData(format!(
        r#"#!/bin/sh
# orca warm pool instance of {pool_comment}: rendered by orca-operator.
set -u
# What the operator reads from the console (GetConsoleOutput) when the
# instance ends before its agent reported: one line, the cause.
say() {{ echo "orca: $*" >&2; echo "orca: $*" >"${{ORCA_CONSOLE:-/dev/console}}" 2>/dev/null || true; }}
halt_now() {{ say "$1"; shutdown -h now 2>/dev/null || poweroff; exit 1; }}
# cloud-init runs user-data on the first boot only; a reserve instance is
# stopped and started again, so the script copies itself to run on every boot.
PER_BOOT=${{ORCA_PER_BOOT_DIR:-/var/lib/cloud/scripts/per-boot}}
if [ -f "$0" ] && [ "$(dirname "$0")" != "$PER_BOOT" ]; then
    mkdir -p "$PER_BOOT" && cp "$0" "$PER_BOOT/orca-pool" && chmod 0700 "$PER_BOOT/orca-pool" \
        || echo 'orca: cannot install the script for later boots' >&2
fi
ORCA_POOL={pool}
export ORCA_POOL
AGENT={agent}
[ -x "$AGENT" ] || halt_now "no executable orca-pool-agent at $AGENT in the image (launch.agentPath)"
RUN_COMMAND={run_command}
{database}
export ORCA_DATABASE_URL
IMDS=${{ORCA_IMDS:-http://169.254.169.254/latest}}
tries=0
until TOKEN=$(curl -sf -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' "$IMDS/api/token") \
    && ORCA_INSTANCE=$(curl -sf -H "X-aws-ec2-metadata-token: $TOKEN" "$IMDS/meta-data/instance-id"); do
    tries=$((tries + 1))
    [ "$tries" -lt 120 ] || halt_now "the instance metadata service did not answer for two minutes"
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
{refresh}    ORCA_RUN=$run ORCA_START=$start \
        ORCA_HEAD=$(echo "$line" | cut -d' ' -f4) \
        ORCA_NEW_CODE=$(echo "$line" | cut -d' ' -f5) \
        sh -c "$RUN_COMMAND" || echo "orca: run $run at $start exited $?" >&2
    kill "$watch" 2>/dev/null
    wait "$watch" 2>/dev/null
done
halt_now "no run for the instance (idleSeconds over, or the pool let it go): powering off"
"#,
        pool_comment = pool.replace('\n', " "),
        pool = shell_quote(pool),
        database = database,
        agent = shell_quote(&spec.launch.agent_path),
        run_command = shell_quote(&spec.launch.run_command),
        seconds = spec.idle_seconds.max(1),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_single_quotes() {
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }
}
