// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// faults kills containerd, or the shim, at one point of a container's life cycle, and checks
// the state containerd finds the container in afterwards, the exit status it learns, and that
// nothing of the container is left once it is deleted. Each runs on a containerd of its own,
// which it may kill, and with a runc wrapper that holds a life-cycle step at the point the
// fault is meant to hit.
type faults struct {
	*env
	runc       *testkit.FaultyRunc
	generation int // 1 for containerd 1.6, 2 for 2.x
}

func newFaults(t *testing.T, generation int, name string) *faults {
	c := testkit.NewContainerd(t, generation, name)
	f := &faults{runc: testkit.NewFaultyRunc(t), generation: generation}
	config := filepath.Join(testkit.TempDir(t), "runtime.toml")
	if err := os.WriteFile(config, []byte(fmt.Sprintf("BinaryName = %q\n", f.runc.Path)), 0o644); err != nil {
		t.Fatal(err)
	}
	f.env = &env{t: t, c: c, shim: testkit.Binary(t, "final/cmd/containerd-shim-shimwalk-v2"),
		rootfs: testkit.Rootfs(t), runc: f.runc.Path, config: config, prefix: name}
	return f
}

func (f *faults) sub(t *testing.T) *faults {
	return &faults{env: f.env.sub(t), runc: f.runc, generation: f.generation}
}

// logOnFailure shows what containerd logged about id when the test fails.
func (f *faults) logOnFailure(id string) {
	f.t.Cleanup(func() {
		if !f.t.Failed() {
			return
		}
		data, _ := os.ReadFile(filepath.Join(f.c.Dir, "containerd.log"))
		var lines []string
		for _, line := range strings.Split(string(data), "\n") {
			if strings.Contains(line, id) && !strings.Contains(strings.ToLower(line), "level=debug") {
				lines = append(lines, line)
			}
		}
		if len(lines) > 40 {
			lines = lines[len(lines)-40:]
		}
		f.t.Logf("containerd's log about %s:\n%s", id, strings.Join(lines, "\n"))
	})
}

// background is a ctr command the test lets run while it strikes.
type background struct {
	cmd    *exec.Cmd
	out    testkit.Buffer
	done   chan struct{}
	result error
}

// ctrBackground starts ctr with args; it is killed, if still running, when the test ends.
func (e *env) ctrBackground(args ...string) *background {
	e.t.Helper()
	b := &background{cmd: e.c.CtrCommand(context.Background(), args...), done: make(chan struct{})}
	b.cmd.Stdout, b.cmd.Stderr = &b.out, &b.out
	if err := b.cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	go func() {
		// Owned by the test: the cleanup below waits for it.
		b.result = b.cmd.Wait()
		close(b.done)
	}()
	e.t.Cleanup(func() {
		_ = b.cmd.Process.Kill()
		<-b.done
	})
	return b
}

// exit waits for the command and returns its exit code.
func (b *background) exit(t *testing.T) int {
	t.Helper()
	select {
	case <-b.done:
	case <-time.After(20 * time.Second):
		t.Fatalf("%v still runs after 20s; output so far: %s", b.cmd.Args, b.out.String())
	}
	if ee, ok := b.result.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	return 0
}

// shimOf is the one shim of id.
func (f *faults) shimOf(id string) int {
	f.t.Helper()
	var shims []int
	testkit.Eventually(f.t, 10*time.Second, "no shim for "+id, func() bool {
		shims = f.c.Shims(id)
		return len(shims) == 1
	})
	return shims[0]
}

// initPid is the container's init, from the pid file runc wrote in the bundle.
func (e *env) initPid(id string) int {
	e.t.Helper()
	var pid int
	testkit.Eventually(e.t, 10*time.Second, "no init.pid for "+id, func() bool {
		p, err := os.ReadFile(filepath.Join(e.c.Bundle(id), bundle.InitPidFile))
		if err != nil {
			return false
		}
		_, err = fmt.Sscan(string(p), &pid)
		return err == nil && pid > 0
	})
	return pid
}

// killContainerd kills containerd, runs between (with containerd down), and starts it again.
func (f *faults) killContainerd(between func()) {
	f.t.Helper()
	f.c.Kill(f.t)
	between()
	f.c.Restart(f.t)
}

// killShim kills the shim of id with SIGKILL and waits until it is gone.
func (f *faults) killShim(id string) {
	f.t.Helper()
	pid := f.shimOf(id)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		f.t.Fatal(err)
	}
	testkit.ExpectGone(f.t, pid, "the killed shim")
}

// exitEvent waits until ctr events showed containerd publishing id's exit with status.
func (f *faults) exitEvent(seen *testkit.Buffer, id string, status int) {
	f.t.Helper()
	want := regexp.MustCompile(`/tasks/exit .*"container_id":"` + regexp.QuoteMeta(id) + `".*"exit_status":` + fmt.Sprint(status) + `\b`)
	testkit.Eventually(f.t, 20*time.Second, fmt.Sprintf("containerd never published the exit %d of %s", status, id), func() bool {
		return want.MatchString(seen.String())
	})
}

