# llmload in a container: a static binary (musl) on a small base with a shell, for Kubernetes
# Jobs and CI runners (deploy/kubernetes/, docs/distributed.md).
#
#   docker build -t llmload:0.1 .
#   docker run --rm -v "$PWD/plans:/plans" llmload:0.1 run /plans/quickstart.kdl --out /tmp/r
#
# Build stage: Alpine's Rust links against musl, so the binary is static and runs on any Linux.
FROM rust:1-alpine AS build
RUN apk add --no-cache musl-dev
WORKDIR /src
COPY . .
RUN cargo build --release --locked && cp target/release/llmload /llmload

# Run stage: Alpine for its shell (a Job computes --shard from JOB_COMPLETION_INDEX) and CA
# certificates (https targets); the binary needs nothing else.
FROM alpine:3.20
RUN apk add --no-cache ca-certificates && adduser -D -u 10001 llmload
COPY --from=build /llmload /usr/local/bin/llmload
USER llmload
WORKDIR /home/llmload
ENTRYPOINT ["llmload"]
CMD ["--help"]
