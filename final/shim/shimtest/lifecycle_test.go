// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
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
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// afterRunc is a BinaryName that runs runc and then, at a subcommand a test arms, does what
// containerd's runc-fp failpoints do after runc: "kill-after-create" kills the new init and
// waits until the shim has reaped it (containerd issue 9103); "hold-after-start" keeps runc
// start from returning, though the init runs, until the test lets it go.
type afterRunc struct {
	Path, dir string
}

const afterRuncScript = `#!/bin/sh
dir=%q
sub= prev= pidfile=
for a; do
	if [ "$prev" = --pid-file ]; then pidfile=$a; fi
	if [ -z "$sub" ]; then case "$a" in create|start) sub=$a;; esac; fi
	prev=$a
done
runc "$@" || exit
if [ "$sub" = create ] && [ -f "$dir/kill-after-create" ]; then
	pid=$(cat "$pidfile")
	kill -9 "$pid"
	# A zombie keeps its /proc entry: gone means the shim has reaped it.
	while [ -e "/proc/$pid" ]; do sleep 0.02; done
fi
if [ "$sub" = start ] && [ -f "$dir/hold-after-start" ]; then
	echo start >> "$dir/reached"
	while [ -f "$dir/hold-after-start" ] && [ -d "$dir" ]; do sleep 0.02; done
fi
exit 0
`

func newAfterRunc(t *testing.T) *afterRunc {
	t.Helper()
	testkit.RequireCommand(t, "runc")
	dir := testkit.TempDir(t)
	a := &afterRunc{Path: filepath.Join(dir, "after-runc"), dir: filepath.Join(dir, "hooks")}
	if err := os.Mkdir(a.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	testkit.WriteExecutable(t, a.Path, []byte(fmt.Sprintf(afterRuncScript, a.dir)))
	return a
}

func (a *afterRunc) arm(t *testing.T, hook string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(a.dir, hook), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(filepath.Join(a.dir, hook)) })
}

func (a *afterRunc) disarm(t *testing.T, hook string) {
	t.Helper()
	if err := os.Remove(filepath.Join(a.dir, hook)); err != nil {
		t.Fatal(err)
	}
}

func (a *afterRunc) reached() bool {
	_, err := os.Stat(filepath.Join(a.dir, "reached"))
	return err == nil
}

// editSpec rewrites the config.json of the bundle at dir, before Create.
func editSpec(t *testing.T, dir string, edit func(*specs.Spec)) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, bundle.ConfigFile))
	if err != nil {
		t.Fatal(err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	edit(&spec)
	if err := driver.WriteSpec(dir, &spec); err != nil {
		t.Fatal(err)
	}
}

// TestInitKilledDuringCreateIsReported: an init killed and reaped before runc create has
// returned (containerd issue 9103) is still the task's: its exit is reported after TaskCreate,
// Wait returns, the task is STOPPED and deletes cleanly.
func TestInitKilledDuringCreateIsReported(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	events := testkit.Events(t, d)
	runc := newAfterRunc(t)
	k := testkit.NewTask(t, d, "killed-in-create", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	req := k.CreateRequest()
	req.Options = mustAny(t, &options.Options{BinaryName: runc.Path})
	runc.arm(t, "kill-after-create")
	created, err := k.Conn.Task.Create(k.Ctx(), req)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if w := waitExec(t, k, ""); w.ExitStatus != 137 {
		t.Errorf("Wait: init exited %d, want 137", w.ExitStatus)
	}
	if st := k.State(); st.Status != task.Status_STOPPED || st.ExitStatus != 137 {
		t.Errorf("State = %v, want STOPPED with 137", st)
	}
	_, err = k.Conn.Task.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID})
	expectCode(t, "Start of a dead init", err, codes.FailedPrecondition)
	del, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID})
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if del.ExitStatus != 137 || del.Pid != created.Pid {
		t.Errorf("Delete = %v, want pid %d and 137", del, created.Pid)
	}
	got := nextEvents(t, events, 0, 3)
	if s := topics(got); s != "/tasks/create /tasks/exit /tasks/delete" {
		t.Errorf("events: %s", s)
	}
}

