#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Installs what shimwalk's demo and tests need, when missing: runc, crun, criu, containerd,
# busybox-static, e2fsprogs (mkfs.ext4, for the loop-mount test) and procps (ps, which the demo,
# the pod lab and the walkthrough's output run) from Debian, and staticcheck, containerd 2.x and
# crictl from the Go module proxy. Safe to run again; says what it did.
# `deps.sh demo` installs only what make demo runs (runc, busybox-static and procps), so that a
# fresh machine shows the demo without first building containerd 2.x, which only the tests use.
set -euo pipefail

what=${1:-all}
case $what in
all) pairs="runc:runc crun:crun criu:criu containerd:containerd ctr:containerd busybox:busybox-static mkfs.ext4:e2fsprogs ps:procps" ;;
demo) pairs="runc:runc busybox:busybox-static ps:procps" ;;
*) echo "usage: deps.sh [all|demo]" >&2; exit 2 ;;
esac

need=()
for pair in $pairs; do
	bin=${pair%%:*} pkg=${pair#*:}
	if ! command -v "$bin" >/dev/null 2>&1; then
		[[ " ${need[*]-} " == *" $pkg "* ]] || need+=("$pkg")
	fi
done
# busybox must be the static build: the container rootfs holds nothing but that one binary.
if command -v busybox >/dev/null 2>&1 && ldd "$(command -v busybox)" >/dev/null 2>&1; then
	need+=(busybox-static)
fi

if ((${#need[@]})); then
	if [[ $(id -u) != 0 ]]; then
		echo "deps: missing ${need[*]}; run as root to install them" >&2
		exit 1
	fi
	echo "deps: installing ${need[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
else
	echo "deps: installed already: $(for pair in $pairs; do echo "${pair%%:*}"; done | sort -u | xargs)"
fi
[[ $what == all ]] || exit 0

STATICCHECK_VERSION=v0.8.2
gobin=$(go env GOPATH)/bin
if [[ ! -x $gobin/staticcheck ]] || ! "$gobin/staticcheck" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
	echo "deps: installing staticcheck $STATICCHECK_VERSION"
	(cd / && go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION")
fi

# Debian has only containerd 1.6: 1.7, 2.2 and 2.4 are built once per machine into a cache outside
# the repository (a few minutes each on a fresh machine; nothing afterwards).
"$(dirname "$0")/containerd2.sh"
# crictl, for the pod lab and its test (tools/labpod), is built from the module proxy the same way.
"$(dirname "$0")/crictl.sh"
