// SPDX-License-Identifier: Apache-2.0

// The container table: each container of the shim with its init and execs, and the lookup
// every RPC starts with. It mirrors containerd v2.4 cmd/containerd-shim-runc-v2/runc/container.go
// (Container, Process) and service.getContainer in task/service.go.

package task

import (
	"context"
	"fmt"

	tasktypes "github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"

	"github.com/shimwalk/shimwalk/final/internal/identifiers"
	"github.com/shimwalk/shimwalk/final/shim/process"
	"github.com/shimwalk/shimwalk/final/shim/reaper"
	"github.com/shimwalk/shimwalk/final/shim/stdio"
)

// container is one container: its init and its execs.
type container struct {
	id    string
	init  *process.Init
	execs map[string]*process.Exec
	// runningExecs counts execs whose exit is still to come, and exec Starts in flight. The
	// init's TaskExit waits for them: containerd expects a container's exec exits before its
	// init's, and an exec whose runc exec is under way may yet run.
	runningExecs int
	initExit     *reaper.Exit // the init's exit, once reaped; its TaskExit may be still to come
	killing      bool         // what the init left behind is being killed; its TaskExit waits
	exitSent     bool         // the init's TaskExit is out
}

// lookup returns the container id and, for execID != "", its exec.
func (s *Service) lookup(id, execID string) (*container, *process.Exec, error) {
	if err := identifiers.Validate("task id", id); err != nil {
		return nil, nil, err
	}
	if execID != "" {
		if err := identifiers.Validate("exec id", execID); err != nil {
			return nil, nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[id]
	if !ok {
		return nil, nil, fmt.Errorf("task %s: %w", id, errdefs.ErrNotFound)
	}
	if execID == "" {
		return c, nil, nil
	}
	e, ok := c.execs[execID]
	if !ok {
		return nil, nil, fmt.Errorf("exec %s in task %s: %w", execID, id, errdefs.ErrNotFound)
	}
	return c, e, nil
}

// proc is what the RPCs that serve the init and an exec alike need of either.
type proc interface {
	ID() string
	Pid() int
	Status() tasktypes.Status
	Stdio() stdio.Config
	Exited() *process.Exit
	Wait(context.Context) (process.Exit, error)
	Resize(w, h uint32) error
	CloseIO() error
}

func (s *Service) proc(id, execID string) (*container, proc, error) {
	c, e, err := s.lookup(id, execID)
	if err != nil {
		return nil, nil, err
	}
	if e != nil {
		return c, e, nil
	}
	return c, c.init, nil
}

// Containers is the number of containers the service holds.
func (s *Service) Containers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.containers)
}
