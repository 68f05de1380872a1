// SPDX-License-Identifier: Apache-2.0

package task

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/emptypb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/shimwalk/shimwalk/final/internal/fsutil"
	"github.com/shimwalk/shimwalk/final/shim/cgroups"
	"github.com/shimwalk/shimwalk/final/shim/events"
	"github.com/shimwalk/shimwalk/final/shim/process"
	"github.com/shimwalk/shimwalk/final/shim/reaper"
)

// Version is what Connect reports; set at build time.
var Version = "dev"

// Config is what a Service needs from the shim around it.
type Config struct {
	Namespace string
	Log       *slog.Logger
	Events    *events.Publisher
	Reaper    *reaper.Reaper
	// OOM watches the containers' memory cgroups and calls CheckOOM; nil watches nothing.
	OOM *cgroups.Watcher
	// Shutdown ends the shim; the service calls it when Shutdown arrives and no container is left.
	Shutdown func()
}

// Service implements containerd.task.v2.Task (and, through the server, v3) for every container
// of one shim.
type Service struct {
	cfg Config

	// mu guards the maps below and orders exits against the bookkeeping of creates and
	// starts: exit handling takes it. It is not held while runc runs, so a Delete or a Kill
	// can come in the middle of a Start; the processes' own ops locks order those.
	mu         sync.Mutex
	containers map[string]*container
	creating   map[string]chan struct{} // ids whose Create is in flight; closed when it has ended
	// shutdownAsked is a Shutdown that came while the only task's Create was in flight: it
	// takes effect if that Create leaves nothing.
	shutdownAsked bool
	stopping      bool               // the shim is going: a Create that comes or ends now finds nobody to serve
	running       map[int]running    // pid -> the process whose exit is still to come
	starting      map[int]*heldExits // init pid -> its Starts in flight and the exits they hold
	pidless       int                // Creates, exec Starts and restores in flight: their pids are not known yet
	unclaimed     []reaper.Exit      // exits of unknown pids while pidless > 0
	orphaned      []*container       // inits exited, what is left of them to kill once mu is released
}

var _ taskapi.TTRPCTaskService = (*Service)(nil)

// New returns an empty service.
func New(cfg Config) *Service {
	return &Service{
		cfg:        cfg,
		containers: map[string]*container{},
		creating:   map[string]chan struct{}{},
		running:    map[int]running{},
		starting:   map[int]*heldExits{},
	}
}

// rpcError turns an errdefs error into the status containerd expects on the wire.
func rpcError(err error) error {
	if err == nil {
		return nil
	}
	return errgrpc.ToGRPC(err)
}

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
	if resp.Status == task.Status_UNKNOWN {
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
		info := &task.ProcessInfo{Pid: uint32(pid)}
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

// Connect reports the shim's pid and the task's.
func (s *Service) Connect(ctx context.Context, r *taskapi.ConnectRequest) (*taskapi.ConnectResponse, error) {
	resp := &taskapi.ConnectResponse{ShimPid: uint32(os.Getpid()), Version: Version}
	s.mu.Lock()
	if c, ok := s.containers[r.ID]; ok {
		resp.TaskPid = uint32(c.init.Pid())
	}
	s.mu.Unlock()
	return resp, nil
}

// Shutdown ends the shim once its last container is gone; containerd sends it after every
// Delete, and only the last one may end a shim that containers share.
func (s *Service) Shutdown(ctx context.Context, r *taskapi.ShutdownRequest) (*emptypb.Empty, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.containers) > 0 {
		return &emptypb.Empty{}, nil
	}
	// containerd sends Shutdown right after a Create that failed, maybe at its deadline while
	// the shim is still undoing it: the Create's end decides. containerd's runc shim ends at
	// once, in the middle of that Create (docs/deploy.md).
	if len(s.creating) > 0 {
		s.shutdownAsked = true
		return &emptypb.Empty{}, nil
	}
	s.stop()
	return &emptypb.Empty{}, nil
}

// stop ends the shim. Call with mu held.
func (s *Service) stop() {
	s.stopping = true
	s.cfg.Shutdown()
}

// ExitRecord is exit.json: what containerd must learn of the init's exit even if the shim that
// saw it is gone.
type ExitRecord struct {
	Pid        int       `json:"pid"`
	ExitStatus int       `json:"exit_status"`
	ExitedAt   time.Time `json:"exited_at"`
}

func writeExitFile(bundle string, x reaper.Exit) error {
	data, err := json.Marshal(ExitRecord{Pid: x.Pid, ExitStatus: x.Status, ExitedAt: x.At})
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(bundle, "exit.json"), data, 0o600)
}
