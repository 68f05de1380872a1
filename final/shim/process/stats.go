// SPDX-License-Identifier: Apache-2.0

package process

import (
	"context"
	"fmt"

	"github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/anypb"
)

// Stats reads the container's cgroup metrics, v1 or v2 as the host runs them, in the form
// `ctr task metrics` decodes (the cgroups/v3 stats types in an Any). The cgroup is found through
// the init's pid, which works whatever driver (cgroupfs or systemd) runc used, and remembered:
// after the init has exited (and until Delete) the cgroup is still there to read, the pid is not.
func (p *Init) Stats(ctx context.Context) (*anypb.Any, error) {
	p.mu.Lock()
	if p.status == deleted {
		defer p.mu.Unlock()
		return nil, p.stateError("stats")
	}
	p.mu.Unlock()
	cg, err := p.cgroup()
	if err != nil {
		return nil, err
	}
	metrics, err := cg.stat()
	if err != nil {
		return nil, fmt.Errorf("cgroup stats: %w", err)
	}
	a, err := typeurl.MarshalAnyToProto(metrics)
	if err != nil {
		return nil, fmt.Errorf("encode stats: %w", err)
	}
	return a, nil
}

// cgroupStats is a container's cgroup, v1 or v2.
type cgroupStats struct {
	v1 cgroup1.Cgroup
	v2 *cgroup2.Manager
}

func (c *cgroupStats) stat() (any, error) {
	if c.v2 != nil {
		return c.v2.Stat()
	}
	return c.v1.Stat(cgroup1.IgnoreNotExist)
}

// cgroup loads the container's cgroup through the init's pid on first use.
func (p *Init) cgroup() (*cgroupStats, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cg != nil {
		return p.cg, nil
	}
	if p.status == task.Status_STOPPED {
		return nil, fmt.Errorf("stats: the container exited before its cgroup was looked up: %w", errdefs.ErrNotFound)
	}
	if cgroups.Mode() == cgroups.Unified {
		group, err := cgroup2.PidGroupPath(p.pid)
		if err != nil {
			return nil, fmt.Errorf("cgroup of %d: %v: %w", p.pid, err, errdefs.ErrNotFound)
		}
		m, err := cgroup2.Load(group)
		if err != nil {
			return nil, fmt.Errorf("load cgroup %s: %w", group, err)
		}
		p.cg = &cgroupStats{v2: m}
		return p.cg, nil
	}
	cg, err := cgroup1.Load(cgroup1.PidPath(p.pid))
	if err != nil {
		return nil, fmt.Errorf("cgroup of %d: %v: %w", p.pid, err, errdefs.ErrNotFound)
	}
	p.cg = &cgroupStats{v1: cg}
	return p.cg, nil
}

// JoinCgroup moves process pid into the existing cgroup path (the ShimCgroup runtime option),
// on cgroup v1 or v2 as the host runs them.
func JoinCgroup(path string, pid int) error {
	if cgroups.Mode() == cgroups.Unified {
		m, err := cgroup2.Load(path)
		if err != nil {
			return fmt.Errorf("load shim cgroup %s: %w", path, err)
		}
		if err := m.AddProc(uint64(pid)); err != nil {
			return fmt.Errorf("join shim cgroup %s: %w", path, err)
		}
		return nil
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(path))
	if err != nil {
		return fmt.Errorf("load shim cgroup %s: %w", path, err)
	}
	if err := cg.AddProc(uint64(pid)); err != nil {
		return fmt.Errorf("join shim cgroup %s: %w", path, err)
	}
	return nil
}
