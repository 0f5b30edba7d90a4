//! The operator's image as `scripts/image` builds it (`$ORCA_IMAGE`), read
//! as a container runtime reads it: its config says what runs and as whom,
//! its layers hold the two static binaries, a CA bundle and the nonroot
//! user and nothing else — no shell — and the operator runs from its root
//! file system, `chroot`ed there as user 65532, as a container would.

use std::{path::Path, process::Command};

use orca_tests::{cluster::random_hex, image::OciImage, release::repo};

fn open() -> (OciImage, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("orca-image-test-{}", random_hex(8)));
    let image = OciImage::open(&orca_tests::image::archive(), &dir.join("archive"))
        .unwrap_or_else(|e| panic!("reading the image: {e:#}"));
    (image, dir)
}

#[test]
fn the_config_runs_the_operator_as_nonroot_with_its_labels() {
    let (image, dir) = open();
    assert_eq!(image.strings("Entrypoint"), ["/orca-operator"]);
    assert_eq!(image.strings("Cmd"), ["run"]);
    assert_eq!(image.user(), "65532:65532");
    let labels = &image.config()["Labels"];
    assert_eq!(labels["org.opencontainers.image.title"], "orca-operator");
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    for label in ["revision", "licenses", "description"] {
        let key = format!("org.opencontainers.image.{label}");
        assert!(
            labels[&key].as_str().is_some_and(|v| !v.is_empty()),
            "no {key}: {labels}"
        );
    }
    assert!(
        image
            .reference()
            .ends_with(&format!("orca-operator:{}", env!("CARGO_PKG_VERSION"))),
        "saved as {:?}",
        image.reference()
    );
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn the_layers_hold_the_binaries_a_ca_bundle_and_the_nonroot_user_and_no_shell() {
    let (image, dir) = open();
    let files: Vec<String> = image
        .files()
        .unwrap_or_else(|e| panic!("listing the layers: {e:#}"))
        .into_iter()
        .map(|f| f.trim_start_matches("./").trim_end_matches('/').to_string())
        .filter(|f| !f.is_empty() && f != ".")
        .collect();
    let mut expected = vec![
        "etc",
        "etc/group",
        "etc/passwd",
        "etc/ssl",
        "etc/ssl/certs",
        "etc/ssl/certs/ca-certificates.crt",
        "orca-operator",
        "orca-pool-agent",
        "tmp",
    ];
    expected.sort_unstable();
    let mut seen: Vec<&str> = files.iter().map(String::as_str).collect();
    seen.sort_unstable();
    assert_eq!(seen, expected, "the image holds exactly these");

    let root = dir.join("root");
    image
        .unpack(&root)
        .unwrap_or_else(|e| panic!("unpacking the image: {e:#}"));
    let passwd = std::fs::read_to_string(root.join("etc/passwd")).unwrap();
    assert!(
        passwd
            .lines()
            .any(|l| l.starts_with("nonroot:x:65532:65532:")),
        "{passwd}"
    );
    assert!(
        passwd.lines().all(|l| l.ends_with(":/sbin/nologin")),
        "no login shell: {passwd}"
    );
    for bin in ["orca-operator", "orca-pool-agent"] {
        let kind = Command::new("file")
            .arg("-b")
            .arg(root.join(bin))
            .output()
            .unwrap_or_else(|e| panic!("`file` is needed to check the binaries: {e}"));
        let kind = String::from_utf8_lossy(&kind.stdout);
        assert!(
            kind.contains("statically linked") || kind.contains("static-pie linked"),
            "{bin}: {kind}"
        );
    }
    let bundle = std::fs::read_to_string(root.join("etc/ssl/certs/ca-certificates.crt")).unwrap();
    assert!(bundle.contains("BEGIN CERTIFICATE"), "an empty CA bundle");
    let _ = std::fs::remove_dir_all(dir);
}

/// `args` run from the image's root as user 65532, as a container runtime
/// would run them: the output, which must be a success.
fn in_image(root: &Path, args: &[&str]) -> String {
    // The command itself runs with no environment, as the image's config
    // gives none.
    let chroot = orca_tests::bins::host_program("chroot")
        .unwrap_or_else(|e| panic!("chroot (coreutils) runs the image's binaries: {e}"));
    let out = Command::new(chroot)
        .arg("--userspec=65532:65532")
        .arg(root)
        .args(args)
        .env_clear()
        .output()
        .unwrap_or_else(|e| panic!("chroot is needed to run the image's binaries: {e}"));
    assert!(
        out.status.success(),
        "{args:?} in the image: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_operator_runs_from_the_image_and_prints_the_repositorys_crds() {
    let (image, dir) = open();
    let root = dir.join("root");
    image
        .unpack(&root)
        .unwrap_or_else(|e| panic!("unpacking the image: {e:#}"));
    let version = in_image(&root, &["/orca-operator", "--version"]);
    assert_eq!(
        version.trim(),
        format!("orca-operator {}", env!("CARGO_PKG_VERSION"))
    );
    let crds = in_image(&root, &["/orca-operator", "crds"]);
    let shipped = std::fs::read_to_string(repo().join("crds/orca.dev.yaml")).unwrap();
    assert!(
        crds == shipped,
        "the image's operator is not this checkout's: its CRDs differ"
    );
    let help = in_image(&root, &["/orca-pool-agent", "--help"]);
    assert!(help.contains("pool-wait"), "{help}");
    let _ = std::fs::remove_dir_all(dir);
}
