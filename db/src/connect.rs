//! One way to connect for every component: host names resolved in Rust (no
//! glibc NSS, so the static agent works), a timeout on the whole connect and
//! on every statement, client TCP keepalives and `tcp_user_timeout`, and the
//! same limits asked of the server so it notices a vanished client quickly
//! (what frees a dead leader's lock within seconds).

use std::{
    net::{IpAddr, SocketAddr},
    time::Duration,
};

use futures::future::poll_fn;
use socket2::{SockRef, TcpKeepalive};
use tokio::{
    net::{TcpStream, UnixStream},
    sync::mpsc,
    task::AbortHandle,
    time::timeout,
};
use tokio_postgres::{
    config::{Host, SslMode as PgSslMode},
    tls::MakeTlsConnect,
    types::ToSql,
    AsyncMessage, Client, Notification, Row, Transaction,
};

use crate::{
    error::{said, DbError},
    tls,
    url::{DatabaseUrl, SslMode},
};

/// Limits for one connection.
#[derive(Clone, Debug)]
pub struct ConnectOptions {
    /// The whole connect: resolving, TCP, TLS and start-up.
    connect_timeout: Duration,
    /// Each statement, on the server (`statement_timeout`) and, a little
    /// later, on the client, which then drops the connection.
    statement_timeout: Duration,
    /// Dead-peer detection: keepalive idle time, and `tcp_user_timeout`
    /// (which is this times three), on both ends.
    keepalive: Duration,
    /// `application_name`, so `pg_stat_activity` shows who is who.
    application_name: String,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        ConnectOptions {
            connect_timeout: Duration::from_secs(5),
            statement_timeout: Duration::from_secs(10),
            keepalive: Duration::from_secs(3),
            application_name: "orca".into(),
        }
    }
}

impl ConnectOptions {
    pub fn named(application_name: &str) -> Self {
        ConnectOptions {
            application_name: application_name.into(),
            ..Default::default()
        }
    }

    /// These options with the whole connect limited to `d`.
    pub fn with_connect_timeout(self, d: Duration) -> Self {
        ConnectOptions {
            connect_timeout: d,
            ..self
        }
    }

    /// These options with each statement limited to `d`.
    pub fn with_statement_timeout(self, d: Duration) -> Self {
        ConnectOptions {
            statement_timeout: d,
            ..self
        }
    }

    /// These options with dead-peer detection after `d` idle.
    pub fn with_keepalive(self, d: Duration) -> Self {
        ConnectOptions {
            keepalive: d,
            ..self
        }
    }
}

/// A connection, with its notifications (LISTEN) on a channel of their own.
pub struct Db {
    client: Client,
    notifications: mpsc::UnboundedReceiver<Notification>,
    task: AbortHandle,
    target: String,
    limit: Duration,
}

