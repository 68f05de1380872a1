// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	taskv3 "github.com/containerd/containerd/api/runtime/task/v3"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// overlayMounts are rootfs mounts for a Create request, with their upper and work directories
// in a fresh directory: a shim that mounted them before refusing the request would leave a
// mount behind.
func overlayMounts(t *testing.T) []*types.Mount {
	t.Helper()
	scratch := testkit.TempDir(t)
	upper, work := filepath.Join(scratch, "upper"), filepath.Join(scratch, "work")
	for _, dir := range []string{upper, work} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return []*types.Mount{{
		Type: "overlay", Source: "overlay",
		Options: []string{"lowerdir=" + testkit.Rootfs(t), "upperdir=" + upper, "workdir=" + work},
	}}
}

// answers checks that the shim still serves: Connect reaches the same process.
func answers(t *testing.T, k *testkit.Task) {
	t.Helper()
	resp, err := k.Conn.Task.Connect(rpcCtx(t, 5*time.Second), &taskapi.ConnectRequest{ID: k.ID})
	if err != nil {
		t.Fatalf("the shim no longer answers: %v", err)
	}
	if int(resp.ShimPid) != k.ShimPid {
		t.Fatalf("Connect reached shim %d, want %d", resp.ShimPid, k.ShimPid)
	}
	if log, _ := os.ReadFile(filepath.Join(k.Bundle, bundle.ShimLogFile)); strings.Contains(string(log), "panic") {
		t.Errorf("the shim's log reports a panic:\n%s", log)
	}
}

// TestCreateRefusesBadRequests: a Create the shim cannot honour fails with InvalidArgument
// before it mounts anything or asks runc for anything.
func TestCreateRefusesBadRequests(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "host", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})

	noConfig, err := d.CreateBundle("noconfig")
	if err != nil {
		t.Fatal(err)
	}
	missing := d.Bundle("missing")
	cases := []struct {
		name string
		req  *taskapi.CreateTaskRequest
	}{
		{"a bundle that does not exist", &taskapi.CreateTaskRequest{ID: "missing", Bundle: missing}},
		{"a bundle without config.json", &taskapi.CreateTaskRequest{ID: "noconfig", Bundle: noConfig}},
		{"a relative bundle path", &taskapi.CreateTaskRequest{ID: "relative", Bundle: "test/relative"}},
		{"an id with a NUL byte", &taskapi.CreateTaskRequest{ID: "nul\x00id", Bundle: k.Bundle}},
		{"an id with a slash", &taskapi.CreateTaskRequest{ID: "../host", Bundle: k.Bundle}},
		{"an id of 10 KiB", &taskapi.CreateTaskRequest{ID: strings.Repeat("a", 10<<10), Bundle: k.Bundle}},
		{"an empty id", &taskapi.CreateTaskRequest{Bundle: k.Bundle}},
		{"options of an unknown type", &taskapi.CreateTaskRequest{
			ID: "badopts", Bundle: k.Bundle, Options: &anypb.Any{TypeUrl: "example.com/no.such.Options"},
		}},
	}
	for _, c := range cases {
		c.req.Rootfs = overlayMounts(t)
		_, err := k.Conn.Task.Create(rpcCtx(t, 30*time.Second), c.req)
		expectCode(t, "Create with "+c.name, err, codes.InvalidArgument)
		if err != nil && len(driver.Message(err)) > 1024 {
			t.Errorf("Create with %s: a %d-byte message", c.name, len(driver.Message(err)))
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("Create made the missing bundle %s: %v", missing, err)
	}
	if m := testkit.Mounts(t, d.State); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if entries, _ := os.ReadDir(noConfig); len(entries) > 0 {
		t.Errorf("Create left %d files in the bundle without config.json", len(entries))
	}
	// runc's state root is shared by the package's tests: look for this test's ids only.
	known := testkit.RuncContainers(t, d.Namespace)
	for _, c := range cases {
		if slices.Contains(known, c.req.ID) {
			t.Errorf("runc knows %q, refused for %s", c.req.ID, c.name)
		}
	}
	answers(t, k)

	// The shim still does its job.
	pid := k.Run()
	if st := k.State(); st.Status != task.Status_RUNNING || int(st.Pid) != pid {
		t.Errorf("State after the refusals = %v, want RUNNING with pid %d", st, pid)
	}
	_, err = k.Conn.Task.Create(rpcCtx(t, 30*time.Second), k.CreateRequest())
	expectCode(t, "a second Create of "+k.ID, err, codes.AlreadyExists)
	if st := k.State(); st.Status != task.Status_RUNNING || int(st.Pid) != pid {
		t.Errorf("State after a second Create = %v, want the first task untouched", st)
	}
}

