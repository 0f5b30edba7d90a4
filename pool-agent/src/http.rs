//! Just enough HTTP/1.1 for the agent's two services, the instance
//! metadata service (plain HTTP on a link-local address) and SSM Parameter
//! Store (HTTPS): one request per connection (`Connection: close`), a time
//! limit on the whole exchange and a bound on the answer read. A client
//! library would bring a connection pool and HTTP/2 that a process making
//! a handful of calls in its life never uses.

use std::{sync::Arc, time::Duration};

use rustls::{pki_types::ServerName, ClientConfig, RootCertStore};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt},
    net::TcpStream,
};
use tokio_rustls::TlsConnector;

/// The most of an answer read: the metadata service's notices and
/// credentials, and a parameter (at most 8 KiB of value), are far less.
const MAX_ANSWER: u64 = 256 * 1024;

/// Where a service is: `http://` or `https://`, a host and a port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    /// `host:port`, to connect to.
    addr: String,
    /// The `Host` header (with the port, if one was given).
    host: String,
    /// TLS, verified against the system's roots for the host's name.
    tls: bool,
}

impl Endpoint {
    /// `addr` (`host:port`) to connect to, `host` for the `Host`
    /// header, over TLS if `tls`.
    pub fn new(addr: String, host: String, tls: bool) -> Self {
        Endpoint { addr, host, tls }
    }

    /// The `Host` header (with the port, if one was given).
    pub fn host(&self) -> &String {
        &self.host
    }

    /// TLS, verified against the system's roots for the host's name.
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// The instance metadata service's address.
    pub fn imds() -> Self {
        Endpoint {
            addr: "169.254.169.254:80".into(),
            host: "169.254.169.254".into(),
            tls: false,
        }
    }

    /// `http://<host>[:<port>]` (no TLS), with or without a trailing `/`;
    /// `None` if it is not one.
    pub fn parse_http(url: &str) -> Option<Endpoint> {
        Self::authority(url.strip_prefix("http://")?, false)
    }

    /// `http://…` or `https://<host>[:<port>]`; `None` if it is neither.
    pub fn parse(url: &str) -> Option<Endpoint> {
        match url.strip_prefix("https://") {
            Some(rest) => Self::authority(rest, true),
            None => Self::parse_http(url),
        }
    }

    fn authority(authority: &str, tls: bool) -> Option<Endpoint> {
        let authority = authority.trim_end_matches('/');
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
        let default_port = if tls { 443 } else { 80 };
        Some(Endpoint {
            addr: if has_port {
                authority.to_string()
            } else {
                format!("{authority}:{default_port}")
            },
            host: authority.to_string(),
            tls,
        })
    }

    /// The host's name, without the port: what TLS verifies.
    fn server_name(&self) -> &str {
        match self.host.rsplit_once(':') {
            Some((name, _)) if !self.host.ends_with(']') => name,
            _ => &self.host,
        }
    }
}

/// Why a call got no answer that could be used; one line each.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("a malformed answer")]
    Malformed,
    #[error("HTTP {0} to {1}")]
    Status(u16, String),
}

