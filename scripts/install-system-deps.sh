#!/usr/bin/env bash
# The system software the test suite runs as real peers, from Debian's packages. `npm test` runs
# this first: it installs what is missing when it can (root, or sudo), and otherwise fails naming
# the packages, so no test that needs one of them can skip silently. Safe to run again; does
# nothing (no apt-get at all) when every command is already there.
#
# One line per package: the package, then the command whose presence says it is installed. A
# feature whose tests need a new system package adds its line here and nowhere else.
set -euo pipefail

packages=(
  "etcd-server etcd"      # cluster tests: a three-member etcd on loopback (test/helpers/etcd.ts)
  "etcd-client etcdctl"
  "kcat kcat"             # Kafka listener tests and bench cases: librdkafka's CLI (test/e2e/kafka.test.ts)
  "prometheus promtool"   # /metrics: promtool check metrics/rules/config, and a real Prometheus scraping the broker
  "chromium chromium"     # the web console's tests in headless Chromium (playwright-core)
  "systemd systemd-analyze"  # systemd-analyze verify of ops/systemd/es-broker.service
)

# Python packages, by pip: the edge tests' S3-compatible object store (test/helpers/moto.ts).
if ! command -v moto_server >/dev/null; then
  echo "installing moto[server] (pip) for the cold-storage tests" >&2
  if ! python3 -m pip install --quiet 'moto[server]' >&2 || ! command -v moto_server >/dev/null; then
    echo "Installing moto[server] with pip failed (or left no moto_server on the PATH); the cold-storage tests need it." >&2
    exit 1
  fi
fi

missing=()
for entry in "${packages[@]}"; do
  read -r package command <<<"$entry"
  if ! command -v "$command" >/dev/null && [ ! -x "/usr/sbin/$command" ] && [ ! -x "/usr/bin/$command" ]; then
    missing+=("$package")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null || ! sudo -n true 2>/dev/null; then
    echo "The tests need these Debian packages, and this user cannot install them: ${missing[*]}" >&2
    echo "Install them (apt-get install -y ${missing[*]}) and run npm test again." >&2
    exit 1
  fi
  sudo="sudo -n"
fi
echo "installing the Debian packages the tests need: ${missing[*]}" >&2
$sudo apt-get update -qq >&2
# policy-rc.d may refuse to start system services: the tests start their own instances.
if ! DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2; then
  echo "Installing the Debian packages ${missing[*]} failed; the tests need them." >&2
  exit 1
fi
