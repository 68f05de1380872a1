// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/api/types/task"
	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// rpcDeadline is the deadline every disturbed call is made with. The shim gets it with the
// request (ttrpc carries it) and must give up on runc by then.
const rpcDeadline = 2 * time.Second

// TestRuncFailures runs a container whose runc fails (exits 1), hangs or is killed at create,
// start, exec, kill and delete. Each time the RPC returns an error within its deadline, the
// container is where it was before the call (a failed create leaves no container at all: no
// runc state, no mount), no runc or process of the call is left, and once runc behaves again
// the container goes through the rest of its life and leaves nothing.
func TestRuncFailures(t *testing.T) {
	t.Parallel()
	shim := shimBinary(t)
	for _, sub := range []string{"create", "start", "exec", "kill", "delete"} {
		for _, fault := range []testkit.Fault{testkit.Fail, testkit.Hang, testkit.Die} {
			t.Run(sub+"/"+string(fault), func(t *testing.T) {
				t.Parallel()
				runcFailure(t, shim, sub, fault)
			})
		}
	}
}

// disturbed makes one call that meets the fault and checks how it failed. That the shim gave
// up on a hung runc is checked by what follows (no runc of the call is left), not by when the
// reply came: the caller stops waiting at its deadline whatever the shim does, and how long a
// failing runc and its cleanup take depends on how busy the machine is.
func disturbed(t *testing.T, what string, fault testkit.Fault, call func(ctx context.Context) error) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), rpcDeadline)
	defer cancel()
	began := time.Now()
	err := call(ctx)
	took := time.Since(began)
	if err == nil {
		t.Fatalf("%s succeeded although runc %s", what, fault)
	}
	msg := driver.Message(err)
	switch fault {
	case testkit.Fail:
		if !strings.Contains(msg, "failing on purpose") {
			t.Errorf("%s: %q does not carry runc's message", what, msg)
		}
	case testkit.Hang:
		// The shim's deadline and the caller's are the same: either the caller gives up, or
		// the shim's reply that it killed runc (137) comes first.
		if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(msg, "deadline") && !strings.Contains(msg, "exit status 137") {
			t.Errorf("%s: %q is neither the deadline nor runc killed at it", what, msg)
		}
	}
	t.Logf("%s with runc that does %s: %v after %v", what, fault, msg, took.Round(time.Millisecond))
	return err
}

