// SPDX-License-Identifier: Apache-2.0

// Tests of how verify judges go test -json output and README headings, without running tests.
package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func parsed(t *testing.T, events string) *testRun {
	t.Helper()
	r := &testRun{result: map[string]string{}}
	if err := r.parse(strings.NewReader(events)); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestOutcome(t *testing.T) {
	const (
		pass     = `{"Action":"pass","Test":"TestA"}` + "\n"
		fail     = `{"Action":"fail","Test":"TestA"}` + "\n"
		skip     = `{"Action":"skip","Test":"TestA"}` + "\n"
		subPass  = `{"Action":"pass","Test":"TestA/sub"}` + "\n"
		pkgPass  = `{"Action":"pass"}` + "\n"
		buildErr = `{"Action":"build-output","Output":"undefined: x\n"}` + "\n" +
			`{"Action":"build-fail"}` + "\n" + `{"Action":"fail","FailedBuild":"p"}` + "\n"
	)
	for _, tc := range []struct {
		events, test, want string
		ok                 bool
		note               string
	}{
		{fail + pkgPass, "TestA", "fail", true, ""},
		{pass, "TestA", "fail", false, "TestA passed"},
		{pass, "TestA", "pass", true, ""},
		{skip, "TestA", "pass", false, "TestA skipped"},
		{pkgPass, "TestA", "pass", false, "TestA did not run"},
		{subPass + fail, "TestA/sub", "pass", true, ""},
		{buildErr, "TestA", "fail", false, "does not build"},
		{"FAIL\tnot json\n", "TestA", "fail", false, "TestA did not run"},
	} {
		got := parsed(t, tc.events).outcome(tc.test, tc.want)
		if got.ok != tc.ok || got.note != tc.note {
			t.Errorf("%q, %s want %s: %+v, want ok %v %q", tc.events, tc.test, tc.want, got, tc.ok, tc.note)
		}
	}
	if r := parsed(t, buildErr); !strings.Contains(r.output.String(), "undefined: x") {
		t.Errorf("build output not kept: %q", r.output.String())
	}
}

func TestCheckAnchor(t *testing.T) {
	root := t.TempDir()
	ex := Exercise{ID: "01.1", Step: "01-x", Anchor: "exercise-011-hand-the-socket-over"}
	if o := checkAnchor(root, ex); o.ok || !strings.Contains(o.note, "does not exist") {
		t.Errorf("without a README: %+v", o)
	}
	readme := filepath.Join(root, "steps", "01-x", "README.md")
	writeFiles(t, root, map[string]string{"steps/01-x/README.md": "# Step 01\n\n### Exercise 01.1: hand the socket over\n"})
	if o := checkAnchor(root, ex); !o.ok {
		t.Errorf("with the heading: %+v", o)
	}
	if err := os.WriteFile(readme, []byte("### Exercise 01.1: hand over the socket\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if o := checkAnchor(root, ex); o.ok || !strings.Contains(o.note, "no heading") {
		t.Errorf("with another heading: %+v", o)
	}
}
