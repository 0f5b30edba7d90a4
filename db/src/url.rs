//! libpq-style database URLs (`postgres://user:pass@host:port/db?sslmode=…`
//! or `host=… dbname=…`), with `sslmode` and `sslrootcert` handled here
//! because tokio-postgres knows neither `verify-full` nor `sslrootcert`.

use std::{fmt, path::PathBuf, str::FromStr};

use tokio_postgres::config::{Config, Host};

use crate::DbError;

/// How TLS is used, as libpq's `sslmode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SslMode {
    /// Plain TCP.
    Disable,
    /// TLS if the server offers it, unverified (libpq's default).
    Prefer,
    /// TLS or nothing, unverified.
    Require,
    /// TLS, the chain verified against `sslrootcert` (or the system's roots)
    /// and the host name checked.
    VerifyFull,
}

/// A parsed database URL. Its `Debug` and `Display` never show the password.
#[derive(Clone)]
pub struct DatabaseUrl {
    config: Config,
    ssl_mode: SslMode,
    root_cert: Option<PathBuf>,
    /// A CA bundle given with the URL (a Secret's key), used instead of the
    /// `sslrootcert` file.
    root_pem: Option<std::sync::Arc<Vec<u8>>>,
}

impl DatabaseUrl {
    /// The connection's settings, the password among them.
    pub(crate) fn config(&self) -> &Config {
        &self.config
    }

    /// Its `sslrootcert` file, if any.
    pub(crate) fn root_cert(&self) -> Option<&PathBuf> {
        self.root_cert.as_ref()
    }

    /// The CA bundle given with it, if any (used instead of the file).
    pub(crate) fn given_ca(&self) -> Option<&std::sync::Arc<Vec<u8>>> {
        self.root_pem.as_ref()
    }

    /// Parses a libpq-style URL or key=value string.
    pub fn parse(text: &str) -> Result<Self, DbError> {
        let secret = password_in(text);
        let hide = |msg: String| match &secret {
            Some(p) if !p.is_empty() => msg.replace(p.as_str(), "***"),
            _ => msg,
        };
        let text = text.trim();
        if text.is_empty() {
            return Err(DbError::Url("it is empty".into()));
        }
        let (rest, params) = take_params(text).map_err(|m| DbError::Url(hide(m)))?;
        let mut ssl_mode = SslMode::Prefer;
        let mut root_cert = None;
        for (key, value) in params {
            match key.as_str() {
                "sslmode" => {
                    ssl_mode = match value.as_str() {
                        "disable" => SslMode::Disable,
                        "allow" | "prefer" => SslMode::Prefer,
                        "require" => SslMode::Require,
                        "verify-full" => SslMode::VerifyFull,
                        other => {
                            return Err(DbError::Url(hide(format!(
                            "sslmode `{other}` is not one of disable, prefer, require, verify-full"
                        ))))
                        }
                    }
                }
                _ => root_cert = Some(PathBuf::from(value)),
            }
        }
        let config = Config::from_str(&rest).map_err(|e| DbError::Url(hide(e.to_string())))?;
        if config.get_hosts().is_empty() {
            return Err(DbError::Url("it names no host".into()));
        }
        Ok(DatabaseUrl {
            config,
            ssl_mode,
            root_cert,
            root_pem: None,
        })
    }

    /// Reads and parses the URL in environment variable `var`.
    pub fn from_env(var: &'static str) -> Result<Self, DbError> {
        match std::env::var(var) {
            Ok(v) if !v.trim().is_empty() => Self::parse(&v),
            _ => Err(DbError::MissingUrl(var)),
        }
    }

    /// `host:port/dbname`, for messages: no user, no password.
    pub fn target(&self) -> String {
        let host = match self.config.get_hosts().first() {
            Some(Host::Tcp(h)) => h.clone(),
            Some(Host::Unix(p)) => p.display().to_string(),
            None => "?".into(),
        };
        let port = self.config.get_ports().first().copied().unwrap_or(5432);
        let db = self
            .config
            .get_dbname()
            .or(self.config.get_user())
            .unwrap_or("postgres");
        format!("{host}:{port}/{db}")
    }

    /// How the server's certificate is checked (`sslmode`).
    pub fn ssl_mode(&self) -> SslMode {
        self.ssl_mode
    }

    /// The same URL, its server checked against the CA bundle `pem` (PEM
    /// text, e.g. from a Secret) rather than its `sslrootcert` file.
    pub fn with_root_pem(mut self, pem: Vec<u8>) -> Self {
        self.root_pem = Some(std::sync::Arc::new(pem));
        self
    }

