// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"
	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

func TestOutputReachesFIFOs(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "echo", testkit.TaskOptions{Args: []string{"sh", "-c", "echo hello; echo oops >&2"}})
	k.Run()
	k.WaitOutput(20 * time.Second)
	if got := k.Stdout.String(); got != "hello\n" {
		t.Errorf("stdout = %q, want %q", got, "hello\n")
	}
	if got := k.Stderr.String(); got != "oops\n" {
		t.Errorf("stderr = %q, want %q", got, "oops\n")
	}
}

func TestStdinReachesTheContainer(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "stdin", testkit.TaskOptions{Args: []string{"sh", "-c", "read line; echo got $line"}, Stdin: "hello\n"})
	k.Run()
	k.WaitOutput(20 * time.Second)
	if got := k.Stdout.String(); got != "got hello\n" {
		t.Errorf("stdout = %q, want %q", got, "got hello\n")
	}
}

// A process with stdin alone has no output pipes. Create must return while the container waits
// to be started: go-runc would otherwise read runc's output through a pipe the container inherits,
// and runc create would return only when the container is gone.
func TestCreateWithStdinOnly(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "stdin-only", testkit.TaskOptions{Args: []string{"sleep", "100"}, Stdin: "unread\n"})
	r := k.CreateRequest()
	r.Stdout, r.Stderr = "", ""
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := k.Conn.Task.Create(ctx, r); err != nil {
		t.Fatalf("Create with stdin only: %v", err)
	}
	if st := k.State(); st.Status != task.Status_CREATED {
		t.Errorf("State = %v, want CREATED", st.Status)
	}
}

func TestContainerIsNotTheShimsChild(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "orphan", testkit.TaskOptions{Args: []string{"sleep", "100"}})
	pid := k.Run()

	st := k.State()
	if st.Status != task.Status_RUNNING || int(st.Pid) != pid || st.Bundle != k.Bundle {
		t.Fatalf("State = %v %d %s, want RUNNING %d %s", st.Status, st.Pid, st.Bundle, pid, k.Bundle)
	}
	// The problem this step ends on: runc create's child is orphaned when runc exits, and the
	// kernel hands it to the same process that adopted the shim (PID 1 here), not to the shim.
	container, err := driver.ReadProc(pid)
	if err != nil {
		t.Fatal(err)
	}
	shim, err := driver.ReadProc(k.ShimPid)
	if err != nil {
		t.Fatal(err)
	}
	if container.PPid == k.ShimPid || container.PPid != shim.PPid {
		t.Errorf("container's parent is %d; want the shim's own parent %d, not the shim %d", container.PPid, shim.PPid, k.ShimPid)
	}

	if _, err := k.Conn.Task.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9}); err != nil {
		t.Fatal(err)
	}
	st = k.WaitStatus(task.Status_STOPPED, 10*time.Second)
	if st.ExitStatus != 255 {
		t.Errorf("exit status %d; with nobody to collect it, it must be unknown (255)", st.ExitStatus)
	}
	resp, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID})
	if err != nil {
		t.Fatal(err)
	}
	if int(resp.Pid) != pid {
		t.Errorf("Delete reports pid %d, want %d", resp.Pid, pid)
	}
	assertNothingLeft(t, k)
}

// assertNothingLeft checks what a deleted task must not leave: runc state, mounts in the bundle,
// or a FIFO the shim still holds.
func assertNothingLeft(t *testing.T, k *testkit.Task) {
	t.Helper()
	for _, id := range testkit.RuncContainers(t, k.D.Namespace) {
		if id == k.ID {
			t.Errorf("runc still knows %s", id)
		}
	}
	if m := testkit.Mounts(t, k.Bundle); len(m) > 0 {
		t.Errorf("mounts left in the bundle: %v", m)
	}
	if k.FIFOs != nil {
		// The copies finish in the background once the pipes are at EOF.
		testkit.Eventually(t, 5*time.Second, "the shim still holds the task's FIFOs", func() bool {
			return len(testkit.OpenFiles(k.ShimPid, k.FIFOs.Stdout, k.FIFOs.Stderr)) == 0
		})
	}
}