// TestTwoStartsKeepTheExit: a second Start of an init that exited while the first Start's runc
// start had not returned must not drop the exit the first holds: TaskExit is sent once, Wait
// returns and State says STOPPED.
func TestTwoStartsKeepTheExit(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	events := testkit.Events(t, d)
	runc := newAfterRunc(t)
	k := testkit.NewTask(t, d, "two-starts", testkit.TaskOptions{Args: []string{"true"}, NullIO: true})
	req := k.CreateRequest()
	req.Options = mustAny(t, &options.Options{BinaryName: runc.Path})
	created, err := k.Conn.Task.Create(k.Ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	runc.arm(t, "hold-after-start")
	first := make(chan error, 1)
	go func() {
		_, err := k.Conn.Task.Start(rpcCtx(t, 30*time.Second), &taskapi.StartRequest{ID: k.ID})
		first <- err
	}()
	testkit.Eventually(t, 20*time.Second, "runc start never returned to the wrapper", runc.reached)
	// /bin/true has exited and the shim has reaped it: its exit is held by the first Start.
	testkit.Eventually(t, 20*time.Second, "the init was never reaped", func() bool { return !driver.Alive(int(created.Pid)) })
	second := make(chan error, 1)
	go func() {
		_, err := k.Conn.Task.Start(rpcCtx(t, 30*time.Second), &taskapi.StartRequest{ID: k.ID})
		second <- err
	}()
	// The second Start has counted itself in and waits behind the first, which holds the
	// init's operations.
	testkit.Eventually(t, 20*time.Second, "the second Start never reached the shim", func() bool {
		return blockedOnLock(t, k, "process.(*Init).Start")
	})
	runc.disarm(t, "hold-after-start")
	if err := <-first; err != nil {
		t.Errorf("first Start: %v", err)
	}
	expectCode(t, "second Start", <-second, codes.FailedPrecondition)
	if w := waitExec(t, k, ""); w.ExitStatus != 0 {
		t.Errorf("Wait: init exited %d, want 0", w.ExitStatus)
	}
	if st := k.State(); st.Status != task.Status_STOPPED {
		t.Errorf("State = %v, want STOPPED", st.Status)
	}
	if _, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID}); err != nil {
		t.Fatal(err)
	}
	got := nextEvents(t, events, 0, 4)
	if s := topics(got); s != "/tasks/create /tasks/start /tasks/exit /tasks/delete" {
		t.Errorf("events: %s", s)
	}
	// containerd's TaskDelete names the container only: ID is an exec's, and a task's delete
	// is no exec's.
	if del, _ := got[3].Event.(*eventstypes.TaskDelete); del == nil || del.ContainerID != k.ID || del.ID != "" {
		t.Errorf("TaskDelete = %v, want the container %s and no ID", got[3].Event, k.ID)
	}
}