    /// The same server with another database: what the test harness and the
    /// local mode use to hand out fresh databases.
    pub fn with_dbname(&self, dbname: &str) -> Self {
        let mut other = self.clone();
        other.config.dbname(dbname);
        other
    }
}

impl fmt::Debug for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "DatabaseUrl({})", self.target())
    }
}

impl fmt::Display for DatabaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.target())
    }
}

/// `text` — output nobody vetted, an instance's console say — with the
/// database URL `url` and the password in it replaced by `***`.
pub fn scrub(text: &str, url: &str) -> String {
    let mut out = text.to_string();
    if !url.trim().is_empty() {
        out = out.replace(url.trim(), "***");
    }
    match password_in(url) {
        Some(p) if !p.is_empty() => out.replace(p.as_str(), "***"),
        _ => out,
    }
}

/// The password a URL carries, found without trusting it to parse, so that
/// even the message about a malformed URL can leave it out.
fn password_in(text: &str) -> Option<String> {
    if let Some(after) = text.split_once("://").map(|(_, r)| r) {
        let authority = after.split(['/', '?']).next().unwrap_or("");
        let userinfo = authority.rsplit_once('@')?.0;
        return userinfo.split_once(':').map(|(_, p)| p.to_string());
    }
    text.split_whitespace()
        .find_map(|kv| kv.strip_prefix("password="))
        .map(|p| p.trim_matches('\'').to_string())
}

/// Splits `sslmode` and `sslrootcert` off a URL or key=value string.
fn take_params(text: &str) -> Result<(String, Vec<(String, String)>), String> {
    let wanted = |k: &str| k == "sslmode" || k == "sslrootcert";
    let mut taken = Vec::new();
    if text.starts_with("postgres://") || text.starts_with("postgresql://") {
        let Some((base, query)) = text.split_once('?') else {
            return Ok((text.to_string(), taken));
        };
        let mut kept = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            if wanted(k) {
                taken.push((k.to_string(), percent_decode(v)?));
            } else {
                kept.push(pair);
            }
        }
        let rest = if kept.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", kept.join("&"))
        };
        return Ok((rest, taken));
    }
    let mut kept = Vec::new();
    for word in text.split_whitespace() {
        match word.split_once('=') {
            Some((k, v)) if wanted(k) => taken.push((k.to_string(), v.trim_matches('\'').into())),
            _ => kept.push(word),
        }
    }
    Ok((kept.join(" "), taken))
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("a bad %-escape in its parameters")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "a parameter that is not UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_forms() {
        let cases = [
            (
                "postgres://u:pw@db.example:6432/orca",
                "db.example:6432/orca",
                SslMode::Prefer,
            ),
            (
                "postgresql://u@10.0.0.1/orca?sslmode=verify-full&sslrootcert=%2Ftmp%2Fca.pem",
                "10.0.0.1:5432/orca",
                SslMode::VerifyFull,
            ),
            (
                "host=h port=7 dbname=d user=u password=pw sslmode=disable",
                "h:7/d",
                SslMode::Disable,
            ),
            (
                "postgres://u:pw@h/d?sslmode=require&application_name=x",
                "h:5432/d",
                SslMode::Require,
            ),
        ];
        for (text, target, mode) in cases {
            let url = DatabaseUrl::parse(text).unwrap();
            assert_eq!(url.target(), target, "{text}");
            assert_eq!(url.ssl_mode(), mode, "{text}");
            assert!(!format!("{url:?} {url}").contains("pw"));
        }
        let url = DatabaseUrl::parse("postgres://u@h/d?sslrootcert=%2Ftmp%2Fca.pem").unwrap();
        assert_eq!(
            url.root_cert.as_deref(),
            Some(std::path::Path::new("/tmp/ca.pem"))
        );
    }

    #[test]
    fn malformed_urls_say_why_without_the_password() {
        let cases = [
            "",
            "postgres://u:s3cret@h:notaport/d",
            "postgres://u:s3cret@h/d?sslmode=sometimes",
            "postgres://u:s3cret@h/d?nonsense=1",
            "host=h password=s3cret bogus",
        ];
        for text in cases {
            let err = DatabaseUrl::parse(text).err().unwrap().to_string();
            assert!(err.starts_with("malformed database URL: "), "{err}");
            assert!(!err.contains("s3cret"), "{err}");
            assert!(!err.contains('\n'), "{err}");
        }
    }
}
