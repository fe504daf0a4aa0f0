#!/usr/bin/env bash
# Installs the peers the benchmark harness (npm run bench) compares es-broker with. Not part of
# `npm ci`: the quick benchmark in CI skips any peer that is missing, with a note.
#   - Debian packages: redis-server (Redis 7, streams with appendfsync always) and nats-server
#     (NATS 2.9 JetStream; it does not fsync per publish, the harness labels it).
#   - npm @durable-streams/server (the Durable Streams reference server, file mode), into its own
#     prefix bench/peers/ (bench/peers/package.json), never into the root dependencies.
# Needs root for apt-get (or sudo). Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

if ! command -v redis-server >/dev/null || ! { command -v nats-server >/dev/null || [ -x /usr/sbin/nats-server ]; }; then
  $sudo apt-get update
  # policy-rc.d may refuse to start the system services: the harness starts its own instances.
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends redis-server nats-server
fi
# The harness runs its own servers on loopback with private data dirs; system-wide ones are not needed.
for service in redis-server nats-server; do
  if command -v systemctl >/dev/null && systemctl is-active --quiet "$service" 2>/dev/null; then
    echo "note: the system $service service is running; the harness does not use it"
  fi
done

npm ci --prefix bench/peers --no-audit --no-fund 2>/dev/null || npm install --prefix bench/peers --no-audit --no-fund

echo "peers installed:"
redis-server --version
{ command -v nats-server >/dev/null && nats-server --version; } || /usr/sbin/nats-server --version
node -e 'console.log("@durable-streams/server " + require("./bench/peers/node_modules/@durable-streams/server/package.json").version)'
