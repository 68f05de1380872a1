// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/api/types/task"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// runExec adds, starts, waits for and deletes one exec through svc, with bounded contexts, and
// returns its pid and exit status. It reports instead of failing, for use in goroutines.
func runExec(svc taskapi.TTRPCTaskService, id, execID string, spec *taskapi.ExecProcessRequest) (int, uint32, error) {
	rpc := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), 10*time.Second)
	}
	ctx, cancel := rpc()
	defer cancel()
	spec.ID, spec.ExecID = id, execID
	if _, err := svc.Exec(ctx, spec); err != nil {
		return 0, 0, fmt.Errorf("Exec %s: %w", execID, err)
	}
	started, err := svc.Start(ctx, &taskapi.StartRequest{ID: id, ExecID: execID})
	if err != nil {
		return 0, 0, fmt.Errorf("Start %s: %w", execID, err)
	}
	wctx, wcancel := rpc()
	defer wcancel()
	w, err := svc.Wait(wctx, &taskapi.WaitRequest{ID: id, ExecID: execID})
	if err != nil {
		return 0, 0, fmt.Errorf("Wait %s (pid %d): %w", execID, started.Pid, err)
	}
	dctx, dcancel := rpc()
	defer dcancel()
	del, err := svc.Delete(dctx, &taskapi.DeleteRequest{ID: id, ExecID: execID})
	if err != nil {
		return 0, 0, fmt.Errorf("Delete %s: %w", execID, err)
	}
	if del.Pid != started.Pid || del.ExitStatus != w.ExitStatus || !del.ExitedAt.AsTime().Equal(w.ExitedAt.AsTime()) {
		return 0, 0, fmt.Errorf("exec %s: Start said pid %d, Wait %d at %v, Delete %v", execID, started.Pid, w.ExitStatus, w.ExitedAt.AsTime(), del)
	}
	return int(started.Pid), w.ExitStatus, nil
}

// TestExecEarlyExit: /bin/true exits before runc exec returns, and the reap loop may collect it
// before Start knows the pid. Every Wait must still end, with the real status.
func TestExecEarlyExit(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "early", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	initPid := k.Run()
	for i := range 50 {
		id := fmt.Sprintf("true-%d", i)
		_, status, err := runExec(k.Conn.Task, k.ID, id, &taskapi.ExecProcessRequest{Spec: execSpec(t, "/bin/true")})
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		if status != 0 {
			t.Errorf("exec %s exited %d, want 0", id, status)
		}
		_, err = k.Conn.Task.State(rpcCtx(t, 5*time.Second), &taskapi.StateRequest{ID: k.ID, ExecID: id})
		expectCode(t, "State of deleted exec "+id, err, codes.NotFound)
	}
	if st := k.State(); st.Status != task.Status_RUNNING || int(st.Pid) != initPid {
		t.Errorf("init after the execs: %v", st)
	}
	// The bundle is in tmpfs for as long as the container runs: execs leave nothing in it.
	if pidFiles, _ := filepath.Glob(filepath.Join(k.Bundle, "*.pid")); len(pidFiles) != 2 {
		t.Errorf("%d pid files in the bundle after 50 execs, want init.pid and shim.pid", len(pidFiles))
	}
	// Nothing left to reap: the shim's only child is the container's init.
	testkit.Eventually(t, 5*time.Second, "the shim has children other than the init", func() bool {
		return slices.Equal(testkit.Children(k.ShimPid), []int{initPid})
	})
}

