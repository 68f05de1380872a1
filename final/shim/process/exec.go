// SPDX-License-Identifier: Apache-2.0

package process

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
	runc "github.com/containerd/go-runc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

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
}

// NewExec prepares an exec process in the container; Start runs it. Execs are refused once
// the container has stopped: its namespaces are gone.
func (p *Init) NewExec(execID string, spec *specs.Process, cfg stdio.Config) (*Exec, error) {
	if spec == nil || len(spec.Args) == 0 {
		return nil, fmt.Errorf("exec %s: the process spec has no args: %w", execID, errdefs.ErrInvalidArgument)
	}
	if st := p.Status(); st != task.Status_RUNNING {
		p.mu.Lock()
		defer p.mu.Unlock()
		return nil, p.stateError("exec")
	}
	e := &Exec{base: newBase(execID, cfg), parent: p, spec: spec}
	e.status = task.Status_CREATED
	return e, nil
}

// Start runs runc exec --detach and records the pid. The process may exit before Start
// returns; its exit is the caller's to match by pid.
func (e *Exec) Start(ctx context.Context) (err error) {
	e.ops.Lock()
	defer e.ops.Unlock()
	e.mu.Lock()
	if e.status != task.Status_CREATED {
		err := e.stateError("start")
		e.mu.Unlock()
		return err
	}
	e.mu.Unlock()
	p := e.parent
	// Not <id>.pid: exec ids are the caller's to choose, and "init" or "shim" would replace the
	// bundle's init.pid or shim.pid, which the delete action and containerd read once the shim
	// is gone. Removed once read: the bundle lives in tmpfs as long as the container runs, and
	// exec probes would leave a file there every few seconds.
	pidFile := filepath.Join(p.Bundle, "exec-"+e.id+".pid")
	defer os.Remove(pidFile)
	opts := &runc.ExecOpts{Detach: true, PidFile: pidFile}
	// A logging binary gets the exec's id as CONTAINER_ID, as from containerd's shim.
	if e.stdio.Terminal {
		c, err := stdio.NewConsole(e.stdio, e.id, p.Namespace, p.monitor)
		if err != nil {
			return err
		}
		e.console, e.io, opts.ConsoleSocket = c, c, c.Socket()
	} else {
		pipes, err := stdio.Open(e.stdio, e.id, p.Namespace, p.opts.IoUID, p.opts.IoGID, p.monitor)
		if err != nil {
			return err
		}
		e.io, opts.IO = pipes, pipes
	}
	defer func() {
		if err != nil {
			e.closeIO()
		}
	}()
	if err := p.runtime.Exec(ctx, p.id, *e.spec, opts); err != nil {
		return p.runtimeError(err, "exec")
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
	e.mu.Lock()
	e.pid = pid
	if e.status == task.Status_CREATED {
		e.status = task.Status_RUNNING
	}
	e.mu.Unlock()
	return nil
}

// Kill signals the exec process. It is not runc's to signal: runc knows containers, and an
// exec is one process whose pid the shim holds.
func (e *Exec) Kill(ctx context.Context, signal uint32) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch e.status {
	case task.Status_RUNNING:
	case task.Status_CREATED:
		return fmt.Errorf("kill: exec %s has not started: %w", e.id, errdefs.ErrFailedPrecondition)
	default:
		return e.finished("kill")
	}
	// Recording the exit takes mu, so a process marked running here has not been recorded as
	// exited. It may just have been reaped, though, and its pid reused in the moment between
	// the two: containerd's runc shim has the same window. A pidfd held from the start would
	// close it; runc exec gives only the pid.
	if err := unix.Kill(e.pid, unix.Signal(signal)); err != nil {
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
	if e.status != task.Status_STOPPED && e.status != task.Status_CREATED {
		err := e.stateError("delete")
		e.mu.Unlock()
		return err
	}
	e.status = deleted
	e.mu.Unlock()
	e.closeIO()
	return nil
}

// Resize sets the size of the exec's terminal, a no-op without one (base.Resize). An exec that
// has exited is refused, as containerd's shim refuses it (execStoppedState.Resize), terminal or
// not. Its error has no class there (Unknown); here it is FailedPrecondition, as every refusal
// of a state is, Unknown being kept for runc's own failures.
func (e *Exec) Resize(width, height uint32) error {
	e.mu.Lock()
	if e.status == task.Status_STOPPED {
		defer e.mu.Unlock()
		return e.stateError("resize")
	}
	e.mu.Unlock()
	return e.base.Resize(width, height)
}
