// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"
	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// holdingRunc is runc, except for the first call of the subcommand named in %[2]q after the
// test created %[1]q/hold: with "create" or "start" it runs runc, creates %[1]q/ran, and returns
// only once the test removes %[1]q/holding, so the container exists (or runs, and may exit)
// while its Create or Start is still in flight; with "delete" it does nothing and succeeds, so
// Delete waits for an exit that runc delete never caused.
const holdingRunc = `#!/bin/sh
dir=%[1]q
sub=
for a; do case "$a" in create|start|delete) sub=$a; break;; esac; done
if [ "$sub" = %[2]q ] && mv "$dir/hold" "$dir/holding" 2>/dev/null; then
	if [ "$sub" = delete ]; then exit 0; fi
	runc "$@"; rc=$?
	: > "$dir/ran"
	while [ -f "$dir/holding" ]; do sleep 0.02; done
	exit $rc
fi
exec runc "$@"
`

// holdingTask prepares a task whose shim drives holdingRunc for subcommand sub, armed.
func holdingTask(t *testing.T, id, sub string, args ...string) (*testkit.Task, string) {
	t.Helper()
	dir := testkit.TempDir(t)
	wrapper := filepath.Join(dir, "runc")
	testkit.WriteExecutable(t, wrapper, []byte(fmt.Sprintf(holdingRunc, dir, sub)))
	if err := os.WriteFile(filepath.Join(dir, "hold"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	d := testkit.NewDriver(t, shimBinary(t))
	d.Env = append(d.Env, "SHIMWALK_RUNC="+wrapper)
	return testkit.NewTask(t, d, id, testkit.TaskOptions{Args: args, NullIO: true}), dir
}

// TestSecondStartKeepsTheFirstsExit: the container exits while the first Start is still in
// flight, which holds the exit back; a second Start of the same task must not drop it. Without
// the exit no TaskExit is sent, Wait never returns and State says RUNNING forever.
func TestSecondStartKeepsTheFirstsExit(t *testing.T) {
	t.Parallel()
	k, dir := holdingTask(t, "twostarts", "start", "true")
	k.Create()
	first := make(chan error, 1)
	go func() {
		_, err := k.Conn.Task.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID})
		first <- err
	}()
	// The first Start's runc start has run and the container has exited: its exit is held.
	testkit.Eventually(t, 20*time.Second, "the exit was never held back", func() bool {
		data, _ := os.ReadFile(filepath.Join(k.Bundle, "shim.log"))
		return strings.Contains(string(data), "exit held until its start is announced")
	})
	if _, err := k.Conn.Task.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID}); err == nil {
		t.Errorf("a second Start of an exited task succeeded")
	}
	if err := os.Remove(filepath.Join(dir, "holding")); err != nil {
		t.Fatal(err)
	}
	if err := <-first; err != nil {
		t.Fatalf("first Start: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := k.Conn.Task.Wait(ctx, &taskapi.WaitRequest{ID: k.ID})
	if err != nil || resp.ExitStatus != 0 {
		t.Fatalf("Wait after two Starts: %v, %v; want exit status 0", resp, err)
	}
	if st := k.State(); st.Status != task.Status_STOPPED {
		t.Errorf("State after the exit: %v", st.Status)
	}
}

// TestSecondDeleteWhileTheFirstWaits: a Delete of a created task waits, with the service's
// mutex released, for the exit runc delete causes. A second Delete in that time must not run
// the delete again nor publish a second TaskDelete.
func TestSecondDeleteWhileTheFirstWaits(t *testing.T) {
	t.Parallel()
	k, dir := holdingTask(t, "twodeletes", "delete", "sleep", "100")
	events := testkit.Events(t, k.D)
	pid := k.Create()
	first := make(chan *taskapi.DeleteResponse, 1)
	go func() {
		resp, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID})
		if err != nil {
			t.Errorf("first Delete: %v", err)
		}
		first <- resp
	}()
	// runc delete "succeeded" without touching the container: the first Delete, which holds
	// the service's mutex from before runc delete, goes on to wait for the exit.
	testkit.Eventually(t, 20*time.Second, "the first Delete never ran runc delete", func() bool {
		_, err := os.Stat(filepath.Join(dir, "holding"))
		return err == nil
	})
	resp, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID})
	if driver.Code(err) != codes.NotFound {
		t.Errorf("second Delete while the first waits: %v, %v; want NotFound", resp, err)
	}
	// The container is still there; its exit lets the first Delete finish.
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if r := <-first; r != nil && (r.ExitStatus != 137 || int(r.Pid) != pid) {
		t.Errorf("first Delete = %v, want pid %d status 137", r, pid)
	}
	got := nextEvents(t, events, 0, 3)
	if s := topics(got); s != "/tasks/create /tasks/exit /tasks/delete" {
		t.Errorf("topics = %s", s)
	}
}

// TestInitKilledDuringCreateIsClaimed: something outside kills runc init after runc create has
// started it but before Create has returned and registered its pid (containerd issue 9103). The
// shim reaps that exit while Create is in flight; it must still be the task's, reported after
// TaskCreate, or Wait never returns and State says CREATED forever.
func TestInitKilledDuringCreateIsClaimed(t *testing.T) {
	t.Parallel()
	k, dir := holdingTask(t, "killedincreate", "create", "sleep", "100")
	events := testkit.Events(t, k.D)
	created := make(chan error, 1)
	go func() {
		_, err := k.Conn.Task.Create(k.Ctx(), k.CreateRequest())
		created <- err
	}()
	testkit.Eventually(t, 20*time.Second, "runc create never returned", func() bool {
		_, err := os.Stat(filepath.Join(dir, "ran"))
		return err == nil
	})
	pid := testkit.ReadPid(t, filepath.Join(k.Bundle, "init.pid"))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Gone from /proc: the shim, runc init's subreaper, has reaped it while Create is held.
	testkit.Eventually(t, 20*time.Second, "the killed runc init was never reaped", func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return os.IsNotExist(err)
	})
	if err := os.Remove(filepath.Join(dir, "holding")); err != nil {
		t.Fatal(err)
	}
	if err := <-created; err != nil {
		t.Fatalf("Create: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := k.Conn.Task.Wait(ctx, &taskapi.WaitRequest{ID: k.ID})
	if err != nil || resp.ExitStatus != 137 {
		t.Fatalf("Wait: %v, %v; want exit status 137", resp, err)
	}
	if st := k.State(); st.Status != task.Status_STOPPED {
		t.Errorf("State after the exit: %v", st.Status)
	}
	if s := topics(nextEvents(t, events, 0, 2)); s != "/tasks/create /tasks/exit" {
		t.Errorf("topics = %s", s)
	}
}
