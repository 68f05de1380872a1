// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

func readExitJSON(t *testing.T, bundle string) exitRecord {
	t.Helper()
	var r exitRecord
	data, err := os.ReadFile(filepath.Join(bundle, "exit.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatalf("exit.json %q: %v", data, err)
	}
	return r
}

func waitExitJSON(t *testing.T, bundle string) exitRecord {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, "exit.json never written", func() bool {
		_, err := os.Stat(filepath.Join(bundle, "exit.json"))
		return err == nil
	})
	return readExitJSON(t, bundle)
}

// sameDriver is a second driver on d's state, as a restarted containerd would be.
func sameDriver(d *driver.Driver) *driver.Driver {
	d2 := *d
	return &d2
}

func TestReconnectFindsRunningTask(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "alive", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	pid := k.Run()
	k.Conn.Close() // the caller goes away

	infos, err := sameDriver(d).Reconnect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(infos) != 1 || infos[0] != (driver.TaskInfo{ID: "alive", ShimPid: k.ShimPid, TaskPid: pid, Status: "RUNNING"}) {
		t.Errorf("Reconnect = %+v, want alive RUNNING shim %d task %d", infos, k.ShimPid, pid)
	}
	conn, err := d.Connect(context.Background(), k.ID)
	if err != nil {
		t.Fatal(err)
	}
	k.Conn = conn // for the cleanup
}

func TestExitWhileNobodyListens(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "alone", testkit.TaskOptions{Args: []string{"sh", "-c", "exit 6"}, NullIO: true})
	pid := k.Run()
	k.Conn.Close()
	// No driver and no events service while the container exits.
	rec := waitExitJSON(t, k.Bundle)
	if rec.Pid != pid || rec.ExitStatus != 6 || rec.ExitedAt.IsZero() {
		t.Fatalf("exit.json = %+v, want pid %d status 6", rec, pid)
	}

	events := testkit.Events(t, d)
	got := nextEvents(t, events, 0, 3)
	if s := topics(got); s != "/tasks/create /tasks/start /tasks/exit" {
		t.Fatalf("queued events arrived as %s", s)
	}
	if e, _ := got[2].Event.(*eventstypes.TaskExit); e == nil || e.Pid != uint32(pid) || e.ExitStatus != 6 {
		t.Errorf("TaskExit = %v", got[2].Event)
	}

	conn, err := d.Connect(context.Background(), k.ID)
	if err != nil {
		t.Fatal(err)
	}
	k.Conn = conn
	resp, err := conn.Task.Wait(k.Ctx(), &taskapi.WaitRequest{ID: k.ID})
	if err != nil {
		t.Fatal(err)
	}
	if resp.ExitStatus != 6 || !resp.ExitedAt.AsTime().Equal(rec.ExitedAt) {
		t.Errorf("Wait = %d at %v, want 6 at %v", resp.ExitStatus, resp.ExitedAt.AsTime(), rec.ExitedAt)
	}
}

