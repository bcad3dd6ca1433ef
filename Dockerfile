# syntax=docker/dockerfile:1
# The operator's image: Node 24 running the operator bundled with @kubernetes/client-node
# (infra/bundle.ts: ~60 MiB less memory per process than the sources), production dependencies
# only, as a non-root user on a read-only root filesystem. The TypeScript sources are in the image
# too: restore init containers run infra/restore-init.ts from them, the chart's bundled Redis
# Sentinel pods infra/redis-sentinel-init.ts (type stripping, no build step).
#   docker build -t etcd-operator:0.1.0 .
#   docker run --rm etcd-operator:0.1.0 --role worker      (all | watcher | worker | scheduler | http)

# Dependencies are installed in a full Node image (npm is not in the runtime image): production ones
# only, without optional ones (TypeScript would come in as an optional peer of valibot, 31 MB;
# msgpackr's native unpacker is only a speed-up), and without @kubernetes/client-node (65 MB), which
# the bundle holds (infra/bundle.ts) and nothing else imports.
FROM node:24-bookworm-slim AS deps
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --omit=optional --ignore-scripts --no-audit --no-fund \
 && rm -rf node_modules/@kubernetes/client-node

# The bundle is built with the dev dependencies (esbuild), which stay in this stage, and so is the
# malloc_trim addon (infra/native/build.ts), with a C compiler that stays here too.
FROM node:24-bookworm-slim AS build
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --ignore-scripts --no-audit --no-fund
COPY shared ./shared
COPY functions ./functions
COPY infra ./infra
RUN node infra/bundle.ts

# Distroless: node and its libraries, no shell, no package manager.
FROM gcr.io/distroless/nodejs24-debian12:nonroot
WORKDIR /app
ENV NODE_ENV=production
# OPERATOR_ENV in infra/operator.ts (why: see there); a test keeps them in step.
ENV MALLOC_ARENA_MAX=2
ENV MALLOC_MMAP_THRESHOLD_=131072
COPY --from=deps /app/node_modules ./node_modules
COPY package.json ./
COPY shared ./shared
COPY functions ./functions
# infra/ without infra/local (the local control plane stays out, see .dockerignore).
COPY infra ./infra
COPY --from=build /app/dist ./dist
# 65532 is distroless's "nonroot"; numeric so Kubernetes can verify runAsNonRoot.
USER 65532:65532
# The flags are OPERATOR_NODE_FLAGS in infra/operator.ts (why: see there); a test keeps them in step.
ENTRYPOINT ["/nodejs/bin/node", "--max-semi-space-size=2", "--expose-gc", "--no-allocation-site-pretenuring", "dist/operator.js"]
CMD ["--role", "all"]
