//! The CRDs: the chart ships crds/, which is what the Rust types generate.

use super::*;

#[test]
fn the_chart_ships_the_crds_of_crds_dir_byte_for_byte() {
    let generated = repo().join("crds/orca.dev.yaml");
    let shipped = repo().join("charts/orca-operator/crds/orca.dev.yaml");
    let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    assert!(
        read(&shipped) == read(&generated),
        "{} differs from {}: run `cp crds/orca.dev.yaml charts/orca-operator/crds/`",
        shipped.display(),
        generated.display()
    );
}

#[test]
fn the_crds_dir_is_what_the_rust_types_generate() {
    let path = repo().join("crds/orca.dev.yaml");
    let on_disk =
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(
        on_disk == orca_operator::crd::crds_yaml(),
        "crds/orca.dev.yaml is stale: run `cargo run -p orca-operator -- crds > crds/orca.dev.yaml` \
         and copy it into the chart (`cp crds/orca.dev.yaml charts/orca-operator/crds/`)"
    );
}
