// SPDX-License-Identifier: Apache-2.0

// The subreaper and its reap loop (since step 04). Mirrors containerd v2.4 pkg/sys/reaper
// (Reap, Monitor) and the SIGCHLD handling of pkg/shim/shim_unix.go. Unlike containerd, a runc
// command's exit goes straight to the caller that started it, through a pid table filled while
// the fork is under the reaper's lock, instead of being broadcast to every subscriber.
package main

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

// exit is one reaped process.
type exit struct {
	pid    int
	status int // shell convention: the exit code, or 128+signal
	at     time.Time
}

// reaper collects every child of the shim. It is go-runc's process monitor too: a plain
// cmd.Wait on a runc command would race with wait4(-1) in reap, and the loser gets ECHILD
// ("no child processes") in place of runc's exit status.
type reaper struct {
	mu      sync.Mutex
	waiting map[int]chan runc.Exit  // runc commands by pid; guarded by mu
	subs    map[*exitQueue]struct{} // guarded by mu
	// reapFirst (SHIMWALK_REAP_FIRST=1, for tests) makes fork return only after the command
	// has exited and, unless fork's caller holds mu, after its exit has been reaped and looked
	// up: the earliest a runc command can be reaped, which a monitor must survive every time,
	// not once in a while.
	reapFirst bool
}

var _ runc.ProcessMonitor = (*reaper)(nil)

func newReaper() *reaper {
	return &reaper{
		waiting: map[int]chan runc.Exit{}, subs: map[*exitQueue]struct{}{},
		reapFirst: os.Getenv("SHIMWALK_REAP_FIRST") == "1",
	}
}

// becomeSubreaper makes the shim the parent of every orphan below it: of the container init
// that runc create leaves behind when it exits, and of anything the container orphans.
func becomeSubreaper() error {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("become child subreaper: %w", err)
	}
	return nil
}

// run reaps on every SIGCHLD until ctx ends. Signals coalesce, so one SIGCHLD may stand for
// several exits: reap collects until nothing is left.
func (r *reaper) run(ctx context.Context) {
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

func (r *reaper) reap() {
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || pid <= 0 {
			return // ECHILD: no children at all; 0: none has exited yet
		}
		e := exit{pid: pid, status: exitStatus(ws), at: time.Now()}
		r.mu.Lock()
		cmd, isCmd := r.waiting[pid]
		delete(r.waiting, pid)
		subs := make([]*exitQueue, 0, len(r.subs))
		for q := range r.subs {
			subs = append(subs, q)
		}
		r.mu.Unlock()
		if isCmd {
			tracePoint("reaper", "shim", false, "SIGCHLD, wait4: a runc command exited %d, to its caller", e.status)
			cmd <- runc.Exit{Pid: pid, Status: e.status, Timestamp: e.at}
			continue
		}
		tracePoint("reaper", "shim", true, "SIGCHLD, wait4: not a runc command, exited %d, to the service", e.status)
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

// fork starts c: c.Start, plus the test hook reapFirst. With it, fork waits for c to exit
// (without reaping it), and if mu is free, so that nothing stops the reap loop from looking the
// pid up before fork's caller records it, reaps it there and then, as the loop would.
func (r *reaper) fork(c *exec.Cmd) error {
	if err := c.Start(); err != nil {
		return err
	}
	if !r.reapFirst {
		return nil
	}
	var info unix.Siginfo
	for {
		err := unix.Waitid(unix.P_PID, c.Process.Pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
		if !errors.Is(err, unix.EINTR) {
			break // exited, or already reaped by the loop (ECHILD)
		}
	}
	if r.mu.TryLock() {
		r.mu.Unlock()
		r.reap()
	}
	return nil
}

// Start starts a runc command. The fork happens under mu, and reap takes mu before it looks a
// pid up, so even a command that exits at once is found in waiting and its exit is not taken
// for a container's.
func (r *reaper) Start(c *exec.Cmd) (chan runc.Exit, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.fork(c); err != nil {
		return nil, err
	}
	ec := make(chan runc.Exit, 1)
	r.waiting[c.Process.Pid] = ec
	return ec, nil
}

// StartLocked is Start from a thread that stays locked until the command exits: go-runc asks
// for it when the command has a parent-death signal, which the kernel ties to the forking
// thread, not to the process.
func (r *reaper) StartLocked(c *exec.Cmd) (chan runc.Exit, error) {
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

// Wait returns the command's exit status once reap has collected it.
func (r *reaper) Wait(c *exec.Cmd, ec chan runc.Exit) (int, error) {
	e := <-ec
	// The process is already reaped, so cmd.Wait's own wait fails (ECHILD); it is called to
	// finish copying the command's output and release its pipes.
	_ = c.Wait()
	// A failed Wait keeps the process's pidfd open until the garbage collector finds it: one fd
	// per runc call would pile up in a shim that runs for long.
	_ = c.Process.Release()
	return e.Status, nil
}

// subscribe returns a queue that receives every exit that is not a runc command's.
func (r *reaper) subscribe() *exitQueue {
	q := &exitQueue{ready: make(chan struct{}, 1)}
	r.mu.Lock()
	r.subs[q] = struct{}{}
	r.mu.Unlock()
	return q
}

func (r *reaper) unsubscribe(q *exitQueue) {
	r.mu.Lock()
	delete(r.subs, q)
	r.mu.Unlock()
}

// exitQueue is an unbounded mailbox: push never blocks the reap loop, whatever the subscriber
// is doing. A bounded channel would deadlock the shim when the subscriber waits for a lock held
// by an RPC that waits for a runc command that only the reap loop can collect.
type exitQueue struct {
	mu    sync.Mutex
	exits []exit // guarded by mu
	ready chan struct{}
}

func (q *exitQueue) push(e exit) {
	q.mu.Lock()
	q.exits = append(q.exits, e)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default: // a wake-up is already pending
	}
}

// take returns the exits queued so far, oldest first.
func (q *exitQueue) take() []exit {
	q.mu.Lock()
	defer q.mu.Unlock()
	exits := q.exits
	q.exits = nil
	return exits
}
