//! A fault-injecting HTTP proxy in front of moto's EC2 server: it answers
//! chosen EC2 actions with EC2's XML error body (or loses them), forwards
//! the rest, and logs every call, so tests can see what the controller
//! sent (action, parameters, when) and how it reacted to the faults.

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

/// What the proxy does to a matching call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer with EC2's error body: this code, this HTTP status.
    Error { code: String, status: u16 },
    /// Never reach moto; close the connection without an answer.
    DropRequest,
    /// Forward to moto (so it acts), then close without an answer: the
    /// caller cannot know whether it happened.
    DropResponse,
    /// Answer 200 with this XML body, moto never asked: what EC2 would say
    /// that moto cannot (an instance's console, say).
    Answer { body: String },
}

impl Fault {
    /// The HTTP status EC2 sends for `code`.
    pub fn error(code: &str) -> Fault {
        let status = match code {
            "RequestLimitExceeded" => 503,
            "InsufficientInstanceCapacity" | "InsufficientCapacity" => 500,
            _ => 400,
        };
        Fault::Error {
            code: code.into(),
            status,
        }
    }
}

#[derive(Clone, Debug)]
struct Rule {
    action: String,
    /// Every one of these `Name=value` parameters must be in the call.
    params: Vec<String>,
    fault: Fault,
    /// How many more calls it hits; `usize::MAX`: all.
    left: usize,
}

/// One call the proxy saw.
#[derive(Clone, Debug)]
pub struct Call {
    action: String,
    /// The form-encoded parameters, as sent.
    body: String,
    at: Instant,
    /// When the answer went back (none for a lost one).
    answered: Option<Instant>,
    fault: Option<Fault>,
    /// The access key id the call was signed with (SigV4's `Credential=`):
    /// who called, when several processes share the proxy.
    key_id: Option<String>,
}

impl Call {
    /// The EC2 action called (`RunInstances`, …).
    pub fn action(&self) -> &str {
        &self.action
    }

    /// The form-encoded parameters, as sent.
    pub fn body(&self) -> &str {
        &self.body
    }

    /// When the call came in.
    pub fn at(&self) -> Instant {
        self.at
    }

    /// When the answer went back (none for a lost one).
    pub fn answered(&self) -> Option<Instant> {
        self.answered
    }

    /// The fault it was answered with, if any.
    pub fn fault(&self) -> &Option<Fault> {
        &self.fault
    }

    /// The access key id the call was signed with (SigV4's `Credential=`):
    /// who called, when several processes share the proxy.
    pub fn key_id(&self) -> Option<&str> {
        self.key_id.as_deref()
    }
}

impl Call {
    /// The value of parameter `name` (still URL-encoded).
    pub fn param(&self, name: &str) -> Option<&str> {
        self.body
            .split('&')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
    }
}

#[derive(Default)]
struct State {
    rules: Vec<Rule>,
    calls: Vec<Call>,
    /// The actions of the calls made with `DryRun=true` (a pool's
    /// preflight): forwarded untouched, never faulted, and not among
    /// `calls`, which are the calls that act.
    dry_runs: Vec<String>,
}

/// The proxy; it stops accepting when its last handle is dropped.
#[derive(Clone)]
pub struct Ec2Faults {
    port: u16,
    state: Arc<Mutex<State>>,
}

impl Ec2Faults {
    /// A proxy to `upstream` (`http://127.0.0.1:<port>`) on a free port.
    pub fn start(upstream: &str) -> Ec2Faults {
        let upstream = upstream
            .strip_prefix("http://")
            .unwrap_or_else(|| {
                panic!("the EC2 fault proxy forwards to http:// only, not {upstream}")
            })
            .trim_end_matches('/')
            .to_string();
        let listener = TcpListener::bind("127.0.0.1:0")
            .expect("invariant: the loopback interface can bind a free port");
        let port = listener
            .local_addr()
            .expect("invariant: a bound listener has an address")
            .port();
        let state = Arc::new(Mutex::new(State::default()));
        let shared = state.clone();
        std::thread::Builder::new()
            .name("ec2-faults".into())
            .spawn(move || {
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { continue };
                    if Arc::strong_count(&shared) == 1 {
                        return;
                    }
                    let (state, upstream) = (shared.clone(), upstream.clone());
                    std::thread::spawn(move || serve(conn, &upstream, &state));
                }
            })
            .expect("invariant: a thread can be started");
        Ec2Faults { port, state }
    }

    /// The endpoint to give the controller.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The next `times` calls of `action` whose parameters include every
    /// `Name=value` of `params` get `fault`.
    pub fn fail(&self, action: &str, params: &[&str], fault: Fault, times: usize) {
        self.lock().rules.push(Rule {
            action: action.into(),
            params: params.iter().map(|p| p.to_string()).collect(),
            fault,
            left: times,
        });
    }

    /// Removes every rule.
    pub fn heal(&self) {
        self.lock().rules.clear();
    }

    /// Every call so far.
    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    /// The actions dry run so far (see `State::dry_runs`).
    pub fn dry_runs(&self) -> Vec<String> {
        self.lock().dry_runs.clone()
    }

    /// The calls of `action` so far.
    pub fn calls_of(&self, action: &str) -> Vec<Call> {
        self.calls()
            .into_iter()
            .filter(|c| c.action == action)
            .collect()
    }

    pub fn forget_calls(&self) {
        self.lock().calls.clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .expect("invariant: the proxy's lock is never poisoned")
    }
}

