# syntax=docker/dockerfile:1
# The mcsd node daemon, for builders with Docker: `make image-docker`
# (IMAGE=...), which stamps the version from git and tags the image with it,
# or by hand:
#   v=$(git describe --tags --always --dirty)
#   docker build --build-arg VERSION=$v --build-arg REVISION=$(git rev-parse HEAD) \
#     -t ghcr.io/mcsd-io/mcsd:$v .
# Without the build arguments the binary says it is v0.0.0-dev (the build
# context holds no .git to ask).
# The binary is static (CGO_ENABLED=0); the runtime image adds nft, which the
# proxier runs to program nftables (it needs nft >= 1.0.1: bookworm has 1.0.6),
# and iptables for --proxier-mode=iptables (bookworm's default, the nft-backed
# iptables-nft).

# Matches the go directive of go.mod.
ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION}-bookworm AS build
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=v0.0.0-dev
ARG REVISION=unknown
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath \
      -ldflags="-s -w -X github.com/mcsd-io/mcsd/internal/version.version=${VERSION} -X github.com/mcsd-io/mcsd/internal/version.revision=${REVISION}" \
      -o /out/mcsd ./cmd/mcsd

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends nftables iptables \
    && rm -rf /var/lib/apt/lists/* \
    && nft --version && iptables --version
COPY --from=build /out/mcsd /usr/local/bin/mcsd
# Root: the proxier programs the node's nftables and conntrack. The
# DaemonSet drops every capability but NET_ADMIN.
USER 0:0
ENTRYPOINT ["/usr/local/bin/mcsd"]
ARG VERSION=v0.0.0-dev
ARG REVISION=unknown
LABEL org.opencontainers.image.source="https://github.com/mcsd-io/mcsd" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
