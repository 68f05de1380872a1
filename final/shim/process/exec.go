// SPDX-License-Identifier: Apache-2.0

// An exec process: its spec prepared from the init's, its stdio wired and runc exec run at
// Start, then signalled and deleted, as containerd v2.4's process.execProcess and its states
// (cmd/containerd-shim-runc-v2/process/exec.go, exec_state.go) do.

package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
	runc "github.com/containerd/go-runc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/shimwalk/shimwalk/final/internal/bundle"
	"github.com/shimwalk/shimwalk/final/shim/stdio"
)

// Exec is an additional process run in a container with runc exec.
type Exec struct {
	base
	parent *Init
	spec   *specs.Process

	// ops serialises Start and Delete. Without it, Starts that race each other all see the
	// exec created and each runs a process, and a Delete during a Start deletes an exec that
	// is about to run. Kill does not take it.
	ops sync.Mutex

	failed bool // guarded by mu: Start failed; the exec stays created and cannot run
	// pidfd names the process for Kill from the moment its pid is read until its exit is
	// recorded: a pid alone may name another process once this one was reaped. -1 when there
	// is none: before Start, after the exit, or on a kernel without pidfd_open (then the pid
	// is signalled, as containerd's runc shim always does). Guarded by mu.
	pidfd int
	gone  bool // guarded by mu: the process has been reaped; nothing is to be signalled
}

// NewExec prepares an exec process in the container; Start runs it. Execs are refused once
// the container has stopped: its namespaces are gone.
func (p *Init) NewExec(execID string, spec *specs.Process, cfg stdio.Config) (*Exec, error) {
	if spec == nil || len(spec.Args) == 0 {
		return nil, fmt.Errorf("exec %s: the process spec has no args: %w", execID, errdefs.ErrInvalidArgument)
	}
	// A created container's init waits in runc init with its namespaces set up: runc exec can
	// join them, and containerd's runc shim allows it.
	if err := p.check(opExec); err != nil {
		return nil, err
	}
	// The request decides the terminal, not the spec: containerd's client sends the
	// container's own process spec for `cio.WithTerminal`, and runc refuses a console socket
	// for a process spec without one. A copy, as the caller's spec is not ours to change.
	own := *spec
	own.Terminal = cfg.Terminal
	return &Exec{base: newBase(execID, cfg, &execRules), parent: p, spec: &own, pidfd: -1}, nil
}

// Status is the exec's state, or the container's while the container is paused or pausing:
// every process of a frozen cgroup is frozen, and containerd's runc shim reports it so.
func (e *Exec) Status() task.Status {
	switch st := e.parent.Status(); st {
	case task.Status_PAUSED, task.Status_PAUSING:
		return st
	}
	return e.base.Status()
}

// SetExited lets go of the pidfd, then records the exit: from here on nothing may be
// signalled, and a Wait that returns finds the pidfd already closed.
func (e *Exec) SetExited(status int, at time.Time) {
	e.mu.Lock()
	e.closePidfd()
	e.gone = true
	e.mu.Unlock()
	e.base.SetExited(status, at)
}

func (e *Exec) closePidfd() {
	if e.pidfd >= 0 {
		unix.Close(e.pidfd)
		e.pidfd = -1
	}
}