func TestDeadShimIsCleanedUp(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "dead", testkit.TaskOptions{Args: []string{"sh", "-c", "exit 6"}, NullIO: true, Overlay: true})
	pid := k.Run()
	rec := waitExitJSON(t, k.Bundle)
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
	want := driver.TaskInfo{ID: "dead", TaskPid: pid, Status: "DELETED", ExitStatus: 6, ExitedAt: rec.ExitedAt}
	if len(infos) != 1 || infos[0].ID != want.ID || infos[0].TaskPid != want.TaskPid || infos[0].Status != want.Status ||
		infos[0].ExitStatus != want.ExitStatus || !infos[0].ExitedAt.Equal(want.ExitedAt) {
		t.Errorf("Reconnect = %+v, want %+v", infos, want)
	}
	assertGone(t, k, sock.SocketPath())
}

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

	infos, err := sameDriver(d).Reconnect(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	// The delete action killed the container: 137, and the pid from init.pid.
	if len(infos) != 1 || infos[0].Status != "DELETED" || infos[0].TaskPid != pid || infos[0].ExitStatus != 137 {
		t.Errorf("Reconnect = %+v, want DELETED pid %d status 137", infos, pid)
	}
	testkit.ExpectGone(t, pid, "container of a deleted task")
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

// TestEventsWaitForTheService keeps the events service away for 60 seconds, longer than
// containerd's own shim retries, while the container exits: the TaskExit still arrives, once.
func TestEventsWaitForTheService(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	first, err := driver.ListenEvents(d.TTRPCAddress)
	if err != nil {
		t.Fatal(err)
	}
	k := testkit.NewTask(t, d, "patient", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	pid := k.Run()
	if got := nextEvents(t, first, 0, 2); topics(got) != "/tasks/create /tasks/start" {
		t.Fatalf("before the outage: %s", topics(got))
	}
	first.Close()

	if _, err := k.Conn.Task.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9}); err != nil {
		t.Fatal(err)
	}
	waitExitJSON(t, k.Bundle)
	time.Sleep(60 * time.Second) // the outage itself

	events := testkit.Events(t, d)
	if _, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID}); err != nil {
		t.Fatal(err)
	}
	// Delivered in order, so once /tasks/delete is in, every copy of the exit would be too.
	got := nextEvents(t, events, 0, 2)
	if s := topics(got); s != "/tasks/exit /tasks/delete" {
		t.Fatalf("after the outage: %s, want the exit once, then the delete", s)
	}
	if e, _ := got[0].Event.(*eventstypes.TaskExit); e == nil || e.Pid != uint32(pid) || e.ExitStatus != 137 {
		t.Errorf("TaskExit = %v", got[0].Event)
	}
}

// TestContainerdRestart is not parallel: it kills the package's containerd, which the parallel
// tests share, and they only start once the sequential ones are done.
func TestContainerdRestart(t *testing.T) {
	c := testkit.StartContainerd(t)
	shim, rootfs := shimBinary(t), testkit.Rootfs(t)
	const running, exiting = "s06-running", "s06-exiting"
	t.Cleanup(func() {
		for _, id := range []string{running, exiting} {
			c.Ctr(t, "task", "kill", "-s", "KILL", id)
			c.Ctr(t, "task", "delete", "--force", id)
			c.Ctr(t, "container", "delete", id)
		}
	})
	if r := c.Ctr(t, "run", "-d", "--runtime", shim, "--rootfs", rootfs, running, "/bin/sleep", "100"); r.Code != 0 {
		t.Fatalf("ctr run -d: %s", r.Stderr)
	}
	if r := c.Ctr(t, "run", "-d", "--runtime", shim, "--rootfs", rootfs, exiting, "/bin/sleep", "100"); r.Code != 0 {
		t.Fatalf("ctr run -d: %s", r.Stderr)
	}
	shims := map[string][]int{running: c.Shims(running), exiting: c.Shims(exiting)}

	c.Kill(t)
	// While containerd is down, one container exits.
	exitPid := testkit.ReadPid(t, filepath.Join(c.Bundle(exiting), "init.pid"))
	syscall.Kill(exitPid, syscall.SIGKILL)
	waitExitJSON(t, c.Bundle(exiting))
	c.Restart(t)

	for id, before := range shims {
		if after := c.Shims(id); len(before) != 1 || len(after) != 1 || after[0] != before[0] {
			t.Errorf("%s: shims before the restart %v, after %v", id, before, after)
		}
	}
	testkit.Eventually(t, 20*time.Second, "after the restart, ctr task ls shows the running task and the exit", func() bool {
		ls := c.Ctr(t, "task", "ls").Stdout
		return containsLine(ls, running, "RUNNING") && containsLine(ls, exiting, "STOPPED")
	})
	if r := c.Ctr(t, "task", "delete", exiting); r.Code != 0 || !regexp.MustCompile(`exit (code|status) 137\b`).MatchString(r.Stdout+r.Stderr) {
		t.Errorf("ctr task delete %s: exit %d, %q", exiting, r.Code, r.Stdout+r.Stderr)
	}
	if r := c.Ctr(t, "task", "kill", "-s", "KILL", running); r.Code != 0 {
		t.Fatalf("ctr task kill: %s", r.Stderr)
	}
	testkit.Eventually(t, 10*time.Second, "killed task never STOPPED", func() bool {
		return containsLine(c.Ctr(t, "task", "ls").Stdout, running, "STOPPED")
	})
	if r := c.Ctr(t, "task", "delete", running); r.Code != 0 || !regexp.MustCompile(`exit (code|status) 137\b`).MatchString(r.Stdout+r.Stderr) {
		t.Errorf("ctr task delete %s: exit %d, %q", running, r.Code, r.Stdout+r.Stderr)
	}
	for _, id := range []string{running, exiting} {
		c.Ctr(t, "container", "delete", id)
		testkit.Eventually(t, 10*time.Second, "shim left for "+id, func() bool { return len(c.Shims(id)) == 0 })
	}
}

