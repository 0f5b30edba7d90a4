//! The instance's metadata service, IMDSv2 (docs/protocol.md#spot-notices):
//! just enough HTTP/1.1 to ask for a session token and read the two spot
//! notices, with a time limit on every call. A service that can't be
//! reached is said once on stderr and asked again on the next tick; it never
//! stops the agent, which then only misses the notices.

use std::time::{Duration, Instant};

use orca_db::pool::Notice;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    sync::watch,
};

/// How often the notices are read.
pub const TICK: Duration = Duration::from_secs(1);

/// The bound on one call, connect to last byte: the service answers within
/// milliseconds, and a tick must not wait on a lost one.
const CALL_LIMIT: Duration = Duration::from_secs(1);

/// What a token is asked for, and how long before that it is asked again.
const TOKEN_TTL_SECS: u64 = 21_600;
const TOKEN_RENEW_AFTER: Duration = Duration::from_secs(TOKEN_TTL_SECS - 600);

/// The most of an answer read: the notices are a few dozen bytes.
const MAX_ANSWER: u64 = 64 * 1024;

const INSTANCE_ACTION: &str = "/latest/meta-data/spot/instance-action";
const REBALANCE: &str = "/latest/meta-data/events/recommendations/rebalance";

/// Where the service is: `169.254.169.254:80`, or (tests only) the
/// `http://<host>:<port>` of `ORCA_POOL_AGENT_IMDS`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port`, to connect to.
    addr: String,
    /// The `Host` header.
    host: String,
}

impl Default for Endpoint {
    fn default() -> Self {
        Endpoint {
            addr: "169.254.169.254:80".into(),
            host: "169.254.169.254".into(),
        }
    }
}

impl Endpoint {
    /// `http://<host>[:<port>]`, with or without a trailing `/`; `None` if
    /// it is not one.
    pub fn parse(url: &str) -> Option<Endpoint> {
        let authority = url.strip_prefix("http://")?.trim_end_matches('/');
        let ok = !authority.is_empty()
            && authority
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'));
        if !ok {
            return None;
        }
        let has_port = match authority.rsplit_once(':') {
            Some((_, port)) if !authority.ends_with(']') => {
                port.parse::<u16>().ok()?;
                true
            }
            _ => false,
        };
        Some(Endpoint {
            addr: if has_port {
                authority.to_string()
            } else {
                format!("{authority}:80")
            },
            host: authority.to_string(),
        })
    }
}

/// Why a call got no answer that could be used; one line each.
#[derive(Debug, thiserror::Error)]
enum CallError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("a malformed answer")]
    Malformed,
    #[error("HTTP {0} to {1}")]
    Status(u16, &'static str),
}

/// An IMDSv2 client with its session token.
pub struct Imds {
    endpoint: Endpoint,
    token: Option<(String, Instant)>,
    /// The last failure said on stderr, so that a service that stays
    /// unreachable is said once, not every tick.
    failing: Option<String>,
    /// The strongest notice said on stderr: each is said once.
    said: Option<Notice>,
}

impl Imds {
    pub fn new(endpoint: Endpoint) -> Self {
        Imds {
            endpoint,
            token: None,
            failing: None,
            said: None,
        }
    }

    /// The strongest notice EC2 gives the instance just now; `None`, no
    /// notice, or the service could not be asked (said once on stderr).
    pub async fn notice(&mut self) -> Option<Notice> {
        match self.read_notice().await {
            Ok(notice) => {
                if self.failing.take().is_some() {
                    tracing::info!("the instance metadata service answers again");
                }
                notice
            }
            Err(e) => {
                let msg = e.to_string();
                if self.failing.as_deref() != Some(msg.as_str()) {
                    tracing::warn!(error = %msg,
                        "cannot read the instance metadata service; spot notices are missed until it answers");
                    self.failing = Some(msg);
                }
                None
            }
        }
    }

    async fn read_notice(&mut self) -> Result<Option<Notice>, CallError> {
        if let Some(action) = self.get(INSTANCE_ACTION).await? {
            if self.said < Some(Notice::Interruption) {
                tracing::warn!(
                    action = field(&action, "action").unwrap_or("?"),
                    time = field(&action, "time").unwrap_or("?"),
                    "spot interruption notice"
                );
                self.said = Some(Notice::Interruption);
            }
            return Ok(Some(Notice::Interruption));
        }
        if let Some(rebalance) = self.get(REBALANCE).await? {
            if self.said < Some(Notice::Rebalance) {
                tracing::warn!(
                    time = field(&rebalance, "noticeTime").unwrap_or("?"),
                    "rebalance recommendation"
                );
                self.said = Some(Notice::Rebalance);
            }
            return Ok(Some(Notice::Rebalance));
        }
        Ok(None)
    }

    /// The body of a 200 for `path`, `None` for a 404. A 401 (the token
    /// expired, or the service restarted) gets a new token and one more try.
    async fn get(&mut self, path: &'static str) -> Result<Option<String>, CallError> {
        for _ in 0..2 {
            let token = self.token().await?;
            let (status, body) = call(
                &self.endpoint,
                "GET",
                path,
                ("X-aws-ec2-metadata-token", &token),
            )
            .await?;
            match status {
                200 => return Ok(Some(body)),
                404 => return Ok(None),
                401 => self.token = None,
                other => return Err(CallError::Status(other, path)),
            }
        }
        Err(CallError::Status(401, path))
    }

