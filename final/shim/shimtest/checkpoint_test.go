// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
	if st := k.State(); st.Status != task.Status_RUNNING || !driver.Alive(int(created.Pid)) {
		t.Errorf("after the checkpoint attempt the task is %v (pid %d alive: %v)", st.Status, created.Pid, driver.Alive(int(created.Pid)))
	}
	if c := call(t, log, "checkpoint", "--image-path", images, "--work-path", work, "--leave-running", k.ID); c == "" {
		t.Errorf("no runc checkpoint call with the image path, work path and --leave-running; calls:\n%s", readLog(log))
	}

	// Restore: a second task created from the image directory, restored by its Start.
	r := testkit.NewTask(t, d, "restored", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	rreq := r.CreateRequest()
	rreq.Checkpoint = images
	rreq.Options = mustAny(t, &options.Options{BinaryName: binary, CriuWorkPath: work})
	if _, err := r.Conn.Task.Create(r.Ctx(), rreq); err != nil {
		t.Fatalf("Create from a checkpoint: %v", err)
	}
	_, err = r.Conn.Task.Start(r.Ctx(), &taskapi.StartRequest{ID: r.ID})
	if c := call(t, log, "restore", "--image-path", images, "--work-path", work, "--detach", "--bundle", r.Bundle, r.ID); c == "" {
		t.Errorf("no runc restore call with the image path, work path, --detach and the bundle; calls:\n%s", readLog(log))
	}
	if err == nil {
		return // restored for real
	}
	if st := r.State(); st.Status != task.Status_CREATED {
		t.Errorf("after a failed restore the task is %v, want CREATED", st.Status)
	}
	for _, id := range testkit.RuncContainers(t, d.Namespace) {
		if id == r.ID {
			t.Errorf("a failed restore left runc state for %s", id)
		}
	}
}

// restoringRunc is a recordingRunc whose restore runs the bundle afresh (runc run --detach)
// with restore's own arguments, as a restore from a real image would start it: CRIU cannot
// dump on this kernel, so there is no image to restore. With untilReaped it returns only once
// the started process has exited and the shim has reaped it, before the shim can know its pid.
func restoringRunc(t *testing.T, untilReaped bool) (binary, log string) {
	t.Helper()
	testkit.RequireCommand(t, "bash")
	dir := testkit.TempDir(t)
	binary, log = filepath.Join(dir, "runc-restorer"), filepath.Join(dir, "calls")
	script := fmt.Sprintf(`#!/bin/bash
echo "$*" >> %q
args=("$@")
for i in "${!args[@]}"; do
	[ "${args[$i]}" = restore ] || continue
	global=("${args[@]:0:i}") run=() pidfile=
	set -- "${args[@]:i+1}"
	while [ $# -gt 0 ]; do
		case $1 in
		--image-path|--work-path|--parent-path) shift 2;;
		--detach|-no-subreaper|--no-subreaper) shift;;
		--pid-file) pidfile=$2; run+=("$1" "$2"); shift 2;;
		*) run+=("$1"); shift;;
		esac
	done
	runc "${global[@]}" run --detach "${run[@]}" || exit
	if %t; then
		pid=$(cat "$pidfile")
		while [ -e /proc/$pid ]; do sleep 0.02; done
	fi
	exit 0
done
exec runc "$@"
`, log, untilReaped)
	testkit.WriteExecutable(t, binary, []byte(script))
	return binary, log
}

// TestRestoreAtStart: a Create from a checkpoint records it and runs nothing (the task is
// CREATED, pid 0, as with containerd's runc shim); Start restores it and reports the restored
// pid. A restored process that exits before runc restore returns, and is reaped before the
// shim knows its pid, still ends the task with its own exit status.
func TestRestoreAtStart(t *testing.T) {
	t.Parallel()
	shim := shimBinary(t)
	for _, early := range []bool{false, true} {
		name, args := "running", []string{"sleep", "100"}
		if early {
			name, args = "exits-at-once", []string{"sh", "-c", "exit 3"}
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			d := testkit.NewDriver(t, shim)
			binary, log := restoringRunc(t, early)
			k := testkit.NewTask(t, d, "restore-"+name, testkit.TaskOptions{Args: args, NullIO: true})
			images := filepath.Join(testkit.TempDir(t), "images")
			req := k.CreateRequest()
			req.Checkpoint = images
			req.Options = mustAny(t, &options.Options{BinaryName: binary})
			created, err := k.Conn.Task.Create(k.Ctx(), req)
			if err != nil {
				t.Fatalf("Create from a checkpoint: %v", err)
			}
			if c := call(t, log, "restore"); c != "" {
				t.Errorf("Create ran %q: restoring is Start's", c)
			}
			if st := k.State(); created.Pid != 0 || st.Status != task.Status_CREATED || st.Pid != 0 {
				t.Errorf("after Create: pid %d, State %v with pid %d; want CREATED with no process", created.Pid, st.Status, st.Pid)
			}
			started, err := k.Conn.Task.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID})
			if err != nil {
				t.Fatalf("Start of a task created from a checkpoint: %v", err)
			}
			if c := call(t, log, "restore", "--image-path", images, "--detach", "-no-subreaper", "--bundle", k.Bundle, k.ID); c == "" {
				t.Errorf("no runc restore of the image, detached and without a subreaper; calls:\n%s", readLog(log))
			}
			pid := int(started.Pid)
			if pid <= 0 {
				t.Fatalf("Start reports pid %d", pid)
			}
			if early {
				if w := waitExec(t, k, ""); w.ExitStatus != 3 {
					t.Errorf("the restored process exited %d, want 3", w.ExitStatus)
				}
				resp, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID})
				if err != nil || resp.ExitStatus != 3 || int(resp.Pid) != pid {
					t.Errorf("Delete: %v, %v; want pid %d, exit 3", resp, err, pid)
				}
				return
			}
			if st := k.State(); st.Status != task.Status_RUNNING || int(st.Pid) != pid || !driver.Alive(pid) {
				t.Errorf("after Start: State %v with pid %d (alive: %v), want RUNNING with pid %d", st.Status, st.Pid, driver.Alive(pid), pid)
			}
			finish(t, k, d, k.ID, pid)
		})
	}
}

// TestDeleteOfUnrestoredTask: a task created from a checkpoint and deleted without a Start
// never had a process. Its Delete answers at once with status 0 at the zero time, as
// containerd's shim does, not the 137 of a process that had to be killed.
func TestDeleteOfUnrestoredTask(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	binary, _ := restoringRunc(t, false)
	k := testkit.NewTask(t, d, "restore-never", testkit.TaskOptions{Args: []string{"sleep", "100"}})
	req := k.CreateRequest()
	req.Checkpoint = filepath.Join(testkit.TempDir(t), "images")
	req.Options = mustAny(t, &options.Options{BinaryName: binary})
	if _, err := k.Conn.Task.Create(k.Ctx(), req); err != nil {
		t.Fatalf("Create from a checkpoint: %v", err)
	}
	resp, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID})
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if resp.Pid != 0 || resp.ExitStatus != 0 || !resp.ExitedAt.AsTime().Equal(time.Time{}) {
		t.Errorf("Delete of a task never restored: pid %d, status %d at %v; want 0, 0 at the zero time", resp.Pid, resp.ExitStatus, resp.ExitedAt.AsTime())
	}
	if m := testkit.Mounts(t, k.Bundle); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
}

func readLog(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}
