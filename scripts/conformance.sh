#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# make conformance: containerd v2.4.2's integration/client suite, unmodified, against
# containerd-shim-runc-v2 and the final shim (tools/conformance). The suite and containerd's
# runc-fp failpoint wrapper are built from the scratch module scripts/containerd2.sh resolved, so
# they are of the same containerd build as the containerd and reference shim it built.
# Arguments go to `conformance run` (e.g. -run 'TestContainerExec' or -shim final).
set -euo pipefail
cd "$(dirname "$0")/.."

# The version is the one scripts/containerd2.sh builds, read from there as final/driver does.
CONTAINERD2_VERSION=$(sed -n 's/^CONTAINERD2_VERSION=\(v[0-9][0-9.]*\)[[:space:]]*$/\1/p' scripts/containerd2.sh)
if [[ -z $CONTAINERD2_VERSION || $CONTAINERD2_VERSION == *$'\n'* ]]; then
	echo "conformance: scripts/containerd2.sh must set CONTAINERD2_VERSION=vX.Y.Z once" >&2
	exit 1
fi
cache=${SHIMWALK_CACHE:-/var/cache/shimwalk}/containerd-$CONTAINERD2_VERSION
src=$cache/src
out=$cache/conformance
mod=github.com/containerd/containerd/v2

if [[ ! -x $cache/bin/containerd || ! -f $src/go.mod ]]; then
	echo "conformance: no containerd $CONTAINERD2_VERSION in $cache; run scripts/containerd2.sh" >&2
	exit 1
fi
mkdir -p "$out/bin"
# go.sum of the scratch module already covers the suite's test dependencies: -mod=readonly keeps
# the module exactly as containerd2.sh left it.
(
	cd "$src"
	export GOWORK=off GOFLAGS="-mod=readonly -buildvcs=false"
	go test -c -o "$out/client.test" "$mod/integration/client"
	go build -o "$out/bin/runc-fp" "$mod/integration/failpoint/cmd/runc-fp"
	go list -f '{{.Dir}}' "$mod/integration/client" >"$out/pkg-dir"
)
go build -o "$out/conformance" ./tools/conformance
exec "$out/conformance" run -suite "$out/client.test" -pkg-dir "$(<"$out/pkg-dir")" -containerd-bin "$cache/bin" \
	-shim-bin "$PWD/bin" -fp-bin "$out/bin" -busybox "$(command -v busybox)" \
	-out "$out/results" -doc docs/deploy.md "$@"