impl Drop for Ec2Faults {
    fn drop(&mut self) {
        // Wake the accept loop so it sees it is alone and returns.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

struct Request {
    head: Vec<String>,
    body: Vec<u8>,
}

fn read_request(r: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut head = Vec::new();
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end_matches(['\r', '\n']).to_string();
        if line.is_empty() {
            break;
        }
        head.push(line);
    }
    let len = head
        .iter()
        .find_map(|h| {
            let (k, v) = h.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())?
        })
        .unwrap_or(0);
    let mut body = vec![0; len];
    r.read_exact(&mut body).ok()?;
    Some(Request { head, body })
}

fn serve(conn: TcpStream, upstream: &str, state: &Mutex<State>) {
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut input = BufReader::new(conn);
    while let Some(req) = read_request(&mut input) {
        let body = String::from_utf8_lossy(&req.body).to_string();
        let action = body
            .split('&')
            .find_map(|kv| kv.strip_prefix("Action="))
            .unwrap_or("")
            .to_string();
        if body.split('&').any(|kv| kv == "DryRun=true") {
            state
                .lock()
                .expect("invariant: the proxy's lock is never poisoned")
                .dry_runs
                .push(action);
            match forward(&req, upstream) {
                Some(answer) if out.write_all(&answer).is_ok() => continue,
                _ => return,
            }
        }
        let fault = {
            let mut s = state
                .lock()
                .expect("invariant: the proxy's lock is never poisoned");
            let fault = s.rules.iter_mut().find_map(|rule| {
                let hit = rule.left > 0
                    && rule.action == action
                    && rule
                        .params
                        .iter()
                        .all(|p| body.split('&').any(|kv| kv == p));
                hit.then(|| {
                    rule.left = rule.left.saturating_sub(1);
                    rule.fault.clone()
                })
            });
            s.calls.push(Call {
                action: action.clone(),
                body: body.clone(),
                at: Instant::now(),
                answered: None,
                fault: fault.clone(),
                key_id: key_id(&req.head),
            });
            (fault, s.calls.len() - 1)
        };
        let (fault, index) = fault;
        let answer = match fault {
            Some(Fault::Error { code, status }) => error_response(&code, status),
            Some(Fault::Answer { body }) => format!(
                "HTTP/1.1 200 OK\r\nContent-Type: text/xml;charset=UTF-8\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            )
            .into_bytes(),
            Some(Fault::DropRequest) => return,
            Some(Fault::DropResponse) => {
                let _ = forward(&req, upstream);
                return;
            }
            None => match forward(&req, upstream) {
                Some(a) => a,
                None => return,
            },
        };
        if out.write_all(&answer).is_err() {
            return;
        }
        let mut s = state
            .lock()
            .expect("invariant: the proxy's lock is never poisoned");
        // forget_calls may have emptied the log meanwhile.
        if let Some(call) = s.calls.get_mut(index) {
            call.answered = Some(Instant::now());
        }
    }
}

/// The access key id of a SigV4 `Authorization` header.
fn key_id(head: &[String]) -> Option<String> {
    head.iter().find_map(|h| {
        let (k, v) = h.split_once(':')?;
        if !k.eq_ignore_ascii_case("authorization") {
            return None;
        }
        let credential = v.split("Credential=").nth(1)?;
        Some(credential.split('/').next()?.to_string())
    })
}

fn error_response(code: &str, status: u16) -> Vec<u8> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response><Errors><Error><Code>{code}</Code>\
         <Message>injected by the test's fault proxy</Message></Error></Errors>\
         <RequestID>00000000-0000-0000-0000-000000000000</RequestID></Response>"
    );
    format!(
        "HTTP/1.1 {status} Injected\r\nContent-Type: text/xml;charset=UTF-8\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Sends the request to moto on a connection of its own and returns the
/// whole answer, made to carry a Content-Length so the client can keep its
/// connection.
fn forward(req: &Request, upstream: &str) -> Option<Vec<u8>> {
    let mut up = TcpStream::connect(upstream).ok()?;
    up.set_read_timeout(Some(Duration::from_secs(30))).ok()?;
    let mut head = String::new();
    for (n, line) in req.head.iter().enumerate() {
        let name = line.split(':').next().unwrap_or("").trim();
        if n > 0 && name.eq_ignore_ascii_case("connection") {
            continue;
        }
        head.push_str(line);
        head.push_str("\r\n");
    }
    head.push_str("Connection: close\r\n\r\n");
    up.write_all(head.as_bytes()).ok()?;
    up.write_all(&req.body).ok()?;
    let mut answer = Vec::new();
    up.read_to_end(&mut answer).ok()?;
    let split = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let (head, body) = (&answer[..split], &answer[split + 4..]);
    let head = String::from_utf8_lossy(head);
    let mut out = String::new();
    for (n, line) in head.split("\r\n").enumerate() {
        let name = line.split(':').next().unwrap_or("").trim();
        if n > 0
            && ["connection", "content-length", "transfer-encoding"]
                .iter()
                .any(|h| name.eq_ignore_ascii_case(h))
        {
            continue;
        }
        out.push_str(line);
        out.push_str("\r\n");
    }
    out.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    Some(bytes)
}
