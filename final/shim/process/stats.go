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
// the init's pid, which works whatever driver (cgroupfs or systemd) runc used.
func (p *Init) Stats(ctx context.Context) (*anypb.Any, error) {
	switch p.Status() {
	case task.Status_RUNNING, task.Status_PAUSED, task.Status_CREATED:
	default:
		p.mu.Lock()
		defer p.mu.Unlock()
		return nil, p.stateError("stats")
	}
	pid := p.Pid()
	var metrics any
	if cgroups.Mode() == cgroups.Unified {
		group, err := cgroup2.PidGroupPath(pid)
		if err != nil {
			return nil, fmt.Errorf("cgroup of %d: %v: %w", pid, err, errdefs.ErrNotFound)
		}
		m, err := cgroup2.Load(group)
		if err != nil {
			return nil, fmt.Errorf("load cgroup %s: %w", group, err)
		}
		if metrics, err = m.Stat(); err != nil {
			return nil, fmt.Errorf("cgroup stats: %w", err)
		}
	} else {
		cg, err := cgroup1.Load(cgroup1.PidPath(pid))
		if err != nil {
			return nil, fmt.Errorf("cgroup of %d: %v: %w", pid, err, errdefs.ErrNotFound)
		}
		if metrics, err = cg.Stat(cgroup1.IgnoreNotExist); err != nil {
			return nil, fmt.Errorf("cgroup stats: %w", err)
		}
	}
	a, err := typeurl.MarshalAnyToProto(metrics)
	if err != nil {
		return nil, fmt.Errorf("encode stats: %w", err)
	}
	return a, nil
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
