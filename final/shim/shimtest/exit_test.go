// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/runc/options"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// sameDriver is a second driver on d's state, as a restarted containerd would be.
func sameDriver(d *driver.Driver) *driver.Driver {
	d2 := *d
	return &d2
}

// TestDeadShimIsCleanedUp: a shim that saw its init exit and then died leaves exit.json, and
// the delete action reports that exit, unmounts the rootfs and removes the runc state.
func TestDeadShimIsCleanedUp(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "dead", testkit.TaskOptions{Args: []string{"sh", "-c", "exit 6"}, NullIO: true, Overlay: true})
	before := time.Now()
	pid := k.Run()
	rec := testkit.WaitExitRecord(t, k.Bundle)
	if rec.Pid != pid || rec.ExitStatus != 6 || rec.ExitedAt.Before(before) || rec.ExitedAt.After(time.Now()) {
		t.Errorf("exit.json = %+v, want pid %d, status 6, a time after %v", rec, pid, before)
	}
	if w := waitExec(t, k, ""); w.ExitStatus != 6 || !w.ExitedAt.AsTime().Equal(rec.ExitedAt) {
		t.Errorf("Wait = %d at %v; exit.json has 6 at %v", w.ExitStatus, w.ExitedAt.AsTime(), rec.ExitedAt)
	}
	if m := testkit.Mounts(t, k.Bundle); len(m) == 0 {
		t.Fatal("the overlay rootfs is not mounted: the test would prove nothing")
	}
	sock, err := driver.ReadBootstrap(k.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(k.ShimPid, syscall.SIGKILL)
	testkit.ExpectGone(t, k.ShimPid, "killed shim")

	infos, err := sameDriver(d).Reconnect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0].ID != k.ID || infos[0].TaskPid != pid || infos[0].Status != "DELETED" ||
		infos[0].ExitStatus != 6 || !infos[0].ExitedAt.Equal(rec.ExitedAt) {
		t.Errorf("Reconnect = %+v, want %s DELETED, pid %d, status 6 at %v", infos, k.ID, pid, rec.ExitedAt)
	}
	assertGone(t, k, sock.SocketPath())
}

// TestShimKilledUnderARunningContainer: with no exit.json, the delete action kills what is
// left of the container and reports 128+SIGKILL for the pid of init.pid.
func TestShimKilledUnderARunningContainer(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "abandoned", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true, Overlay: true})
	pid := k.Run()
	sock, err := driver.ReadBootstrap(k.Bundle)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Kill(k.ShimPid, syscall.SIGKILL)
	testkit.ExpectGone(t, k.ShimPid, "killed shim")
	if !driver.Alive(pid) {
		t.Fatal("the container died with its shim")
	}
	if _, err := os.Stat(filepath.Join(k.Bundle, bundle.ExitFile)); !os.IsNotExist(err) {
		t.Errorf("exit.json exists for a container that still runs: %v", err)
	}

	resp, err := d.DeleteShim(context.Background(), k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if int(resp.Pid) != pid || resp.ExitStatus != 137 || resp.ExitedAt == nil {
		t.Errorf("delete action = %v, want pid %d, status 137 and a time", resp, pid)
	}
	testkit.ExpectGone(t, pid, "container of a deleted task")
	// Run again (containerd retries a failed cleanup), it still succeeds.
	if _, err := d.DeleteShim(context.Background(), k.ID); err != nil {
		t.Errorf("second delete action: %v", err)
	}
	if err := d.RemoveBundle(k.ID); err != nil {
		t.Fatal(err)
	}
	assertGone(t, k, sock.SocketPath())
}

// assertGone checks that nothing of a task the driver cleaned up is left.
func assertGone(t *testing.T, k *testkit.Task, socket string) {
	t.Helper()
	for _, id := range testkit.RuncContainers(t, k.D.Namespace) {
		if id == k.ID {
			t.Errorf("runc still knows %s", id)
		}
	}
	if m := testkit.Mounts(t, filepath.Dir(k.Bundle)); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	for _, p := range []string{socket, k.Bundle} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s left behind", p)
		}
	}
}

