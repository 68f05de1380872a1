// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

const groupLabel = "io.containerd.shimwalk.v2.group"

// annotate adds annotations to the config.json of bundle.
func annotate(t *testing.T, dir string, annotations map[string]string) {
	t.Helper()
	editSpec(t, dir, func(spec *specs.Spec) { spec.Annotations = annotations })
}

// TestGroupSharesOneShim: containers whose specs carry the same group annotation are served by
// one shim, which ends only with its last container.
func TestGroupSharesOneShim(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	rootfs := testkit.Rootfs(t)
	ids := []string{"grp-a", "grp-b"}
	conns := map[string]*driver.Conn{}
	addresses := map[string]string{}
	shimPid := 0
	t.Cleanup(func() {
		// Whatever is left when the test fails half-way; on success this finds nothing to do.
		for _, id := range ids {
			if c := conns[id]; c != nil {
				_ = d.ForceDelete(rpcCtx(t, 30*time.Second), c, id)
			}
		}
		if shimPid > 0 && driver.Alive(shimPid) {
			syscall.Kill(shimPid, syscall.SIGKILL)
			testkit.ExpectGone(t, shimPid, "grouped shim")
		}
		for _, id := range ids {
			if _, err := os.Stat(d.Bundle(id)); err == nil {
				_, _ = d.DeleteShim(rpcCtx(t, 30*time.Second), id)
				if err := d.RemoveBundle(id); err != nil {
					t.Error(err)
				}
			}
		}
	})

	for _, id := range ids {
		dir, err := d.NewBundle(id, driver.SpecOptions{Args: []string{"sleep", "100"}, Rootfs: rootfs, Readonly: true})
		if err != nil {
			t.Fatal(err)
		}
		annotate(t, dir, map[string]string{groupLabel: "pod-1"})
		b, err := d.StartShim(rpcCtx(t, 30*time.Second), id, nil)
		if err != nil {
			t.Fatal(err)
		}
		addresses[id] = b.Address
		if shimPid == 0 {
			shimPid = testkit.ReadPid(t, filepath.Join(dir, bundle.ShimPidFile))
		}
		if conns[id], err = d.Connect(rpcCtx(t, 5*time.Second), id); err != nil {
			t.Fatal(err)
		}
	}
	if addresses["grp-a"] != addresses["grp-b"] {
		t.Fatalf("grouped tasks got addresses %s and %s", addresses["grp-a"], addresses["grp-b"])
	}
	for _, id := range ids {
		c, err := conns[id].Task.Connect(rpcCtx(t, 5*time.Second), &taskapi.ConnectRequest{ID: id})
		if err != nil {
			t.Fatal(err)
		}
		if int(c.ShimPid) != shimPid {
			t.Errorf("%s is served by shim %d, want the group's %d", id, c.ShimPid, shimPid)
		}
	}

	pids := map[string]uint32{}
	for _, id := range ids {
		svc := conns[id].Task
		created, err := svc.Create(rpcCtx(t, 30*time.Second), &taskapi.CreateTaskRequest{ID: id, Bundle: d.Bundle(id)})
		if err != nil {
			t.Fatalf("Create %s: %v", id, err)
		}
		pids[id] = created.Pid
		if _, err := svc.Start(rpcCtx(t, 30*time.Second), &taskapi.StartRequest{ID: id}); err != nil {
			t.Fatalf("Start %s: %v", id, err)
		}
	}
	if children := testkit.Children(shimPid); len(children) != 2 {
		t.Errorf("the group's shim has children %v, want both inits %v", children, pids)
	}

	// The first task goes, and its bundle with it: the shim stays for the second.
	stop(t, conns["grp-a"], "grp-a")
	if _, err := conns["grp-a"].Task.Shutdown(rpcCtx(t, 5*time.Second), &taskapi.ShutdownRequest{ID: "grp-a"}); err != nil {
		t.Fatalf("Shutdown with a task left: %v", err)
	}
	conns["grp-a"].Close()
	delete(conns, "grp-a")
	if err := d.RemoveShim(rpcCtx(t, 30*time.Second), nil, "grp-a"); err != nil {
		t.Fatalf("delete action and bundle removal for grp-a: %v", err)
	}
	if !driver.Alive(shimPid) {
		t.Fatal("the shim exited with a task left")
	}
	st, err := conns["grp-b"].Task.State(rpcCtx(t, 5*time.Second), &taskapi.StateRequest{ID: "grp-b"})
	if err != nil {
		t.Fatalf("the shim did not survive the first Shutdown: %v", err)
	}
	if st.Status != task.Status_RUNNING || st.Pid != pids["grp-b"] {
		t.Errorf("grp-b after grp-a went: %v", st)
	}
	_, err = conns["grp-b"].Task.State(rpcCtx(t, 5*time.Second), &taskapi.StateRequest{ID: "grp-a"})
	expectCode(t, "State of the deleted grp-a", err, codes.NotFound)

	// The last one goes: Shutdown ends the shim, which removes its socket.
	stop(t, conns["grp-b"], "grp-b")
	_, _ = conns["grp-b"].Task.Shutdown(rpcCtx(t, 5*time.Second), &taskapi.ShutdownRequest{ID: "grp-b"})
	testkit.ExpectGone(t, shimPid, "the group's shim after its last task")
	if _, err := os.Lstat(driver.Bootstrap{Address: addresses["grp-b"]}.SocketPath()); !os.IsNotExist(err) {
		t.Errorf("the group's socket is left: %v", err)
	}
	conns["grp-b"].Close()
	delete(conns, "grp-b")
	if err := d.RemoveShim(rpcCtx(t, 30*time.Second), nil, "grp-b"); err != nil {
		t.Errorf("delete action and bundle removal for grp-b: %v", err)
	}
	for _, id := range testkit.RuncContainers(t, d.Namespace) {
		if slices.Contains(ids, id) {
			t.Errorf("runc still knows %s", id)
		}
	}
}

// stop kills task id, waits for its exit and deletes it.
func stop(t *testing.T, c *driver.Conn, id string) {
	t.Helper()
	if _, err := c.Task.Kill(rpcCtx(t, 5*time.Second), &taskapi.KillRequest{ID: id, Signal: 9}); err != nil {
		t.Fatalf("Kill %s: %v", id, err)
	}
	w, err := c.Task.Wait(rpcCtx(t, 10*time.Second), &taskapi.WaitRequest{ID: id})
	if err != nil {
		t.Fatalf("Wait %s: %v", id, err)
	}
	if w.ExitStatus != 137 {
		t.Errorf("%s exited %d, want 137", id, w.ExitStatus)
	}
	if _, err := c.Task.Delete(rpcCtx(t, 10*time.Second), &taskapi.DeleteRequest{ID: id}); err != nil {
		t.Fatalf("Delete %s: %v", id, err)
	}
}
