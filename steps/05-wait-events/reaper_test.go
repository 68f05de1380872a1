// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"syscall"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"
	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

func TestContainerIsTheShimsChild(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "child", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	pid := k.Run()
	p, err := driver.ReadProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	if p.PPid != k.ShimPid {
		t.Errorf("container %d has parent %d, want the shim %d", pid, p.PPid, k.ShimPid)
	}
}

func TestExitStatusIsCollected(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	cases := []struct {
		id     string
		args   []string
		signal uint32 // sent after start, when not 0
		want   uint32
	}{
		{"exit7", []string{"sh", "-c", "exit 7"}, 0, 7},
		{"killed", []string{"sleep", "100"}, 9, 137},
	}
	for _, tc := range cases {
		t.Run(tc.id, func(t *testing.T) {
			t.Parallel()
			k := testkit.NewTask(t, d, tc.id, testkit.TaskOptions{Args: tc.args, NullIO: true})
			pid := k.Run()
			if tc.signal != 0 {
				if _, err := k.Conn.Task.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: tc.signal, All: true}); err != nil {
					t.Fatal(err)
				}
			}
			st := k.WaitStatus(task.Status_STOPPED, 10*time.Second)
			if st.ExitStatus != tc.want || st.ExitedAt == nil {
				t.Errorf("State: exit status %d at %v, want %d and a time", st.ExitStatus, st.ExitedAt, tc.want)
			}
			resp, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID})
			if err != nil {
				t.Fatal(err)
			}
			if int(resp.Pid) != pid || resp.ExitStatus != tc.want || !resp.ExitedAt.AsTime().Equal(st.ExitedAt.AsTime()) {
				t.Errorf("Delete = pid %d status %d at %v; want %d, %d, %v", resp.Pid, resp.ExitStatus, resp.ExitedAt.AsTime(), pid, tc.want, st.ExitedAt.AsTime())
			}
		})
	}
}

func TestNoZombies(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "zombies", testkit.TaskOptions{
		Args: []string{"sh", "-c", "sleep 1 & sleep 1 & exit 0"}, NullIO: true,
	})
	k.Run()
	k.WaitStatus(task.Status_STOPPED, 10*time.Second)
	testkit.Eventually(t, 10*time.Second, "the shim keeps children after the container exited", func() bool {
		for _, child := range testkit.Children(k.ShimPid) {
			if p, err := driver.ReadProc(child); err == nil {
				t.Logf("child %d state %c: %s", child, p.State, p.Command)
				return false
			}
		}
		return true
	})
}