// TestIllegalTransitions walks one task through every state, asking each time for what that
// state forbids: each refusal carries the code containerd maps back to its errdefs.
func TestIllegalTransitions(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "illegal", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	svc := k.Conn.Task
	ctx := func() context.Context { return rpcCtx(t, 30*time.Second) }

	k.Create()
	_, err := svc.Pause(ctx(), &taskapi.PauseRequest{ID: k.ID})
	expectCode(t, "Pause of a created task", err, codes.FailedPrecondition)
	_, err = svc.Resume(ctx(), &taskapi.ResumeRequest{ID: k.ID})
	expectCode(t, "Resume of a created task", err, codes.FailedPrecondition)
	// Exec in a created task is allowed, as in the reference: TestExecIntoCreatedContainer.

	k.Start()
	_, err = svc.Start(ctx(), &taskapi.StartRequest{ID: k.ID})
	expectCode(t, "Start of a running task", err, codes.FailedPrecondition)
	_, err = svc.Resume(ctx(), &taskapi.ResumeRequest{ID: k.ID})
	expectCode(t, "Resume of a running task", err, codes.FailedPrecondition)
	_, err = svc.Delete(ctx(), &taskapi.DeleteRequest{ID: k.ID})
	expectCode(t, "Delete of a running task", err, codes.FailedPrecondition)
	for _, sig := range []uint32{0, 65, 99999} {
		_, err = svc.Kill(ctx(), &taskapi.KillRequest{ID: k.ID, Signal: sig})
		expectCode(t, "Kill with signal "+strconv.Itoa(int(sig)), err, codes.InvalidArgument)
	}
	_, err = svc.Exec(ctx(), &taskapi.ExecProcessRequest{
		ID: k.ID, ExecID: "notjson",
		Spec: &anypb.Any{TypeUrl: "types.containerd.io/opencontainers/runtime-spec/1/Process", Value: []byte("{not json")},
	})
	expectCode(t, "Exec with a spec that is not JSON", err, codes.InvalidArgument)
	_, err = svc.Exec(ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "noargs", Spec: execSpec(t)})
	expectCode(t, "Exec without args", err, codes.InvalidArgument)
	for _, id := range []string{"a/b", "nul\x00", strings.Repeat("e", 10<<10), ""} {
		_, err = svc.Exec(ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: id, Spec: execSpec(t, "true")})
		expectCode(t, "Exec with id "+shorten(id), err, codes.InvalidArgument)
	}
	if _, err := svc.Exec(ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "once", Spec: execSpec(t, "true")}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	_, err = svc.Exec(ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "once", Spec: execSpec(t, "false")})
	expectCode(t, "Exec with an exec id already taken", err, codes.AlreadyExists)
	_, err = svc.Start(ctx(), &taskapi.StartRequest{ID: k.ID, ExecID: "nosuch"})
	expectCode(t, "Start of an unknown exec", err, codes.NotFound)
	_, err = svc.Kill(ctx(), &taskapi.KillRequest{ID: k.ID, ExecID: "once", Signal: 9})
	expectCode(t, "Kill of an exec not started", err, codes.FailedPrecondition)
	_, err = svc.State(ctx(), &taskapi.StateRequest{ID: "nosuch"})
	expectCode(t, "State of an unknown task", err, codes.NotFound)
	_, err = svc.Delete(ctx(), &taskapi.DeleteRequest{ID: k.ID, ExecID: "nosuch"})
	expectCode(t, "Delete of an unknown exec", err, codes.NotFound)
	sock, err := driver.ReadBootstrap(k.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	code, msg := testkit.RawCall(t, sock.SocketPath(), "containerd.task.v2.Task", "Create", []byte{0xff, 0xff, 0xff})
	if code != codes.InvalidArgument {
		t.Errorf("Create with a payload that does not decode: %v %s, want InvalidArgument", code, msg)
	}
	answers(t, k)

	// The exec refused a second time is the first one, and it runs.
	if _, err := svc.Start(ctx(), &taskapi.StartRequest{ID: k.ID, ExecID: "once"}); err != nil {
		t.Fatalf("Start of exec once: %v", err)
	}
	if w := waitExec(t, k, "once"); w.ExitStatus != 0 {
		t.Errorf("exec once (true) exited %d", w.ExitStatus)
	}
	_, err = svc.Start(ctx(), &taskapi.StartRequest{ID: k.ID, ExecID: "once"})
	expectCode(t, "Start of an exec that exited", err, codes.FailedPrecondition)
	// NotFound, as containerd's runc shim says: CRI's StopContainer takes it as "already gone".
	_, err = svc.Kill(ctx(), &taskapi.KillRequest{ID: k.ID, ExecID: "once", Signal: 9})
	expectCode(t, "Kill of an exec that exited", err, codes.NotFound)

	if _, err := svc.Pause(ctx(), &taskapi.PauseRequest{ID: k.ID}); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	_, err = svc.Pause(ctx(), &taskapi.PauseRequest{ID: k.ID})
	expectCode(t, "Pause of a paused task", err, codes.FailedPrecondition)
	_, err = svc.Delete(ctx(), &taskapi.DeleteRequest{ID: k.ID})
	expectCode(t, "Delete of a paused task", err, codes.FailedPrecondition)
	if _, err := svc.Resume(ctx(), &taskapi.ResumeRequest{ID: k.ID}); err != nil {
		t.Fatalf("Resume: %v", err)
	}

	if _, err := svc.Kill(ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9}); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if w := waitExec(t, k, ""); w.ExitStatus != 137 {
		t.Errorf("init exited %d, want 137", w.ExitStatus)
	}
	_, err = svc.Exec(ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "late", Spec: execSpec(t, "true")})
	expectCode(t, "Exec in a stopped task", err, codes.FailedPrecondition)
	_, err = svc.Pause(ctx(), &taskapi.PauseRequest{ID: k.ID})
	expectCode(t, "Pause of a stopped task", err, codes.FailedPrecondition)
	_, err = svc.Kill(ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9})
	expectCode(t, "Kill of a stopped task", err, codes.NotFound)
	if _, err := svc.Delete(ctx(), &taskapi.DeleteRequest{ID: k.ID}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	_, err = svc.Delete(ctx(), &taskapi.DeleteRequest{ID: k.ID})
	expectCode(t, "a second Delete", err, codes.NotFound)
	_, err = svc.Start(ctx(), &taskapi.StartRequest{ID: k.ID})
	expectCode(t, "Start of a deleted task", err, codes.NotFound)
	answers(t, k)
}

