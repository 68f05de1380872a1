// SPDX-License-Identifier: Apache-2.0

package process

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
	runc "github.com/containerd/go-runc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/shimwalk/shimwalk/final/shim/cgroups"
	"github.com/shimwalk/shimwalk/final/shim/stdio"
)

// fakeRunc stands in for runc so that an allowed operation succeeds without a container:
// every call exits 0, ps lists no process, and exec records its caller (the test) as the
// process it started.
const fakeRunc = `#!/bin/sh
pidfile=
while [ $# -gt 0 ]; do
	case "$1" in
	--pid-file) pidfile=$2; shift ;;
	ps) echo '[]' ;;
	esac
	shift
done
[ -z "$pidfile" ] || printf %d $PPID >"$pidfile"
`

// outcome is what an operation in a state must come to: the state after it, and for a
// refusal its error class and text (the state is then left as it was).
type outcome struct {
	next  task.Status
	class error
	msg   string
}

// succeeds is the outcome of an operation the state allows: the process is in next after it.
func succeeds(next task.Status) outcome { return outcome{next: next} }

func refused(class error, msg string) outcome { return outcome{class: class, msg: msg} }

func precondition(msg string) outcome {
	return refused(errdefs.ErrFailedPrecondition, msg+": failed precondition")
}

func notFound(msg string) outcome { return refused(errdefs.ErrNotFound, msg+": not found") }

// stateFixture builds the processes of the tests in the state wanted, driven by fakeRunc.
type stateFixture struct {
	t    *testing.T
	runc string
}

func newStateFixture(t *testing.T) *stateFixture {
	return &stateFixture{t: t, runc: writeFakeRunc(t, fakeRunc)}
}

// writeFakeRunc writes script as an executable and returns its path.
func writeFakeRunc(t *testing.T, script string) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "runc")
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

func (f *stateFixture) init(status task.Status) *Init {
	dir := f.t.TempDir()
	// An empty cgroup2 tree: Stats reads zeros from it instead of the host's cgroups.
	cg, err := cgroups.LoadV2(f.t.TempDir(), []byte("0::/\n"))
	if err != nil {
		f.t.Fatal(err)
	}
	p := &Init{
		base:   newBase("c1", stdio.Config{}, &initRules),
		Bundle: dir,
		runtime: &runc.Runc{
			Command: f.runc, Root: filepath.Join(dir, "root"),
			Log: filepath.Join(dir, "log.json"), LogFormat: runc.JSON,
		},
		cg: cg,
	}
	p.status, p.pid = status, os.Getpid()
	return p
}

func (f *stateFixture) exec(status task.Status) *Exec {
	e := &Exec{
		base:   newBase("e1", stdio.Config{}, &execRules),
		parent: f.init(running),
		spec:   &specs.Process{Args: []string{"true"}, Cwd: "/"},
		pidfd:  -1,
	}
	e.status, e.pid = status, os.Getpid()
	f.t.Cleanup(func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		e.closePidfd()
	})
	return e
}

// stateCase is an operation on a process of type P and its outcome in each state.
type stateCase[P interface{ Status() task.Status }] struct {
	name string
	call func(context.Context, P) error
	want map[task.Status]outcome
}

// runStates runs every case on a process built in each of states.
func runStates[P interface{ Status() task.Status }](t *testing.T, states []task.Status, build func(task.Status) P, cases []stateCase[P]) {
	for _, c := range cases {
		for _, before := range states {
			t.Run(c.name+" when "+statusName(before), func(t *testing.T) {
				want, ok := c.want[before]
				if !ok {
					t.Fatalf("no outcome given for %s", statusName(before))
				}
				p := build(before)
				err := c.call(context.Background(), p)
				checkOutcome(t, err, p.Status(), before, want)
			})
		}
	}
}

func checkOutcome(t *testing.T, err error, got task.Status, before task.Status, want outcome) {
	t.Helper()
	if want.class == nil {
		if err != nil || got != want.next {
			t.Errorf("got %v in state %s, want success in state %s", err, got, want.next)
		}
		return
	}
	if !errors.Is(err, want.class) || err.Error() != want.msg {
		t.Errorf("got error %v, want %q (%v)", err, want.msg, want.class)
	}
	if got != before {
		t.Errorf("refused, yet moved from %s to %s", before, got)
	}
}