// onlyInit waits until the shim's only child is the container's init (pid; 0 for none): every
// runc of a disturbed call, and what it started, is gone.
func onlyInit(t *testing.T, shimPid, pid int) {
	t.Helper()
	var kids []int
	deadline := time.Now().Add(10 * time.Second)
	for {
		kids = slices.DeleteFunc(testkit.Children(shimPid), func(c int) bool { return c == pid })
		if len(kids) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shim still has children %v besides its init %d", kids, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func runcFailure(t *testing.T, shim, sub string, fault testkit.Fault) {
	d := testkit.NewDriver(t, shim)
	runc := testkit.NewFaultyRunc(t)
	// Unique in the test process: every driver of the kit shares the namespace and runc root.
	id := "runcfail-" + sub + "-" + string(fault)
	k := testkit.NewTask(t, d, id, testkit.TaskOptions{Args: []string{"sleep", "100"}, Overlay: true, NullIO: true})
	req := k.CreateRequest()
	req.Options = mustAny(t, &options.Options{BinaryName: runc.Path})
	svc := k.Conn.Task
	inRunc := func() bool { return slices.Contains(testkit.RuncContainers(t, d.Namespace), id) }
	// Cleared before the task is taken down, whatever the test did.
	t.Cleanup(func() { runc.Clear(t, sub) })

	if sub == "create" {
		runc.Set(t, sub, fault)
		disturbed(t, "Create", fault, func(ctx context.Context) error {
			_, err := svc.Create(ctx, req)
			return err
		})
		// The caller may have its error (at its deadline) before the shim has undone the
		// Create. A retry waits for the undo: with runc failing at once, its own error, never
		// AlreadyExists, and once it is back, nothing of either Create is left.
		runc.Set(t, sub, testkit.Fail)
		if _, err := svc.Create(k.Ctx(), req); !strings.Contains(driver.Message(err), "failing on purpose") {
			t.Errorf("a retried Create: %v, want runc's own failure", err)
		}
		onlyInit(t, k.ShimPid, 0)
		if inRunc() {
			t.Errorf("a failed create left runc state for %s", id)
		}
		if m := testkit.Mounts(t, k.Bundle); len(m) > 0 {
			t.Errorf("a failed create left mounts %v", m)
		}
		if _, err := svc.State(k.Ctx(), &taskapi.StateRequest{ID: id}); driver.Code(err) != codes.NotFound {
			t.Errorf("State after a failed create: %v, want NotFound", err)
		}
		// Nothing half-made stands in the way: the same id is created once runc behaves.
		runc.Clear(t, sub)
		if _, err := svc.Create(k.Ctx(), req); err != nil {
			t.Fatalf("Create once runc behaves: %v", err)
		}
		k.Start()
		finish(t, k, d, id, 0)
		return
	}

	created, err := svc.Create(k.Ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	pid := int(created.Pid)
	if sub == "start" {
		runc.Set(t, sub, fault)
		disturbed(t, "Start", fault, func(ctx context.Context) error {
			_, err := svc.Start(ctx, &taskapi.StartRequest{ID: id})
			return err
		})
		onlyInit(t, k.ShimPid, pid)
		if st := k.State(); st.Status != task.Status_CREATED || !driver.Alive(pid) {
			t.Errorf("after a failed start the task is %v (init %d alive: %v), want CREATED", st.Status, pid, driver.Alive(pid))
		}
		runc.Clear(t, sub)
	}
	k.Start()
	k.WaitStatus(task.Status_RUNNING, 10*time.Second)

	switch sub {
	case "exec":
		runc.Set(t, sub, fault)
		if _, err := svc.Exec(k.Ctx(), &taskapi.ExecProcessRequest{ID: id, ExecID: "x", Spec: execSpec(t, "sleep", "100")}); err != nil {
			t.Fatal(err)
		}
		disturbed(t, "Start of an exec", fault, func(ctx context.Context) error {
			_, err := svc.Start(ctx, &taskapi.StartRequest{ID: id, ExecID: "x"})
			return err
		})
		onlyInit(t, k.ShimPid, pid)
		if st := k.State(); st.Status != task.Status_RUNNING {
			t.Errorf("after a failed exec the task is %v, want RUNNING", st.Status)
		}
		if _, err := svc.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: id, ExecID: "x"}); err != nil {
			t.Errorf("Delete of the failed exec: %v", err)
		}
		runc.Clear(t, sub)
		if _, err := svc.Exec(k.Ctx(), &taskapi.ExecProcessRequest{ID: id, ExecID: "x", Spec: execSpec(t, "true")}); err != nil {
			t.Fatalf("the exec id is still taken: %v", err)
		}
		if _, err := svc.Start(k.Ctx(), &taskapi.StartRequest{ID: id, ExecID: "x"}); err != nil {
			t.Fatalf("Start of an exec once runc behaves: %v", err)
		}
		if w := waitExec(t, k, "x"); w.ExitStatus != 0 {
			t.Errorf("the exec exited %d", w.ExitStatus)
		}
	case "kill":
		runc.Set(t, sub, fault)
		err := disturbed(t, "Kill", fault, func(ctx context.Context) error {
			_, err := svc.Kill(ctx, &taskapi.KillRequest{ID: id, Signal: 9})
			return err
		})
		// NotFound would tell the caller that the container is gone and need not be killed.
		if driver.Code(err) == codes.NotFound {
			t.Errorf("a failed kill of a running container is reported as NotFound: %v", err)
		}
		onlyInit(t, k.ShimPid, pid)
		if st := k.State(); st.Status != task.Status_RUNNING || !driver.Alive(pid) {
			t.Errorf("after a failed kill the task is %v (init alive: %v), want RUNNING", st.Status, driver.Alive(pid))
		}
		runc.Clear(t, sub)
	case "delete":
		if _, err := svc.Kill(k.Ctx(), &taskapi.KillRequest{ID: id, Signal: 9}); err != nil {
			t.Fatal(err)
		}
		k.WaitStatus(task.Status_STOPPED, 10*time.Second)
		runc.Set(t, sub, fault)
		disturbed(t, "Delete", fault, func(ctx context.Context) error {
			_, err := svc.Delete(ctx, &taskapi.DeleteRequest{ID: id})
			return err
		})
		onlyInit(t, k.ShimPid, 0)
		if st := k.State(); st.Status != task.Status_STOPPED || st.ExitStatus != 137 {
			t.Errorf("after a failed delete the task is %v with exit %d, want STOPPED 137", st.Status, st.ExitStatus)
		}
		if !inRunc() {
			t.Errorf("a failed delete removed the container from runc but not from the shim")
		}
		runc.Clear(t, sub)
	}
	finish(t, k, d, id, pid)
}

// finish kills and deletes the task with a runc that behaves, expects exit 137, and checks
// that the container left nothing: no runc state, no mount, no process.
func finish(t *testing.T, k *testkit.Task, d *driver.Driver, id string, pid int) {
	t.Helper()
	svc := k.Conn.Task
	if _, err := svc.Kill(k.Ctx(), &taskapi.KillRequest{ID: id, Signal: 9}); err != nil && driver.Code(err) != codes.NotFound {
		t.Fatalf("Kill: %v", err)
	}
	k.WaitStatus(task.Status_STOPPED, 10*time.Second)
	resp, err := svc.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: id})
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if resp.ExitStatus != 137 {
		t.Errorf("Delete reports exit %d, want 137", resp.ExitStatus)
	}
	if slices.Contains(testkit.RuncContainers(t, d.Namespace), id) {
		t.Errorf("runc still knows %s", id)
	}
	if m := testkit.Mounts(t, k.Bundle); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	onlyInit(t, k.ShimPid, 0)
	if pid > 0 && driver.Alive(pid) {
		t.Errorf("init %d still runs", pid)
	}
}
