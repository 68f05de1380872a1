// SPDX-License-Identifier: Apache-2.0

// The Task service itself: what it is configured with, the state its RPCs share, Connect and
// Shutdown. It mirrors service, NewTaskService, Connect and Shutdown in containerd v2.4
// cmd/containerd-shim-runc-v2/task/service.go.

package task

import (
	"context"
	"log/slog"
	"os"
	"sync"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/errdefs/pkg/errgrpc"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/shimwalk/shimwalk/final/shim/cgroups"
	"github.com/shimwalk/shimwalk/final/shim/events"
	"github.com/shimwalk/shimwalk/final/shim/reaper"
)

// Config is what a Service needs from the shim around it.
type Config struct {
	Namespace string
	// Version is the shim's version, which Connect reports.
	Version string
	Log     *slog.Logger
	Events  *events.Publisher
	Reaper  *reaper.Reaper
	// OOM watches the containers' memory cgroups and calls CheckOOM; nil watches nothing.
	OOM *cgroups.Watcher
	// RuncRoot is runc's state root for containers whose runtime options name none.
	RuncRoot string
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

// Connect reports the shim's pid and the task's.
func (s *Service) Connect(ctx context.Context, r *taskapi.ConnectRequest) (*taskapi.ConnectResponse, error) {
	resp := &taskapi.ConnectResponse{ShimPid: uint32(os.Getpid()), Version: s.cfg.Version}
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