// TestInitStates drives every operation of an init in every state it can be in: what is
// refused, with which class and words, and where what succeeds leads.
func TestInitStates(t *testing.T) {
	ops := []stateCase[*Init]{
		{"start", func(ctx context.Context, p *Init) error { return p.Start(ctx) }, map[task.Status]outcome{
			created: succeeds(running),
			running: precondition("start: process c1 is running"),
			paused:  precondition("start: process c1 is paused"),
			stopped: precondition("start: process c1 has already exited"),
			deleted: notFound("start: process c1 is deleted"),
		}},
		{"kill", func(ctx context.Context, p *Init) error { return p.Kill(ctx, 0, false) }, map[task.Status]outcome{
			created: succeeds(created),
			running: succeeds(running),
			paused:  succeeds(paused),
			stopped: notFound("kill: process c1 has already finished"),
			deleted: notFound("kill: process c1 has already finished"),
		}},
		{"kill all", func(ctx context.Context, p *Init) error { return p.Kill(ctx, 0, true) }, map[task.Status]outcome{
			created: succeeds(created),
			running: succeeds(running),
			paused:  succeeds(paused),
			stopped: succeeds(stopped),
			deleted: notFound("kill: process c1 has already finished"),
		}},
		{"pause", func(ctx context.Context, p *Init) error { return p.Pause(ctx) }, map[task.Status]outcome{
			created: precondition("pause: process c1 is created"),
			running: succeeds(paused),
			paused:  precondition("pause: process c1 is paused"),
			stopped: precondition("pause: process c1 has already exited"),
			deleted: notFound("pause: process c1 is deleted"),
		}},
		{"resume", func(ctx context.Context, p *Init) error { return p.Resume(ctx) }, map[task.Status]outcome{
			created: precondition("resume: process c1 is created"),
			running: precondition("resume: process c1 is running"),
			paused:  succeeds(running),
			stopped: precondition("resume: process c1 has already exited"),
			deleted: notFound("resume: process c1 is deleted"),
		}},
		{"delete", func(ctx context.Context, p *Init) error { return p.Delete(ctx) }, map[task.Status]outcome{
			created: succeeds(deleted),
			running: precondition("delete: process c1 is running"),
			paused:  precondition("delete: process c1 is paused"),
			stopped: succeeds(deleted),
			deleted: notFound("delete: process c1 is deleted"),
		}},
		{"update", func(ctx context.Context, p *Init) error { return p.Update(ctx, &specs.LinuxResources{}) }, map[task.Status]outcome{
			created: succeeds(created),
			running: succeeds(running),
			paused:  succeeds(paused),
			stopped: precondition("update: process c1 has already exited"),
			deleted: notFound("update: process c1 is deleted"),
		}},
		{"checkpoint", func(ctx context.Context, p *Init) error { return p.Checkpoint(ctx, CheckpointConfig{}) }, map[task.Status]outcome{
			created: precondition("checkpoint: process c1 is created"),
			running: succeeds(running),
			paused:  succeeds(paused),
			stopped: precondition("checkpoint: process c1 has already exited"),
			deleted: notFound("checkpoint: process c1 is deleted"),
		}},
		{"exec", func(ctx context.Context, p *Init) error {
			_, err := p.NewExec("e1", &specs.Process{Args: []string{"true"}}, stdio.Config{})
			return err
		}, map[task.Status]outcome{
			created: succeeds(created),
			running: succeeds(running),
			paused:  precondition("exec: process c1 is paused"),
			stopped: precondition("exec: process c1 has already exited"),
			deleted: notFound("exec: process c1 is deleted"),
		}},
		{"pids", func(ctx context.Context, p *Init) error { _, err := p.Pids(ctx); return err }, map[task.Status]outcome{
			created: succeeds(created),
			running: succeeds(running),
			paused:  succeeds(paused),
			stopped: succeeds(stopped),
			deleted: notFound("pids: process c1 is deleted"),
		}},
		{"stats", func(ctx context.Context, p *Init) error { _, err := p.Stats(ctx); return err }, map[task.Status]outcome{
			created: succeeds(created),
			running: succeeds(running),
			paused:  succeeds(paused),
			stopped: succeeds(stopped),
			deleted: notFound("stats: process c1 is deleted"),
		}},
		{"exit", func(ctx context.Context, p *Init) error { p.SetExited(0, time.Now()); return nil }, map[task.Status]outcome{
			created: succeeds(stopped),
			running: succeeds(stopped),
			paused:  succeeds(stopped),
			stopped: succeeds(stopped),
			deleted: succeeds(deleted),
		}},
	}
	f := newStateFixture(t)
	runStates(t, []task.Status{created, running, paused, stopped, deleted}, f.init, ops)
}