// TestManyContainersAtOnce runs 20 shims, each creating, starting, killing and deleting its
// container at the same time. Each container answers SIGTERM with its own exit code: a runc
// command whose exit was stolen by the reap loop fails its RPC, and an exit given to the wrong
// process shows up as a wrong status.
func TestManyContainersAtOnce(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	rootfs := testkit.Rootfs(t)
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs <- runToExit(d, rootfs, i)
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

func runToExit(d *driver.Driver, rootfs string, i int) (err error) {
	id, want := fmt.Sprintf("load%02d", i), uint32(10+i)
	script := fmt.Sprintf("trap 'exit %d' TERM; while :; do sleep 0.1; done", want)
	k, err := testkit.OpenTask(d, id, rootfs, testkit.TaskOptions{Args: []string{"sh", "-c", script}, NullIO: true})
	defer func() {
		if k == nil {
			return
		}
		if err != nil {
			log, _ := os.ReadFile(filepath.Join(k.Bundle, "shim.log"))
			err = fmt.Errorf("%w\nshim.log:\n%s", err, log)
		}
		err = errors.Join(err, k.Close())
	}()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	svc := k.Conn.Task
	created, err := svc.Create(ctx, k.CreateRequest())
	if err != nil {
		return fmt.Errorf("%s: Create: %w", id, err)
	}
	if _, err := svc.Start(ctx, &taskapi.StartRequest{ID: id}); err != nil {
		return fmt.Errorf("%s: Start: %w", id, err)
	}
	// The trap is set once sh runs its script; until then SIGTERM would be ignored by PID 1.
	// Before runc start execs sh, the same pid is `runc init`, whose Go runtime catches
	// every signal: ShellTraps looks for the handler only once the process is busybox.
	if err := waitFor(ctx, func() bool { return testkit.ShellTraps(int(created.Pid), syscall.SIGTERM) }); err != nil {
		return fmt.Errorf("%s: the trap was never set: %w", id, err)
	}
	if _, err := svc.Kill(ctx, &taskapi.KillRequest{ID: id, Signal: 15}); err != nil {
		return fmt.Errorf("%s: Kill: %w", id, err)
	}
	var st *taskapi.StateResponse
	if err := waitFor(ctx, func() bool {
		st, err = svc.State(ctx, &taskapi.StateRequest{ID: id})
		return err == nil && st.Status == task.Status_STOPPED
	}); err != nil {
		return fmt.Errorf("%s: never stopped (%v): %w", id, st, err)
	}
	resp, err := svc.Delete(ctx, &taskapi.DeleteRequest{ID: id})
	if err != nil {
		return fmt.Errorf("%s: Delete: %w", id, err)
	}
	if resp.Pid != created.Pid || resp.ExitStatus != want {
		return fmt.Errorf("%s: Delete reports pid %d status %d, want pid %d status %d", id, resp.Pid, resp.ExitStatus, created.Pid, want)
	}
	return nil
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(ctx context.Context, cond func() bool) error {
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// TestContainerdCollectsExitStatus runs a container under a real containerd and checks that
// containerd learns its exit status from the shim.
func TestContainerdCollectsExitStatus(t *testing.T) {
	t.Parallel()
	c := testkit.StartContainerd(t)
	shim, rootfs := shimBinary(t), testkit.Rootfs(t)
	const id = "s04-exit3"
	t.Cleanup(func() {
		c.Ctr(t, "task", "delete", "--force", id)
		c.Ctr(t, "container", "delete", id)
	})
	if r := c.Ctr(t, "run", "-d", "--runtime", shim, "--rootfs", rootfs, id, "/bin/sh", "-c", "sleep 1; exit 3"); r.Code != 0 {
		t.Fatalf("ctr run -d: %s", r.Stderr)
	}
	testkit.Eventually(t, 20*time.Second, "task never STOPPED", func() bool {
		return containsLine(c.Ctr(t, "task", "ls").Stdout, id, "STOPPED")
	})
	r := c.Ctr(t, "task", "delete", id)
	if r.Code != 0 {
		t.Fatalf("ctr task delete: %s", r.Stderr)
	}
	// containerd 1.6 says "exit code 3" on stderr, later versions "exit status 3".
	if !regexp.MustCompile(`exit (code|status) 3\b`).MatchString(r.Stdout + r.Stderr) {
		t.Errorf("ctr task delete said %q, want exit status 3", r.Stdout+r.Stderr)
	}
	if r := c.Ctr(t, "container", "delete", id); r.Code != 0 {
		t.Fatalf("ctr container delete: %s", r.Stderr)
	}
	testkit.Eventually(t, 10*time.Second, "step-04 shim still running after the task was deleted", func() bool {
		return len(c.Shims(id)) == 0
	})
}

// TestShutdownLetsRuncCommandsFinish: a Kill whose runc kill is still running when Shutdown
// arrives must get its answer. The reap loop delivers runc's exit, so it must outlive the RPCs
// in flight, not stop with the Shutdown request.
func TestShutdownLetsRuncCommandsFinish(t *testing.T) {
	t.Parallel()
	k, f := faultyTask(t, "drain")
	if _, err := k.Conn.Task.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9}); err != nil {
		t.Fatal(err)
	}
	k.WaitStatus(task.Status_STOPPED, 20*time.Second)
	f.Set(t, "kill", testkit.Block)
	killed := make(chan error, 1)
	go func() {
		_, err := k.Conn.Task.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9})
		killed <- err
	}()
	f.WaitReached(t, "kill", 20*time.Second)
	if _, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Conn.Task.Shutdown(k.Ctx(), &taskapi.ShutdownRequest{ID: k.ID}); err != nil {
		t.Fatal(err)
	}
	f.Clear(t, "kill")
	// runc kill finds the container deleted: NotFound, not a connection closed on the caller.
	if err := <-killed; driver.Code(err) != codes.NotFound {
		t.Errorf("Kill in flight across Shutdown: %v, want NotFound from runc", err)
	}
}

// TestRuncExitsReapedFirst: with SHIMWALK_REAP_FIRST, every runc command's exit is reaped, and
// looked up, before Start returns, whenever Start does not hold the reaper's lock across the
// fork. A monitor that records the pid after the fork then loses every runc exit, and the
// first RPC fails, every time; the step's passes the whole life cycle.
func TestRuncExitsReapedFirst(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	d.Env = append(d.Env, "SHIMWALK_REAP_FIRST=1")
	k := testkit.NewTask(t, d, "reapfirst", testkit.TaskOptions{Args: []string{"sh", "-c", "exit 3"}, NullIO: true})
	pid := k.Run()
	st := k.WaitStatus(task.Status_STOPPED, 20*time.Second)
	if st.ExitStatus != 3 {
		t.Errorf("State: exit status %d, want 3", st.ExitStatus)
	}
	resp, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID})
	if err != nil {
		t.Fatal(err)
	}
	if int(resp.Pid) != pid || resp.ExitStatus != 3 {
		t.Errorf("Delete = pid %d status %d; want %d, 3", resp.Pid, resp.ExitStatus, pid)
	}
}
