//! The instance's metadata service, IMDSv2 (docs/protocol.md#spot-notices):
//! just enough HTTP/1.1 to ask for a session token and read the two spot
//! notices, with a time limit on every call. A service that can't be
//! reached is said once on stderr and asked again on the next tick; it never
//! stops the agent, which then only misses the notices.

use std::time::{Duration, Instant};

use orca_db::pool::Notice;
use tokio::sync::watch;

pub use crate::http::Endpoint;
use crate::http::{call, CallError};

/// How often the notices are read.
pub const TICK: Duration = Duration::from_secs(1);

/// The bound on one call, connect to last byte: the service answers within
/// milliseconds, and a tick must not wait on a lost one.
const CALL_LIMIT: Duration = Duration::from_secs(1);

/// What a token is asked for, and how long before that it is asked again.
const TOKEN_TTL_SECS: u64 = 21_600;
const TOKEN_RENEW_AFTER: Duration = Duration::from_secs(TOKEN_TTL_SECS - 600);

const INSTANCE_ACTION: &str = "/latest/meta-data/spot/instance-action";
const REBALANCE: &str = "/latest/meta-data/events/recommendations/rebalance";
const CREDENTIALS: &str = "/latest/meta-data/iam/security-credentials/";

/// An instance role's temporary credentials; never shown.
pub struct RoleKeys {
    access_key_id: String,
    secret_access_key: String,
    token: String,
}

impl RoleKeys {
    pub fn access_key_id(&self) -> &String {
        &self.access_key_id
    }

    pub fn secret_access_key(&self) -> &String {
        &self.secret_access_key
    }

    pub fn token(&self) -> &String {
        &self.token
    }
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

    /// The instance role's credentials, as the SDKs read them
    /// (`iam/security-credentials/<role>`); `None` if the instance has no
    /// role.
    pub async fn credentials(&mut self) -> Result<Option<RoleKeys>, CallError> {
        let Some(roles) = self.get(CREDENTIALS).await? else {
            return Ok(None);
        };
        let Some(role) = roles.lines().map(str::trim).find(|r| !r.is_empty()) else {
            return Ok(None);
        };
        if !role
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b))
        {
            return Err(CallError::Malformed);
        }
        let Some(json) = self.get(&format!("{CREDENTIALS}{role}")).await? else {
            return Ok(None);
        };
        let v: serde_json::Value = serde_json::from_str(&json).map_err(|_| CallError::Malformed)?;
        let text = |k: &str| {
            v[k].as_str()
                .map(str::to_string)
                .ok_or(CallError::Malformed)
        };
        Ok(Some(RoleKeys {
            access_key_id: text("AccessKeyId")?,
            secret_access_key: text("SecretAccessKey")?,
            token: text("Token")?,
        }))
    }

    /// The body of a 200 for `path`, `None` for a 404. A 401 (the token
    /// expired, or the service restarted) gets a new token and one more try.
    async fn get(&mut self, path: &str) -> Result<Option<String>, CallError> {
        for _ in 0..2 {
            let token = self.token().await?;
            let (status, body) = call(
                &self.endpoint,
                "GET",
                path,
                &[("X-aws-ec2-metadata-token", &token)],
                b"",
                CALL_LIMIT,
            )
            .await?;
            match status {
                200 => {
                    return String::from_utf8(body)
                        .map(Some)
                        .map_err(|_| CallError::Malformed)
                }
                404 => return Ok(None),
                401 => self.token = None,
                other => return Err(CallError::Status(other, path.to_string())),
            }
        }
        Err(CallError::Status(401, path.to_string()))
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
            &[(
                "X-aws-ec2-metadata-token-ttl-seconds",
                &TOKEN_TTL_SECS.to_string(),
            )],
            b"",
            CALL_LIMIT,
        )
        .await?;
        let body = String::from_utf8(body).map_err(|_| CallError::Malformed)?;
        let token = body.trim();
        if status != 200 {
            return Err(CallError::Status(status, "/latest/api/token".into()));
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
    fn fields() {
        let action = r#"{"action": "terminate", "time":"2026-01-02T03:04:05Z"}"#;
        assert_eq!(field(action, "action"), Some("terminate"));
        assert_eq!(field(action, "time"), Some("2026-01-02T03:04:05Z"));
        assert_eq!(field(action, "noticeTime"), None);
        assert_eq!(field(r#"{"action":"a b"}"#, "action"), None);
    }
}