// TestConcurrentExecEarlyExit starts short execs from several callers at once: an exit that
// the reap loop collects while other execs' Starts are in flight must reach its own exec.
func TestConcurrentExecEarlyExit(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "concurrent", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	k.Run()
	const callers, each = 4, 8
	// Different statuses, so that an exit handed to the wrong exec shows.
	var specs []*taskapi.ExecProcessRequest
	for status := range 3 {
		specs = append(specs, &taskapi.ExecProcessRequest{Spec: execSpec(t, "/bin/sh", "-c", fmt.Sprintf("exit %d", status))})
	}
	var wg sync.WaitGroup
	errs := make(chan error, callers*each)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("c%d-%d", c, i)
				want := uint32((c + i) % len(specs))
				spec := &taskapi.ExecProcessRequest{Spec: specs[want].Spec}
				_, status, err := runExec(k.Conn.Task, k.ID, id, spec)
				if err == nil && status != want {
					err = fmt.Errorf("exec %s exited %d, want %d", id, status, want)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestExecExitsComeBeforeInitExit: containerd takes an init's TaskExit as the end of the whole
// container, so the exits of its execs must be out before it.
func TestExecExitsComeBeforeInitExit(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	events := testkit.Events(t, d)
	k := testkit.NewTask(t, d, "order", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	initPid := k.Run()
	svc := k.Conn.Task
	if _, err := svc.Exec(k.Ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "long", Spec: execSpec(t, "sleep", "100")}); err != nil {
		t.Fatal(err)
	}
	started, err := svc.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID, ExecID: "long"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9}); err != nil {
		t.Fatal(err)
	}
	if w := waitExec(t, k, ""); w.ExitStatus != 137 {
		t.Errorf("init exited %d, want 137", w.ExitStatus)
	}
	if w := waitExec(t, k, "long"); w.ExitStatus != 137 {
		t.Errorf("exec exited %d, want 137", w.ExitStatus)
	}
	if _, err := svc.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID}); err != nil {
		t.Fatal(err)
	}

	got := nextEvents(t, events, 0, 7)
	want := "/tasks/create /tasks/start /tasks/exec-added /tasks/exec-started /tasks/exit /tasks/exit /tasks/delete"
	if s := topics(got); s != want {
		t.Fatalf("events: %s\nwant:   %s", s, want)
	}
	if e, _ := got[2].Event.(*eventstypes.TaskExecAdded); e == nil || e.ContainerID != k.ID || e.ExecID != "long" {
		t.Errorf("TaskExecAdded = %v", got[2].Event)
	}
	if e, _ := got[3].Event.(*eventstypes.TaskExecStarted); e == nil || e.ContainerID != k.ID || e.ExecID != "long" || e.Pid != started.Pid {
		t.Errorf("TaskExecStarted = %v, want pid %d", got[3].Event, started.Pid)
	}
	execExit, _ := got[4].Event.(*eventstypes.TaskExit)
	initExit, _ := got[5].Event.(*eventstypes.TaskExit)
	if execExit == nil || execExit.ContainerID != k.ID || execExit.ID != "long" || execExit.Pid != started.Pid || execExit.ExitStatus != 137 {
		t.Errorf("first TaskExit = %v, want the exec's", got[4].Event)
	}
	if initExit == nil || initExit.ContainerID != k.ID || initExit.ID != k.ID || initExit.Pid != uint32(initPid) || initExit.ExitStatus != 137 {
		t.Errorf("second TaskExit = %v, want the init's", got[5].Event)
	}
	if execExit != nil && initExit != nil && execExit.ExitedAt.AsTime().After(initExit.ExitedAt.AsTime()) {
		t.Errorf("the exec exited at %v, after the init at %v", execExit.ExitedAt.AsTime(), initExit.ExitedAt.AsTime())
	}
	for _, e := range got {
		if e.Namespace != d.Namespace {
			t.Errorf("%s in namespace %q", e.Topic, e.Namespace)
		}
	}
}