// TestExecStates is TestInitStates for an exec process, in the states it has of its own (it is
// never paused itself: its Status reports its container's).
func TestExecStates(t *testing.T) {
	ops := []stateCase[*Exec]{
		{"start", func(ctx context.Context, e *Exec) error { return e.Start(ctx) }, map[task.Status]outcome{
			created: succeeds(running),
			running: precondition("start: process e1 is running"),
			stopped: precondition("start: process e1 has already exited"),
			deleted: notFound("start: process e1 is deleted"),
		}},
		{"kill", func(ctx context.Context, e *Exec) error { return e.Kill(ctx, 0) }, map[task.Status]outcome{
			created: precondition("kill: exec e1 has not started"),
			running: succeeds(running),
			stopped: notFound("kill: process e1 has already finished"),
			deleted: notFound("kill: process e1 has already finished"),
		}},
		{"delete", func(ctx context.Context, e *Exec) error { return e.Delete(ctx) }, map[task.Status]outcome{
			created: succeeds(deleted),
			running: precondition("delete: process e1 is running"),
			stopped: succeeds(deleted),
			deleted: notFound("delete: process e1 is deleted"),
		}},
		{"resize", func(ctx context.Context, e *Exec) error { return e.Resize(80, 24) }, map[task.Status]outcome{
			created: succeeds(created),
			running: succeeds(running),
			stopped: precondition("resize: process e1 has already exited"),
			deleted: succeeds(deleted),
		}},
		{"exit", func(ctx context.Context, e *Exec) error { e.SetExited(0, time.Now()); return nil }, map[task.Status]outcome{
			created: succeeds(stopped),
			running: succeeds(stopped),
			stopped: succeeds(stopped),
			deleted: succeeds(deleted),
		}},
	}
	f := newStateFixture(t)
	runStates(t, []task.Status{created, running, stopped, deleted}, f.exec, ops)
}

// heldRunc is a runc that, at any call, tells the test it got there through the FIFO
// reached and then waits for the test to open the FIFO release before it exits 0: the test
// acts while runc works.
const heldRunc = `#!/bin/sh
dir=$(dirname "$0")
echo "$*" >"$dir/reached"
read -r _ <"$dir/release"
exit 0
`

// TestExitWhileRuncWorks: a process that exits while runc works on it stays stopped when the
// call then succeeds (a Start does not make it running, nor a Pause paused), unless the
// operation leads on from stopped too (a Delete of a created init still deletes it).
func TestExitWhileRuncWorks(t *testing.T) {
	cases := []struct {
		name   string
		before task.Status
		call   func(context.Context, *Init) error
		want   task.Status
	}{
		{"start", created, func(ctx context.Context, p *Init) error { return p.Start(ctx) }, stopped},
		{"pause", running, func(ctx context.Context, p *Init) error { return p.Pause(ctx) }, stopped},
		{"resume", paused, func(ctx context.Context, p *Init) error { return p.Resume(ctx) }, stopped},
		{"delete", created, func(ctx context.Context, p *Init) error { return p.Delete(ctx) }, deleted},
	}
	for _, c := range cases {
		t.Run(c.name+" when "+statusName(c.before), func(t *testing.T) {
			f := &stateFixture{t: t, runc: writeFakeRunc(t, heldRunc)}
			dir := filepath.Dir(f.runc)
			for _, name := range []string{"reached", "release"} {
				if err := unix.Mkfifo(filepath.Join(dir, name), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			p := f.init(c.before)
			done := make(chan error, 1)
			go func() { done <- c.call(context.Background(), p) }()

			// Opening reached waits for runc to open it; a call that never runs runc ends first.
			reached := make(chan error, 1)
			go func() {
				r, err := os.Open(filepath.Join(dir, "reached"))
				if err == nil {
					_, err = io.ReadAll(r)
					r.Close()
				}
				reached <- err
			}()
			select {
			case err := <-reached:
				if err != nil {
					t.Fatal(err)
				}
			case err := <-done:
				// Unblock the reader: a writer that comes and goes gives it EOF.
				if w, oerr := os.OpenFile(filepath.Join(dir, "reached"), os.O_WRONLY|unix.O_NONBLOCK, 0); oerr == nil {
					w.Close()
				}
				<-reached
				t.Fatalf("%s returned %v without calling runc", c.name, err)
			}
			p.SetExited(0, time.Now())
			release, err := os.OpenFile(filepath.Join(dir, "release"), os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			release.Close()
			if err := <-done; err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got := p.Status(); got != c.want {
				t.Errorf("%s with an exit while runc worked: %s, want %s", c.name, statusName(got), statusName(c.want))
			}
		})
	}
}
