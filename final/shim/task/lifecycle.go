// SPDX-License-Identifier: Apache-2.0

// The life cycle RPCs: Create, Exec, Start and Delete add and remove containers and processes,
// and with them the exits to come (exits.go). They mirror containerd v2.4
// cmd/containerd-shim-runc-v2/task/service.go Create, Start, Exec and Delete, and
// runc/container.go NewContainer.

package task

import (
	"context"
	"errors"
	"fmt"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/errdefs"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/shimwalk/shimwalk/final/internal/bundle"
	"github.com/shimwalk/shimwalk/final/internal/identifiers"
	"github.com/shimwalk/shimwalk/final/shim/cgroups"
	"github.com/shimwalk/shimwalk/final/shim/events"
	"github.com/shimwalk/shimwalk/final/shim/process"
	"github.com/shimwalk/shimwalk/final/shim/stdio"
)

// Create makes a container: its rootfs mounted, its stdio wired, its init created by runc.
func (s *Service) Create(ctx context.Context, r *taskapi.CreateTaskRequest) (*taskapi.CreateTaskResponse, error) {
	if err := identifiers.Validate("task id", r.ID); err != nil {
		return nil, rpcError(err)
	}
	opts, _, err := process.ParseOptions(r.Options)
	if err != nil {
		return nil, rpcError(err)
	}
	s.mu.Lock()
	for {
		if s.containers[r.ID] != nil {
			s.mu.Unlock()
			return nil, rpcError(fmt.Errorf("task %s: %w", r.ID, errdefs.ErrAlreadyExists))
		}
		inFlight, ok := s.creating[r.ID]
		if !ok {
			break
		}
		// A Create of this id is in flight, or being undone after its caller's deadline passed:
		// a retry waits for its outcome rather than meet AlreadyExists from a Create that is
		// about to leave nothing. containerd's runc shim holds no lock across runc create, and
		// lets two Creates of one id race (docs/deploy.md).
		s.mu.Unlock()
		select {
		case <-inFlight:
		case <-ctx.Done():
			return nil, rpcError(fmt.Errorf("task %s: waiting for the Create in flight: %w", r.ID, ctx.Err()))
		}
		s.mu.Lock()
		if s.stopping {
			// The Create waited for left nothing and ended the shim: a task made now would be
			// served by nobody. (A Create that comes once the shim stops is refused by the
			// server; this one was let in before.)
			s.mu.Unlock()
			return nil, rpcError(fmt.Errorf("task %s: the shim is shutting down: %w", r.ID, errdefs.ErrUnavailable))
		}
	}
	done := make(chan struct{})
	s.creating[r.ID] = done
	// runc create returns after the init is there; it may be killed and reaped before its pid
	// is read (containerd issue 9103), and that exit must reach it.
	s.pidPending()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.creating, r.ID)
		close(done)
		s.pidKnown()
		// A Create whose caller went away (containerd killed mid-call) has been undone. If that
		// leaves this shim nothing to serve, nobody may ever ask it to go: containerd 1.6 does
		// not end a task-less shim it finds after a restart. It goes by itself, and a restarted
		// containerd cleans up after it as after any dead shim. Canceled, not a deadline: ttrpc
		// cancels a request only when its connection closes, while a caller whose deadline
		// passed is still there to retry or ask for Shutdown.
		if len(s.containers) > 0 {
			s.shutdownAsked = false // a Shutdown that waited for this Create would find a task
		} else if len(s.creating) == 0 {
			switch {
			case errors.Is(ctx.Err(), context.Canceled):
				s.cfg.Log.Info("create abandoned by its caller; no task left, shutting down", "id", r.ID)
				s.stop()
			case s.shutdownAsked:
				s.cfg.Log.Info("create undone; shutdown was asked for and no task is left", "id", r.ID)
				s.stop()
			}
		}
		s.unlock()
	}()

	// Before anything is written to the bundle: through a symlink it would land elsewhere.
	if err := bundle.Check(r.Bundle); err != nil {
		return nil, rpcError(err)
	}
	// An exit.json left by an earlier task in this bundle must not pass for this one's.
	if err := bundle.RemoveExit(r.Bundle); err != nil {
		return nil, rpcError(fmt.Errorf("remove old exit.json: %w", err))
	}
	// Before runc create: should this shim die while runc runs, the delete action must drive
	// the same runc binary and root to find what runc made.
	if err := bundle.SaveOptions(r.Bundle, opts); err != nil {
		return nil, rpcError(fmt.Errorf("record runtime options: %w", err))
	}
	// After the record, which keeps the options as containerd sent them: the delete action
	// fills in its own root the same way.
	if opts.Root == "" {
		opts.Root = s.cfg.RuncRoot
	}
	p, err := process.NewInit(ctx, process.CreateConfig{
		ID: r.ID, Bundle: r.Bundle, Namespace: s.cfg.Namespace, Rootfs: r.Rootfs,
		Stdio:      stdio.Config{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal},
		Checkpoint: r.Checkpoint, ParentCheckpoint: r.ParentCheckpoint,
		Options: opts, Monitor: s.cfg.Reaper,
	})
	if err != nil {
		return nil, rpcError(err)
	}
	// Without the watch, a kill that spares the init is never reported. Added before the
	// container can be seen: a Delete that came first would otherwise leave the watch behind.
	if m, ok := p.MemoryCgroup(); ok && s.cfg.OOM != nil {
		if err := s.cfg.OOM.Add(r.ID, m); err != nil {
			s.cfg.Log.Warn("watch for oom", "id", r.ID, "err", err)
		}
	}
	// On cgroup v2 the host's controllers are enabled down to the container's cgroup, as
	// containerd's runc shim does at Create; a failure is logged, as there.
	if pid := p.Pid(); pid > 0 {
		if err := cgroups.EnableControllersOf(cgroups.Root, pid); err != nil {
			s.cfg.Log.Warn("enable cgroup controllers", "id", r.ID, "err", err)
		}
	}
	c := &container{id: r.ID, init: p, execs: map[string]*process.Exec{}}
	s.mu.Lock()
	if abandoned := s.shutdownAsked || errors.Is(ctx.Err(), context.Canceled); abandoned {
		// Its caller gave up on it (went away, or asked the shim to go once the Create had
		// failed for it): a task added now would be one nobody serves or ever deletes.
		s.mu.Unlock()
		s.undoCreate(c)
		return nil, rpcError(fmt.Errorf("task %s: created after its caller gave up on it: %w", r.ID, errdefs.ErrUnavailable))
	}
	s.containers[r.ID] = c
	// From here an exit of this pid is the container's; one reaped before is claimed, after
	// TaskCreate. A container to be restored has no process before Start.
	if pid := p.Pid(); pid > 0 {
		s.running[pid] = running{c: c}
	}
	s.cfg.Events.Publish(events.TopicCreate, &eventstypes.TaskCreate{
		ContainerID: r.ID, Bundle: r.Bundle, Rootfs: r.Rootfs, Pid: uint32(p.Pid()), Checkpoint: r.Checkpoint,
		IO: &eventstypes.TaskIO{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal},
	})
	s.claim(p.Pid())
	s.mu.Unlock() // the deferred unlock kills what a claimed exit left behind
	s.cfg.Log.Info("created", "id", r.ID, "pid", p.Pid())
	return &taskapi.CreateTaskResponse{Pid: uint32(p.Pid())}, nil
}