// TestOneExecStartsOnce: Starts of one exec that race each other run one process; the others
// are refused. A second runc exec would leave a process in the container that nobody tracks.
func TestOneExecStartsOnce(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "once", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	initPid := k.Run()
	svc := k.Conn.Task
	if _, err := svc.Exec(k.Ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "racy", Spec: execSpec(t, "sleep", "100")}); err != nil {
		t.Fatal(err)
	}
	const callers = 4
	results := make(chan error, callers)
	begin := make(chan struct{})
	for range callers {
		go func() {
			<-begin
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, err := svc.Start(ctx, &taskapi.StartRequest{ID: k.ID, ExecID: "racy"})
			results <- err
		}()
	}
	close(begin)
	started := 0
	for range callers {
		switch err := <-results; driver.Code(err) {
		case codes.OK:
			started++
		case codes.FailedPrecondition:
		default:
			t.Errorf("a racing Start: %v", err)
		}
	}
	if started != 1 {
		t.Errorf("%d Starts succeeded, want 1", started)
	}
	pids, err := svc.Pids(k.Ctx(), &taskapi.PidsRequest{ID: k.ID})
	if err != nil {
		t.Fatal(err)
	}
	if len(pids.Processes) != 2 {
		var list []uint32
		for _, p := range pids.Processes {
			list = append(list, p.Pid)
		}
		t.Errorf("the container runs %v, want the init %d and one exec", list, initPid)
	}
	_, err = svc.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID, ExecID: "racy"})
	expectCode(t, "Delete of a running exec", err, codes.FailedPrecondition)
}

// withoutPIDNamespace rewrites the spec of bundle so that its processes share the host's PID
// namespace: the init's exit then takes nothing down with it.
func withoutPIDNamespace(t *testing.T, dir string) {
	t.Helper()
	editSpec(t, dir, func(spec *specs.Spec) {
		if spec.Linux == nil {
			t.Fatal("the spec has no linux section")
		}
		spec.Linux.Namespaces = slices.DeleteFunc(spec.Linux.Namespaces, func(ns specs.LinuxNamespace) bool {
			return ns.Type == specs.PIDNamespace
		})
	})
}

// TestExecExitComesFirstWithoutPIDNamespace: an init without a PID namespace of its own leaves
// its execs running when it dies, so the kernel does not put their exits first. The shim does:
// it holds the init's exit, ends the execs, and publishes their TaskExit before the init's.
// runc kill fails throughout, so that a runc kill --all of what the init left cannot stand in
// for the shim's own kill of its execs, and the init is killed as the OOM killer would.
func TestExecExitComesFirstWithoutPIDNamespace(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	events := testkit.Events(t, d)
	runc := testkit.NewFaultyRunc(t)
	k := testkit.NewTask(t, d, "order-hostpid", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	withoutPIDNamespace(t, k.Bundle)
	req := k.CreateRequest()
	req.Options = mustAny(t, &options.Options{BinaryName: runc.Path})
	svc := k.Conn.Task
	created, err := svc.Create(k.Ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	initPid := int(created.Pid)
	k.Start()
	if _, err := svc.Exec(k.Ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "long", Spec: execSpec(t, "sleep", "100")}); err != nil {
		t.Fatal(err)
	}
	started, err := svc.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID, ExecID: "long"})
	if err != nil {
		t.Fatal(err)
	}
	runc.Set(t, "kill", testkit.Fail)
	t.Cleanup(func() { runc.Clear(t, "kill") }) // before the task's own cleanup kills it
	if err := syscall.Kill(initPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Nothing but the shim ends the exec: an init's TaskExit published first is never followed
	// by the exec's, so the first exit decides.
	got := nextEvents(t, events, 0, 5)
	want := "/tasks/create /tasks/start /tasks/exec-added /tasks/exec-started /tasks/exit"
	if s := topics(got); s != want {
		t.Fatalf("events: %s\nwant:   %s", s, want)
	}
	if e, _ := got[4].Event.(*eventstypes.TaskExit); e == nil || e.ID != "long" || e.Pid != started.Pid {
		t.Fatalf("first TaskExit = %v, want the exec's (pid %d) before the init's (pid %d)", got[4].Event, started.Pid, initPid)
	}
	last := nextEvents(t, events, 5, 1)
	if e, _ := last[0].Event.(*eventstypes.TaskExit); e == nil || e.ID != k.ID || e.Pid != uint32(initPid) || e.ExitStatus != 137 {
		t.Errorf("second TaskExit = %v, want the init's with 137", last[0].Event)
	}
	if w := waitExec(t, k, "long"); w.ExitStatus != 137 {
		t.Errorf("exec exited %d, want 137", w.ExitStatus)
	}
}
