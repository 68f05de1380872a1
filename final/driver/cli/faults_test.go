// SPDX-License-Identifier: Apache-2.0

package cli_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// TestFaults kills shimctl (the driver, in containerd's place) or the final shim at each point
// of a container's life cycle, and then looks with a new driver, as containerd does after a
// restart: shimctl ls reconnects to live shims and cleans up after dead ones. The container is
// in the state it should be, its exit status is known, and once it is deleted nothing is left:
// no bundle, FIFO, runc state, shim or process. A runc wrapper holds the life-cycle step at the
// point struck.
func TestFaults(t *testing.T) {
	t.Parallel()
	for _, p := range []struct {
		name string
		fn   func(f *shimctlFault)
	}{
		{"AfterStart", (*shimctlFault).afterStart},
		{"DuringCreate", (*shimctlFault).duringCreate},
		{"BetweenCreateAndStart", (*shimctlFault).betweenCreateAndStart},
		{"DuringWait", (*shimctlFault).duringWait},
		{"DuringExec", (*shimctlFault).duringExec},
		{"DuringDelete", (*shimctlFault).duringDelete},
	} {
		for _, victim := range []string{"driver", "shim"} {
			t.Run(p.name+"/"+victim, func(t *testing.T) {
				t.Parallel()
				f := &shimctlFault{s: newShimctl(t, finalShim), runc: testkit.NewFaultyRunc(t), victim: victim}
				// Unique in the test process: runc's state root and namespace are shared.
				f.id = strings.ToLower(fmt.Sprintf("f-%s-%s", p.name, victim))
				f.s.track(f.id)
				p.fn(f)
			})
		}
	}
}

type shimctlFault struct {
	s      *shimctl
	runc   *testkit.FaultyRunc
	victim string // "driver" or "shim"
	id     string
}

func (f *shimctlFault) runArgs(flags ...string) []string {
	args := append([]string{"run", "--runtime-binary", f.runc.Path, "--rootfs", testkit.Rootfs(f.s.t)}, flags...)
	return append(args, f.id, "--", "sleep", "100")
}

