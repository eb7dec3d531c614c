#!/bin/sh
# A kubeadm node, as root, before it has joined: pullguard's package,
# serve's socket, the join with the kubelet patch, then `pullguard install`.
# PULLGUARD_DEB_URL and PULLGUARD_DEB_SHA256 name the release's .deb and
# its line of SHA256SUMS. Run from the directory that holds join.yaml and
# patches/ (deploy/bootstrap/kubeadm).
set -eu
cd "$(dirname "$0")"
: "${PULLGUARD_DEB_URL:?the URL of pullguard_<version>_<arch>.deb}"
: "${PULLGUARD_DEB_SHA256:?its SHA-256, from the release's SHA256SUMS}"
deb=/var/cache/pullguard/pullguard.deb

# Fail closed: on any failure the kubelet stops and cannot start until
# this drop-in is removed (docs/operations.md, "New nodes").
block=/etc/systemd/system/kubelet.service.d/00-pullguard-bootstrap-failed.conf
fail_closed() {
  mkdir -p "$(dirname "$block")"
  printf '%s\n' '[Service]' \
    'ExecStartPre=/bin/echo pullguard bootstrap failed: remove this drop-in and run the bootstrap again' \
    'ExecStartPre=/bin/false' >"$block"
  systemctl daemon-reload || true
  systemctl stop kubelet || true
}
trap 'rc=$?; if [ "$rc" -ne 0 ]; then fail_closed; fi; exit "$rc"' EXIT

# 1. The package: the binary and the units; it starts nothing.
mkdir -p /var/cache/pullguard
curl -fsSL --retry 5 -o "$deb" "$PULLGUARD_DEB_URL"
echo "$PULLGUARD_DEB_SHA256  $deb" | sha256sum -c -
apt-get install -y "$deb"

# 2. serve's socket, before the kubelet's first start. The kubelet that
# kubeadm starts connects to it, and systemd starts serve, which reads
# the configuration kubeadm has just written; the connection waits in the
# socket until serve answers.
systemctl enable --now pullguard.socket

# 3. The join: kubeadm writes the kubelet's configuration with the patch
# (imageServiceEndpoint: serve's socket) and starts the kubelet.
install -d -m 0755 /etc/kubernetes/pullguard-patches
install -m 0644 patches/kubeletconfiguration+strategic.yaml /etc/kubernetes/pullguard-patches/
kubeadm join --config join.yaml

# 4. install: serve gets the kubelet's own flags (its credential
# providers, root directory, runtime), the kubelet's settings move to a
# --config-dir that `kubeadm upgrade` does not rewrite, the kubelet is
# ordered after serve, and uninstall has its manifest. The kubelet is
# restarted through serve, as it already runs: at no moment does it run
# without it. Exits 1 when doctor's checks do not pass: then, as for any
# failed step, fail_closed stops the kubelet and keeps it stopped.
pullguard install --restart-kubelet
