# pinhook's container image: the `pinhook` binary on a distroless base (glibc, CA
# certificates, user 65532 "nonroot", no shell), as manifests/base/deployment.yaml runs it
# (entrypoint = pinhook, args ["serve"], runAsUser 65532, read-only root filesystem).
#
#   docker build -t registry.example/platform/pinhook:0.1.0 .
#   docker push registry.example/platform/pinhook:0.1.0
#
# Then point the manifests at it (manifests/base/kustomization.yaml `images:`, with the
# digest from `pinhook resolve --form digest registry.example/platform/pinhook:0.1.0`).
#
# Pin both base images by digest in your build (`FROM rust:1-bookworm@sha256:…`):
# this file names tags so it stays readable.

FROM rust:1-bookworm AS build
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY src ./src
COPY benches ./benches
COPY examples ./examples
COPY tests ./tests
RUN cargo build --release --locked --bin pinhook \
    && install -m 0755 target/release/pinhook /pinhook

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /pinhook /usr/local/bin/pinhook
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["/usr/local/bin/pinhook"]
CMD ["serve"]
