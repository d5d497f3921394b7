# syntax=docker/dockerfile:1
#
# The ratekeeper image: one static binary on distroless, running as a
# non-root user. By default it runs the gateway with
# /etc/ratekeeper/gateway.yaml, the quickstart's demo API and limits
# (deploy/docker/gateway.yaml) listening on all interfaces:
#
#   docker build -t ratekeeper:dev .
#   docker run --rm -p 8080:8080 -p 9090:9090 ratekeeper:dev
#
# Your own config: mount a directory over /etc/ratekeeper (a directory, not
# the file alone, so that edits replaced by rename are seen by the watch):
#
#   docker run --rm -p 8080:8080 -p 9090:9090 -v "$PWD/conf:/etc/ratekeeper:ro" ratekeeper:dev
#
# The decision service, with its rules in /etc/ratekeeper/ratelimit/ (in a
# container, listen on all interfaces: the defaults are loopback):
#
#   docker run --rm -p 8081:8081 -v "$PWD/ratelimit:/etc/ratekeeper/ratelimit:ro" ratekeeper:dev \
#     serve --config /etc/ratekeeper/ratelimit/ --grpc-listen :8081 --http-listen :8080 --admin-listen :9090
#
# .dockerignore leaves .git out, so -buildvcs=auto stamps no revision: with
# it, git in the builder would see every ignored file as deleted and stamp
# each build "modified". Pass --build-arg REVISION=$(git rev-parse HEAD) to
# label the image with the revision. cmd/ratekeeper/deploy_test.go runs this file's
# go build and checks the user, the ports and the default command.

FROM --platform=$BUILDPLATFORM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
ARG TARGETOS TARGETARCH
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH \
    go build -trimpath -buildvcs=auto -ldflags='-s -w' -o /out/ratekeeper ./cmd/ratekeeper

FROM gcr.io/distroless/static-debian12:nonroot
ARG REVISION=unknown
LABEL org.opencontainers.image.title="ratekeeper" \
      org.opencontainers.image.source="https://github.com/ratekeeper/ratekeeper" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.revision="$REVISION"
COPY --from=build /out/ratekeeper /usr/local/bin/ratekeeper
COPY deploy/docker/gateway.yaml /etc/ratekeeper/gateway.yaml
# Numeric, so that Kubernetes' runAsNonRoot can verify it (distroless's
# nonroot user).
USER 65532:65532
# proxy: 8080 (listen), 9090 (admin_listen); serve: 8081 (gRPC), 8080
# (HTTP JSON API), 9090 (admin).
EXPOSE 8080 8081 9090
ENTRYPOINT ["/usr/local/bin/ratekeeper"]
CMD ["proxy", "--config", "/etc/ratekeeper/gateway.yaml"]
