// SPDX-License-Identifier: Apache-2.0

package testkit

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// Helpers run inside a re-executed test binary, for the parts of a test that must happen in
// another process, such as connecting to a shim as another user. A helper returns an exit code.
var helpers = map[string]func(args []string) int{}

const helperEnv = "SHIMWALK_TESTKIT_HELPER"

// RegisterHelper makes fn runnable by RunHelper under name. Call it from an init function.
func RegisterHelper(name string, fn func(args []string) int) {
	helpers[name] = fn
}

func runHelper() (int, bool) {
	name := os.Getenv(helperEnv)
	if name == "" {
		return 0, false
	}
	fn, ok := helpers[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "testkit: no helper %q\n", name)
		return 2, true
	}
	return fn(os.Args[1:]), true
}

// RunHelper runs the helper name in a copy of the test binary as uid:gid and returns its result.
func RunHelper(t testing.TB, uid, gid uint32, name string, args ...string) Result {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, args...)
	cmd.Env = append(os.Environ(), helperEnv+"="+name)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
	out, err := cmd.Output()
	r := Result{Stdout: string(out)}
	if ee, ok := err.(*exec.ExitError); ok {
		r.Code, r.Stderr = ee.ExitCode(), string(ee.Stderr)
	} else if err != nil {
		t.Fatalf("helper %s: %v", name, err)
	}
	return r
}