// undoCreate removes what a Create made that is not to be served after all.
func (s *Service) undoCreate(c *container) {
	if s.cfg.OOM != nil {
		s.cfg.OOM.Remove(c.id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.init.Delete(ctx); err != nil {
		s.cfg.Log.Error("undo create", "id", c.id, "err", err)
	}
}

// Start starts the init or an exec.
func (s *Service) Start(ctx context.Context, r *taskapi.StartRequest) (*taskapi.StartResponse, error) {
	c, e, err := s.lookup(r.ID, r.ExecID)
	if err != nil {
		return nil, rpcError(err)
	}
	if e == nil {
		return s.startInit(ctx, c)
	}
	return s.startExec(ctx, c, e)
}

// startInit runs the init. A process that exits at once (/bin/true) can be reaped before runc
// start returns: its exit is held until TaskStart is out, then handled, exactly once.
func (s *Service) startInit(ctx context.Context, c *container) (*taskapi.StartResponse, error) {
	if c.init.Restoring() {
		return s.restoreInit(ctx, c)
	}
	pid := c.init.Pid()
	s.mu.Lock()
	held := s.holdExits(pid)
	s.mu.Unlock()
	err := c.init.Start(ctx)
	s.mu.Lock()
	defer s.unlock()
	if err == nil {
		s.cfg.Events.Publish(events.TopicStart, &eventstypes.TaskStart{ContainerID: c.id, Pid: uint32(pid)})
	}
	s.releaseExits(pid, held)
	if err != nil {
		return nil, rpcError(err)
	}
	return &taskapi.StartResponse{Pid: uint32(pid)}, nil
}

// restoreInit restores a container created from a checkpoint. As with an exec, the pid is
// known only once runc restore returns, and by then the restored process may have exited and
// been reaped: its exit is among those of unknown pids kept while such starts are in flight.
func (s *Service) restoreInit(ctx context.Context, c *container) (*taskapi.StartResponse, error) {
	s.mu.Lock()
	s.pidPending()
	s.mu.Unlock()
	err := c.init.Start(ctx)
	s.mu.Lock()
	defer s.unlock()
	defer s.pidKnown() // after the claim: the last one out drops what nobody claimed
	if err != nil {
		return nil, rpcError(err)
	}
	pid := c.init.Pid()
	if m, ok := c.init.MemoryCgroup(); ok && s.cfg.OOM != nil {
		if err := s.cfg.OOM.Add(c.id, m); err != nil {
			s.cfg.Log.Warn("watch for oom", "id", c.id, "err", err)
		}
	}
	s.running[pid] = running{c: c}
	s.cfg.Events.Publish(events.TopicStart, &eventstypes.TaskStart{ContainerID: c.id, Pid: uint32(pid)})
	s.claim(pid)
	return &taskapi.StartResponse{Pid: uint32(pid)}, nil
}

// startExec runs an exec. Its pid is known only once runc exec returns, and by then the process
// may have exited and been reaped: exits of unknown pids are kept while exec starts are in
// flight, and claimed here.
//
// The Start counts as a running exec from the first moment (containerd issue 10589): an init
// that exits meanwhile has its TaskExit held until the Start has resolved, and a Start that
// comes after that exit is refused, though the exec itself could still be added.
func (s *Service) startExec(ctx context.Context, c *container, e *process.Exec) (*taskapi.StartResponse, error) {
	s.mu.Lock()
	if c.initExit != nil {
		s.mu.Unlock()
		return nil, rpcError(fmt.Errorf("start exec %s: the init of task %s is not running: %w", e.ID(), c.id, errdefs.ErrFailedPrecondition))
	}
	c.runningExecs++
	s.pidPending()
	s.mu.Unlock()
	err := e.Start(ctx)
	s.mu.Lock()
	defer s.unlock()
	defer s.pidKnown() // after the claim: the last one out drops what nobody claimed
	if err != nil {
		c.runningExecs--
		s.finishInit(c)
		return nil, rpcError(err)
	}
	pid := e.Pid()
	s.cfg.Events.Publish(events.TopicExecStarted, &eventstypes.TaskExecStarted{ContainerID: c.id, ExecID: e.ID(), Pid: uint32(pid)})
	s.running[pid] = running{c: c, exec: e}
	s.claim(pid)
	if c.initExit != nil {
		// It got in after the init had gone: it must not hold the init's exit for good.
		_ = e.Kill(context.Background(), 9)
	}
	return &taskapi.StartResponse{Pid: uint32(pid)}, nil
}

// Delete removes an exec, or a whole container once its init has stopped.
func (s *Service) Delete(ctx context.Context, r *taskapi.DeleteRequest) (*taskapi.DeleteResponse, error) {
	c, e, err := s.lookup(r.ID, r.ExecID)
	if err != nil {
		return nil, rpcError(err)
	}
	if e != nil {
		if err := e.Delete(ctx); err != nil {
			return nil, rpcError(err)
		}
		s.mu.Lock()
		delete(c.execs, e.ID())
		s.mu.Unlock()
		if x := e.Exited(); x != nil {
			return deleteResponse(e.Pid(), x), nil
		}
		// Never ran: nothing was killed, and containerd and its clients expect status 0 (and
		// the zero time) for an exec that was added and never started, or failed to start.
		return &taskapi.DeleteResponse{Pid: uint32(e.Pid()), ExitedAt: timestamppb.New(time.Time{})}, nil
	}
	p := c.init
	s.mu.Lock()
	if c.runningExecs > 0 {
		s.mu.Unlock()
		return nil, rpcError(fmt.Errorf("task %s still has %d running execs: %w", c.id, c.runningExecs, errdefs.ErrFailedPrecondition))
	}
	s.mu.Unlock()
	if err := p.Delete(ctx); err != nil {
		return nil, rpcError(err)
	}
	// A created task's init was killed by runc delete; its exit comes through the reap loop.
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		s.cfg.Log.Warn("deleted task's exit not seen", "id", c.id, "pid", p.Pid())
	}
	if s.cfg.OOM != nil {
		s.cfg.OOM.Remove(c.id)
	}
	s.mu.Lock()
	delete(s.containers, c.id)
	delete(s.running, p.Pid())
	resp := deleteResponse(p.Pid(), p.Exited())
	if p.Pid() == 0 {
		// Created from a checkpoint and never restored: as for an exec that never ran,
		// containerd's shim answers status 0 at the zero time.
		resp = &taskapi.DeleteResponse{ExitedAt: timestamppb.New(time.Time{})}
	}
	s.cfg.Events.Publish(events.TopicDelete, &eventstypes.TaskDelete{
		ContainerID: c.id, Pid: resp.Pid, ExitStatus: resp.ExitStatus, ExitedAt: resp.ExitedAt,
	})
	s.mu.Unlock()
	s.cfg.Log.Info("deleted", "id", c.id)
	return resp, nil
}

func deleteResponse(pid int, x *process.Exit) *taskapi.DeleteResponse {
	if x == nil {
		// Never seen to exit: what containerd reports for a process it had to kill.
		return &taskapi.DeleteResponse{Pid: uint32(pid), ExitStatus: 128 + 9, ExitedAt: timestamppb.Now()}
	}
	return &taskapi.DeleteResponse{Pid: uint32(pid), ExitStatus: uint32(x.Status), ExitedAt: timestamppb.New(x.At)}
}

// Exec adds an exec process to a running container; Start runs it.
func (s *Service) Exec(ctx context.Context, r *taskapi.ExecProcessRequest) (*emptypb.Empty, error) {
	if err := identifiers.Validate("exec id", r.ExecID); err != nil {
		return nil, rpcError(err)
	}
	spec, err := process.ParseProcessSpec(r.Spec)
	if err != nil {
		return nil, rpcError(err)
	}
	c, _, err := s.lookup(r.ID, "")
	if err != nil {
		return nil, rpcError(err)
	}
	e, err := c.init.NewExec(r.ExecID, spec, stdio.Config{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal})
	if err != nil {
		return nil, rpcError(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, taken := c.execs[r.ExecID]; taken {
		return nil, rpcError(fmt.Errorf("exec %s in task %s: %w", r.ExecID, r.ID, errdefs.ErrAlreadyExists))
	}
	c.execs[r.ExecID] = e
	s.cfg.Events.Publish(events.TopicExecAdded, &eventstypes.TaskExecAdded{ContainerID: r.ID, ExecID: r.ExecID})
	return &emptypb.Empty{}, nil
}
