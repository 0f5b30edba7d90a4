# syntax=docker/dockerfile:1
# The operator image: orca-operator and orca-pool-agent, both fully static
# (glibc linked in, TLS by rustls), on distroless's static base.
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
 && mkdir -p /out \
 && cp target/x86_64-unknown-linux-gnu/release/orca-operator \
       target/x86_64-unknown-linux-gnu/release/orca-pool-agent /out/

FROM --platform=linux/amd64 gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/orca-operator /orca-operator
COPY --from=build /out/orca-pool-agent /orca-pool-agent
USER nonroot:nonroot
ENTRYPOINT ["/orca-operator"]
CMD ["run"]