// TestExecPidFilesStayApart: an exec's id is the caller's choice, and the ids "init" and
// "shim" are valid ones. Their pid files must not replace the bundle's init.pid and shim.pid,
// which the delete action and containerd read when the shim is gone.
func TestExecPidFilesStayApart(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "pidfiles", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	pid := k.Run()
	for _, id := range []string{"init", "shim"} {
		if _, err := k.Conn.Task.Exec(k.Ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: id, Spec: execSpec(t, "sleep", "100")}); err != nil {
			t.Fatalf("Exec %s: %v", id, err)
		}
		if _, err := k.Conn.Task.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID, ExecID: id}); err != nil {
			t.Fatalf("Start %s: %v", id, err)
		}
	}
	if got := testkit.ReadPid(t, filepath.Join(k.Bundle, bundle.InitPidFile)); got != pid {
		t.Errorf("init.pid says %d, want the init's %d", got, pid)
	}
	if got := testkit.ReadPid(t, filepath.Join(k.Bundle, bundle.ShimPidFile)); got != k.ShimPid {
		t.Errorf("shim.pid says %d, want the shim's %d", got, k.ShimPid)
	}

	syscall.Kill(k.ShimPid, syscall.SIGKILL)
	testkit.ExpectGone(t, k.ShimPid, "killed shim")
	resp, err := d.DeleteShim(context.Background(), k.ID)
	if err != nil {
		t.Fatal(err)
	}
	if int(resp.Pid) != pid || resp.ExitStatus != 137 {
		t.Errorf("delete action = %v, want the init's pid %d and status 137", resp, pid)
	}
	testkit.ExpectGone(t, pid, "container of a deleted task")
}

// TestDeleteActionUsesTheTasksRuntimeOptions gives a task its own runc root through the runtime
// options: the delete action, run after the shim died, must find the container there.
func TestDeleteActionUsesTheTasksRuntimeOptions(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "ownroot", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	root := filepath.Join(testkit.TempDir(t), "runc")
	req := k.CreateRequest()
	req.Options = mustAny(t, &options.Options{Root: root})
	created, err := k.Conn.Task.Create(k.Ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	k.Start()
	if known := testkit.RuncContainersAt(t, root, d.Namespace, ""); !slices.Contains(known, k.ID) {
		t.Fatalf("runc under the task's root does not know it: %v", known)
	}
	syscall.Kill(k.ShimPid, syscall.SIGKILL)
	testkit.ExpectGone(t, k.ShimPid, "killed shim")
	if _, err := d.DeleteShim(context.Background(), k.ID); err != nil {
		t.Fatal(err)
	}
	testkit.ExpectGone(t, int(created.Pid), "the container of the dead shim")
	if known := testkit.RuncContainersAt(t, root, d.Namespace, ""); slices.Contains(known, k.ID) {
		t.Errorf("runc under the task's root still knows it after the delete action")
	}
}

// TestStatsOfAStoppedTask reads the metrics of a task whose init has exited but which is not
// deleted yet: its cgroup is still there, and containerd's CRI asks for it in that window.
func TestStatsOfAStoppedTask(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "stopped-stats", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	k.Run()
	if _, err := k.Conn.Task.Stats(k.Ctx(), &taskapi.StatsRequest{ID: k.ID}); err != nil {
		t.Fatalf("Stats of a running task: %v", err)
	}
	if _, err := k.Conn.Task.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9}); err != nil {
		t.Fatal(err)
	}
	if _, err := k.Conn.Task.Wait(k.Ctx(), &taskapi.WaitRequest{ID: k.ID}); err != nil {
		t.Fatal(err)
	}
	resp, err := k.Conn.Task.Stats(k.Ctx(), &taskapi.StatsRequest{ID: k.ID})
	if err != nil || resp.GetStats() == nil {
		t.Errorf("Stats of a stopped task: %v, %v", resp, err)
	}
}
