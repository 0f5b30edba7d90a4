//! A stand-in for an EC2 instance's metadata service (IMDSv2), as much of
//! it as the pool agent reads: the session token (`PUT /latest/api/token`)
//! and the two spot notices, `spot/instance-action` and
//! `events/recommendations/rebalance` (404 until raised). Every read needs
//! a token the service issued, as on EC2 (401 otherwise), and the tokens
//! can be expired at will, and an answer carrying a notice can be held
//! back until the test lets it go, to time a race. The agent finds it through
//! `ORCA_POOL_AGENT_IMDS` (a test-only setting). It also serves the
//! instance role [`ROLE`]'s credentials (`iam/security-credentials/`), with
//! which the agent reads the database URL's parameter.

use std::{
    net::SocketAddr,
    sync::{Arc, Mutex},
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    sync::{watch, Semaphore},
    task::JoinHandle,
};

const ACTION: &str = "/latest/meta-data/spot/instance-action";
const REBALANCE: &str = "/latest/meta-data/events/recommendations/rebalance";
const TOKEN: &str = "/latest/api/token";
const CREDENTIALS: &str = "/latest/meta-data/iam/security-credentials/";
/// The instance role the stand-in serves credentials of.
pub const ROLE: &str = "orca-pool-instance";

#[derive(Default)]
struct State {
    /// The body of `spot/instance-action`, once raised.
    action: Option<String>,
    /// The body of the rebalance recommendation, once raised.
    rebalance: Option<String>,
    /// Tokens of older generations are refused.
    generation: u64,
    issued: u64,
    refused: u64,
    polls: u64,
    /// Reads of the role's credentials.
    credential_reads: u64,
    /// Answers carrying a notice wait for a [`FakeImds::release`].
    hold: bool,
}

/// What the handlers share with the test.
struct Shared {
    state: Mutex<State>,
    /// Answers that carry a notice and are held back.
    held: watch::Sender<u64>,
    release: Semaphore,
}

/// A running stand-in, on a port of its own on 127.0.0.1; it stops when
/// dropped.
pub struct FakeImds {
    addr: SocketAddr,
    shared: Arc<Shared>,
    server: JoinHandle<()>,
}

impl FakeImds {
    pub async fn start() -> FakeImds {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("the stand-in metadata service cannot listen: {e}"));
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            held: watch::channel(0).0,
            release: Semaphore::new(0),
        });
        let handlers = shared.clone();
        let server = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(answer(stream, handlers.clone()));
            }
        });
        FakeImds {
            addr,
            shared,
            server,
        }
    }

    /// What `ORCA_POOL_AGENT_IMDS` is set to.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// From now on an answer carrying a notice is held back until
    /// [`FakeImds::release`].
    pub fn hold_notices(&self) {
        self.state().hold = true;
    }

    /// Lets one held answer go.
    pub fn release(&self) {
        self.shared.release.add_permits(1);
    }

    /// Waits until an answer carrying a notice is held back: the agent has
    /// asked, and gets the notice on [`FakeImds::release`].
    pub async fn notice_asked(&self, within: Duration) {
        let mut held = self.shared.held.subscribe();
        tokio::time::timeout(within, held.wait_for(|n| *n > 0))
            .await
            .unwrap_or_else(|_| panic!("the notice was not asked for within {within:?}"))
            .expect("invariant: the stand-in runs while it is held");
    }

    /// The two-minute notice: EC2 is about to `terminate`, `stop` or
    /// `hibernate` the instance.
    pub fn interrupt(&self, action: &str) {
        self.state().action = Some(format!(
            r#"{{"action":"{action}","time":"2026-05-04T03:02:01Z"}}"#
        ));
    }

    /// A rebalance recommendation.
    pub fn rebalance(&self) {
        self.state().rebalance = Some(r#"{"noticeTime":"2026-05-04T03:00:00Z"}"#.into());
    }

    /// No notice any more: what the next instance's agent reads.
    pub fn calm(&self) {
        let mut s = self.state();
        s.action = None;
        s.rebalance = None;
    }

    /// Every token issued so far is refused from now on (401), as after a
    /// token's time to live.
    pub fn expire_tokens(&self) {
        self.state().generation += 1;
    }

    /// Tokens issued so far.
    pub fn tokens_issued(&self) -> u64 {
        self.state().issued
    }

    /// Reads refused for want of a valid token.
    pub fn refused(&self) -> u64 {
        self.state().refused
    }

    /// Reads of `spot/instance-action` answered so far, with or without a
    /// notice: the agent's polls.
    pub fn credential_reads(&self) -> u64 {
        self.state().credential_reads
    }

    pub fn polls(&self) -> u64 {
        self.state().polls
    }
}