// TestExecRacingInitExit is containerd's TestIssue10589 through the Task API: while an exec's
// runc exec is held, the init is killed. The init's TaskExit waits until that Start has
// resolved; an exec added meanwhile is accepted and its Start refused; nothing hangs. The
// container has the host's PID namespace, so that the shim's runc kill --all, held as well,
// shows that the shim has taken in the init's exit.
func TestExecRacingInitExit(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	events := testkit.Events(t, d)
	runc := testkit.NewFaultyRunc(t)
	k := testkit.NewTask(t, d, "exec-race", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	withoutPIDNamespace(t, k.Bundle)
	req := k.CreateRequest()
	req.Options = mustAny(t, &options.Options{BinaryName: runc.Path})
	svc := k.Conn.Task
	initPid, err := svc.Create(k.Ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	k.Start()
	t.Cleanup(func() { runc.Clear(t, "exec"); runc.Clear(t, "kill") })
	if _, err := svc.Exec(k.Ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "exec1", Spec: execSpec(t, "sleep", "301")}); err != nil {
		t.Fatal(err)
	}
	runc.Set(t, "exec", testkit.Block)
	runc.Set(t, "kill", testkit.Block)
	exec1 := make(chan error, 1)
	go func() {
		_, err := svc.Start(rpcCtx(t, 30*time.Second), &taskapi.StartRequest{ID: k.ID, ExecID: "exec1"})
		exec1 <- err
	}()
	runc.WaitReached(t, "exec", 20*time.Second)
	if err := syscall.Kill(int(initPid.Pid), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	runc.WaitReached(t, "kill", 20*time.Second) // the shim has the init's exit

	if _, err := svc.Exec(k.Ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "exec2", Spec: execSpec(t, "sleep", "302")}); err != nil {
		t.Fatalf("Exec while the init's exit is held: %v", err)
	}
	_, err = svc.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID, ExecID: "exec2"})
	expectCode(t, "Start of an exec after the init exited", err, codes.FailedPrecondition)

	runc.Clear(t, "kill")
	runc.Clear(t, "exec")
	if err := <-exec1; err == nil {
		t.Errorf("exec1 started in a container whose init is dead")
	}
	if w := waitExec(t, k, ""); w.ExitStatus != 137 {
		t.Errorf("init exited %d, want 137", w.ExitStatus)
	}
	for _, id := range []string{"exec1", "exec2"} {
		st, err := svc.State(k.Ctx(), &taskapi.StateRequest{ID: k.ID, ExecID: id})
		if err != nil || st.Status != task.Status_CREATED {
			t.Errorf("State of %s = %v, %v; want CREATED", id, st, err)
		}
		del, err := svc.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID, ExecID: id})
		if err != nil || del.ExitStatus != 0 {
			t.Errorf("Delete of %s = %v, %v; want status 0", id, del, err)
		}
	}
	if st := k.State(); st.Status != task.Status_STOPPED {
		t.Errorf("task is %v, want STOPPED", st.Status)
	}
	got := nextEvents(t, events, 0, 5)
	if s := topics(got); s != "/tasks/create /tasks/start /tasks/exec-added /tasks/exec-added /tasks/exit" {
		t.Errorf("events: %s", s)
	}
}

// TestFailedExecStartReleasesWait: CRI's ExecSync sends Wait alongside Start; when Start fails
// (no such binary), the Wait returns at once, as the reference's does, instead of holding a
// handler in the shim until the caller gives up. The exec stays CREATED and deletes with 0.
func TestFailedExecStartReleasesWait(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "exec-fails", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	k.Run()
	svc := k.Conn.Task
	if _, err := svc.Exec(k.Ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "missing", Spec: execSpec(t, "/no/such/binary")}); err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		_, err := svc.Wait(rpcCtx(t, 20*time.Second), &taskapi.WaitRequest{ID: k.ID, ExecID: "missing"})
		waited <- err
	}()
	_, err := svc.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID, ExecID: "missing"})
	if err == nil {
		t.Fatal("Start of a missing binary succeeded")
	}
	if err := <-waited; err != nil {
		t.Errorf("Wait of the exec that failed to start: %v", err)
	}
	_, err = svc.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID, ExecID: "missing"})
	expectCode(t, "a second Start", err, codes.FailedPrecondition)
	if st, err := svc.State(k.Ctx(), &taskapi.StateRequest{ID: k.ID, ExecID: "missing"}); err != nil || st.Status != task.Status_CREATED {
		t.Errorf("State = %v, %v; want CREATED", st, err)
	}
	del, err := svc.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID, ExecID: "missing"})
	if err != nil || del.ExitStatus != 0 {
		t.Errorf("Delete = %v, %v; want status 0", del, err)
	}
	if st := k.State(); st.Status != task.Status_RUNNING {
		t.Errorf("the container is %v after a failed exec", st.Status)
	}
}

// TestDeleteUnstartedExec: an exec added and never started deletes with status 0, as
// containerd's clients expect (ctr, CRI's exec cleanup); nothing was killed.
func TestDeleteUnstartedExec(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "exec-unstarted", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	k.Run()
	svc := k.Conn.Task
	if _, err := svc.Exec(k.Ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "idle", Spec: execSpec(t, "true")}); err != nil {
		t.Fatal(err)
	}
	del, err := svc.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID, ExecID: "idle"})
	if err != nil {
		t.Fatal(err)
	}
	if del.ExitStatus != 0 || del.Pid != 0 {
		t.Errorf("Delete = %v, want pid 0 and status 0", del)
	}
}

