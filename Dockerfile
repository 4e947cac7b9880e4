# pinhook's container image, for builds with a Docker engine and network access: the same
# files as `scripts/image.sh` (the offline build, docs/image.md) puts in its image, because the
# build stage runs that script's `--rootfs` step: /usr/local/bin/pinhook, the shared libraries
# `ldd` names for it and the dynamic loader, Debian's CA bundle, /etc/passwd and /etc/group with
# user 65532 "nonroot", /etc/nsswitch.conf, /tmp (1777); no shell. The final stage is `scratch`:
# no base image's files. As manifests/base/deployment.yaml runs it: entrypoint pinhook, args
# ["serve"], runAsUser 65532, read-only root filesystem.
#
#   docker build -t registry.example/platform/pinhook:0.1.0 .
#   docker push registry.example/platform/pinhook:0.1.0
#
# Then point the manifests at it (manifests/base/kustomization.yaml `images:`, with the
# digest from `pinhook resolve --form digest registry.example/platform/pinhook:0.1.0`).
#
# Pin the build image by digest in your build (`FROM rust:1-bookworm@sha256:…`): this file
# names a tag so it stays readable. The digest differs from scripts/image.sh's (other file
# times, Docker's own config fields, a binary built with that image's toolchain); the file
# set is the same. For a reproducible digest, use scripts/image.sh.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
COPY examples ./examples
COPY tests ./tests
COPY scripts/image.sh ./scripts/image.sh
RUN apt-get update && apt-get install -y --no-install-recommends tini && rm -rf /var/lib/apt/lists/*
RUN cargo build --release --locked --bin pinhook \
    && install -m 0755 target/release/pinhook /pinhook \
    && scripts/image.sh --binary /pinhook --rootfs /rootfs

FROM scratch
COPY --from=build /rootfs/ /
USER 65532:65532
EXPOSE 8443
ENV PATH=/usr/local/bin SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
ENTRYPOINT ["/usr/local/bin/tini", "--", "/usr/local/bin/pinhook"]
CMD ["serve"]
