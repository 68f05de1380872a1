// SPDX-License-Identifier: Apache-2.0

// The Task service over ttrpc (since step 02; Create, Start, Kill, Delete and State since step 03;
// exits collected since step 04; Wait, the running map and task events since step 05).
// Mirrors the ttrpc server of containerd v2.4 pkg/shim/shim.go (serve, with
// UnixSocketRequireSameUser) and cmd/containerd-shim-runc-v2/task/service.go; RPCs of later
// steps answer Unimplemented.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"
	runc "github.com/containerd/go-runc"
	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const version = "shimwalk step 05-wait-events"

func serve(o options) error {
	logger, logFile, err := openLog(o.debug)
	if err != nil {
		return err
	}
	defer logFile.Close()
	ln, err := inheritedListener()
	if err != nil {
		return err
	}
	path := ln.Addr().String()

	// Before anything can fork: a container init orphaned earlier would not be ours to reap.
	if err := becomeSubreaper(); err != nil {
		return err
	}
	// ctx ends the reap loop and handleExits, and only when serve returns: the RPCs still in
	// flight after a Shutdown drain first, and a runc command one of them runs needs the reap
	// loop for its exit. The Shutdown RPC ends only the wait below, through requested.
	ctx, stop := context.WithCancel(context.Background())
	requested, shutdown := context.WithCancel(context.Background())
	defer shutdown()
	reaper := newReaper()
	runc.Monitor = reaper
	var loops sync.WaitGroup
	defer func() { stop(); loops.Wait() }() // the loops below end with ctx
	loops.Add(2)
	go func() { defer loops.Done(); reaper.run(ctx) }()

	// Caught from here to the very end: a SIGTERM during the final flush of events below must
	// not kill the shim with the last TaskDelete still queued.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(signals)
	events := newPublisher(os.Getenv("TTRPC_ADDRESS"), o.namespace, logger)
	go events.run() // ends in events.close, below
	defer func() {
		// Flush what is queued, TaskDelete above all, before the shim goes.
		flush, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		events.close(flush)
	}()
	svc := &service{
		id: o.id, namespace: o.namespace, log: logger, shutdown: shutdown, events: events,
		running: map[int]*initProcess{}, starting: map[*heldExits]struct{}{},
	}
	exits := reaper.subscribe()
	defer reaper.unsubscribe(exits)
	go func() { defer loops.Done(); svc.handleExits(ctx, exits) }()
	callers := newConns()
	srv, err := ttrpc.NewServer(
		// The socket is already 0600 in a 0700 directory; the credential check is the second
		// lock, and the one that still holds if someone loosens the file modes.
		ttrpc.WithServerHandshaker(callers.handshaker(ttrpc.UnixSocketRequireSameUser())),
		ttrpc.WithUnaryServerInterceptor(svc.intercept),
	)
	if err != nil {
		return fmt.Errorf("new ttrpc server: %w", err)
	}
	taskapi.RegisterTTRPCTaskService(srv, svc)

	served := make(chan error, 1)
	// Not requested: the Shutdown RPC cancels it, and ttrpc closes a connection whose context ends,
	// which would drop the reply to that very Shutdown. srv.Shutdown below ends Serve.
	go func() { served <- srv.Serve(context.Background(), ln) }()
	logger.Info("serving", "namespace", o.namespace, "id", o.id, "socket", path, "pid", os.Getpid())

	select {
	case sig := <-signals:
		logger.Info("stopping", "signal", sig.String())
	case <-requested.Done():
		logger.Info("stopping", "reason", "shutdown requested")
		// The Shutdown reply may still be queued on a connection ttrpc would take for idle:
		// let its caller read it and hang up first.
		callers.waitHangUp(2 * time.Second)
	case err := <-served:
		logger.Error("serve", "err", err)
	}
	// Let replies in flight, the Shutdown reply among them, reach their callers.
	grace, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := srv.Shutdown(grace); err != nil {
		srv.Close()
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove socket: %w", err)
	}
	logger.Info("stopped")
	return nil
}

// service implements containerd.task.v2.Task for one task id.
type service struct {
	id, namespace string
	log           *slog.Logger
	shutdown      func()

	events *publisher

	// mu guards the fields below. Create holds it across runc create, and Delete across runc
	// delete, so those two never interleave. It does not keep a Delete out of a Start: Start
	// releases it while runc start runs, and what a Delete does then is runc's to sort out (the
	// Start fails, or the Delete is refused as the task now runs). The reap loop hands runc's
	// own exits back without it (only handleExits takes it), so a runc command run with mu held
	// still gets its exit.
	mu   sync.Mutex
	init *initProcess // nil until Create and after Delete
	// running maps a pid to the process whose exit is still to come.
	running map[int]*initProcess
	// starting holds back, for each Start in flight, the exits of its process, so that no
	// TaskExit overtakes its TaskStart. Each Start has its own: a second Start of the same task
	// must not drop what the first is holding.
	starting map[*heldExits]struct{}
}

