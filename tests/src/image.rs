//! The operator's OCI image as `scripts/image` writes it (an OCI archive,
//! `$ORCA_IMAGE`), read as a container runtime reads it: the index, the
//! manifest, the config (entrypoint, user, labels) and the layers, which
//! [`OciImage::unpack`] lays out as a root file system.

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::{bail, Context as _};
use serde_json::Value;

/// The archive `scripts/image` built; the tests that need it fail, saying
/// how to get it, when it is not there.
pub fn archive() -> PathBuf {
    let Some(path) = std::env::var_os("ORCA_IMAGE") else {
        panic!(
            "ORCA_IMAGE is not set: export the path scripts/image prints (scripts/test does); \
             the image tests read that OCI archive and run the operator from it"
        );
    };
    let path = PathBuf::from(path);
    assert!(
        path.is_file(),
        "ORCA_IMAGE={} is not a file: run scripts/image",
        path.display()
    );
    path
}

/// An OCI archive, extracted.
#[derive(Clone, Debug)]
pub struct OciImage {
    dir: PathBuf,
    /// The reference it was saved as (`org.opencontainers.image.ref.name`).
    reference: String,
    /// The image's configuration (its `config`: `Entrypoint`, `Cmd`,
    /// `User`, `Env`, `Labels`, `WorkingDir`).
    config: Value,
    /// The layers' blobs, in order.
    layers: Vec<PathBuf>,
}

impl OciImage {
    /// The reference it was saved as (`org.opencontainers.image.ref.name`).
    pub fn reference(&self) -> &str {
        &self.reference
    }
}

impl OciImage {
    /// The image's configuration (its `config`: `Entrypoint`, `Cmd`,
    /// `User`, `Env`, `Labels`, `WorkingDir`).
    pub fn config(&self) -> &Value {
        &self.config
    }
}

impl OciImage {
    /// Extracts `archive` into `dir` and reads its only image.
    pub fn open(archive: &Path, dir: &Path) -> anyhow::Result<OciImage> {
        std::fs::create_dir_all(dir)?;
        run(Command::new("tar")
            .arg("-xf")
            .arg(archive)
            .arg("-C")
            .arg(dir))?;
        let index: Value = read_json(&dir.join("index.json"))?;
        let [manifest] = index["manifests"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[])
        else {
            bail!("{} holds no image or more than one", archive.display());
        };
        let reference = manifest["annotations"]["org.opencontainers.image.ref.name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let manifest: Value = read_json(&blob(dir, &manifest["digest"])?)?;
        let config: Value = read_json(&blob(dir, &manifest["config"]["digest"])?)?;
        let layers = manifest["layers"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| blob(dir, &l["digest"]))
            .collect::<anyhow::Result<_>>()?;
        Ok(OciImage {
            dir: dir.to_path_buf(),
            reference,
            config: config["config"].clone(),
            layers,
        })
    }

    /// A field of the config as a list of strings (`Entrypoint`, `Cmd`,
    /// `Env`); empty when absent.
    pub fn strings(&self, field: &str) -> Vec<String> {
        self.config[field]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    }

    /// The user the image runs as (`User`), e.g. `65532:65532`.
    pub fn user(&self) -> String {
        self.config["User"].as_str().unwrap_or_default().to_string()
    }

    /// Every path in the layers, as `tar` lists them (`./etc/passwd`, …).
    pub fn files(&self) -> anyhow::Result<Vec<String>> {
        let mut files = Vec::new();
        for layer in &self.layers {
            let out = run(Command::new("tar").arg("-tf").arg(layer))?;
            files.extend(out.lines().map(str::to_string));
        }
        Ok(files)
    }

    /// Lays the layers out in `root`, owners and modes kept.
    pub fn unpack(&self, root: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(root)?;
        for layer in &self.layers {
            run(Command::new("tar")
                .args(["--same-owner", "--same-permissions", "-xf"])
                .arg(layer)
                .arg("-C")
                .arg(root))?;
        }
        Ok(())
    }

    /// Where the archive was extracted.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

fn blob(dir: &Path, digest: &Value) -> anyhow::Result<PathBuf> {
    let digest = digest.as_str().context("a descriptor without a digest")?;
    let (algorithm, hex) = digest
        .split_once(':')
        .with_context(|| format!("a digest without an algorithm: {digest}"))?;
    Ok(dir.join("blobs").join(algorithm).join(hex))
}

fn read_json(path: &Path) -> anyhow::Result<Value> {
    let text = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    serde_json::from_slice(&text).with_context(|| format!("{} is no JSON", path.display()))
}

fn run(command: &mut Command) -> anyhow::Result<String> {
    let out = command
        .output()
        .with_context(|| format!("cannot run {command:?}"))?;
    if !out.status.success() {
        bail!(
            "{command:?} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
