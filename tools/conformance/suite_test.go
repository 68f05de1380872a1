// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
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

// fakeSuite writes a test binary stand-in that passes TestA and then hangs in TestHang, whatever
// -test.skip says, as a regression that hangs every exec test would.
func fakeSuite(t *testing.T) (suite, pkgDir string) {
	t.Helper()
	dir := t.TempDir()
	suite = filepath.Join(dir, "client.test")
	// One write, so that test2json's events for it come together, with no quiet gap between.
	script := "#!/bin/sh\nprintf '=== RUN   TestA\\n--- PASS: TestA (0.00s)\\n=== RUN   TestHang\\n'\nexec sleep 1000\n"
	if err := os.WriteFile(suite, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	pkgDir = filepath.Join(dir, "pkg")
	if err := os.MkdirAll(filepath.Join(pkgDir, "testdata"), 0o755); err != nil {
		t.Fatal(err)
	}
	return suite, pkgDir
}

// TestShimRunStartsAtMost: a shim whose tests hang start after start is given up after -starts
// starts, not twenty, and what it did not get to is recorded, not an error that loses the rest.
func TestShimRunStartsAtMost(t *testing.T) {
	suite, pkgDir := fakeSuite(t)
	out := t.TempDir()
	starts := 0
	r := &shimRun{suite: suite, pkgDir: pkgDir, name: "final", out: out, env: os.Environ(), timeout: "10m",
		hang: time.Second, total: time.Hour, starts: 3,
		clean: func(string) []string { starts++; return nil }}
	if _, err := r.run(context.Background()); err != nil {
		t.Fatalf("run: %v", err)
	}
	if starts != 3 {
		t.Errorf("the suite was started %d times, want 3", starts)
	}
	if !strings.Contains(r.cutShort, "3 starts") {
		t.Errorf("cutShort = %q, want it to say the starts ran out", r.cutShort)
	}
	res, err := readResultsFile(filepath.Join(out, "final.json"))
	if err != nil {
		t.Fatal(err)
	}
	if word(res["TestA"]) != "pass" || word(res["TestHang"]) != "hung" {
		t.Errorf("TestA %s, TestHang %s; want pass, hung", word(res["TestA"]), word(res["TestHang"]))
	}
}

// TestShimRunDeadline: all starts for a shim together end at -shim-timeout; the test running
// then is ended, the run is reported as cut short, and the reference's pass of a test
// the shim never got to is a regression.
func TestShimRunDeadline(t *testing.T) {
	suite, pkgDir := fakeSuite(t)
	out := t.TempDir()
	starts := 0
	// hang is longer than total, so only the deadline can stop the hanging start.
	r := &shimRun{suite: suite, pkgDir: pkgDir, name: "final", out: out, env: os.Environ(), timeout: "10m",
		hang: time.Hour, total: 2 * time.Second, starts: 5,
		clean: func(string) []string { starts++; return nil }}
	if _, err := r.run(context.Background()); err != nil {
		t.Fatalf("run: %v", err)
	}
	if starts != 1 || !strings.Contains(r.cutShort, "ran out") {
		t.Errorf("%d starts, cutShort %q; want 1 start that ran out of time", starts, r.cutShort)
	}
	final, err := readResultsFile(filepath.Join(out, "final.json"))
	if err != nil {
		t.Fatal(err)
	}
	// TestHang is hung, or not run at all if the deadline came before the suite's first event.
	ref := map[string]*outcome{"TestHang": {Action: "pass"}, "TestLater": {Action: "pass"}}
	if got := regressions(ref, final); !slices.Equal(got, []string{"TestHang", "TestLater"}) {
		t.Errorf("regressions %q, want TestHang and TestLater", got)
	}
}

// TestNewEmptyCgroups: of the suite's namespaces' cgroups, in every hierarchy (a v1 or hybrid
// host has one per controller), only the empty ones that were not there before the run are
// removed; another namespace's are never looked at.
func TestNewEmptyCgroups(t *testing.T) {
	root := t.TempDir()
	hiers := []string{filepath.Join(root, "pids"), filepath.Join(root, "memory")}
	mk := func(dir, procs string) string {
		d := filepath.Join(root, dir)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(procs), 0o644); err != nil {
			t.Fatal(err)
		}
		return d
	}
	mk("pids/testing", "")
	mk("pids/testing/old", "")
	mk("pids/other/new", "")
	before := suiteCgroups(hiers)
	mk("pids/testing/new", "")
	mk("pids/testing/busy", "42\n")
	mk("memory/testing-TestX", "")
	mk("memory/testing-TestX/c", "")
	mk("pids/other/newer", "")
	got := newEmptyCgroups(hiers, before)
	// Deepest (longest) first, so that a cgroup goes before its parent.
	want := []string{filepath.Join(root, "memory/testing-TestX/c"), filepath.Join(root, "memory/testing-TestX"), filepath.Join(root, "pids/testing/new")}
	if !slices.Equal(got, want) {
		t.Errorf("newEmptyCgroups = %q, want %q", got, want)
	}
	if got := newEmptyCgroups(hiers, nil); got != nil {
		t.Errorf("with nothing recorded before: %q, want none", got)
	}
}