impl Drop for Db {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Connects to `url` within `opts.connect_timeout`.
pub async fn connect(url: &DatabaseUrl, opts: &ConnectOptions) -> Result<Db, DbError> {
    let target = url.target();
    match timeout(opts.connect_timeout, connect_inner(url, opts, &target)).await {
        Ok(result) => result,
        Err(_) => Err(DbError::Connect {
            target,
            reason: format!("no answer within {:?}", opts.connect_timeout),
        }),
    }
}

async fn connect_inner(
    url: &DatabaseUrl,
    opts: &ConnectOptions,
    target: &str,
) -> Result<Db, DbError> {
    let fail = |reason: String| DbError::Connect {
        target: target.to_string(),
        reason,
    };
    let mut config = url.config().clone();
    config.ssl_mode(match url.ssl_mode() {
        SslMode::Disable => PgSslMode::Disable,
        SslMode::Prefer => PgSslMode::Prefer,
        SslMode::Require | SslMode::VerifyFull => PgSslMode::Require,
    });
    config.application_name(&opts.application_name);
    let ms = |d: Duration| d.as_millis().max(1);
    let secs = |d: Duration| d.as_secs().max(1);
    let server_limits = format!(
        "-c statement_timeout={} -c tcp_keepalives_idle={} -c tcp_keepalives_interval={} -c tcp_keepalives_count=3 -c tcp_user_timeout={}",
        ms(opts.statement_timeout),
        secs(opts.keepalive),
        secs(opts.keepalive),
        ms(opts.keepalive * 3),
    );
    let options = match config.get_options() {
        Some(own) if !own.is_empty() => format!("{own} {server_limits}"),
        _ => server_limits,
    };
    config.options(&options);

    let pem = tls::root_pem(url).await.map_err(&fail)?;
    let hosts = config.get_hosts().to_vec();
    let ports = config.get_ports().to_vec();
    let mut last = String::from("no host to try");
    // A server that refused the credentials, if every host failed.
    let mut refused = false;
    for (i, host) in hosts.iter().enumerate() {
        let port = ports.get(i).or(ports.first()).copied().unwrap_or(5432);
        let (client, connection) = match host {
            Host::Unix(dir) => {
                let path = dir.join(format!(".s.PGSQL.{port}"));
                let stream = match UnixStream::connect(&path).await {
                    Ok(s) => s,
                    Err(e) => {
                        last = format!("{}: {e}", path.display());
                        continue;
                    }
                };
                match config.connect_raw(stream, tokio_postgres::NoTls).await {
                    Ok((c, conn)) => (c, spawn_connection(conn)),
                    Err(e) => {
                        refused |= is_refusal(&e);
                        last = said(&e);
                        continue;
                    }
                }
            }
            Host::Tcp(name) => {
                let stream = match tcp(name, port, opts).await {
                    Ok(s) => s,
                    Err(e) => {
                        last = e;
                        continue;
                    }
                };
                let mut make =
                    tls::connector(url, pem.as_deref().map(Vec::as_slice)).map_err(&fail)?;
                let tls = <_ as MakeTlsConnect<TcpStream>>::make_tls_connect(&mut make, name)
                    .map_err(|e| fail(format!("TLS set-up: {e}")))?;
                match config.connect_raw(stream, tls).await {
                    Ok((c, conn)) => (c, spawn_connection(conn)),
                    Err(e) => {
                        refused |= is_refusal(&e);
                        last = said(&e);
                        continue;
                    }
                }
            }
        };
        let (task, notifications) = connection;
        return Ok(Db {
            client,
            notifications,
            task,
            target: target.to_string(),
            limit: opts.statement_timeout + Duration::from_secs(2),
        });
    }
    if refused {
        return Err(DbError::Refused {
            target: target.to_string(),
            reason: last,
        });
    }
    Err(fail(last))
}

/// SQLSTATE class 28, invalid authorization: the server refused the
/// user or its password.
fn is_refusal(e: &tokio_postgres::Error) -> bool {
    e.code().is_some_and(|c| c.code().starts_with("28"))
}

type Spawned = (AbortHandle, mpsc::UnboundedReceiver<Notification>);

/// Drives the connection, forwarding notifications; it ends with it.
fn spawn_connection<S, T>(mut conn: tokio_postgres::Connection<S, T>) -> Spawned
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (tx, rx) = mpsc::unbounded_channel();
    let task = tokio::spawn(async move {
        while let Some(message) = poll_fn(|cx| conn.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    let _ = tx.send(n);
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "connection ended");
                    break;
                }
            }
        }
    });
    (task.abort_handle(), rx)
}

async fn tcp(host: &str, port: u16, opts: &ConnectOptions) -> Result<TcpStream, String> {
    let addrs: Vec<IpAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![ip],
        Err(_) => resolve(host).await?,
    };
    let mut last = format!("{host}:{port}: no address");
    for ip in addrs {
        let addr = SocketAddr::new(ip, port);
        match TcpStream::connect(addr).await {
            Ok(stream) => {
                let sock = SockRef::from(&stream);
                let keepalive = TcpKeepalive::new()
                    .with_time(opts.keepalive)
                    .with_interval(opts.keepalive)
                    .with_retries(3);
                let tuned = sock
                    .set_tcp_keepalive(&keepalive)
                    .and_then(|_| sock.set_tcp_user_timeout(Some(opts.keepalive * 3)))
                    .and_then(|_| sock.set_tcp_nodelay(true));
                if let Err(e) = tuned {
                    tracing::debug!(error = %e, "could not set TCP keepalives");
                }
                return Ok(stream);
            }
            Err(e) => last = format!("{host}:{port}: {e}"),
        }
    }
    Err(last)
}