// heldExits are the exits of pid that arrived while one Start was in flight.
type heldExits struct {
	pid   int
	exits []exit
}

var _ taskapi.TTRPCTaskService = (*service)(nil)

// intercept turns a request that does not decode into InvalidArgument (ttrpc would say Unknown),
// and a panic in a handler into an error: one bad request must not take down every container
// the shim looks after.
func (s *service) intercept(ctx context.Context, unmarshal ttrpc.Unmarshaler, info *ttrpc.UnaryServerInfo, method ttrpc.Method) (resp any, err error) {
	defer func() {
		if r := recover(); r != nil {
			s.log.Error("panic in handler", "method", info.FullMethod, "panic", r)
			err = status.Errorf(codes.Internal, "%s: internal error", info.FullMethod)
		}
	}()
	decode := func(v any) error {
		if err := unmarshal(v); err != nil {
			return status.Errorf(codes.InvalidArgument, "%s: malformed request: %v", info.FullMethod, err)
		}
		return nil
	}
	begin := time.Now()
	resp, err = method(ctx, decode)
	s.log.Debug("rpc", "method", info.FullMethod, "took", time.Since(begin), "err", err)
	return resp, err
}

// checkID answers for a request that names a task: this shim serves exactly one.
func (s *service) checkID(id string) error {
	switch id {
	case "":
		return status.Error(codes.InvalidArgument, "task id is required")
	case s.id:
		return nil
	}
	return status.Errorf(codes.NotFound, "task %q not found: this shim serves %q", id, s.id)
}

func notYet(method, step string) error {
	return status.Errorf(codes.Unimplemented, "%s: added in %s", method, step)
}

func (s *service) Connect(ctx context.Context, r *taskapi.ConnectRequest) (*taskapi.ConnectResponse, error) {
	return &taskapi.ConnectResponse{ShimPid: uint32(os.Getpid()), Version: version}, nil
}

func (s *service) State(ctx context.Context, r *taskapi.StateRequest) (*taskapi.StateResponse, error) {
	p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	resp := &taskapi.StateResponse{
		ID: p.id, Bundle: p.bundle, Pid: uint32(p.pid),
		Stdin: p.stdin, Stdout: p.stdout, Stderr: p.stderr,
	}
	if e := s.exitOf(p); e != nil {
		// The shim saw the exit itself: no need to ask runc.
		resp.Status, resp.ExitStatus, resp.ExitedAt = task.Status_STOPPED, uint32(e.status), timestamppb.New(e.at)
		return resp, nil
	}
	if resp.Status, err = p.status(ctx); err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	if resp.Status == task.Status_STOPPED {
		// runc sees the process gone, but the reap loop has not recorded its exit yet. Until it
		// has, the task counts as running: STOPPED promises an exit status.
		resp.Status = task.Status_RUNNING
	}
	return resp, nil
}

// exitOf returns the recorded exit of p, or nil while it runs.
func (s *service) exitOf(p *initProcess) *exit {
	s.mu.Lock()
	defer s.mu.Unlock()
	return p.exited
}

// handleExits turns reaped pids into process exits through the running map. Every exit not
// in the map is an orphan the shim adopted as subreaper; reaping it was the whole job.
func (s *service) handleExits(ctx context.Context, q *exitQueue) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.ready:
		}
		for _, e := range q.take() {
			s.mu.Lock()
			held := false
			for h := range s.starting {
				if h.pid == e.pid {
					h.exits = append(h.exits, e)
					held = true
				}
			}
			if held {
				s.log.Info("exit held until its start is announced", "pid", e.pid, "status", e.status)
				tracePoint("shim", "", false, "exit %d held: its Start has not sent TaskStart yet", e.status)
			} else {
				s.processExit(e)
			}
			s.mu.Unlock()
		}
	}
}

