// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/api/types/task"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// recordingRunc is a BinaryName that logs every invocation's arguments, then runs runc.
func recordingRunc(t *testing.T) (binary, log string) {
	t.Helper()
	dir := testkit.TempDir(t)
	binary, log = filepath.Join(dir, "runc-recorder"), filepath.Join(dir, "calls")
	script := "#!/bin/sh\necho \"$*\" >> " + log + "\nexec runc \"$@\"\n"
	testkit.WriteExecutable(t, binary, []byte(script))
	return binary, log
}

// call is the logged invocation that has all of words, or "".
func call(t *testing.T, log string, words ...string) string {
	t.Helper()
	data, _ := os.ReadFile(log)
	for _, line := range strings.Split(string(data), "\n") {
		all := true
		for _, w := range words {
			all = all && strings.Contains(" "+line+" ", " "+w+" ")
		}
		if all {
			return line
		}
	}
	return ""
}

// TestCheckpointAndRestoreInvocations checkpoints a running container with CRIU through runc.
// CRIU cannot dump on this machine's kernel, so what is checked is what can be: the error comes
// back with CRIU's log named, the container keeps running untouched, and runc was called for
// checkpoint and then restore with the image path, work path and flags the options ask for.
func TestCheckpointAndRestoreInvocations(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	binary, log := recordingRunc(t)
	k := testkit.NewTask(t, d, "ckpt", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	req := k.CreateRequest()
	req.Options = mustAny(t, &options.Options{BinaryName: binary})
	created, err := k.Conn.Task.Create(k.Ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	k.Start()

	images := filepath.Join(testkit.TempDir(t), "images")
	work := filepath.Join(testkit.TempDir(t), "work")
	_, err = k.Conn.Task.Checkpoint(k.Ctx(), &taskapi.CheckpointTaskRequest{
		ID: k.ID, Path: images, Options: mustAny(t, &options.CheckpointOptions{WorkPath: work}),
	})
	if err == nil {
		t.Log("CRIU managed to dump on this kernel; the error path is not exercised")
	} else if msg := driver.Message(err); !strings.Contains(msg, "runc checkpoint") || !strings.Contains(msg, filepath.Join(work, "dump.log")) {
		t.Errorf("Checkpoint error %q does not carry runc's message and CRIU's log path", msg)
	}
	if st := k.State(); st.Status != task.Status_RUNNING || !testkit.Alive(int(created.Pid)) {
		t.Errorf("after the checkpoint attempt the task is %v (pid %d alive: %v)", st.Status, created.Pid, testkit.Alive(int(created.Pid)))
	}
	if c := call(t, log, "checkpoint", "--image-path", images, "--work-path", work, "--leave-running", k.ID); c == "" {
		t.Errorf("no runc checkpoint call with the image path, work path and --leave-running; calls:\n%s", readLog(log))
	}

	// Restore: a second task created from the image directory.
	r := testkit.NewTask(t, d, "restored", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	rreq := r.CreateRequest()
	rreq.Checkpoint = images
	rreq.Options = mustAny(t, &options.Options{BinaryName: binary, CriuWorkPath: work})
	_, err = r.Conn.Task.Create(r.Ctx(), rreq)
	if c := call(t, log, "restore", "--image-path", images, "--work-path", work, "--detach", "--bundle", r.Bundle, r.ID); c == "" {
		t.Errorf("no runc restore call with the image path, work path, --detach and the bundle; calls:\n%s", readLog(log))
	}
	if err == nil {
		return // restored for real
	}
	for _, id := range testkit.RuncContainers(t, d.Namespace) {
		if id == r.ID {
			t.Errorf("a failed restore left runc state for %s", id)
		}
	}
}

func readLog(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}