// hold makes runc wait at sub, starts shimctl with args, and returns once runc got there.
func (f *shimctlFault) hold(sub string, args ...string) *background {
	f.s.t.Helper()
	f.runc.Set(f.s.t, sub, testkit.Block)
	f.s.t.Cleanup(func() { f.runc.Clear(f.s.t, sub) })
	before := f.runc.Reached(sub)
	b := f.s.background(args...)
	deadline := time.Now().Add(20 * time.Second)
	for f.runc.Reached(sub) == before {
		if time.Now().After(deadline) {
			f.s.t.Fatalf("runc %s never called; shimctl %v: %s", sub, args, b.stderr.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	return b
}

// exited waits for b to end by itself and returns its exit code.
func exited(t *testing.T, b *background) int {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%v did not end; stderr %q", b.cmd.Args, b.stderr.String())
	}
	t.Logf("%v exited %d: stdout %q, stderr %q", b.cmd.Args[3:], b.cmd.ProcessState.ExitCode(), b.stdout.String(), b.stderr.String())
	return b.cmd.ProcessState.ExitCode()
}

// strike kills the driver b (with the shim's delete action on the way, if the victim is the
// shim: the driver is then left to see it), then lets runc's sub go on.
func (f *shimctlFault) strike(b *background, sub string) {
	f.s.t.Helper()
	if f.victim == "driver" {
		if code := b.stop(f.s.t, syscall.SIGKILL); code != -1 {
			f.s.t.Errorf("the killed driver exited %d", code)
		}
	} else {
		f.killShim()
	}
	if sub != "" {
		f.runc.Clear(f.s.t, sub)
	}
}

// started runs the task detached and returns the pids of its shim and its init.
func (f *shimctlFault) started() (shim, init int) {
	f.s.t.Helper()
	if r := f.s.run(f.runArgs("-d")...); r.Code != 0 {
		f.s.t.Fatalf("run -d: %s", r.Stderr)
	}
	return f.shimPid(), f.initPid()
}

func (f *shimctlFault) shimPid() int { return f.recordedPid(bundle.ShimPidFile) }

func (f *shimctlFault) initPid() int { return f.recordedPid(bundle.InitPidFile) }

// recordedPid waits until the bundle's pid file name holds a pid, and returns it.
func (f *shimctlFault) recordedPid(name string) int {
	f.s.t.Helper()
	pid := 0
	testkit.Eventually(f.s.t, 10*time.Second, "no "+name+" for "+f.id, func() bool {
		var err error
		pid, err = bundle.ReadPidFile(filepath.Join(f.s.namespaced, f.id, name))
		return err == nil
	})
	return pid
}

func (f *shimctlFault) killShim() {
	f.s.t.Helper()
	pid := f.shimPid()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		f.s.t.Fatal(err)
	}
	testkit.ExpectGone(f.s.t, pid, "the killed shim")
}

// lsRow is the new driver's view of the task: shim pid, task pid, status, exit.
func (f *shimctlFault) lsRow() []string {
	f.s.t.Helper()
	return strings.Fields(strings.Replace(f.s.ls()[f.id], "NO TASK", "NO-TASK", 1))
}

// expectLs checks that a new driver finds the task with status (and, for a finished one, exit).
func (f *shimctlFault) expectLs(status, exit string) {
	f.s.t.Helper()
	row := f.lsRow()
	if len(row) < 4 || row[2] != status || (exit != "" && row[3] != exit) {
		f.s.t.Errorf("shimctl ls shows %s as %v, want %s with exit %s", f.id, row, status, exit)
	}
}

// expectDeletedByLs: the shim died, and the new driver's ls ran its delete action, which
// reports the exit of the container it killed (137) and removed the bundle.
func (f *shimctlFault) expectDeletedByLs(pids ...int) {
	f.s.t.Helper()
	f.expectLs("DELETED", "137")
	f.expectNothingLeft(pids...)
}

// finish kills and deletes the task through a new driver, which reports exit 137.
func (f *shimctlFault) finish(pids ...int) {
	f.s.t.Helper()
	if r := f.s.run("task", "kill", "-s", "KILL", "--all", f.id); r.Code != 0 {
		f.s.t.Errorf("task kill: %s", r.Stderr)
	}
	f.s.status(f.id, "STOPPED")
	f.deleteStopped()
	f.expectNothingLeft(pids...)
}

func (f *shimctlFault) deleteStopped() {
	f.s.t.Helper()
	r := f.s.run("task", "delete", f.id)
	if r.Code != 0 || !strings.Contains(r.Stdout+r.Stderr, "137") {
		f.s.t.Errorf("task delete: exit %d, %q; want exit status 137", r.Code, r.Stdout+r.Stderr)
	}
}

func (f *shimctlFault) expectNothingLeft(pids ...int) {
	f.s.t.Helper()
	f.s.expectNoTask(f.id, pids...)
	if shims := f.s.shims(); len(shims) > 0 {
		f.s.t.Errorf("shims left: %v", shims)
	}
}

// afterStart: run -d has returned, so its driver is gone already. A new driver finds the task
// RUNNING under the same shim. Shim killed: the new driver's ls cleans up, exit 137.
func (f *shimctlFault) afterStart() {
	shim, pid := f.started()
	if f.victim == "shim" {
		f.killShim()
		f.expectDeletedByLs(pid, shim)
		return
	}
	f.expectLs("RUNNING", "-")
	if row := f.lsRow(); len(row) < 2 || row[0] != fmt.Sprint(shim) || row[1] != fmt.Sprint(pid) {
		f.s.t.Errorf("ls shows shim %s, init %s; want %d, %d", row[0], row[1], shim, pid)
	}
	f.finish(pid, shim)
}

// duringCreate: runc create is held. Driver killed: its connection closes, which cancels the
// Create and runc create with it; the shim, serving no task, ends itself, and a new driver's ls
// cleans up after it. Shim killed: run fails with
// the closed connection and cleans up itself through the delete action.
func (f *shimctlFault) duringCreate() {
	b := f.hold("create", f.runArgs("-d")...)
	shim := f.shimPid()
	f.strike(b, "create")
	if f.victim == "shim" {
		if code := exited(f.s.t, b); code == 0 {
			f.s.t.Errorf("run succeeded with its shim killed")
		}
		if row, ok := f.s.ls()[f.id]; ok && !strings.Contains(row, "DELETED") {
			f.s.t.Errorf("ls shows %s as %q after its shim died", f.id, row)
		}
		f.expectNothingLeft(shim)
		return
	}
	// The undone Create left the shim nothing to serve, and no caller to ask it to go: it
	// ends itself, and the new driver's ls cleans up after it as after any dead shim.
	testkit.ExpectGone(f.s.t, shim, "the task-less shim")
	f.expectLs("DELETED", "")
	f.expectNothingLeft(shim)
}

// betweenCreateAndStart: Create returned and runc start is held. Driver killed: the Start is
// cancelled with the connection, and the new driver finds the task CREATED. Shim killed: run
// fails with the closed connection and cleans up itself through the delete action.
func (f *shimctlFault) betweenCreateAndStart() {
	b := f.hold("start", f.runArgs("-d")...)
	shim, pid := f.shimPid(), f.initPid()
	f.strike(b, "start")
	if f.victim == "shim" {
		// The failing run cleans up after its dead shim itself, as its Start failed.
		if code := exited(f.s.t, b); code == 0 {
			f.s.t.Errorf("run succeeded with its shim killed")
		}
		if row, ok := f.s.ls()[f.id]; ok {
			f.s.t.Errorf("ls shows %s as %q after the failed run cleaned up", f.id, row)
		}
		f.expectNothingLeft(pid, shim)
		return
	}
	f.expectLs("CREATED", "-")
	f.finish(pid, shim)
}

// duringWait: run waits for the container. Driver killed: the container runs on and the new
// driver finds it RUNNING. Shim killed: run fails, and ls cleans up with exit 137.
func (f *shimctlFault) duringWait() {
	b := f.s.background(f.runArgs()...)
	f.s.status(f.id, "RUNNING")
	shim, pid := f.shimPid(), f.initPid()
	f.strike(b, "")
	if f.victim == "shim" {
		if code := exited(f.s.t, b); code == 0 {
			f.s.t.Errorf("the waiting run exited 0 with its shim killed")
		}
		f.expectDeletedByLs(pid, shim)
		return
	}
	f.expectLs("RUNNING", "-")
	// The killed run's own FIFOs, which only it would have removed (ctr's are the same): the
	// shim must not hold them once the task is deleted.
	if r := f.s.run("task", "kill", "-s", "KILL", f.id); r.Code != 0 {
		f.s.t.Errorf("task kill: %s", r.Stderr)
	}
	f.s.status(f.id, "STOPPED")
	f.deleteStopped()
	testkit.ExpectGone(f.s.t, shim, "the shim of the deleted task")
	fifos, _ := filepath.Glob(filepath.Join(f.s.state, "fifo", f.id+"-*"))
	for _, dir := range fifos {
		if err := os.RemoveAll(dir); err != nil {
			f.s.t.Error(err)
		}
	}
	f.expectNothingLeft(pid)
}

// duringExec: runc exec is held. Driver killed: the exec is cancelled with the connection, and
// the task is RUNNING with its init alone. Shim killed: ls cleans up, exit 137.
func (f *shimctlFault) duringExec() {
	shim, pid := f.started()
	b := f.hold("exec", "task", "exec", "-d", "--exec-id", "e1", f.id, "--", "sleep", "100")
	f.strike(b, "exec")
	if f.victim == "shim" {
		exited(f.s.t, b)
		f.expectDeletedByLs(pid, shim)
		return
	}
	f.expectLs("RUNNING", "-")
	if r := f.s.run("task", "ps", f.id); strings.Contains(r.Stdout, "e1") {
		f.s.t.Errorf("the cancelled exec runs: %s", r.Stdout)
	}
	f.finish(pid, shim)
}

// duringDelete: the container was killed and runc delete is held. Driver killed: the Delete
// is cancelled with the connection; the new driver finds the task STOPPED with exit 137 and
// deletes it. Shim killed: ls cleans up, exit 137.
func (f *shimctlFault) duringDelete() {
	shim, pid := f.started()
	if r := f.s.run("task", "kill", "-s", "KILL", f.id); r.Code != 0 {
		f.s.t.Fatal(r.Stderr)
	}
	f.s.status(f.id, "STOPPED")
	b := f.hold("delete", "task", "delete", f.id)
	f.strike(b, "delete")
	if f.victim == "shim" {
		exited(f.s.t, b)
		f.expectDeletedByLs(pid, shim)
		return
	}
	f.expectLs("STOPPED", "137")
	f.deleteStopped()
	f.expectNothingLeft(pid, shim)
}