// gone checks that containerd has no task id any more, and that nothing of it is left.
func (f *faults) gone(id string, pids ...int) {
	f.t.Helper()
	testkit.Eventually(f.t, 20*time.Second, id+" still listed by ctr task ls", func() bool {
		return !hasRow(f.ctr("task", "ls").Stdout, id)
	})
	f.nothingLeft(id, pids...)
}

// deleted kills what runs of id, deletes the task and expects containerd to report exit
// status 137, and then nothing left.
func (f *faults) deleted(id string, pids ...int) {
	f.t.Helper()
	f.ctr("task", "kill", "-a", "-s", "KILL", id)
	f.waitStatus(id, "STOPPED")
	if r := f.ctr("task", "delete", id); r.Code != 0 || !exitStatus("137").MatchString(r.Stdout+r.Stderr) {
		f.t.Errorf("ctr task delete %s: exit %d, %q; want exit status 137", id, r.Code, r.Stdout+r.Stderr)
	}
	f.gone(id, pids...)
}

func (f *faults) nothingLeft(id string, pids ...int) {
	f.t.Helper()
	f.ctr("container", "delete", id)
	var left []string
	deadline := time.Now().Add(10 * time.Second)
	for left = f.c.Leftovers(f.t, id, true, pids...); len(left) > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		left = f.c.Leftovers(f.t, id, true, pids...)
	}
	if len(left) > 0 {
		f.t.Errorf("%s left %v", id, left)
	}
	// ctr's FIFOs: a ctr that lost containerd under it cannot remove its own; the shim must
	// have closed them all the same.
	fifos, _ := filepath.Glob(filepath.Join(f.fifoDir(), "*", id+"-*"))
	for _, fifo := range fifos {
		for _, pid := range f.c.Shims("") {
			if open := testkit.OpenFiles(pid, fifo); len(open) > 0 {
				f.t.Errorf("shim %d still holds %v", pid, open)
			}
		}
	}
}

// points is the life cycle, each point a way to reach it and strike there.
func (f *faults) run(t *testing.T, strike string) {
	for _, p := range []struct {
		name string
		fn   func(f *faults, strike string)
	}{
		{"AfterStart", (*faults).afterStart},
		{"DuringCreate", (*faults).duringCreate},
		{"BetweenCreateAndStart", (*faults).betweenCreateAndStart},
		{"DuringWait", (*faults).duringWait},
		{"DuringExec", (*faults).duringExec},
		{"DuringDelete", (*faults).duringDelete},
	} {
		t.Run(p.name, func(t *testing.T) { p.fn(f.sub(t), strike) })
	}
}

// afterStart: a container that runs. containerd killed: after the restart it finds the
// container RUNNING under the same shim and init. Shim killed: containerd learns of the
// death, runs the shim's delete action (which kills the container) and publishes exit 137.
func (f *faults) afterStart(strike string) {
	id := f.container("run")
	f.logOnFailure(id)
	seen := f.watchEvents(f.t)
	f.runDetached(id, nil, "/bin/sleep", "100")
	shim, pid := f.shimOf(id), f.initPid(id)
	// The check for leftovers sees a live container for what it is: it can fail.
	live := strings.Join(f.c.Leftovers(f.t, id, true, pid), " ")
	for _, want := range []string{"shim", "bundle", "runc state", "/sys/fs/cgroup/", fmt.Sprintf("process %d", pid), "sockets"} {
		if !strings.Contains(live, want) {
			f.t.Errorf("the leftover check does not see the live container's %s: %s", want, live)
		}
	}
	if strike == "containerd" {
		f.killContainerd(func() {})
		f.waitStatus(id, "RUNNING")
		if now := f.shimOf(id); now != shim || !driver.Alive(pid) {
			f.t.Errorf("after the restart: shim %d (was %d), init %d alive %v", now, shim, pid, driver.Alive(pid))
		}
		f.deleted(id, pid, shim)
		return
	}
	f.killShim(id)
	f.exitEvent(seen, id, 137)
	f.gone(id, pid, shim)
}

