// SPDX-License-Identifier: Apache-2.0

// The Task service over ttrpc (since step 02). Mirrors the ttrpc server of containerd v2.4
// pkg/shim/shim.go (serve, with UnixSocketRequireSameUser) and the skeleton of
// cmd/containerd-shim-runc-v2/task/service.go; RPCs of later steps answer Unimplemented.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/ttrpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"
)

const version = "shimwalk step 02-ttrpc"

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

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	svc := &service{id: o.id, namespace: o.namespace, log: logger, shutdown: stop}
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
	// Not ctx: the Shutdown RPC cancels ctx, and ttrpc closes a connection whose context ends,
	// which would drop the reply to that very Shutdown. srv.Shutdown below ends Serve.
	go func() { served <- srv.Serve(context.Background(), ln) }()
	logger.Info("serving", "namespace", o.namespace, "id", o.id, "socket", path, "pid", os.Getpid())

	select {
	case sig := <-signals:
		logger.Info("stopping", "signal", sig.String())
	case <-ctx.Done():
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
	if err := s.checkID(r.ID); err != nil {
		return nil, err
	}
	// The shim knows the id, but no task has been created: that arrives in step 03.
	return nil, status.Errorf(codes.NotFound, "task %q has not been created", r.ID)
}

func (s *service) Shutdown(ctx context.Context, r *taskapi.ShutdownRequest) (*emptypb.Empty, error) {
	if err := s.checkID(r.ID); err != nil {
		return nil, err
	}
	s.shutdown()
	return &emptypb.Empty{}, nil
}

func (s *service) Create(context.Context, *taskapi.CreateTaskRequest) (*taskapi.CreateTaskResponse, error) {
	return nil, notYet("Create", "step 03-runc-create")
}

func (s *service) Start(context.Context, *taskapi.StartRequest) (*taskapi.StartResponse, error) {
	return nil, notYet("Start", "step 03-runc-create")
}

func (s *service) Delete(context.Context, *taskapi.DeleteRequest) (*taskapi.DeleteResponse, error) {
	return nil, notYet("Delete", "step 03-runc-create")
}

func (s *service) Kill(context.Context, *taskapi.KillRequest) (*emptypb.Empty, error) {
	return nil, notYet("Kill", "step 03-runc-create")
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