impl Drop for FakeImds {
    fn drop(&mut self) {
        self.server.abort();
    }
}

async fn answer(mut stream: TcpStream, shared: Arc<Shared>) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    let read = tokio::time::timeout(Duration::from_secs(5), async {
        while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 16 * 1024 {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => head.extend_from_slice(&buf[..n]),
            }
        }
        true
    })
    .await;
    if read != Ok(true) {
        return;
    }
    let head = String::from_utf8_lossy(&head);
    let mut lines = head.split("\r\n");
    let request: Vec<&str> = lines.next().unwrap_or("").split(' ').collect();
    let header = |name: &str| {
        head.split("\r\n")
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_string())
    };
    let (status, body, hold) = {
        let mut s = shared.state.lock().unwrap_or_else(|p| p.into_inner());
        let valid = |s: &State| {
            header("x-aws-ec2-metadata-token")
                .is_some_and(|t| t.starts_with(&format!("t{}-", s.generation)))
        };
        match (request.first().copied(), request.get(1).copied()) {
            (Some("PUT"), Some(TOKEN)) => {
                let ttl = header("x-aws-ec2-metadata-token-ttl-seconds")
                    .and_then(|t| t.parse::<u32>().ok())
                    .filter(|t| (1..=21_600).contains(t));
                match ttl {
                    Some(_) => {
                        s.issued += 1;
                        (200, format!("t{}-{}", s.generation, s.issued), false)
                    }
                    None => (400, String::new(), false),
                }
            }
            (Some("GET"), Some(path)) if path.starts_with(CREDENTIALS) => {
                if !valid(&s) {
                    s.refused += 1;
                    (401, String::new(), false)
                } else if path == CREDENTIALS {
                    (200, ROLE.to_string(), false)
                } else if path.strip_prefix(CREDENTIALS) == Some(ROLE) {
                    s.credential_reads += 1;
                    let body = serde_json::json!({
                        "Code": "Success",
                        "Type": "AWS-HMAC",
                        "AccessKeyId": "ASIAINSTANCEROLE",
                        "SecretAccessKey": "instance-role-secret",
                        "Token": "instance-role-session-token",
                        "Expiration": "2099-01-01T00:00:00Z",
                    });
                    (200, body.to_string(), false)
                } else {
                    (404, String::new(), false)
                }
            }
            (Some("GET"), Some(path)) if path == ACTION || path == REBALANCE => {
                if !valid(&s) {
                    s.refused += 1;
                    (401, String::new(), false)
                } else {
                    if path == ACTION {
                        s.polls += 1;
                    }
                    let notice = if path == ACTION {
                        s.action.clone()
                    } else {
                        s.rebalance.clone()
                    };
                    match notice {
                        Some(body) => (200, body, s.hold),
                        None => (404, "<html>Not Found</html>".into(), false),
                    }
                }
            }
            _ => (404, String::new(), false),
        }
    };
    if hold {
        shared.held.send_modify(|n| *n += 1);
        if let Ok(permit) = shared.release.acquire().await {
            permit.forget();
        }
    }
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        _ => "Not Found",
    };
    let answer = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(answer.as_bytes()).await;
    let _ = stream.shutdown().await;
}