// TestExecTerminalFromRequest: the request's Terminal decides, not the process spec's, which
// is what containerd's client sends for `cio.WithTerminal` with the container's own spec.
func TestExecTerminalFromRequest(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "exec-tty", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	k.Run()
	fifos, err := d.NewFIFOs("exec-tty-tty", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fifos.Remove() })
	fifos.Stderr = "" // a terminal has one stream; nobody would ever close this one
	var out testkit.Buffer
	attached, err := fifos.Attach(context.Background(), nil, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { attached.Close() })
	svc := k.Conn.Task
	// The spec has no terminal; the request asks for one.
	if _, err := svc.Exec(k.Ctx(), &taskapi.ExecProcessRequest{
		ID: k.ID, ExecID: "tty", Terminal: true, Stdout: fifos.Stdout,
		Spec: execSpec(t, "sh", "-c", "[ -t 1 ] && echo tty || echo notty"),
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID, ExecID: "tty"}); err != nil {
		t.Fatalf("Start of a terminal exec: %v", err)
	}
	if w := waitExec(t, k, "tty"); w.ExitStatus != 0 {
		t.Errorf("exec exited %d", w.ExitStatus)
	}
	if _, err := svc.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID, ExecID: "tty"}); err != nil {
		t.Fatal(err)
	}
	attached.Wait()
	if got := strings.TrimSpace(out.String()); got != "tty" {
		t.Errorf("the exec saw %q on stdout, want tty", got)
	}
}

// TestExecIntoCreatedContainer: runc exec joins a created container's namespaces, and the
// reference allows it.
func TestExecIntoCreatedContainer(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "exec-created", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	k.Create()
	_, status, err := runExec(k.Conn.Task, k.ID, "early", &taskapi.ExecProcessRequest{Spec: execSpec(t, "sh", "-c", "exit 3")})
	if err != nil {
		t.Fatal(err)
	}
	if status != 3 {
		t.Errorf("exec exited %d, want 3", status)
	}
	if st := k.State(); st.Status != task.Status_CREATED {
		t.Errorf("the container is %v after the exec, want CREATED", st.Status)
	}
	k.Start()
	k.WaitStatus(task.Status_RUNNING, 10*time.Second)
}

// TestExecPausedWithContainer: an exec of a paused container is paused too, as the reference
// reports it, and running again once the container resumes.
func TestExecPausedWithContainer(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "exec-paused", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	k.Run()
	svc := k.Conn.Task
	if _, err := svc.Exec(k.Ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "long", Spec: execSpec(t, "sleep", "100")}); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID, ExecID: "long"}); err != nil {
		t.Fatal(err)
	}
	execStatus := func() task.Status {
		st, err := svc.State(k.Ctx(), &taskapi.StateRequest{ID: k.ID, ExecID: "long"})
		if err != nil {
			t.Fatal(err)
		}
		return st.Status
	}
	if _, err := svc.Pause(k.Ctx(), &taskapi.PauseRequest{ID: k.ID}); err != nil {
		t.Fatal(err)
	}
	if st := execStatus(); st != task.Status_PAUSED {
		t.Errorf("exec of a paused container is %v, want PAUSED", st)
	}
	if _, err := svc.Resume(k.Ctx(), &taskapi.ResumeRequest{ID: k.ID}); err != nil {
		t.Fatal(err)
	}
	if st := execStatus(); st != task.Status_RUNNING {
		t.Errorf("exec of a resumed container is %v, want RUNNING", st)
	}
}

