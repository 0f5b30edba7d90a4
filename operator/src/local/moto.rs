//! moto's EC2 server on a free port, from the venv the scripts make
//! (`$ORCA_MOTO_SERVER`, or `.cache/venv/bin/moto_server` of this checkout):
//! the local mode's EC2 when a WarmPool names no endpoint, and the tests'.

use std::{
    io::{Read, Write},
    net::TcpStream,
    os::unix::process::CommandExt,
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use super::spawn::{free_port, spawn_tied_with};
use crate::{
    crd::WarmPoolSpec,
    fence::Fence,
    warmpool::ec2::{Ec2, Ec2Config},
};

/// A running moto EC2 server on a port of its own; killed when dropped.
pub struct Moto {
    port: u16,
    child: Child,
}

fn server_path() -> PathBuf {
    if let Ok(p) = std::env::var("ORCA_MOTO_SERVER") {
        return PathBuf::from(p);
    }
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../.cache/venv/bin/moto_server")
}

impl Moto {
    /// Starts moto's server and waits until it answers.
    pub fn start() -> Moto {
        let path = server_path();
        if !path.exists() {
            panic!(
                "moto's EC2 server is missing: no {} (scripts/test and scripts/demo create a venv with \
                 moto[server]; or set ORCA_MOTO_SERVER)",
                path.display()
            );
        }
        let port = free_port();
        let mut cmd = Command::new(&path);
        cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
            // No AMI catalogue: moto launches any image id (its AMI
            // validation is off), and a region's backend, made again at
            // each reset, then starts in 0.01 CPU-seconds rather than 0.34.
            .env("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // A group of its own: a terminal's Ctrl-C is for the program
            // that started it, which stops its pools before moto.
            .process_group(0);
        // SIGKILL when this process ends: moto has nothing to save, and a
        // Python server dies of SIGQUIT only after a core dump.
        let child = spawn_tied_with(cmd, None, libc::SIGKILL)
            .unwrap_or_else(|e| panic!("moto_server ({}) could not start: {e}", path.display()));
        let mut moto = Moto { port, child };
        let deadline = Instant::now() + Duration::from_secs(60);
        while moto.get("/moto-api/data.json").is_none() {
            if let Ok(Some(status)) = moto.child.try_wait() {
                panic!("moto_server exited at start-up ({status})");
            }
            if Instant::now() > deadline {
                panic!("moto_server did not answer on port {port} within 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        moto
    }

    /// `http://127.0.0.1:<port>`: the EC2 endpoint.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A GET of `path`; the body if it answered 200.
    pub fn get(&self, path: &str) -> Option<String> {
        match self.request("GET", path, &[], "")? {
            (200, body) => Some(body),
            _ => None,
        }
    }

    /// A POST of `body` to `path` with `headers`: (status, body), or
    /// `None` if moto could not be asked.
    pub fn post(&self, path: &str, headers: &[(&str, &str)], body: &str) -> Option<(u16, String)> {
        self.request("POST", path, headers, body)
    }

    fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Option<(u16, String)> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .ok()?;
        let mut head = format!(
            "{method} {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n",
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        write!(stream, "{head}\r\n{body}").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_string()))
    }
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The image of a pool moved onto moto: the account's own can't exist
/// there (moto launches any id; this one was in its catalogue).
const MOTO_IMAGE: &str = "ami-12c6146b";

/// A pool without an endpoint runs on the local mode's own moto server,
/// where the account's image, subnets and security groups can't exist:
/// they become moto's.
pub async fn onto(
    moto: &mut Option<Moto>,
    key: &str,
    mut spec: WarmPoolSpec,
) -> Result<WarmPoolSpec, String> {
    if moto.is_none() {
        println!("local: starting moto's EC2 server for the WarmPools");
        for (k, v) in [
            ("AWS_ACCESS_KEY_ID", "local"),
            ("AWS_SECRET_ACCESS_KEY", "local"),
            ("AWS_EC2_METADATA_DISABLED", "true"),
        ] {
            std::env::set_var(k, v);
        }
        let started = tokio::task::spawn_blocking(Moto::start)
            .await
            .map_err(|e| e.to_string())?;
        *moto = Some(started);
    }
    let endpoint = moto
        .as_ref()
        .map(|m| m.endpoint())
        .expect("invariant: moto started above");
    let ec2 = Ec2::new(
        &Ec2Config::new(&spec.region, Some(&endpoint)),
        Fence::always(),
    )
    .await;
    let subnets = ec2
        .client()
        .describe_subnets()
        .send()
        .await
        .map_err(|e| format!("moto: listing its subnets: {e}"))?
        .subnets()
        .iter()
        .filter_map(|s| s.subnet_id().map(String::from))
        .take(spec.launch.subnet_ids.len().max(1))
        .collect::<Vec<_>>();
    println!("warmpool {key}: on moto at {endpoint}: image {MOTO_IMAGE}, moto's subnets {subnets:?}, no security groups");
    // Its SSM too: moto serves both.
    spec.ssm_endpoint.get_or_insert_with(|| endpoint.clone());
    spec.endpoint = Some(endpoint);
    spec.launch.launch_template = None;
    spec.launch.image_id = Some(MOTO_IMAGE.into());
    spec.launch.subnet_ids = subnets;
    spec.launch.security_group_ids = Vec::new();
    spec.launch.iam_instance_profile = None;
    if spec.launch.instance_types.is_empty() {
        spec.launch.instance_types = vec!["t3.micro".into()];
    }
    Ok(spec)
}