// TestFailedCleanupReportsTheRecordedExit: when runc delete --force fails after the shim died,
// the delete action still unmounts and reports the exit exit.json recorded, as containerd's runc
// shim does (manager.Stop logs the failure and goes on). A failed action would make containerd
// report 255 in its place (cleanupAfterDeadShim) and keep the bundle.
func TestFailedCleanupReportsTheRecordedExit(t *testing.T) {
	t.Parallel()
	f := testkit.NewFaultyRunc(t)
	d := testkit.NewDriver(t, shimBinary(t))
	d.Env = append(d.Env, "SHIMWALK_RUNC="+f.Path)
	k := testkit.NewTask(t, d, "stuck", testkit.TaskOptions{Args: []string{"sh", "-c", "exit 3"}, NullIO: true})
	pid := uint32(k.Run())
	waitExitJSON(t, k.Bundle)
	syscall.Kill(k.ShimPid, syscall.SIGKILL)
	testkit.ExpectGone(t, k.ShimPid, "killed shim")
	for _, fault := range []testkit.Fault{testkit.Die, testkit.Fail} {
		f.Set(t, "delete", fault)
		resp, err := k.D.DeleteShim(context.Background(), k.ID)
		if err != nil || resp.ExitStatus != 3 || resp.Pid != pid {
			t.Errorf("delete action with a runc that meets %q: %v, %v; want pid %d, status 3", fault, resp, err, pid)
		}
	}
	f.Clear(t, "delete") // the task's cleanup runs the delete action again, and runc's for real
}

// TestHungShimDoesNotDelayCleanup: containerd runs the delete action for a shim it cannot reach,
// which may be hung rather than dead, and kills the action after 5 s. The container is what the
// action is for: runc delete --force must run before the shim is signalled, let alone waited for.
func TestHungShimDoesNotDelayCleanup(t *testing.T) {
	t.Parallel()
	k, f := faultyTask(t, "hung")
	pid := int(k.State().Pid)
	if err := syscall.Kill(k.ShimPid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(k.ShimPid, syscall.SIGKILL) })
	f.Set(t, "delete", testkit.Block)
	done := make(chan error, 1)
	go func() {
		_, err := k.D.DeleteShim(context.Background(), k.ID)
		done <- err
	}()
	f.WaitReached(t, "delete", 20*time.Second)
	// runc delete --force is running: the stopped shim has not been touched yet.
	if st, err := driver.ReadProc(k.ShimPid); err != nil || st.State != 'T' {
		t.Errorf("the hung shim was signalled before the container was cleaned up: %+v, %v", st, err)
	}
	f.Clear(t, "delete")
	if err := <-done; err != nil {
		t.Fatalf("delete action: %v", err)
	}
	testkit.ExpectGone(t, pid, "container after the delete action")
	testkit.ExpectGone(t, k.ShimPid, "hung shim after the delete action")
}

// TestDeleteActionDoesNotUnmountThroughASymlink: the delete action unmounts the bundle's rootfs
// after a dead shim. When rootfs is a symlink (a bundle whose rootfs the shim never mounted), the
// unmount must not follow it: the host's mount at the link's target is not the container's.
func TestDeleteActionDoesNotUnmountThroughASymlink(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	bundle, err := d.CreateBundle("linked")
	if err != nil {
		t.Fatal(err)
	}
	hosts := t.TempDir()
	if err := syscall.Mount("tmpfs", hosts, "tmpfs", 0, "size=64k"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Unmount(hosts, syscall.MNT_DETACH) })
	if err := os.Symlink(hosts, filepath.Join(bundle, "rootfs")); err != nil {
		t.Fatal(err)
	}
	if _, err := d.DeleteShim(context.Background(), "linked"); err != nil {
		t.Fatal(err)
	}
	if got := mountsAt(t, hosts); got != 1 {
		t.Errorf("%d mounts on the symlink's target after the delete action, want its 1", got)
	}
}
