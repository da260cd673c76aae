# syntax=docker/dockerfile:1
#
# taskgate gateway image: a static binary on distroless, running as nonroot.
#   docker build -t taskgate:dev .
#   docker run --rm -p 8080:8080 -p 9090:9090 \
#     -v "$PWD/taskgate.yaml:/etc/taskgate/taskgate.yaml:ro" -e OPENAI_API_KEY ... taskgate:dev
# The config's admin_listen must bind every interface (":9090") for probes
# and scrapers outside the container to reach it.

FROM golang:1.26 AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /gateway ./cmd/gateway

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /gateway /gateway
USER nonroot:nonroot
EXPOSE 8080 9090
ENTRYPOINT ["/gateway"]
CMD ["-config", "/etc/taskgate/taskgate.yaml"]
