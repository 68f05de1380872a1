// SPDX-License-Identifier: Apache-2.0

// What is left of a container when its init exits: containerd v2.4's runc shim kills it in
// handleInitExit, when runc.ShouldKillAllOnExit finds that the init did not own its PID
// namespace.

package process

import (
	"context"
	"fmt"

	runc "github.com/containerd/go-runc"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// KillAllOnExit reports whether the exit of the init of the container in dir leaves
// processes behind that nobody else ends. An init with a PID namespace of its own takes every
// process of it down with it. One that joined another's (a pod's containers sharing its
// namespace) or has none (host PID) does not: its children live on, reparented, holding the
// container's stdout and stderr, and its output never ends. A spec that cannot be read gets
// the kill, as in the reference: a kill too many hits only processes that are dying anyway.
func KillAllOnExit(dir string) bool {
	var spec struct {
		Linux *struct {
			Namespaces []specs.LinuxNamespace `json:"namespaces"`
		} `json:"linux"`
	}
	if err := bundle.ReadSpec(dir, &spec); err != nil || spec.Linux == nil {
		return true
	}
	for _, ns := range spec.Linux.Namespaces {
		if ns.Type == specs.PIDNamespace && ns.Path == "" {
			return false
		}
	}
	return true
}

// KillAll sends SIGKILL to every process left in the container's cgroup with runc kill --all,
// which runc allows for a stopped container.
func (p *Init) KillAll(ctx context.Context) error {
	mark := logEnd(p.runtime.Log)
	if err := p.runtime.Kill(ctx, p.id, int(unix.SIGKILL), &runc.KillOpts{All: true}); err != nil {
		return fmt.Errorf("kill what is left of %s: %w", p.id, p.killError(err, mark))
	}
	return nil
}