// TestTaskAPIv3 speaks containerd.task.v3.Task, as containerd 2.x does once the shim reported
// version 3, on the same socket as v2.
func TestTaskAPIv3(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "v3", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	pid := k.Run()
	b, err := driver.ReadBootstrap(k.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	nc, err := net.DialTimeout("unix", b.SocketPath(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	client := ttrpc.NewClient(nc)
	t.Cleanup(func() { client.Close() })
	v3 := taskv3.NewTTRPCTaskClient(client)

	c, err := v3.Connect(rpcCtx(t, 5*time.Second), &taskv3.ConnectRequest{ID: k.ID})
	if err != nil {
		t.Fatalf("v3 Connect: %v", err)
	}
	if int(c.ShimPid) != k.ShimPid || int(c.TaskPid) != pid || c.Version == "" {
		t.Errorf("v3 Connect = %v, want shim %d, task %d, a version", c, k.ShimPid, pid)
	}
	st, err := v3.State(rpcCtx(t, 5*time.Second), &taskv3.StateRequest{ID: k.ID})
	if err != nil {
		t.Fatalf("v3 State: %v", err)
	}
	if st.ID != k.ID || int(st.Pid) != pid || st.Status != task.Status_RUNNING || st.Bundle != k.Bundle {
		t.Errorf("v3 State = %v, want %s RUNNING with pid %d in %s", st, k.ID, pid, k.Bundle)
	}
	_, err = v3.State(rpcCtx(t, 5*time.Second), &taskv3.StateRequest{ID: "nosuch"})
	expectCode(t, "v3 State of an unknown task", err, codes.NotFound)
	// v2 on the same socket, and a service the shim does not have.
	if st := k.State(); st.Status != task.Status_RUNNING {
		t.Errorf("v2 State = %v", st)
	}
	code, _ := testkit.RawCall(t, b.SocketPath(), "containerd.task.v4.Task", "State", nil)
	if code != codes.Unimplemented {
		t.Errorf("an unknown service answered %v, want Unimplemented", code)
	}
	if !slices.Contains(testkit.RuncContainers(t, d.Namespace), k.ID) {
		t.Errorf("runc does not know %s", k.ID)
	}
}

// TestDeleteCreatedTask: a task created and never started can be deleted: runc kills the
// waiting init, the shim reports its exit, and then has nothing left to keep it.
func TestDeleteCreatedTask(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	events := testkit.Events(t, d)
	k := testkit.NewTask(t, d, "unstarted", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true, Overlay: true})
	pid := k.Create()
	del, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID})
	if err != nil {
		t.Fatalf("Delete of a created task: %v", err)
	}
	if int(del.Pid) != pid || del.ExitStatus != 137 || del.ExitedAt == nil {
		t.Errorf("Delete = %v, want pid %d, status 137 and a time", del, pid)
	}
	testkit.ExpectGone(t, pid, "the init of a deleted task")
	if slices.Contains(testkit.RuncContainers(t, d.Namespace), k.ID) {
		t.Errorf("runc still knows %s", k.ID)
	}
	if m := testkit.Mounts(t, k.Bundle); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if got := nextEvents(t, events, 0, 3); topics(got) != "/tasks/create /tasks/exit /tasks/delete" {
		t.Errorf("events: %s", topics(got))
	}
	_, _ = k.Conn.Task.Shutdown(k.Ctx(), &taskapi.ShutdownRequest{ID: k.ID})
	testkit.ExpectGone(t, k.ShimPid, "a shim after its only task was deleted")
}
