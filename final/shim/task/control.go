// SPDX-License-Identifier: Apache-2.0

// The RPCs on a process that exists: State, Wait, Kill, Pids, Pause, Resume, Checkpoint,
// Update, ResizePty, CloseIO and Stats look the process up, ask package process, and answer;
// none adds or removes one. They mirror the RPCs of the same names in containerd v2.4
// cmd/containerd-shim-runc-v2/task/service.go.

package task

import (
	"context"
	"fmt"
	"path/filepath"

	eventstypes "github.com/containerd/containerd/api/events"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/runc/options"
	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/shimwalk/shimwalk/final/shim/events"
	"github.com/shimwalk/shimwalk/final/shim/process"
)

// State reports what the shim knows of a process, without asking runc.
func (s *Service) State(ctx context.Context, r *taskapi.StateRequest) (*taskapi.StateResponse, error) {
	c, p, err := s.proc(r.ID, r.ExecID)
	if err != nil {
		return nil, rpcError(err)
	}
	io := p.Stdio()
	resp := &taskapi.StateResponse{
		ID: p.ID(), Bundle: c.init.Bundle, Pid: uint32(p.Pid()), Status: p.Status(),
		Stdin: io.Stdin, Stdout: io.Stdout, Stderr: io.Stderr, Terminal: io.Terminal, ExecID: r.ExecID,
	}
	if resp.Status == tasktypes.Status_UNKNOWN {
		return nil, rpcError(fmt.Errorf("process %s: %w", p.ID(), errdefs.ErrNotFound))
	}
	if x := p.Exited(); x != nil {
		resp.ExitStatus, resp.ExitedAt = uint32(x.Status), timestamppb.New(x.At)
	}
	return resp, nil
}

// Wait blocks until the process has exited.
func (s *Service) Wait(ctx context.Context, r *taskapi.WaitRequest) (*taskapi.WaitResponse, error) {
	_, p, err := s.proc(r.ID, r.ExecID)
	if err != nil {
		return nil, rpcError(err)
	}
	x, err := p.Wait(ctx)
	if err != nil {
		return nil, rpcError(err)
	}
	return &taskapi.WaitResponse{ExitStatus: uint32(x.Status), ExitedAt: timestamppb.New(x.At)}, nil
}

// Kill signals the init (with all, every process of the container) or an exec.
func (s *Service) Kill(ctx context.Context, r *taskapi.KillRequest) (*emptypb.Empty, error) {
	if r.Signal == 0 || r.Signal > 64 {
		return nil, rpcError(fmt.Errorf("signal %d is not a signal: %w", r.Signal, errdefs.ErrInvalidArgument))
	}
	c, e, err := s.lookup(r.ID, r.ExecID)
	if err != nil {
		return nil, rpcError(err)
	}
	if e != nil {
		err = e.Kill(ctx, r.Signal)
	} else {
		err = c.init.Kill(ctx, r.Signal, r.All)
	}
	return &emptypb.Empty{}, rpcError(err)
}

// Pids lists the container's processes, naming the execs among them.
func (s *Service) Pids(ctx context.Context, r *taskapi.PidsRequest) (*taskapi.PidsResponse, error) {
	c, _, err := s.lookup(r.ID, "")
	if err != nil {
		return nil, rpcError(err)
	}
	pids, err := c.init.Pids(ctx)
	if err != nil {
		return nil, rpcError(err)
	}
	execs := map[int]string{}
	s.mu.Lock()
	for id, e := range c.execs {
		execs[e.Pid()] = id
	}
	s.mu.Unlock()
	resp := &taskapi.PidsResponse{}
	for _, pid := range pids {
		info := &tasktypes.ProcessInfo{Pid: uint32(pid)}
		if id, ok := execs[pid]; ok {
			a, err := typeurl.MarshalAnyToProto(&options.ProcessDetails{ExecID: id})
			if err != nil {
				return nil, rpcError(err)
			}
			info.Info = a
		}
		resp.Processes = append(resp.Processes, info)
	}
	return resp, nil
}