// Start runs runc exec --detach and records the pid. The process may exit before Start
// returns; its exit is the caller's to match by pid.
func (e *Exec) Start(ctx context.Context) (err error) {
	e.ops.Lock()
	defer e.ops.Unlock()
	e.mu.Lock()
	if e.failed {
		e.mu.Unlock()
		return fmt.Errorf("start: exec %s failed to start before: %w", e.id, errdefs.ErrFailedPrecondition)
	}
	if err := e.checkLocked(opStart); err != nil {
		e.mu.Unlock()
		return err
	}
	e.mu.Unlock()
	defer func() {
		if err != nil {
			e.mu.Lock()
			e.failed = true
			e.release()
			e.mu.Unlock()
		}
	}()
	p := e.parent
	// Removed once read: the bundle lives in tmpfs as long as the container runs, and exec
	// probes would leave a file there every few seconds.
	pidFile := filepath.Join(p.Bundle, bundle.ExecPidFile(e.id))
	defer os.Remove(pidFile)
	opts := &runc.ExecOpts{Detach: true, PidFile: pidFile}
	// A logging binary gets the exec's id as CONTAINER_ID, as from containerd's shim.
	if e.stdio.Terminal {
		c, err := stdio.NewConsole(e.stdio, e.id, p.namespace, p.monitor)
		if err != nil {
			return err
		}
		opts.ConsoleSocket = c.Socket()
		// Under mu: a ResizePty or the exit's record may read them while runc exec runs.
		e.mu.Lock()
		e.console, e.io = c, c
		e.mu.Unlock()
	} else {
		pipes, err := stdio.Open(e.stdio, e.id, p.namespace, p.opts.IoUID, p.opts.IoGID, p.monitor)
		if err != nil {
			return err
		}
		opts.IO = pipes
		e.mu.Lock()
		e.io = pipes
		e.mu.Unlock()
	}
	defer func() {
		if err != nil {
			e.closeIO()
		}
	}()
	mark := logEnd(p.runtime.Log)
	if err := p.runtime.Exec(ctx, p.id, *e.spec, opts); err != nil {
		return p.runtimeError(err, "exec", mark)
	}
	if e.console != nil {
		if err := e.console.Attach(); err != nil {
			return err
		}
	}
	pid, err := runc.ReadPidFile(opts.PidFile)
	if err != nil {
		return fmt.Errorf("read exec pid: %w", err)
	}
	// From here on the pid cannot name a newer process. One that exited and was reaped already
	// gives ESRCH, unless its pid was taken again in the moment since runc exec returned: that
	// moment is what is left of the reference's window, which lasts as long as the exec.
	fd, ferr := unix.PidfdOpen(pid, 0)
	e.mu.Lock()
	e.pid = pid
	switch {
	case ferr == nil && e.exit == nil:
		e.pidfd = fd
	case ferr == nil:
		unix.Close(fd)
	case errors.Is(ferr, unix.ESRCH):
		e.gone = true
	}
	e.advance(opStart)
	e.mu.Unlock()
	return nil
}

// Kill signals the exec process. It is not runc's to signal: runc knows containers, and an
// exec is one process whose pid the shim holds.
func (e *Exec) Kill(ctx context.Context, signal uint32) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.checkLocked(opKill); err != nil {
		return err
	}
	// Recording the exit takes mu, so a process marked running here has not been recorded as
	// exited. It may have been reaped already, though, and its pid reused: containerd's runc
	// shim signals the pid and has that window. The pidfd, opened before the exit could be
	// claimed, names this process and no other.
	var err error
	switch {
	case e.gone:
		err = unix.ESRCH
	case e.pidfd >= 0:
		err = unix.PidfdSendSignal(e.pidfd, unix.Signal(signal), nil, 0)
	default:
		err = unix.Kill(e.pid, unix.Signal(signal))
	}
	if err != nil {
		// Only a process that is gone is NotFound: callers read it as "stop trying".
		switch {
		case errors.Is(err, unix.ESRCH):
			return fmt.Errorf("kill exec %s: %v: %w", e.id, err, errdefs.ErrNotFound)
		case errors.Is(err, unix.EINVAL):
			return fmt.Errorf("kill exec %s with signal %d: %v: %w", e.id, signal, err, errdefs.ErrInvalidArgument)
		}
		return fmt.Errorf("kill exec %s: %w", e.id, err)
	}
	return nil
}

// Delete forgets the exec process once it has exited (or never started), after its output
// was delivered.
func (e *Exec) Delete(ctx context.Context) error {
	e.ops.Lock()
	defer e.ops.Unlock()
	e.mu.Lock()
	if err := e.checkLocked(opDelete); err != nil {
		e.mu.Unlock()
		return err
	}
	e.advance(opDelete)
	e.closePidfd()
	e.mu.Unlock()
	e.closeIO()
	return nil
}

// Resize sets the size of the exec's terminal, a no-op without one (base.Resize). An exec that
// has exited is refused, as containerd's shim refuses it (execStoppedState.Resize), terminal or
// not. Its error has no class there (Unknown); here it is FailedPrecondition, as every refusal
// of a state is, Unknown being kept for runc's own failures.
func (e *Exec) Resize(width, height uint32) error {
	if err := e.check(opResize); err != nil {
		return err
	}
	return e.base.Resize(width, height)
}