// duringCreate: runc create is held. containerd killed: its connection closes, which cancels
// the Create and with it runc create; the shim undoes what it made and, serving no task, ends
// itself: containerd 1.6.20 would keep a task-less shim it finds after a restart (it lacks the
// cleanup 1.7 added, containerd issue 6860), and containerd-shim-runc-v2 is left that way.
// After the restart containerd cleans up after the dead shim. Shim killed: ctr run fails, and
// containerd cleans up through the delete action. Either way: no task, nothing left.
func (f *faults) duringCreate(strike string) {
	id := f.container("create")
	f.logOnFailure(id)
	f.runc.Set(f.t, "create", testkit.Block)
	defer f.runc.Clear(f.t, "create")
	before := f.runc.Reached("create")
	run := f.ctrBackground(append(f.runArgs("-d"), id, "/bin/sleep", "100")...)
	testkit.Eventually(f.t, 20*time.Second, "runc create never called", func() bool { return f.runc.Reached("create") > before })
	shim := f.shimOf(id)
	if strike == "containerd" {
		f.killContainerd(func() {
			if code := run.exit(f.t); code == 0 {
				f.t.Errorf("ctr run succeeded with containerd killed under it")
			}
			f.runc.Clear(f.t, "create")
			// The cancelled Create is over once its runc and the runc delete that undoes it
			// are: containerd must not come back while the shim is half-way.
			testkit.Eventually(f.t, 10*time.Second, "the cancelled Create never ended", func() bool {
				return len(testkit.Children(shim)) == 0
			})
		})
		if hasRow(f.ctr("task", "ls").Stdout, id) {
			f.t.Errorf("a task whose Create never returned is listed")
		}
		// The shim ended itself: nothing was left for it to serve. containerd 1.6.20 would
		// keep a task-less shim it finds after a restart.
		testkit.ExpectGone(f.t, shim, "the task-less shim")
		f.gone(id, shim)
		return
	}
	f.killShim(id)
	f.runc.Clear(f.t, "create")
	if code := run.exit(f.t); code == 0 {
		f.t.Errorf("ctr run succeeded with its shim killed: %s", run.out.String())
	}
	f.gone(id, shim)
}

// betweenCreateAndStart: Create has returned and the Start RPC is held before runc start.
// containerd killed: its connection closes, which cancels the Start and runc start with it;
// after the restart the task is CREATED, and deleting it kills the init that waits in runc
// init (killed first: containerd's client refuses to delete a created task with a pid).
// Shim killed: containerd deletes the created container through the delete action
// and publishes exit 137.
func (f *faults) betweenCreateAndStart(strike string) {
	id := f.container("start")
	f.logOnFailure(id)
	seen := f.watchEvents(f.t)
	f.runc.Set(f.t, "start", testkit.Block)
	defer f.runc.Clear(f.t, "start")
	before := f.runc.Reached("start")
	run := f.ctrBackground(append(f.runArgs("-d"), id, "/bin/sleep", "100")...)
	testkit.Eventually(f.t, 20*time.Second, "runc start never called", func() bool { return f.runc.Reached("start") > before })
	shim, pid := f.shimOf(id), f.initPid(id)
	if strike == "containerd" {
		f.killContainerd(func() {
			if code := run.exit(f.t); code == 0 {
				f.t.Errorf("ctr run succeeded with containerd killed under it")
			}
			f.runc.Clear(f.t, "start")
		})
		f.waitStatus(id, "CREATED")
		f.deleted(id, pid, shim)
		return
	}
	f.killShim(id)
	f.runc.Clear(f.t, "start")
	if code := run.exit(f.t); code == 0 {
		f.t.Errorf("ctr run succeeded with its shim killed: %s", run.out.String())
	}
	f.exitEvent(seen, id, 137)
	f.gone(id, pid, shim)
}

// duringWait: ctr run waits for the container to exit. containerd killed: ctr fails, the
// container runs on, and after the restart it is RUNNING. Shim killed: containerd cleans up
// through the delete action and publishes exit 137; the waiting ctr run fails, under both
// generations, with the closed connection its Wait was on.
func (f *faults) duringWait(strike string) {
	id := f.container("wait")
	f.logOnFailure(id)
	seen := f.watchEvents(f.t)
	run := f.ctrBackground(append(f.runArgs(), id, "/bin/sleep", "100")...)
	f.waitStatus(id, "RUNNING")
	shim, pid := f.shimOf(id), f.initPid(id)
	if strike == "containerd" {
		f.killContainerd(func() {
			if code := run.exit(f.t); code == 0 {
				f.t.Errorf("ctr run exited 0 with containerd killed under it")
			}
		})
		f.waitStatus(id, "RUNNING")
		if !driver.Alive(pid) {
			f.t.Errorf("the container's init %d died with containerd", pid)
		}
		f.deleted(id, pid, shim)
		return
	}
	f.killShim(id)
	if code := run.exit(f.t); code == 0 || !strings.Contains(run.out.String(), "ttrpc: closed") {
		f.t.Errorf("the waiting ctr run exited %d, want a Wait failed on the closed connection: %s", code, run.out.String())
	}
	f.exitEvent(seen, id, 137)
	f.gone(id, pid, shim)
}