// TestKilledInitTakesItsChildren is the pod's case: a container whose init did not get a PID
// namespace of its own (it joined another container's, or has the host's) and forked. When the
// init is killed its children are reparented, still holding the container's stdout; the shim
// kills what is left, so the output ends and nothing of the container lives on.
func TestKilledInitTakesItsChildren(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	pause := testkit.NewTask(t, d, "pod-pause", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	pausePid := pause.Run()
	for _, tc := range []struct {
		name string
		pid  func(ns []specs.LinuxNamespace) []specs.LinuxNamespace
	}{
		{"shared", func(ns []specs.LinuxNamespace) []specs.LinuxNamespace {
			for i := range ns {
				if ns[i].Type == specs.PIDNamespace {
					ns[i].Path = fmt.Sprintf("/proc/%d/ns/pid", pausePid)
				}
			}
			return ns
		}},
		{"host", func(ns []specs.LinuxNamespace) []specs.LinuxNamespace {
			var kept []specs.LinuxNamespace
			for _, n := range ns {
				if n.Type != specs.PIDNamespace {
					kept = append(kept, n)
				}
			}
			return kept
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k := testkit.NewTask(t, d, "pod-"+tc.name, testkit.TaskOptions{
				Args: []string{"sh", "-c", "sleep 200 & echo forked; exec sleep 201"},
			})
			editSpec(t, k.Bundle, func(s *specs.Spec) { s.Linux.Namespaces = tc.pid(s.Linux.Namespaces) })
			initPid := k.Run()
			var child int
			testkit.Eventually(t, 20*time.Second, "the init never forked", func() bool {
				pids, err := k.Conn.Task.Pids(k.Ctx(), &taskapi.PidsRequest{ID: k.ID})
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range pids.Processes {
					if int(p.Pid) != initPid {
						child = int(p.Pid)
					}
				}
				return child != 0 && strings.Contains(k.Stdout.String(), "forked")
			})
			// As the OOM killer would. Not with Kill: a runc that kills the whole cgroup for a
			// SIGKILL of an init without its own PID namespace would hide what the shim does.
			if err := syscall.Kill(initPid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			if w := waitExec(t, k, ""); w.ExitStatus != 137 {
				t.Errorf("init exited %d, want 137", w.ExitStatus)
			}
			k.WaitOutput(20 * time.Second)
			// Killed: gone, or a zombie of the pod's init, which does not reap.
			testkit.Eventually(t, 20*time.Second, fmt.Sprintf("the init's child %d lives on", child), func() bool {
				p, err := driver.ReadProc(child)
				return err != nil || p.State == 'Z'
			})
			if _, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID}); err != nil {
				t.Fatal(err)
			}
		})
	}
	// An init with a PID namespace of its own takes everything in it along: there is nothing
	// left to kill, and the shim runs no runc kill --all, as containerd's shim decides
	// (ShouldKillAllOnExit). runc kill is made to fail here only to count its calls.
	t.Run("own", func(t *testing.T) {
		runc := testkit.NewFaultyRunc(t)
		runc.Set(t, "kill", testkit.Fail)
		k := testkit.NewTask(t, d, "pod-own", testkit.TaskOptions{Args: []string{"sh", "-c", "sleep 200 & exec sleep 201"}, NullIO: true})
		req := k.CreateRequest()
		req.Options = mustAny(t, &options.Options{BinaryName: runc.Path})
		created, err := k.Conn.Task.Create(k.Ctx(), req)
		if err != nil {
			t.Fatalf("Create: %v", err)
		}
		k.Start()
		if err := syscall.Kill(int(created.Pid), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		if w := waitExec(t, k, ""); w.ExitStatus != 137 {
			t.Errorf("init exited %d, want 137", w.ExitStatus)
		}
		// The exit is published after any kill of what the init left: by now it has run.
		if n := runc.Reached("kill"); n != 0 {
			t.Errorf("the shim ran runc kill %d times after an init with its own PID namespace exited, want none", n)
		}
		if _, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID}); err != nil {
			t.Fatal(err)
		}
	})
	if st := pause.State(); st.Status != task.Status_RUNNING {
		t.Errorf("the pod's init is %v, want RUNNING", st.Status)
	}
}