// processExit records e for the process it belongs to, if any, and publishes TaskExit.
// Call it with mu held.
func (s *service) processExit(e exit) {
	p, ok := s.running[e.pid]
	if !ok {
		s.log.Debug("reaped", "pid", e.pid, "status", e.status)
		return
	}
	delete(s.running, e.pid)
	p.setExited(e)
	s.log.Info("init exited", "pid", e.pid, "status", e.status)
	s.events.publish(topicExit, &eventstypes.TaskExit{
		ContainerID: p.id, ID: p.id, Pid: uint32(e.pid),
		ExitStatus: uint32(e.status), ExitedAt: timestamppb.New(e.at),
	})
}

// process returns the init process for a request naming id and execID.
func (s *service) process(id, execID string) (*initProcess, error) {
	if err := s.checkID(id); err != nil {
		return nil, err
	}
	if execID != "" {
		return nil, notYet("exec processes", "final")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.init == nil {
		return nil, status.Errorf(codes.NotFound, "task %q: %v", id, errNotCreated)
	}
	return s.init, nil
}

func (s *service) Shutdown(ctx context.Context, r *taskapi.ShutdownRequest) (*emptypb.Empty, error) {
	if err := s.checkID(r.ID); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Like containerd's shim, stay while a task exists: containerd calls Shutdown after every
	// Delete, and only once the last task is gone may the shim go.
	if s.init != nil {
		return &emptypb.Empty{}, nil
	}
	s.shutdown()
	return &emptypb.Empty{}, nil
}

func (s *service) Create(ctx context.Context, r *taskapi.CreateTaskRequest) (*taskapi.CreateTaskResponse, error) {
	if err := s.checkID(r.ID); err != nil {
		return nil, err
	}
	switch {
	case r.Terminal:
		return nil, notYet("Create with a terminal", "final")
	case r.Checkpoint != "":
		return nil, notYet("Create from a checkpoint", "final")
	case !filepath.IsAbs(r.Bundle):
		return nil, status.Errorf(codes.InvalidArgument, "bundle %q is not an absolute path", r.Bundle)
	}
	if st, err := os.Stat(filepath.Join(r.Bundle, "config.json")); err != nil || !st.Mode().IsRegular() {
		return nil, status.Errorf(codes.InvalidArgument, "bundle %s has no config.json", r.Bundle)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.init != nil {
		return nil, status.Errorf(codes.AlreadyExists, "task %q already exists", r.ID)
	}
	p, err := createInit(ctx, s.namespace, r)
	if err != nil {
		return nil, status.Errorf(codes.Unknown, "%v", err)
	}
	s.init = p
	// From here on an exit of this pid is the container's. One may be reaped already: runc init
	// waits for runc start, but something outside can kill it during runc create (containerd
	// issue 9103). That exit waits in handleExits for mu, which Create holds until the pid is in
	// running, so it is claimed, not dropped.
	s.running[p.pid] = p
	s.log.Info("created", "pid", p.pid)
	s.events.publish(topicCreate, &eventstypes.TaskCreate{
		ContainerID: r.ID, Bundle: r.Bundle, Rootfs: r.Rootfs, Pid: uint32(p.pid), Checkpoint: r.Checkpoint,
		IO: &eventstypes.TaskIO{Stdin: r.Stdin, Stdout: r.Stdout, Stderr: r.Stderr, Terminal: r.Terminal},
	})
	return &taskapi.CreateTaskResponse{Pid: uint32(p.pid)}, nil
}

func (s *service) Start(ctx context.Context, r *taskapi.StartRequest) (*taskapi.StartResponse, error) {
	p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	// A process that exits at once (/bin/true) can be reaped before runc start even returns.
	// Hold its exit until TaskStart is out, then handle it: exactly once, and in order.
	h := &heldExits{pid: p.pid}
	s.mu.Lock()
	s.starting[h] = struct{}{}
	s.mu.Unlock()
	startErr := p.start(ctx)
	if startErr == nil {
		s.log.Info("started", "pid", p.pid)
		s.events.publish(topicStart, &eventstypes.TaskStart{ContainerID: p.id, Pid: uint32(p.pid)})
	}
	s.mu.Lock()
	delete(s.starting, h)
	// Another Start may have held the same exit and handled it already: processExit then finds
	// the pid no longer running and does nothing.
	for _, e := range h.exits {
		tracePoint("shim", "", false, "TaskStart is out: the held exit %d goes on", e.status)
		s.processExit(e)
	}
	s.mu.Unlock()
	if startErr != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%v", startErr)
	}
	return &taskapi.StartResponse{Pid: uint32(p.pid)}, nil
}

func (s *service) Kill(ctx context.Context, r *taskapi.KillRequest) (*emptypb.Empty, error) {
	p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	if r.Signal == 0 || r.Signal > 64 {
		return nil, status.Errorf(codes.InvalidArgument, "signal %d is not a signal", r.Signal)
	}
	if err := p.kill(ctx, r.Signal, r.All); err != nil {
		// NotFound tells the caller the task is gone and further kills are pointless; any
		// other failure leaves a container that may still run, which the caller must hear.
		if errors.Is(err, errGone) {
			return nil, status.Errorf(codes.NotFound, "%v", err)
		}
		return nil, status.Errorf(codes.Unknown, "%v", err)
	}
	return &emptypb.Empty{}, nil
}

func (s *service) Delete(ctx context.Context, r *taskapi.DeleteRequest) (*taskapi.DeleteResponse, error) {
	p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	if s.exitOf(p) == nil {
		if st, err := p.status(ctx); err == nil && st != task.Status_STOPPED && st != task.Status_CREATED {
			return nil, status.Errorf(codes.FailedPrecondition, "task %q is %s: kill it first", r.ID, st)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.init != p {
		return nil, status.Errorf(codes.NotFound, "task %q: %v", r.ID, errNotCreated)
	}
	// A Delete already under way may be waiting below for the exit, with mu released. A second
	// one must not run runc delete again nor publish a second TaskDelete: for it, as for
	// containerd's shim once the first has finished, the task is gone.
	if p.deleting {
		return nil, status.Errorf(codes.NotFound, "task %q is being deleted", r.ID)
	}
	p.deleting = true
	if err := p.delete(ctx); err != nil {
		p.deleting = false
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	if p.exited == nil {
		// Deleted before it ever ran: runc delete killed it. Its exit is on the way through the
		// reap loop, which needs mu to deliver it.
		s.mu.Unlock()
		select {
		case <-p.done:
		case <-ctx.Done():
		}
		s.mu.Lock()
		if p.exited == nil {
			// Deleted in runc, not yet here: a later Delete waits for the exit again.
			p.deleting = false
			return nil, status.Errorf(codes.DeadlineExceeded, "task %q: exit not seen after runc delete", r.ID)
		}
	}
	s.init = nil
	delete(s.running, p.pid)
	s.log.Info("deleted", "pid", p.pid)
	resp := &taskapi.DeleteResponse{Pid: uint32(p.pid), ExitStatus: uint32(p.exited.status), ExitedAt: timestamppb.New(p.exited.at)}
	s.events.publish(topicDelete, &eventstypes.TaskDelete{
		ContainerID: p.id, Pid: resp.Pid, ExitStatus: resp.ExitStatus, ExitedAt: resp.ExitedAt,
	})
	return resp, nil
}

// Wait blocks until the task has exited. All waiters sleep on the same closed-on-exit channel,
// so any number of them wake together, and a Wait after the exit returns at once.
func (s *service) Wait(ctx context.Context, r *taskapi.WaitRequest) (*taskapi.WaitResponse, error) {
	p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	e := s.exitOf(p)
	return &taskapi.WaitResponse{ExitStatus: uint32(e.status), ExitedAt: timestamppb.New(e.at)}, nil
}

func (s *service) Pids(context.Context, *taskapi.PidsRequest) (*taskapi.PidsResponse, error) {
	return nil, notYet("Pids", "final")
}

func (s *service) Pause(context.Context, *taskapi.PauseRequest) (*emptypb.Empty, error) {
	return nil, notYet("Pause", "final")
}

func (s *service) Resume(context.Context, *taskapi.ResumeRequest) (*emptypb.Empty, error) {
	return nil, notYet("Resume", "final")
}

func (s *service) Checkpoint(context.Context, *taskapi.CheckpointTaskRequest) (*emptypb.Empty, error) {
	return nil, notYet("Checkpoint", "final")
}

func (s *service) Exec(context.Context, *taskapi.ExecProcessRequest) (*emptypb.Empty, error) {
	return nil, notYet("Exec", "final")
}

func (s *service) ResizePty(context.Context, *taskapi.ResizePtyRequest) (*emptypb.Empty, error) {
	return nil, notYet("ResizePty", "final")
}

func (s *service) CloseIO(context.Context, *taskapi.CloseIORequest) (*emptypb.Empty, error) {
	return nil, notYet("CloseIO", "final")
}

func (s *service) Update(context.Context, *taskapi.UpdateTaskRequest) (*emptypb.Empty, error) {
	return nil, notYet("Update", "final")
}

func (s *service) Stats(context.Context, *taskapi.StatsRequest) (*taskapi.StatsResponse, error) {
	return nil, notYet("Stats", "final")
}
