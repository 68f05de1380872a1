// SPDX-License-Identifier: Apache-2.0

// Programs a test writes and then runs. Each is written by a child process, never by the test
// binary itself: parallel tests fork all the time; a child forked while this process holds the
// new file open for writing keeps that descriptor until its own exec, and an exec of the file
// in that instant fails with ETXTBSY ("text file busy", golang.org/issue/22315). The child that
// writes the file forks nothing else, so no descriptor of the file outlives the write. Not a
// mirror of any containerd function.

package testkit

import (
	"bytes"
	"fmt"
	"os/exec"
	"testing"
)

// WriteExecutable writes data to path as a file anyone may execute.
func WriteExecutable(t testing.TB, path string, data []byte) {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", `cat >"$1" && chmod 0755 "$1"`, "sh", path)
	cmd.Stdin = bytes.NewReader(data)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("write executable %s: %v: %s", path, err, out)
	}
}

// copyExecutable copies the program from to the new file to, for anyone to execute.
func copyExecutable(from, to string) error {
	if out, err := exec.Command("/bin/sh", "-c", `cat "$1" >"$2" && chmod 0755 "$2"`, "sh", from, to).CombinedOutput(); err != nil {
		return fmt.Errorf("copy %s to %s: %w: %s", from, to, err, bytes.TrimSpace(out))
	}
	return nil
}