// blockedOnLock reports whether a goroutine of the shim of k waits for a mutex inside fn (a
// function name as a stack shows it), from the goroutine dump the shim logs on SIGUSR1: the
// only way to know that an RPC has reached the shim and stopped there.
func blockedOnLock(t *testing.T, k *testkit.Task, fn string) bool {
	t.Helper()
	log := filepath.Join(k.Bundle, bundle.ShimLogFile)
	dumps := func() []string {
		data, _ := os.ReadFile(log)
		var found []string
		for _, line := range strings.Split(string(data), "\ntime=") {
			if strings.Contains(line, `msg="goroutine dump"`) {
				found = append(found, line)
			}
		}
		return found
	}
	before := len(dumps())
	if err := syscall.Kill(k.ShimPid, syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	var all []string
	testkit.Eventually(t, 10*time.Second, "the shim logged no goroutine dump", func() bool {
		all = dumps()
		return len(all) > before
	})
	// The stacks are one quoted attribute: goroutines are parted by an escaped blank line.
	for _, g := range strings.Split(all[len(all)-1], `\n\n`) {
		if strings.Contains(g, "sync.(*Mutex).Lock") && strings.Contains(g, fn) {
			return true
		}
	}
	return false
}

// joinCgroups moves pid into every cgroup that from is in, v1 hierarchies and v2 alike: the
// cgroups as /proc/<from>/cgroup lists them, found under /sys/fs/cgroup.
func joinCgroups(t *testing.T, from []string, pid int) {
	t.Helper()
	joined := 0
	for _, line := range from {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || parts[2] == "/" {
			continue
		}
		var dirs []string
		if parts[1] == "" {
			dirs = []string{"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}
		} else {
			dirs = []string{filepath.Join("/sys/fs/cgroup", strings.TrimPrefix(parts[1], "name="))}
		}
		for _, dir := range dirs {
			procs := filepath.Join(dir, parts[2], "cgroup.procs")
			if _, err := os.Stat(procs); err != nil {
				continue
			}
			if err := os.WriteFile(procs, []byte(strconv.Itoa(pid)), 0o644); err != nil {
				t.Fatalf("join %s: %v", procs, err)
			}
			joined++
		}
	}
	if joined == 0 {
		t.Fatalf("no cgroup of %v to join", from)
	}
}

// TestKillAllReachesAStoppedTask: Kill with all still reaches what is left in a container
// whose init has stopped, as runc kill --all and the reference do; without all it is NotFound.
func TestKillAllReachesAStoppedTask(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "kill-all-stopped", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	initPid := k.Run()
	cgroups, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", initPid))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(initPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	waitExec(t, k, "")
	// Something left in the container's cgroup once its init is gone: what a process that
	// escaped the kill on exit, or one the init's cgroup gained later, would be.
	left := exec.Command("sleep", "1000")
	if err := left.Start(); err != nil {
		t.Fatal(err)
	}
	var waitErr error
	ended := make(chan struct{}) // closed once the process has been waited for
	go func() { waitErr = left.Wait(); close(ended) }()
	t.Cleanup(func() {
		left.Process.Kill()
		<-ended
	})
	joinCgroups(t, strings.Fields(string(cgroups)), left.Process.Pid)
	_, err = k.Conn.Task.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9})
	expectCode(t, "Kill of a stopped init", err, codes.NotFound)
	if _, err := k.Conn.Task.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9, All: true}); err != nil {
		t.Fatalf("Kill with all of a stopped task: %v", err)
	}
	select {
	case <-ended:
		if ee, ok := waitErr.(*exec.ExitError); !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Errorf("what was left ended with %v, want SIGKILL", waitErr)
		}
	case <-rpcCtx(t, 20*time.Second).Done():
		t.Errorf("what was left in the container's cgroup lives on after Kill with all")
	}
}