    async fn token(&mut self) -> Result<String, CallError> {
        if let Some((token, at)) = &self.token {
            if at.elapsed() < TOKEN_RENEW_AFTER {
                return Ok(token.clone());
            }
        }
        let at = Instant::now();
        let (status, body) = call(
            &self.endpoint,
            "PUT",
            "/latest/api/token",
            (
                "X-aws-ec2-metadata-token-ttl-seconds",
                &TOKEN_TTL_SECS.to_string(),
            ),
        )
        .await?;
        let token = body.trim();
        if status != 200 {
            return Err(CallError::Status(status, "/latest/api/token"));
        }
        // The token goes into a header line: nothing may break out of it.
        if token.is_empty() || !token.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(CallError::Malformed);
        }
        self.token = Some((token.to_string(), at));
        Ok(token.to_string())
    }
}

/// Reads the notices every [`TICK`] for as long as the agent runs: the
/// strongest seen so far is in the channel (a notice, once given, is not
/// taken back). `None` (metadata disabled): nothing is read, and the
/// channel stays empty.
pub fn watch(endpoint: Option<Endpoint>) -> watch::Receiver<Option<Notice>> {
    let (tx, rx) = watch::channel(None);
    let Some(endpoint) = endpoint else {
        return rx;
    };
    let mut imds = Imds::new(endpoint);
    tokio::spawn(async move {
        loop {
            if let Some(notice) = imds.notice().await {
                tx.send_if_modified(|seen| {
                    let stronger = seen.is_none_or(|s| notice > s);
                    if stronger {
                        *seen = Some(notice);
                    }
                    stronger
                });
            }
            if *tx.borrow() == Some(Notice::Interruption) {
                // Nothing stronger can come. Keep the sender, so that
                // receivers don't see a closed channel.
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(TICK).await;
        }
    });
    rx
}

/// Waits for a new value in the channel; forever if it can have none.
pub async fn changed(rx: &mut watch::Receiver<Option<Notice>>) {
    if rx.changed().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// One request on a connection of its own (`Connection: close`), its status
/// and body.
async fn call(
    endpoint: &Endpoint,
    method: &str,
    path: &str,
    (name, value): (&str, &str),
) -> Result<(u16, String), CallError> {
    let exchange = async {
        let mut stream = TcpStream::connect(&endpoint.addr).await?;
        let request = format!(
            "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{name}: {value}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            host = endpoint.host,
        );
        stream.write_all(request.as_bytes()).await?;
        let mut answer = Vec::new();
        (&mut stream)
            .take(MAX_ANSWER)
            .read_to_end(&mut answer)
            .await?;
        Ok::<_, CallError>(answer)
    };
    let answer = tokio::time::timeout(CALL_LIMIT, exchange)
        .await
        .map_err(|_| CallError::Timeout(CALL_LIMIT))??;
    parse(&answer).ok_or(CallError::Malformed)
}

/// An HTTP/1.1 answer read to its end: the status and the body (by
/// `Content-Length`, chunked, or up to the close).
fn parse(answer: &[u8]) -> Option<(u16, String)> {
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&answer[..split]).ok()?;
    let mut body = &answer[split + 4..];
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()?
        .strip_prefix("HTTP/1.")?
        .get(2..5)?
        .parse()
        .ok()?;
    let mut chunked = false;
    for line in lines {
        let (name, value) = line.split_once(':')?;
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            body = body.get(..value.parse::<usize>().ok()?)?;
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        }
    }
    let body = if chunked {
        dechunk(body)?
    } else {
        body.to_vec()
    };
    Some((status, String::from_utf8(body).ok()?))
}

fn dechunk(mut body: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let end = body.windows(2).position(|w| w == b"\r\n")?;
        let size = std::str::from_utf8(&body[..end]).ok()?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        body = &body[end + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(body.get(..size)?);
        body = body.get(size + 2..)?;
    }
}

/// The string value of `"key"` in a flat JSON object such as
/// `{"action":"terminate","time":"…"}`; for the log line only.
fn field<'a>(json: &'a str, key: &str) -> Option<&'a str> {
    let at = json.find(&format!("\"{key}\""))? + key.len() + 2;
    let rest = json[at..].trim_start().strip_prefix(':')?.trim_start();
    let rest = rest.strip_prefix('"')?;
    let value = &rest[..rest.find('"')?];
    // A log field of one line, and short.
    (value.len() <= 64 && value.bytes().all(|b| b.is_ascii_graphic())).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:8111/"),
            Some(Endpoint {
                addr: "127.0.0.1:8111".into(),
                host: "127.0.0.1:8111".into()
            })
        );
        assert_eq!(
            Endpoint::parse("http://169.254.169.254"),
            Some(Endpoint::default())
        );
        for bad in [
            "",
            "127.0.0.1:80",
            "https://x",
            "http://",
            "http://a:b",
            "http://a b",
            "http://a:80/x",
        ] {
            assert_eq!(Endpoint::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn answers() {
        let plain =
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(parse(plain), Some((200, "hello".into())));
        let closed = b"HTTP/1.0 404 Not Found\r\n\r\n<html>gone</html>";
        assert_eq!(parse(closed), Some((404, "<html>gone</html>".into())));
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n2;x=1\r\nef\r\n0\r\n\r\n";
        assert_eq!(parse(chunked), Some((200, "abcdef".into())));
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\n"), None);
        assert_eq!(parse(b"SSH-2.0\r\n\r\n"), None);
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort"),
            None
        );
    }

    #[test]
    fn fields() {
        let action = r#"{"action": "terminate", "time":"2026-01-02T03:04:05Z"}"#;
        assert_eq!(field(action, "action"), Some("terminate"));
        assert_eq!(field(action, "time"), Some("2026-01-02T03:04:05Z"));
        assert_eq!(field(action, "noticeTime"), None);
        assert_eq!(field(r#"{"action":"a b"}"#, "action"), None);
    }
}
