// SPDX-License-Identifier: Apache-2.0

// Helpers: parts of a test that must run in another process, such as dialling a shim as
// another user, run by a copy of the test binary that re-executes itself. Not a mirror of any
// containerd function.

package testkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"

	"github.com/shimwalk/shimwalk/final/driver"
)

// Helpers run inside a re-executed test binary, for the parts of a test that must happen in
// another process, such as connecting to a shim as another user. A helper returns an exit code.
var helpers = map[string]func(args []string) int{}

const helperEnv = "SHIMWALK_TESTKIT_HELPER"

// registerHelper makes fn runnable by RunHelper under name. Call it from an init function.
func registerHelper(name string, fn func(args []string) int) {
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

func init() {
	// ttrpc-connect ADDRESS: calls Connect on the shim at ADDRESS and prints the shim's pid.
	// Exit 1: connected, and the call was refused; 3: could not connect at all (file
	// permissions), so that a test of the peer-credential check can tell the two apart.
	registerHelper("ttrpc-connect", func(args []string) int {
		if len(args) != 1 {
			fmt.Fprintln(os.Stderr, "usage: ttrpc-connect ADDRESS")
			return 2
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := driver.Dial(ctx, args[0])
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 3
		}
		defer conn.Close()
		resp, err := conn.Task.Connect(ctx, &taskapi.ConnectRequest{})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Println(resp.ShimPid)
		return 0
	})
}

// helper is the copy of the test binary RunHelper runs.
var helperCopy perProcess[string]

// helperBinary is a copy of the test binary that any user may execute: go test keeps its
// binaries in a directory only root can enter.
func helperBinary(t testing.TB) string {
	t.Helper()
	return helperCopy.get(t, func() (string, error) {
		self, err := os.Executable()
		if err != nil {
			return "", fmt.Errorf("helper binary: %w", err)
		}
		if err := os.Chmod(WorkDir(t), 0o711); err != nil {
			return "", fmt.Errorf("helper binary: %w", err)
		}
		bin := filepath.Join(WorkDir(t), "helper")
		if err := copyExecutable(self, bin); err != nil {
			return "", fmt.Errorf("helper binary: %w", err)
		}
		return bin, nil
	})
}

// RunHelper runs the helper name in a copy of the test binary as uid:gid and returns its result.
func RunHelper(t testing.TB, uid, gid uint32, name string, args ...string) Result {
	t.Helper()
	cmd := exec.Command(helperBinary(t), args...)
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
