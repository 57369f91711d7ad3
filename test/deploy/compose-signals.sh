#!/usr/bin/env bash
# compose-signals.sh — what the compose smoke tool ($COMPOSE_SMOKE: it builds the Dockerfile, starts
# docker-compose.yml and runs the README's Try-it flow) does not check, on the stack it builds
# (kept with SMOKE_KEEP=1, torn down at the end): SIGHUP through `docker compose kill -s HUP proxy`
# reaches the proxy (init: true forwards it) and reloads its config, and a config error stops the
# proxy with one line and exit 2 instead of a restart loop. Needs root; 1–4 minutes. Not part of
# `npm test` (no Docker engine there); run it by hand after changing the Dockerfile or compose file.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
smoke=${COMPOSE_SMOKE:?set COMPOSE_SMOKE to the compose smoke tool (a script taking the project directory)}
export DOCKER_HOST=unix:///run/compose-smoke/docker.sock
compose=/var/lib/compose-smoke/bin/docker-compose
C() { "$compose" --project-directory "$root" -f "$root/docker-compose.yml" "$@"; }
fails=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
tmp=$(mktemp -d)
cleanup() {
  rm -rf "$tmp"
  SMOKE_TEARDOWN_ONLY=1 bash "$smoke" "$root" >/dev/null 2>&1
}
trap cleanup EXIT

SMOKE_KEEP=1 bash "$smoke" "$root" || { echo "FAIL compose-smoke itself"; exit 1; }

# 1. SIGHUP through compose reaches the proxy and reloads; the proxy keeps serving.
C kill -s HUP proxy >/dev/null 2>&1
reloaded=
for _ in $(seq 1 20); do
  if C logs --no-color proxy 2>/dev/null | grep -q '"msg":"configuration reloaded"'; then reloaded=1; break; fi
  sleep 0.5
done
if [ -n "$reloaded" ]; then pass "docker compose kill -s HUP proxy: the proxy logged 'configuration reloaded'"
else fail "docker compose kill -s HUP proxy: no 'configuration reloaded' line"; fi
state=$("/usr/bin/docker" inspect -f '{{.State.Status}} {{.RestartCount}}' "$(C ps -q proxy)" 2>/dev/null)
if [ "$state" = "running 0" ]; then pass "after SIGHUP the proxy still runs, never restarted ($state)"
else fail "after SIGHUP the proxy is '$state', expected 'running 0'"; fi

# 2. A broken config: one line on stderr, exit 2, and no restart loop under the compose policy.
cp -r "$root/config" "$tmp/config"
printf 'routes: [ { name: broken, upstream: nowhere } ]\n' >"$tmp/config/proxy.yaml"
cat >"$tmp/override.yml" <<YAML
services:
  proxy:
    volumes: !override
      - $tmp/config:/app/config:ro
YAML
C -f "$tmp/override.yml" up -d --no-deps proxy >/dev/null 2>&1
sleep 20
id=$(C -f "$tmp/override.yml" ps -aq proxy)
read -r status code restarts < <("/usr/bin/docker" inspect -f '{{.State.Status}} {{.State.ExitCode}} {{.RestartCount}}' "$id" 2>/dev/null)
lines=$("/usr/bin/docker" logs "$id" 2>&1 | grep -c .)
if [ "$code" = 2 ]; then pass "a config error exits 2 (status $status)"; else fail "a config error: exit code '$code', expected 2"; fi
if [ "${restarts:-99}" -le 3 ] && [ "$status" = exited ]; then pass "a config error is not restarted in a loop: $restarts restarts, then it stays exited"
else fail "a config error: status '$status' after $restarts restarts in 20 s (a restart loop)"; fi
echo "--- what it printed ($lines lines) ---"; "/usr/bin/docker" logs "$id" 2>&1 | tail -5

echo "SUMMARY: compose-signals $((fails == 0 ? 1 : 0)) ($fails failed)"
[ "$fails" = 0 ]
