#!/usr/bin/env bash
# The project's entry point for people and CI: sets up the machine (Node LTS, npm packages,
# Debian packages, built binaries; each only when missing) and then runs what was asked.
#   run.sh test [tap args]   type-check, lint, and all tests against the local control plane
#   run.sh demo [--real-nodes]  the local control plane with an example, until Ctrl-C
#   run.sh local up|down|status [--name N]
#   run.sh assets [--check] [--runtime]  build (or check) the pinned binaries (--runtime: not the test-only ones)
#   run.sh image [--rebuild-bases]  build the operator's image from the Dockerfile (buildah)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=env.sh
source "$here/env.sh"
cd "$EOP_ROOT"

cmd="${1:-test}"
shift || true
case "$cmd" in
  test)
    ensure_test_packages
    ensure_image_packages
    ensure_node_packages
    step "binaries (kube-apiserver, kube-controller-manager, kubectl, etcd 3.5/3.6/3.7, versitygw, fake-gcs-server, promtool, kubelet, kube-proxy, kube-scheduler, pause, CoreDNS; cached in $EOP_CACHE)"
    node infra/local/assets.ts >/dev/null
    step "type-check (tsc --noEmit)"
    npx tsc --noEmit
    step "lint (biome)"
    npx biome check .
    step "tests (tap)"
    out="$(mktemp)"
    set +e
    npx tap "$@" 2>&1 | tee "$out"
    rc=${PIPESTATUS[0]}
    set -e
    # tap ends with "# { total: N, pass: P, fail: F }"; repeat it as the plain closing line CI reads.
    summary="$(grep -E '^# \{ total: ' "$out" | tail -n 1)"
    rm -f "$out"
    pass="$(grep -oE 'pass: [0-9]+' <<<"$summary" | grep -oE '[0-9]+' || echo 0)"
    fail="$(grep -oE 'fail: [0-9]+' <<<"$summary" | grep -oE '[0-9]+' || echo 0)"
    if [ "$rc" != 0 ] && [ "$fail" = 0 ]; then fail=1; fi
    echo "${pass} passed, ${fail} failed"
    exit "$rc"
    ;;
  demo)
    if [[ "$*" == *--real-nodes* ]]; then ensure_image_packages; ensure_node_packages; fi
    node infra/local/assets.ts --runtime >/dev/null
    exec node infra/local/demo.ts "$@"
    ;;
  local)
    if [[ "$*" == *--real-nodes* ]]; then ensure_image_packages; ensure_node_packages; fi
    exec node infra/local/cli.ts "$@"
    ;;
  assets)
    exec node infra/local/assets.ts "$@"
    ;;
  image)
    ensure_image_packages
    exec node infra/image/build.ts "$@"
    ;;
  *)
    echo "usage: run.sh test|demo|local|assets|image" >&2
    exit 2
    ;;
esac
