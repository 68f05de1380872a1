// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// shellLogger writes a logging binary that saves its environment to <to>.env and its stdout
// (fd 3) to <to>.out, and returns the binary:// URI that runs it with to as its argument. It
// ignores the SIGTERM that may come as soon as its pipes are closed, which could stop it
// before it has read them to their end.
func shellLogger(t *testing.T) (uri, to string) {
	t.Helper()
	dir := testkit.TempDir(t)
	logger := filepath.Join(dir, "logger.sh")
	script := "#!/bin/sh\ntr '\\0' '\\n' </proc/$$/environ >\"$2.env\"\nexec 5>&-\ntrap '' TERM\nexec cat <&3 >\"$2.out\"\n"
	testkit.WriteExecutable(t, logger, []byte(script))
	to = filepath.Join(dir, "log")
	return "binary://" + logger + "?to=" + to, to
}

// checkLoggerEnv checks the environment shellLogger saved: the exec's id as CONTAINER_ID, as
// containerd's shim passes it (NewBinaryIO and CopyConsole get the exec's id), the namespace,
// and nothing else.
func checkLoggerEnv(t *testing.T, to, execID, namespace string) {
	t.Helper()
	env, err := os.ReadFile(to + ".env")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Fields(string(env))
	slices.Sort(got)
	want := []string{"CONTAINER_ID=" + execID, "CONTAINER_NAMESPACE=" + namespace}
	if !slices.Equal(got, want) {
		t.Errorf("the logging binary's environment is %q, want %q", got, want)
	}
}

// TestExecLogger: an exec whose output goes to a binary:// logging binary.
func TestExecLogger(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "exec-logger", testkit.TaskOptions{Args: []string{"sleep", "600"}, NullIO: true})
	k.Run()
	uri, to := shellLogger(t)
	_, status, err := runExec(k.Conn.Task, k.ID, "log", &taskapi.ExecProcessRequest{
		Spec: execSpec(t, "/bin/sh", "-c", "echo exec-to-logger"), Stdout: uri, Stderr: uri,
	})
	if err != nil || status != 0 {
		t.Fatalf("exec: %d, %v", status, err)
	}
	if out, err := os.ReadFile(to + ".out"); err != nil || string(out) != "exec-to-logger\n" {
		t.Errorf("the logging binary got %q (%v), want the exec's output", out, err)
	}
	checkLoggerEnv(t, to, "log", d.Namespace)
}
