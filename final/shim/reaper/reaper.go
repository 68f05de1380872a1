// SPDX-License-Identifier: Apache-2.0

// The reap loop: on every SIGCHLD, wait4(-1) until nothing is left, each exit to the command
// that waits for it or else to the subscribers. It mirrors containerd v2.4
// pkg/sys/reaper/reaper_unix.go (Reap, reap, exitStatus, Monitor.Start, Monitor.Wait,
// Monitor.Subscribe) and the SIGCHLD loop of pkg/shim/shim_unix.go (reap).

package reaper

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"sync"
	"time"

	runc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"
)

// Exit is one reaped process.
type Exit struct {
	Pid    int
	Status int // the exit code, or 128+signal
	At     time.Time
}

// Reaper collects every child of the process. It is go-runc's process monitor too: a plain
// cmd.Wait on a runc command would race with wait4(-1), and the loser gets ECHILD.
type Reaper struct {
	mu      sync.Mutex
	waiting map[int]chan runc.Exit // commands started through Start, by pid; guarded by mu
	subs    map[*Queue]struct{}    // guarded by mu
}

var _ runc.ProcessMonitor = (*Reaper)(nil)

// New returns a reaper. Call Run to start reaping.
func New() *Reaper {
	return &Reaper{waiting: map[int]chan runc.Exit{}, subs: map[*Queue]struct{}{}}
}

// SetSubreaper makes the calling process the parent of every orphan below it. Call it before
// anything forks: an orphan made earlier went to someone else.
func SetSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become child subreaper: %w", err)
	}
	return nil
}

// Run reaps on every SIGCHLD until ctx ends. Signals coalesce, so one SIGCHLD may stand for
// several exits: each round collects until nothing is left.
func (r *Reaper) Run(ctx context.Context) {
	sigchld := make(chan os.Signal, 32)
	signal.Notify(sigchld, unix.SIGCHLD)
	defer signal.Stop(sigchld)
	r.reap() // children that exited before Notify took effect
	for {
		select {
		case <-ctx.Done():
			return
		case <-sigchld:
			r.reap()
		}
	}
}

func (r *Reaper) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD: no children at all; 0: none has exited yet
		}
		e := Exit{Pid: pid, Status: exitStatus(ws), At: time.Now()}
		r.mu.Lock()
		cmd, isCmd := r.waiting[pid]
		delete(r.waiting, pid)
		subs := make([]*Queue, 0, len(r.subs))
		for q := range r.subs {
			subs = append(subs, q)
		}
		r.mu.Unlock()
		if isCmd {
			cmd <- runc.Exit{Pid: pid, Status: e.Status, Timestamp: e.At}
			continue
		}
		for _, q := range subs {
			q.push(e)
		}
	}
}

func exitStatus(ws unix.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// Start starts c. The fork happens under mu, and reap takes mu before it looks a pid up, so
// even a command that exits at once is found in waiting and its exit is not taken for a
// container's.
func (r *Reaper) Start(c *exec.Cmd) (chan runc.Exit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := c.Start(); err != nil {
		return nil, err
	}
	ec := make(chan runc.Exit, 1)
	r.waiting[c.Process.Pid] = ec
	return ec, nil
}

// StartLocked is Start from an OS thread that stays locked until the command exits: a
// parent-death signal is tied to the forking thread, not to the process.
func (r *Reaper) StartLocked(c *exec.Cmd) (chan runc.Exit, error) {
	started := make(chan error, 1)
	ec := make(chan runc.Exit, 1)
	go func() {
		// Owned by the command: ends when the reap loop delivers its exit.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		inner, err := r.Start(c)
		started <- err
		if err == nil {
			ec <- <-inner
		}
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return ec, nil
}

// Wait returns the command's exit status once the reap loop collected it.
func (r *Reaper) Wait(c *exec.Cmd, ec chan runc.Exit) (int, error) {
	e := <-ec
	// Already reaped, so cmd.Wait's own wait fails (ECHILD); it is called to finish copying
	// the command's output and release its pipes.
	_ = c.Wait()
	// A failed Wait keeps the process's pidfd open until the garbage collector finds it: one
	// fd per runc call would pile up in a shim that runs for months.
	_ = c.Process.Release()
	return e.Status, nil
}

// Subscribe returns a queue that receives every exit that is not a started command's.
func (r *Reaper) Subscribe() *Queue {
	q := &Queue{ready: make(chan struct{}, 1)}
	r.mu.Lock()
	r.subs[q] = struct{}{}
	r.mu.Unlock()
	return q
}

// Unsubscribe stops delivery to q.
func (r *Reaper) Unsubscribe(q *Queue) {
	r.mu.Lock()
	delete(r.subs, q)
	r.mu.Unlock()
}

// Queue is an unbounded mailbox of exits. push never blocks the reap loop: a bounded channel
// would deadlock when the subscriber waits for a lock held by an RPC that waits for a runc
// command that only the reap loop can collect.
type Queue struct {
	mu    sync.Mutex
	exits []Exit // guarded by mu
	ready chan struct{}
}

func (q *Queue) push(e Exit) {
	q.mu.Lock()
	q.exits = append(q.exits, e)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// Ready is signalled when exits may be waiting.
func (q *Queue) Ready() <-chan struct{} {
	return q.ready
}

// Take returns the exits queued so far, oldest first.
func (q *Queue) Take() []Exit {
	q.mu.Lock()
	defer q.mu.Unlock()
	exits := q.exits
	q.exits = nil
	return exits
}