/// Resolves in Rust: `/etc/hosts` first, then the resolvers of
/// `/etc/resolv.conf`. "localhost" works without either.
async fn resolve(host: &str) -> Result<Vec<IpAddr>, String> {
    if host.eq_ignore_ascii_case("localhost") {
        return Ok(vec![
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::from([0u16, 0, 0, 0, 0, 0, 0, 1]),
        ]);
    }
    let resolver = hickory_resolver::TokioResolver::builder_tokio()
        .map_err(|e| format!("cannot read the resolver configuration: {e}"))?
        .build()
        .map_err(|e| format!("cannot start the resolver: {e}"))?;
    let found = resolver
        .lookup_ip(host)
        .await
        .map_err(|e| format!("cannot resolve {host}: {e}"))?;
    let addrs: Vec<IpAddr> = found.iter().collect();
    if addrs.is_empty() {
        return Err(format!("{host} has no address"));
    }
    Ok(addrs)
}

impl Db {
    /// `host:port/dbname` of this connection.
    pub fn target(&self) -> &str {
        &self.target
    }

    async fn limited<T, F>(&self, what: &'static str, fut: F) -> Result<T, DbError>
    where
        F: std::future::Future<Output = Result<T, tokio_postgres::Error>>,
    {
        match timeout(self.limit, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(source)) => Err(DbError::Statement {
                target: self.target.clone(),
                source,
            }),
            Err(_) => Err(DbError::Timeout {
                what,
                target: self.target.clone(),
                after: self.limit,
            }),
        }
    }

    pub async fn query(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, DbError> {
        self.limited("a query", self.client.query(sql, params))
            .await
    }

    pub async fn query_one(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Row, DbError> {
        self.limited("a query", self.client.query_one(sql, params))
            .await
    }

    pub async fn query_opt(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>, DbError> {
        self.limited("a query", self.client.query_opt(sql, params))
            .await
    }

    /// As [`Db::query`], for a statement that ends `limit <max + 1>`: its
    /// rows, or [`DbError::TooMany`] if the database had more than `max`
    /// (a partial answer is no ground to act on).
    pub async fn query_at_most(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        max: usize,
        what: &'static str,
    ) -> Result<Vec<Row>, DbError> {
        let rows = self.query(sql, params).await?;
        if rows.len() > max {
            return Err(DbError::TooMany {
                target: self.target.clone(),
                what,
                max,
            });
        }
        Ok(rows)
    }

    pub async fn execute(&self, sql: &str, params: &[&(dyn ToSql + Sync)]) -> Result<u64, DbError> {
        self.limited("a statement", self.client.execute(sql, params))
            .await
    }

    pub async fn batch(&self, sql: &str) -> Result<(), DbError> {
        self.limited("a statement", self.client.batch_execute(sql))
            .await
    }

    /// Begins a transaction; its statements are cut by the server's
    /// `statement_timeout`.
    pub async fn transaction(&mut self) -> Result<Transaction<'_>, DbError> {
        let target = self.target.clone();
        let limit = self.limit;
        match timeout(limit, self.client.transaction()).await {
            Ok(Ok(tx)) => Ok(tx),
            Ok(Err(source)) => Err(DbError::Statement { target, source }),
            Err(_) => Err(DbError::Timeout {
                what: "begin",
                target,
                after: limit,
            }),
        }
    }

    /// Wraps an error of a statement run on this connection's client or
    /// transaction.
    pub fn wrap(&self, source: tokio_postgres::Error) -> DbError {
        DbError::Statement {
            target: self.target.clone(),
            source,
        }
    }

    /// LISTENs on `channel` (quoted: instance ids hold dashes).
    pub async fn listen(&self, channel: &str) -> Result<(), DbError> {
        self.batch(&format!("listen {}", quote_ident(channel)))
            .await
    }

    /// The next notification, or `None` once the connection has ended.
    pub async fn notification(&mut self) -> Option<Notification> {
        self.notifications.recv().await
    }

    /// Takes every notification already received, without waiting.
    pub fn drain_notifications(&mut self) -> usize {
        let mut n = 0;
        while self.notifications.try_recv().is_ok() {
            n += 1;
        }
        n
    }

    pub fn is_closed(&self) -> bool {
        self.client.is_closed()
    }

    pub fn client(&self) -> &Client {
        &self.client
    }
}

/// Quotes an SQL identifier.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}