// duringExec: runc exec is held. containerd killed: its connection closes, which cancels the
// exec's Start and runc exec with it; after the restart the task is RUNNING with its init
// alone, and deleting it ends as it would have. Shim killed: the
// exec fails, containerd cleans up the task through the delete action and publishes exit 137.
func (f *faults) duringExec(strike string) {
	id := f.container("exec")
	f.logOnFailure(id)
	seen := f.watchEvents(f.t)
	f.runDetached(id, nil, "/bin/sleep", "100")
	shim, pid := f.shimOf(id), f.initPid(id)
	f.runc.Set(f.t, "exec", testkit.Block)
	defer f.runc.Clear(f.t, "exec")
	before := f.runc.Reached("exec")
	// Detached, so that its FIFOs are in a directory of its own: ctr never removes a
	// detached exec's.
	execFIFOs := testkit.TempDir(f.t)
	ex := f.ctrBackground("task", "exec", "--fifo-dir", execFIFOs, "-d", "--exec-id", "e1", id, "/bin/sleep", "100")
	testkit.Eventually(f.t, 20*time.Second, "runc exec never called", func() bool { return f.runc.Reached("exec") > before })
	if strike == "containerd" {
		f.killContainerd(func() {
			if code := ex.exit(f.t); code == 0 {
				f.t.Errorf("ctr task exec succeeded with containerd killed under it")
			}
			f.runc.Clear(f.t, "exec")
		})
		f.waitStatus(id, "RUNNING")
		if ps := f.ctr("task", "ps", id); regexp.MustCompile(`(ExecID:|exec_id:\s*")e1\b`).MatchString(ps.Stdout) {
			f.t.Errorf("the cancelled exec runs: %s", ps.Stdout)
		}
		f.deleted(id, pid, shim)
		return
	}
	f.killShim(id)
	f.runc.Clear(f.t, "exec")
	if code := ex.exit(f.t); code == 0 {
		f.t.Errorf("ctr task exec succeeded with its shim killed: %s", ex.out.String())
	}
	f.exitEvent(seen, id, 137)
	f.gone(id, pid, shim)
}

// duringDelete: the container was killed and runc delete is held. containerd killed: its
// connection closes, which cancels the Delete and runc delete with it; after the restart the
// task is STOPPED, and deleting it again reports exit 137. Shim killed: ctr task delete fails
// with the closed connection, and containerd cleans up through the delete action: no task.
func (f *faults) duringDelete(strike string) {
	id := f.container("delete")
	f.logOnFailure(id)
	f.runDetached(id, nil, "/bin/sleep", "100")
	shim, pid := f.shimOf(id), f.initPid(id)
	f.ctr("task", "kill", "-s", "KILL", id)
	f.waitStatus(id, "STOPPED")
	if ls := f.ctr("task", "ls"); !hasRow(ls.Stdout, id, "STOPPED") {
		f.t.Fatalf("not stopped: %s", ls.Stdout)
	}
	f.runc.Set(f.t, "delete", testkit.Block)
	defer f.runc.Clear(f.t, "delete")
	before := f.runc.Reached("delete")
	del := f.ctrBackground("task", "delete", id)
	testkit.Eventually(f.t, 20*time.Second, "runc delete never called", func() bool { return f.runc.Reached("delete") > before })
	if strike == "containerd" {
		f.killContainerd(func() {
			if code := del.exit(f.t); code == 0 {
				f.t.Errorf("ctr task delete succeeded with containerd killed under it")
			}
			f.runc.Clear(f.t, "delete")
		})
		f.waitStatus(id, "STOPPED")
		if r := f.ctr("task", "delete", id); r.Code != 0 || !exitStatus("137").MatchString(r.Stdout+r.Stderr) {
			f.t.Errorf("ctr task delete %s after the restart: exit %d, %q; want exit status 137", id, r.Code, r.Stdout+r.Stderr)
		}
		f.gone(id, pid, shim)
		return
	}
	f.killShim(id)
	f.runc.Clear(f.t, "delete")
	if code := del.exit(f.t); code == 0 || !strings.Contains(del.out.String(), "ttrpc: closed") {
		f.t.Errorf("ctr task delete with its shim killed: exit %d, %s; want the closed connection", code, del.out.String())
	}
	f.gone(id, pid, shim)
}

func TestFaultsContainerd16KillContainerd(t *testing.T) {
	t.Parallel()
	newFaults(t, 1, "f16c").run(t, "containerd")
}

func TestFaultsContainerd16KillShim(t *testing.T) {
	t.Parallel()
	newFaults(t, 1, "f16s").run(t, "shim")
}

func TestFaultsContainerd2KillContainerd(t *testing.T) {
	t.Parallel()
	newFaults(t, 2, "f2c").run(t, "containerd")
}

func TestFaultsContainerd2KillShim(t *testing.T) {
	t.Parallel()
	newFaults(t, 2, "f2s").run(t, "shim")
}
