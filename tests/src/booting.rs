//! EC2 instances that boot as real ones do: for each instance of a pool
//! that EC2 (moto) lists as pending or running, its own user-data is run
//! as a script, as cloud-init would — with stand-ins for the metadata
//! service (`curl`, answering the instance's id) and the power-off
//! (`shutdown`, `poweroff`: the instance is then terminated, as
//! `InstanceInitiatedShutdownBehavior=terminate` makes EC2 do), and the
//! script's output as the instance's console, which the EC2 proxy in
//! front of moto answers `GetConsoleOutput` with. What agent the "image"
//! holds is the spec's `launch.agentPath`: this release's, or an earlier
//! one's; or, with [`Booting::with_images`], the agent baked into the
//! instance's AMI, found at the default `agentPath`.

use std::{
    collections::HashSet,
    path::{Path, PathBuf},
    process::Stdio,
    sync::{Arc, Mutex},
    time::Duration,
};

use base64::Engine;
use orca_operator::{
    crd::DEFAULT_AGENT_PATH,
    warmpool::{Ec2, Ownership},
};
use tokio::task::JoinHandle;

use crate::ec2_faults::{Ec2Faults, Fault};

/// The booting instances of one pool; their scripts and whatever they
/// started are killed when it is dropped.
pub struct Booting {
    task: JoinHandle<()>,
    groups: Arc<Mutex<Vec<i32>>>,
    dir: PathBuf,
}

impl Drop for Booting {
    fn drop(&mut self) {
        self.task.abort();
        for pgid in self.groups.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            // SAFETY: kill(2) of a process group the harness started.
            unsafe {
                libc::kill(-pgid, libc::SIGKILL);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn stub(dir: &Path, name: &str, body: &str) {
    let p = dir.join(name);
    std::fs::write(&p, format!("#!/bin/sh\n{body}\n"))
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
}

impl Booting {
    /// Boots the instances of `owner`'s pool EC2 lists at `ec2` (moto
    /// itself), their consoles answered through `proxy` (what the operator
    /// calls), with `env` added to each script's environment (AWS keys of
    /// the instance role, the agents' test settings).
    pub fn start(
        ec2: Ec2,
        proxy: &Ec2Faults,
        owner: Ownership,
        env: Vec<(String, String)>,
    ) -> Booting {
        Booting::with_images(ec2, proxy, owner, env, Vec::new())
    }

    /// As [`Booting::start`], each AMI of `images` holding its agent
    /// binary at the default `launch.agentPath` (as an image baked with
    /// that release's agent does): an instance launched from it (its tag
    /// `orca.dev/image`) runs that agent where its script names the path.
    pub fn with_images(
        ec2: Ec2,
        proxy: &Ec2Faults,
        owner: Ownership,
        env: Vec<(String, String)>,
        images: Vec<(String, PathBuf)>,
    ) -> Booting {
        let dir = std::env::temp_dir().join(format!(
            "orca-booting-{}-{}",
            std::process::id(),
            crate::cluster::random_hex(4)
        ));
        let stubs = dir.join("bin");
        std::fs::create_dir_all(&stubs).unwrap_or_else(|e| panic!("{}: {e}", stubs.display()));
        stub(
            &stubs,
            "curl",
            r#"case "$*" in *api/token*) echo token ;; *instance-id*) echo "$ORCA_TEST_INSTANCE" ;; *) exit 22 ;; esac"#,
        );
        for off in ["shutdown", "poweroff"] {
            stub(&stubs, off, r#"touch "$ORCA_TEST_HALTED""#);
        }
        let groups: Arc<Mutex<Vec<i32>>> = Arc::default();
        let proxy = proxy.clone();
        let (kept, base) = (groups.clone(), dir.clone());
        let task = tokio::spawn(async move {
            let mut seen: HashSet<String> = HashSet::new();
            loop {
                let listed = ec2.describe(&owner).await.unwrap_or_default();
                for i in listed {
                    let running = matches!(
                        i.state(),
                        orca_operator::warmpool::Ec2State::Pending
                            | orca_operator::warmpool::Ec2State::Running
                    );
                    if running && seen.insert(i.id().to_string()) {
                        let agent = images
                            .iter()
                            .find(|(ami, _)| i.image() == Some(ami.as_str()))
                            .map(|(_, agent)| agent.as_path());
                        let instance = Instance { id: i.id(), agent };
                        boot(&ec2, &proxy, &base, instance, &env, &kept).await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(300)).await;
            }
        });
        Booting { task, groups, dir }
    }
}

/// An instance to boot: its id, and the agent its image holds at the
/// default `agentPath`, if the test says.
struct Instance<'a> {
    id: &'a str,
    agent: Option<&'a Path>,
}

/// Runs the instance's user-data in a process group of its own; when it
/// ends having powered off, terminates the instance and serves its console.
async fn boot(
    ec2: &Ec2,
    proxy: &Ec2Faults,
    base: &Path,
    instance: Instance<'_>,
    env: &[(String, String)],
    groups: &Arc<Mutex<Vec<i32>>>,
) {
    let id = instance.id;
    let Ok(Some(mut script)) = ec2.user_data(id).await else {
        return;
    };
    if let Some(agent) = instance.agent {
        script = script.replace(DEFAULT_AGENT_PATH, &agent.display().to_string());
    }
    let home = base.join(id);
    let _ = std::fs::create_dir_all(&home);
    let file = home.join("part-001");
    if std::fs::write(&file, script).is_err() {
        return;
    }
    let console = home.join("console");
    let halted = home.join("halted");
    let Ok(out) = std::fs::File::create(&console) else {
        return;
    };
    let Ok(err) = out.try_clone() else {
        return;
    };
    let path = format!(
        "{}:{}",
        base.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut cmd = tokio::process::Command::new("sh");
    cmd.arg(&file)
        .env("PATH", path)
        .env("ORCA_TEST_INSTANCE", id)
        .env("ORCA_TEST_HALTED", &halted)
        .env("ORCA_PER_BOOT_DIR", home.join("per-boot"))
        .env("ORCA_CONSOLE", "/dev/null")
        .envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .process_group(0);
    let Ok(mut child) = cmd.spawn() else {
        return;
    };
    if let Some(pid) = child.id() {
        groups
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(pid as i32);
    }
    let (ec2, proxy, id) = (ec2.clone(), proxy.clone(), id.to_string());
    tokio::spawn(async move {
        let _ = child.wait().await;
        if !halted.exists() {
            return;
        }
        let text = std::fs::read_to_string(&console).unwrap_or_default();
        let output = base64::engine::general_purpose::STANDARD.encode(text);
        let body = format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<GetConsoleOutputResponse \
             xmlns=\"http://ec2.amazonaws.com/doc/2016-11-15/\"><requestId>0</requestId>\
             <instanceId>{id}</instanceId><timestamp>2026-01-01T00:00:00.000Z</timestamp>\
             <output>{output}</output></GetConsoleOutputResponse>"
        );
        proxy.fail(
            "GetConsoleOutput",
            &[&format!("InstanceId={id}")],
            Fault::Answer { body },
            usize::MAX,
        );
        // The power-off: with InstanceInitiatedShutdownBehavior=terminate,
        // the instance goes.
        let _ = ec2
            .client()
            .terminate_instances()
            .instance_ids(&id)
            .send()
            .await;
    });
}
