// SPDX-License-Identifier: Apache-2.0

// What an init and an exec share: identity, status, exit and the Wait on it, stdin and the
// terminal, which containerd v2.4's runc shim spreads over the process.Process interface and
// the fields and SetExited of process.Init and execProcess
// (cmd/containerd-shim-runc-v2/process/process.go, init.go, exec.go).

package process

import (
	"context"
	"sync"
	"time"

	"github.com/containerd/containerd/api/types/task"

	"github.com/shimwalk/shimwalk/final/shim/stdio"
)

// Exit is how a process ended.
type Exit struct {
	Status int
	At     time.Time
}

// streams is a process's stdio: pipes or a terminal.
type streams interface {
	Wait(timeout time.Duration)
	CloseStdin() error
	Close() error
}

// base is what init and exec processes share: identity, status and exit.
type base struct {
	id    string // the container id for init, the exec id for an exec
	stdio stdio.Config

	rules *rules // the state machine: initRules or execRules

	mu      sync.Mutex
	pid     int           // guarded by mu
	status  task.Status   // guarded by mu; moved only by advance
	exit    *Exit         // guarded by mu; set once, by SetExited
	done    chan struct{} // closed by SetExited, or by release for a process that never ran
	closed  bool          // guarded by mu; done is closed
	io      streams       // guarded by mu
	console *stdio.Console
}

func newBase(id string, cfg stdio.Config, r *rules) base {
	return base{id: id, stdio: cfg, rules: r, status: task.Status_CREATED, done: make(chan struct{})}
}

// ID is the container id of an init, the exec id of an exec.
func (p *base) ID() string { return p.id }

// Pid is the process's pid, 0 before it has one.
func (p *base) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

// Stdio is what the process's streams were created from.
func (p *base) Stdio() stdio.Config { return p.stdio }

// Status is the process's state.
func (p *base) Status() task.Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Exited returns the exit, or nil while the process runs.
func (p *base) Exited() *Exit {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exit
}

// Done is closed when the process has exited.
func (p *base) Done() <-chan struct{} { return p.done }

// SetExited records the exit and wakes every Wait. Later calls are ignored: a pid is reaped once.
func (p *base) SetExited(status int, at time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit != nil {
		return
	}
	p.exit = &Exit{Status: status, At: at}
	p.advance(opExit)
	if p.console != nil {
		// The copy ends with the process, not with the last holder of its terminal.
		p.console.Shutdown()
	}
	p.closeDone()
}

// release wakes every Wait of a process that will never run, leaving it without an exit: a
// caller whose Start failed has stopped waiting, but a Wait sent alongside it (CRI's ExecSync
// sends both) must not be left to its deadline. Call with mu held.
func (p *base) release() {
	p.closeDone()
}

func (p *base) closeDone() {
	if !p.closed {
		p.closed = true
		close(p.done)
	}
}

// Wait blocks until the process has exited, or ctx ends. A process that never ran reports
// status 0 at the zero time, as containerd's runc shim does.
func (p *base) Wait(ctx context.Context) (Exit, error) {
	select {
	case <-p.done:
		if x := p.Exited(); x != nil {
			return *x, nil
		}
		return Exit{}, nil
	case <-ctx.Done():
		return Exit{}, ctx.Err()
	}
}

// CloseIO gives the process EOF on stdin.
func (p *base) CloseIO() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.io == nil {
		return nil
	}
	return p.io.CloseStdin()
}

// Resize sets the size of the process's terminal. A process without one has nothing to
// resize, which is no error: containerd's shim answers so, and clients resize whatever they
// attach to.
func (p *base) Resize(width, height uint32) error {
	p.mu.Lock()
	c := p.console
	p.mu.Unlock()
	if c == nil {
		return nil
	}
	return c.Resize(width, height)
}

// closeIO waits, at most a few seconds, for the output to be delivered, then closes the streams.
func (p *base) closeIO() {
	p.mu.Lock()
	io := p.io
	p.io = nil
	p.mu.Unlock()
	if io != nil {
		io.Wait(5 * time.Second)
		io.Close()
	}
}
