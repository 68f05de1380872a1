// SPDX-License-Identifier: Apache-2.0

// A container's cgroup metrics for the Stats RPC, as containerd v2.4's runc shim reads them in
// service.Stats (cmd/containerd-shim-runc-v2/task/service.go).

package process

import (
	"context"
	"fmt"

	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shimwalk/shimwalk/final/shim/cgroups"
)

// Stats reads the container's cgroup metrics, v1 or v2 as the host runs them, in the form
// `ctr task metrics` decodes (the cgroups/v3 stats types in an Any). The cgroup is found through
// the init's pid and remembered: after the init has exited (and until Delete) the cgroup is
// still there to read, the pid is not.
func (p *Init) Stats(ctx context.Context) (*anypb.Any, error) {
	if err := p.check(opStats); err != nil {
		return nil, err
	}
	cg, err := p.cgroup()
	if err != nil {
		return nil, err
	}
	metrics, err := cg.Metrics()
	if err != nil {
		return nil, err
	}
	a, err := typeurl.MarshalAnyToProto(metrics)
	if err != nil {
		return nil, fmt.Errorf("encode stats: %w", err)
	}
	return a, nil
}

// cgroup loads the container's cgroup through the init's pid on first use.
func (p *Init) cgroup() (*cgroups.Group, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cg != nil {
		return p.cg, nil
	}
	if p.status == task.Status_STOPPED {
		return nil, fmt.Errorf("stats: the container exited before its cgroup was looked up: %w", errdefs.ErrNotFound)
	}
	cg, err := cgroups.Load(p.pid)
	if err != nil {
		return nil, err
	}
	p.cg = cg
	return cg, nil
}
