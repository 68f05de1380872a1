#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds crictl, the CRI client, from the Go module proxy into the cache beside containerd 2.x
# (scripts/containerd2.sh), for the pod lab (make lab-pod): Debian's crictl is not in every
# release, and the module proxy is the one source reachable everywhere we run. Safe to run again:
# with the binary in place it only says so. tools/labpod reads the version below.
set -euo pipefail

CRICTL_VERSION=v1.34.0

cache=${SHIMWALK_CACHE:-/var/cache/shimwalk}/crictl-$CRICTL_VERSION
bin=$cache/bin

if ! mkdir -p "$cache" 2>/dev/null || [[ ! -w $cache ]]; then
	echo "crictl: cannot write $cache; run as root or set SHIMWALK_CACHE" >&2
	exit 1
fi
# Parallel runs on one machine would build into the same file; the second waits and finds it.
exec 9>"$cache/.lock"
flock 9

if [[ -x $bin/crictl ]] && "$bin/crictl" --version >/dev/null 2>&1; then
	echo "crictl: crictl $CRICTL_VERSION is built in $bin"
	exit 0
fi

echo "crictl: building crictl $CRICTL_VERSION into $bin (a minute or two, once per machine)"
mkdir -p "$bin"
t0=$SECONDS
# go install pkg@version builds in module mode outside any module: nothing of shimwalk's go.mod,
# go.work or GOFLAGS=-mod=... reaches it. Built under a temporary GOBIN so that an interrupted
# build never looks done.
tmp=$(mktemp -d "$cache/.build.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
(cd / && GOWORK=off GOFLAGS=-buildvcs=false CGO_ENABLED=0 GOBIN=$tmp \
	go install -ldflags="-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=${CRICTL_VERSION#v}" \
	"sigs.k8s.io/cri-tools/cmd/crictl@$CRICTL_VERSION")
mv "$tmp/crictl" "$bin/crictl"
echo "crictl: built $bin/crictl in $((SECONDS - t0))s: $("$bin/crictl" --version)"