// TestSecondDeleteWhileTheFirstRuns: a Delete that comes while another Delete of the same task
// is still in runc delete waits for it and then finds the task gone; TaskDelete is sent once.
func TestSecondDeleteWhileTheFirstRuns(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	events := testkit.Events(t, d)
	runc := testkit.NewFaultyRunc(t)
	k := testkit.NewTask(t, d, "two-deletes", testkit.TaskOptions{Args: []string{"true"}, NullIO: true})
	req := k.CreateRequest()
	req.Options = mustAny(t, &options.Options{BinaryName: runc.Path})
	svc := k.Conn.Task
	if _, err := svc.Create(k.Ctx(), req); err != nil {
		t.Fatal(err)
	}
	k.Start()
	waitExec(t, k, "")
	t.Cleanup(func() { runc.Clear(t, "delete") })
	runc.Set(t, "delete", testkit.Block)
	results := make(chan error, 2)
	del := func() {
		_, err := svc.Delete(rpcCtx(t, 30*time.Second), &taskapi.DeleteRequest{ID: k.ID})
		results <- err
	}
	go del()
	runc.WaitReached(t, "delete", 20*time.Second)
	go del()
	testkit.Eventually(t, 20*time.Second, "the second Delete never reached the shim", func() bool {
		return blockedOnLock(t, k, "process.(*Init).Delete")
	})
	runc.Clear(t, "delete")
	codesSeen := map[codes.Code]int{}
	for range 2 {
		codesSeen[driver.Code(<-results)]++
	}
	if codesSeen[codes.OK] != 1 || codesSeen[codes.NotFound] != 1 {
		t.Errorf("two Deletes: %v, want one OK and one NotFound", codesSeen)
	}
	got := nextEvents(t, events, 0, 4)
	if s := topics(got); s != "/tasks/create /tasks/start /tasks/exit /tasks/delete" {
		t.Errorf("events: %s", s)
	}
	// Anything published after the first TaskDelete would be a second one.
	if _, err := svc.Shutdown(k.Ctx(), &taskapi.ShutdownRequest{ID: k.ID}); err != nil && driver.Code(err) != codes.Unknown {
		t.Errorf("Shutdown: %v", err)
	}
	testkit.ExpectGone(t, k.ShimPid, "the shim")
	if n := len(events.Events()); n != 4 {
		t.Errorf("%d events, want 4: %s", n, topics(events.Events()))
	}
}

// pidfdsOf lists the pids the pidfds that process pid holds refer to.
func pidfdsOf(t *testing.T, pid int) []int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		if link, _ := os.Readlink(filepath.Join(dir, e.Name())); link != "anon_inode:[pidfd]" {
			continue
		}
		info, _ := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "Pid:"); ok {
				n, _ := strconv.Atoi(strings.TrimSpace(v))
				pids = append(pids, n)
			}
		}
	}
	return pids
}

// TestExecKilledThroughPidfd: the shim holds a pidfd for a running exec, so that Kill never
// reaches another process that took the pid once the exec was reaped, and lets it go with the
// exit. A signal still gets through it.
func TestExecKilledThroughPidfd(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "exec-pidfd", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	k.Run()
	svc := k.Conn.Task
	if _, err := svc.Exec(k.Ctx(), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: "long", Spec: execSpec(t, "sleep", "100")}); err != nil {
		t.Fatal(err)
	}
	started, err := svc.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID, ExecID: "long"})
	if err != nil {
		t.Fatal(err)
	}
	if held := pidfdsOf(t, k.ShimPid); !slices.Contains(held, int(started.Pid)) {
		t.Errorf("the shim holds pidfds for %v, not for the exec %d", held, started.Pid)
	}
	if _, err := svc.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, ExecID: "long", Signal: 15}); err != nil {
		t.Fatal(err)
	}
	if w := waitExec(t, k, "long"); w.ExitStatus != 128+15 {
		t.Errorf("exec exited %d, want %d", w.ExitStatus, 128+15)
	}
	if held := pidfdsOf(t, k.ShimPid); slices.Contains(held, int(started.Pid)) {
		t.Errorf("the shim still holds a pidfd for the exec %d after its exit", started.Pid)
	}
	_, err = svc.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, ExecID: "long", Signal: 9})
	expectCode(t, "Kill of an exited exec", err, codes.NotFound)
}
