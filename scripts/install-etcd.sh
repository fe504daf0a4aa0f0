#!/usr/bin/env bash
# Installs etcd (Debian's etcd-server and etcd-client 3.4) for the cluster tests, which start their
# own members on loopback with private data directories (test/helpers/etcd.ts); the system service
# is not used. Needs root for apt-get (or sudo). Safe to run again; does nothing if etcd is there.
set -euo pipefail

if command -v etcd >/dev/null && command -v etcdctl >/dev/null; then
  exit 0
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  if ! command -v sudo >/dev/null; then
    echo "etcd is missing and this user cannot install it: install the Debian packages etcd-server and etcd-client" >&2
    exit 1
  fi
  sudo="sudo"
fi
$sudo apt-get update
# policy-rc.d may refuse to start the system service: the tests run their own members.
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends etcd-server etcd-client
etcd --version | head -1
