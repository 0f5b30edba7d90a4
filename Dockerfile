# syntax=docker/dockerfile:1
# The operator image for users with Docker: the same layout as
# scripts/image builds offline (image/Containerfile) — orca-operator and
# orca-pool-agent, both fully static (glibc linked in, TLS by rustls), a CA
# bundle, /etc/passwd and /etc/group with the nonroot user 65532 and an
# empty /tmp, FROM scratch: no shell, nothing else.
#
#   docker build -t orca-operator .
#
# orca-pool-agent rides along so that an AMI build can take it from the
# image: docker cp "$(docker create orca-operator)":/orca-pool-agent .

# The binaries are x86_64 (as EC2 runs the agent), so both stages are too,
# whatever the build machine.
FROM --platform=linux/amd64 rust:1-bookworm AS build
WORKDIR /src
COPY . .
# --target keeps +crt-static off the build scripts and proc macros, which
# must stay dynamic; only the shipped binaries are static.
ENV CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-C target-feature=+crt-static"
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    rustup target add x86_64-unknown-linux-gnu \
 && cargo build --release --locked --target x86_64-unknown-linux-gnu \
        -p orca-operator -p orca-pool-agent \
 && mkdir -p /rootfs/etc/ssl/certs /rootfs/tmp \
 && install -m 0755 target/x86_64-unknown-linux-gnu/release/orca-operator \
        target/x86_64-unknown-linux-gnu/release/orca-pool-agent /rootfs/ \
 && install -m 0644 image/passwd image/group /rootfs/etc/ \
 && install -m 0644 /etc/ssl/certs/ca-certificates.crt /rootfs/etc/ssl/certs/ \
 && chmod 1777 /rootfs/tmp

FROM scratch
COPY --from=build /rootfs/ /
LABEL org.opencontainers.image.title="orca-operator" \
      org.opencontainers.image.description="The orca control plane: Scheduler rollouts with the overlap handover, and EC2 warm pools" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
ENTRYPOINT ["/orca-operator"]
CMD ["run"]
