// SPDX-License-Identifier: Apache-2.0

// The Task service over ttrpc (since step 02; Create, Start, Kill, Delete and State since step 03;
// exits collected since step 04).
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

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"
	runc "github.com/containerd/go-runc"
	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const version = "shimwalk step 04-subreaper"

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

	svc := &service{id: o.id, namespace: o.namespace, log: logger, shutdown: shutdown}
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

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(signals)
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

	// mu guards init. Create and Delete hold it across their runc command, so those two never
	// interleave. Start and Kill do not take it while runc runs, so a Delete can come in the
	// middle of a Start: runc sorts that out (the Start fails, or the Delete is refused because
	// the task now runs).
	mu   sync.Mutex
	init *initProcess // guarded by mu; nil until Create and after Delete
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

// handleExits records the exit of the container's init. Every other exit is an orphan the
// shim adopted as subreaper; reaping it was the whole job.
func (s *service) handleExits(ctx context.Context, q *exitQueue) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.ready:
		}
		for _, e := range q.take() {
			s.mu.Lock()
			if s.init != nil && s.init.pid == e.pid && s.init.exited == nil {
				s.init.exited = &e
				s.log.Info("init exited", "pid", e.pid, "status", e.status)
				tracePoint("shim", "", false, "the init's exit, status %d, kept for State", e.status)
			} else {
				s.log.Debug("reaped", "pid", e.pid, "status", e.status)
			}
			s.mu.Unlock()
		}
	}
}

// unknownExitStatus is what containerd reports when an exit status cannot be known.
const unknownExitStatus = 255

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
	s.log.Info("created", "pid", p.pid)
	return &taskapi.CreateTaskResponse{Pid: uint32(p.pid)}, nil
}

func (s *service) Start(ctx context.Context, r *taskapi.StartRequest) (*taskapi.StartResponse, error) {
	p, err := s.process(r.ID, r.ExecID)
	if err != nil {
		return nil, err
	}
	if err := p.start(ctx); err != nil {
		return nil, status.Errorf(codes.FailedPrecondition, "%v", err)
	}
	s.log.Info("started", "pid", p.pid)
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
		st, err := p.status(ctx)
		if err == nil && st == task.Status_STOPPED {
			// runc sees the init gone, but the reap loop has not recorded its exit yet. Deleting
			// now would report 255 for a container that exited normally, and log its real exit
			// as an orphan's. Like State, count the task as running until the exit is recorded
			// (step 05 waits for it instead).
			return nil, status.Errorf(codes.FailedPrecondition, "task %q has exited, but its exit status is not collected yet: try again", r.ID)
		}
		if err == nil && st != task.Status_CREATED {
			return nil, status.Errorf(codes.FailedPrecondition, "task %q is %s: kill it first", r.ID, st)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.init != p {
		return nil, status.Errorf(codes.NotFound, "task %q: %v", r.ID, errNotCreated)
	}
	if err := p.delete(ctx); err != nil {
		return nil, status.Errorf(codes.Internal, "%v", err)
	}
	s.init = nil
	s.log.Info("deleted", "pid", p.pid)
	if p.exited == nil {
		// Deleted before it ever ran: runc delete killed it, and that exit has not been reaped
		// yet. Report the status as unknown rather than wait for it.
		return &taskapi.DeleteResponse{Pid: uint32(p.pid), ExitStatus: unknownExitStatus, ExitedAt: timestamppb.Now()}, nil
	}
	return &taskapi.DeleteResponse{Pid: uint32(p.pid), ExitStatus: uint32(p.exited.status), ExitedAt: timestamppb.New(p.exited.at)}, nil
}

func (s *service) Wait(context.Context, *taskapi.WaitRequest) (*taskapi.WaitResponse, error) {
	return nil, notYet("Wait", "step 05-wait-events")
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