// Pause freezes the container.
func (s *Service) Pause(ctx context.Context, r *taskapi.PauseRequest) (*emptypb.Empty, error) {
	c, _, err := s.lookup(r.ID, "")
	if err != nil {
		return nil, rpcError(err)
	}
	if err := c.init.Pause(ctx); err != nil {
		return nil, rpcError(err)
	}
	s.cfg.Events.Publish(events.TopicPaused, &eventstypes.TaskPaused{ContainerID: c.id})
	return &emptypb.Empty{}, nil
}

// Resume thaws the container.
func (s *Service) Resume(ctx context.Context, r *taskapi.ResumeRequest) (*emptypb.Empty, error) {
	c, _, err := s.lookup(r.ID, "")
	if err != nil {
		return nil, rpcError(err)
	}
	if err := c.init.Resume(ctx); err != nil {
		return nil, rpcError(err)
	}
	s.cfg.Events.Publish(events.TopicResumed, &eventstypes.TaskResumed{ContainerID: c.id})
	return &emptypb.Empty{}, nil
}

// Checkpoint dumps the container with CRIU.
func (s *Service) Checkpoint(ctx context.Context, r *taskapi.CheckpointTaskRequest) (*emptypb.Empty, error) {
	c, _, err := s.lookup(r.ID, "")
	if err != nil {
		return nil, rpcError(err)
	}
	o, err := process.ParseCheckpointOptions(r.Options)
	if err != nil {
		return nil, rpcError(err)
	}
	image := r.Path
	if o.ImagePath != "" {
		image = o.ImagePath
	}
	if image == "" || !filepath.IsAbs(image) {
		return nil, rpcError(fmt.Errorf("checkpoint needs an absolute image path: %w", errdefs.ErrInvalidArgument))
	}
	err = c.init.Checkpoint(ctx, process.CheckpointConfig{
		ImagePath: image, WorkDir: o.WorkPath, Exit: o.Exit, AllowOpenTCP: o.OpenTcp,
		AllowExternalUnix: o.ExternalUnixSockets, AllowTerminal: o.Terminal, FileLocks: o.FileLocks,
		EmptyNamespaces: o.EmptyNamespaces,
	})
	if err != nil {
		return nil, rpcError(err)
	}
	s.cfg.Events.Publish(events.TopicCheckpointed, &eventstypes.TaskCheckpointed{ContainerID: c.id, Checkpoint: image})
	return &emptypb.Empty{}, nil
}

// Update applies new resource limits.
func (s *Service) Update(ctx context.Context, r *taskapi.UpdateTaskRequest) (*emptypb.Empty, error) {
	c, _, err := s.lookup(r.ID, "")
	if err != nil {
		return nil, rpcError(err)
	}
	res, err := process.ParseResources(r.Resources)
	if err != nil {
		return nil, rpcError(err)
	}
	return &emptypb.Empty{}, rpcError(c.init.Update(ctx, res))
}

// ResizePty resizes the terminal of the init or an exec.
func (s *Service) ResizePty(ctx context.Context, r *taskapi.ResizePtyRequest) (*emptypb.Empty, error) {
	_, p, err := s.proc(r.ID, r.ExecID)
	if err != nil {
		return nil, rpcError(err)
	}
	return &emptypb.Empty{}, rpcError(p.Resize(r.Width, r.Height))
}

// CloseIO closes the process's stdin.
func (s *Service) CloseIO(ctx context.Context, r *taskapi.CloseIORequest) (*emptypb.Empty, error) {
	_, p, err := s.proc(r.ID, r.ExecID)
	if err != nil {
		return nil, rpcError(err)
	}
	if !r.Stdin {
		return &emptypb.Empty{}, nil
	}
	return &emptypb.Empty{}, rpcError(p.CloseIO())
}

// Stats reports the container's cgroup metrics.
func (s *Service) Stats(ctx context.Context, r *taskapi.StatsRequest) (*taskapi.StatsResponse, error) {
	c, _, err := s.lookup(r.ID, "")
	if err != nil {
		return nil, rpcError(err)
	}
	stats, err := c.init.Stats(ctx)
	if err != nil {
		return nil, rpcError(err)
	}
	return &taskapi.StatsResponse{Stats: stats}, nil
}