func TestCreateFailureCarriesRuncsMessage(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "nosuch", testkit.TaskOptions{Args: []string{"nosuch"}, Overlay: true})
	_, err := k.Conn.Task.Create(k.Ctx(), k.CreateRequest())
	if err == nil {
		t.Fatal("Create of a missing executable succeeded")
	}
	if msg := driver.Message(err); !strings.Contains(msg, `exec: "nosuch": executable file not found in $PATH`) {
		t.Errorf("Create error %q does not carry runc's message", msg)
	}
	assertNothingLeft(t, k)
	// The shim is still there, with no task, ready for another Create.
	if _, err := k.Conn.Task.State(k.Ctx(), &taskapi.StateRequest{ID: k.ID}); driver.Code(err) != codes.NotFound {
		t.Errorf("State after a failed Create: %v, want NotFound", err)
	}
}

func TestOverlayRootfs(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "overlay", testkit.TaskOptions{
		Args: []string{"sh", "-c", "echo written > /proof; cat /proof; grep ' / ' /proc/mounts | cut -d' ' -f3"}, Overlay: true,
	})
	k.Run()
	if m := testkit.Mounts(t, k.Bundle); len(m) != 1 || m[0] != filepath.Join(k.Bundle, "rootfs") {
		t.Errorf("mounts in the bundle while running: %v, want just rootfs", m)
	}
	k.WaitOutput(20 * time.Second)
	if got := k.Stdout.String(); got != "written\noverlay\n" {
		t.Errorf("stdout = %q, want the file's content and an overlay root", got)
	}
	k.WaitStatus(task.Status_STOPPED, 10*time.Second)
	if _, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID}); err != nil {
		t.Fatal(err)
	}
	// The write went to the upper directory, not to the shared lower one.
	if data, err := os.ReadFile(filepath.Join(k.Upper, "proof")); err != nil || string(data) != "written\n" {
		t.Errorf("upper dir has proof = %q, %v", data, err)
	}
	if _, err := os.Stat(filepath.Join(testkit.Rootfs(t), "proof")); !os.IsNotExist(err) {
		t.Errorf("the write reached the lower directory")
	}
	assertNothingLeft(t, k)
}

func TestContainerdRunsAndKills(t *testing.T) {
	t.Parallel()
	c := testkit.StartContainerd(t)
	shim, rootfs := shimBinary(t), testkit.Rootfs(t)
	const id = "s03-sleep"
	t.Cleanup(func() {
		c.Ctr(t, "task", "kill", "-s", "KILL", id)
		c.Ctr(t, "task", "delete", id)
		c.Ctr(t, "container", "delete", id)
	})
	if r := c.Ctr(t, "run", "-d", "--runtime", shim, "--rootfs", rootfs, id, "/bin/sleep", "100"); r.Code != 0 {
		t.Fatalf("ctr run -d: %s", r.Stderr)
	}
	if r := c.Ctr(t, "task", "ls"); !containsLine(r.Stdout, id, "RUNNING") {
		t.Errorf("ctr task ls does not show %s RUNNING:\n%s", id, r.Stdout)
	}
	if r := c.Ctr(t, "task", "kill", "-s", "KILL", id); r.Code != 0 {
		t.Fatalf("ctr task kill: %s", r.Stderr)
	}
	testkit.Eventually(t, 10*time.Second, "task never STOPPED", func() bool {
		return containsLine(c.Ctr(t, "task", "ls").Stdout, id, "STOPPED")
	})
	if r := c.Ctr(t, "task", "delete", id); r.Code != 0 {
		t.Fatalf("ctr task delete: %s", r.Stderr)
	}
	if r := c.Ctr(t, "container", "delete", id); r.Code != 0 {
		t.Fatalf("ctr container delete: %s", r.Stderr)
	}
	testkit.Eventually(t, 10*time.Second, "step-03 shim still running after the task was deleted", func() bool {
		return len(c.Shims(id)) == 0
	})
}

// containsLine reports whether some line of out has all of words.
func containsLine(out string, words ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		fields := strings.Fields(line)
		found := 0
		for _, w := range words {
			for _, f := range fields {
				if f == w {
					found++
					break
				}
			}
		}
		if found == len(words) {
			return true
		}
	}
	return false
}