/// One request: `method path` with `headers` and `body`; the answer's
/// status and body, within `limit`.
pub async fn call(
    endpoint: &Endpoint,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    limit: Duration,
) -> Result<(u16, Vec<u8>), CallError> {
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", endpoint.host);
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!(
        "Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    ));
    let mut request = request.into_bytes();
    request.extend_from_slice(body);
    let exchange = async {
        let stream = TcpStream::connect(&endpoint.addr).await?;
        if endpoint.tls {
            let name = ServerName::try_from(endpoint.server_name().to_string())
                .map_err(|e| CallError::Tls(e.to_string()))?;
            let stream = TlsConnector::from(tls_config()?)
                .connect(name, stream)
                .await?;
            exchange(stream, &request).await
        } else {
            exchange(stream, &request).await
        }
    };
    let answer = tokio::time::timeout(limit, exchange)
        .await
        .map_err(|_| CallError::Timeout(limit))??;
    parse(&answer).ok_or(CallError::Malformed)
}

async fn exchange<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    request: &[u8],
) -> Result<Vec<u8>, CallError> {
    stream.write_all(request).await?;
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        // A server that keeps the connection open despite `Connection:
        // close` has answered once its Content-Length is read.
        if complete(&answer) {
            return Ok(answer);
        }
        match stream.read(&mut buf).await {
            Ok(0) => return Ok(answer),
            Ok(n) => {
                answer.extend_from_slice(&buf[..n]);
                if answer.len() as u64 > MAX_ANSWER {
                    return Err(CallError::Malformed);
                }
            }
            // A server that closes without TLS's close_notify still sent
            // its whole answer (its length is checked by the parse).
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof && !answer.is_empty() => {
                return Ok(answer)
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether `answer` holds a whole answer by its `Content-Length` (one
/// without it, or chunked, ends with the connection).
fn complete(answer: &[u8]) -> bool {
    let Some(split) = answer.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&answer[..split]);
    head.split("\r\n")
        .filter_map(|l| l.split_once(':'))
        .find(|(k, _)| k.trim().eq_ignore_ascii_case("content-length"))
        .and_then(|(_, v)| v.trim().parse::<usize>().ok())
        .is_some_and(|len| answer.len() >= split + 4 + len)
}

/// rustls on ring with the system's roots, made once.
fn tls_config() -> Result<Arc<ClientConfig>, CallError> {
    static CONFIG: std::sync::OnceLock<Result<Arc<ClientConfig>, String>> =
        std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = RootCertStore::empty();
            for cert in rustls_native_certs::load_native_certs().certs {
                // A bundle may hold certificates rustls rejects; the rest
                // are still good roots.
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err("no system root certificates".into());
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
        .map_err(CallError::Tls)
}

/// An HTTP/1.1 answer read to its end: the status and the body (by
/// `Content-Length`, chunked, or up to the close).
fn parse(answer: &[u8]) -> Option<(u16, Vec<u8>)> {
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
    Some((status, body))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(
            Endpoint::parse_http("http://127.0.0.1:8111/"),
            Some(Endpoint {
                addr: "127.0.0.1:8111".into(),
                host: "127.0.0.1:8111".into(),
                tls: false,
            })
        );
        assert_eq!(
            Endpoint::parse_http("http://169.254.169.254"),
            Some(Endpoint::imds())
        );
        let ssm = Endpoint::parse("https://ssm.eu-west-1.amazonaws.com").unwrap();
        assert_eq!(ssm.addr, "ssm.eu-west-1.amazonaws.com:443");
        assert_eq!(ssm.server_name(), "ssm.eu-west-1.amazonaws.com");
        assert!(ssm.tls);
        let ported = Endpoint::parse("https://vpce.example:8443/").unwrap();
        assert_eq!(ported.server_name(), "vpce.example");
        assert_eq!(Endpoint::parse_http("https://x"), None);
        for bad in [
            "",
            "127.0.0.1:80",
            "ftp://x",
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
        let body = |s: &str| s.as_bytes().to_vec();
        let plain =
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello";
        assert_eq!(parse(plain), Some((200, body("hello"))));
        let closed = b"HTTP/1.0 404 Not Found\r\n\r\n<html>gone</html>";
        assert_eq!(parse(closed), Some((404, body("<html>gone</html>"))));
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nabcd\r\n2;x=1\r\nef\r\n0\r\n\r\n";
        assert_eq!(parse(chunked), Some((200, body("abcdef"))));
        assert_eq!(parse(b"HTTP/1.1 200 OK\r\n"), None);
        assert_eq!(parse(b"SSH-2.0\r\n\r\n"), None);
        assert_eq!(
            parse(b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort"),
            None
        );
    }
}
