// SPDX-License-Identifier: Apache-2.0

package main

import (
	"slices"
	"testing"
)

func TestSuiteEnvReplacesProxyAndTrust(t *testing.T) {
	base := []string{"HOME=/root", "PATH=/usr/bin", "http_proxy=http://corp:3128", "NO_PROXY=ghcr.io",
		"SSL_CERT_DIR=/etc/ssl/certs", "SHIMWALK_RUNC_ROOT=/tmp/x", "TEST_RUNTIME=io.containerd.runc.v2"}
	got := suiteEnv(base, map[string]string{"PATH": "/a:/usr/bin", "HTTPS_PROXY": "http://127.0.0.1:1",
		"TEST_RUNTIME": "io.containerd.shimwalk.v2", "http_proxy": "", "NO_PROXY": "", "SSL_CERT_DIR": ""})
	// A caller's proxy, exemptions and trust never reach the suite, nor the test kit's
	// SHIMWALK_ settings: the final shim runs as containerd would run it.
	want := []string{"HOME=/root", "HTTPS_PROXY=http://127.0.0.1:1", "PATH=/a:/usr/bin", "TEST_RUNTIME=io.containerd.shimwalk.v2"}
	if !slices.Equal(got, want) {
		t.Fatalf("env %q, want %q", got, want)
	}
}

func TestUnescapeMount(t *testing.T) {
	for in, want := range map[string]string{
		`/run/containerd-test/a\040b`: "/run/containerd-test/a b",
		`/plain`:                      "/plain",
		`/trailing\04`:                `/trailing\04`,
		`/x\134y`:                     `/x\y`,
	} {
		if got := unescapeMount(in); got != want {
			t.Errorf("unescapeMount(%q) = %q, want %q", in, got, want)
		}
	}
}
