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
// test created %[1]q/hold: with "start" it returns only once the test removes %[1]q/holding, so
// the container runs (and may exit) while its Start is still in flight; with "delete" it does
// nothing and succeeds, so Delete waits for an exit that runc delete never caused.
const holdingRunc = `#!/bin/sh
dir=%[1]q
sub=
for a; do case "$a" in start|delete) sub=$a; break;; esac; done
if [ "$sub" = %[2]q ] && mv "$dir/hold" "$dir/holding" 2>/dev/null; then
	if [ "$sub" = delete ]; then exit 0; fi
	runc "$@"; rc=$?
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
