# The idempotency-proxy image, and (target `payments`) the demo legacy payments service that
# docker-compose.yml puts behind it. Built in stages so a runnable image holds only compiled
# JavaScript, production dependencies and the config: no TypeScript, no dev tools, no npm cache.
# The proxy image holds the files of the npm package (see package.json's `files`) but the pages
# of docs/, test/ and packages/client/ it carries: they stay out of the build context, so editing
# them rebuilds nothing.
#
#   docker build -t idempotency-proxy .                   # the proxy: the default (last) stage
#   docker build --target payments -t payments-demo .     # the demo payments service
#
# Linted in test/deploy/dockerfile.test.ts (hadolint's rules, by hand: no Docker engine in CI).

# One base for every stage: Node 26, the Active LTS line (package.json's engines name 24 and 26, the
# lines CI runs the suite on), on Debian 12, slim. The line, not a patch release: a rebuild picks up
# Node's security releases; the dependencies are pinned by the lockfile.
FROM node:26-bookworm-slim AS base
WORKDIR /app

# Production dependencies only. --omit=optional leaves out embedded-postgres's platform binaries
# (about 60 MB) and pg-cloudflare: in a container the store is the PostgreSQL that DATABASE_URL
# names, so the embedded server is never started. Without DATABASE_URL (or store.url) the proxy exits
# 1 with one line: "the embedded PostgreSQL is not installed in this build (…); set DATABASE_URL or
# store.url to a PostgreSQL server". --ignore-scripts: nothing left needs one. --workspaces=false:
# the client workspace is no runtime dependency (dist/client holds a copy of its build), so no link
# to packages/client is made.
FROM base AS deps
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --omit=optional --ignore-scripts --workspaces=false

# Compiles the TypeScript with the dev dependencies (the client workspace first: the proxy's
# dist/client is a copy of its CommonJS build), then unpacks what `npm pack` would publish (the
# `files` list: no sources, tests, demos or benchmarks) into /pkg; only /pkg and the demo service
# leave this stage.
FROM base AS build
COPY package.json package-lock.json ./
COPY packages/client/package.json ./packages/client/
RUN npm ci --omit=optional --ignore-scripts
COPY tsconfig.json README.md CHANGELOG.md LICENSE ./
COPY packages/client/tsconfig.cjs.json packages/client/tsconfig.esm.json ./packages/client/
COPY packages/client/src ./packages/client/src
COPY src ./src
COPY config ./config
RUN npm run build \
  && npm pack --ignore-scripts --pack-destination /tmp \
  && mkdir -p /pkg \
  && tar -xzf /tmp/idempotency-proxy-0*.tgz -C /pkg --strip-components=1 --no-same-owner

# What both runnable images share: the published package and its production dependencies. Files
# stay owned by root and read-only to the `node` user the process runs as (the official image's
# non-root user): the proxy never writes to its own files, so the container can run with a
# read-only root filesystem (docker run --read-only, Kubernetes readOnlyRootFilesystem). On an
# external PostgreSQL it writes only its spool (a volume on /var/lib/idempotency-proxy); a tmpfs on
# /tmp is enough for anything Node puts there.
FROM base AS runtime
ENV NODE_ENV=production
COPY --from=deps /app/node_modules ./node_modules
COPY --from=build /pkg ./
# The one place the proxy writes, when a volume is mounted there: the spool (store.outbox.spool) of
# answers PostgreSQL could not take yet. A new named volume starts with this directory's owner.
RUN mkdir -p /var/lib/idempotency-proxy && chown node:node /var/lib/idempotency-proxy
USER node

# The demo "legacy" payments API (not idempotent). It binds 127.0.0.1 by default; in a container it
# must listen on every interface for the proxy's container to reach it.
FROM runtime AS payments
COPY --from=build /app/dist/demo/payments-service.js ./dist/demo/
ENV PAYMENTS_HOST=0.0.0.0 PAYMENTS_PORT=4000
EXPOSE 4000
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:4000/health').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["node", "dist/demo/payments-service.js"]

# The proxy: client traffic on 8080 (listen.port), health, metrics and keys on 9090 (admin.port).
# The slim image has no curl, so the healthcheck asks Node itself. /readyz is ready once the store is
# reachable and migrated; start-period covers the startup wait for PostgreSQL.
FROM runtime AS proxy
# config/proxy.yaml listens on 127.0.0.1 unless PROXY_HOST says otherwise (right for `npm start`);
# in a container the published port reaches only a listener on every interface.
ENV PROXY_HOST=0.0.0.0
EXPOSE 8080 9090
HEALTHCHECK --interval=10s --timeout=3s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:9090/readyz').then(r=>process.exit(r.ok?0:1),()=>process.exit(1))"]
ENTRYPOINT ["node", "dist/main.js"]
CMD ["serve", "--config", "config/proxy.yaml"]
