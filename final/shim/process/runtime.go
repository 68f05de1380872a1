// SPDX-License-Identifier: Apache-2.0

// The runc CLI a container is driven with: its binary, state root and log, from the runtime
// options, as containerd v2.4's NewRunc (cmd/containerd-shim-runc-v2/process/init.go) makes it.

package process

import (
	"path/filepath"

	runc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"

	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// DefaultRuncRoot is runc's state root when neither the runtime options nor the shim's
// configuration (SHIMWALK_RUNC_ROOT, read by bootstrap) name one; each namespace gets a
// directory below it.
const DefaultRuncRoot = "/run/shimwalk/runc"

// newRuntime returns the runc CLI for a container of namespace with its bundle at dir.
// Each namespace gets its own state root, so equal ids in different namespaces do not collide.
func newRuntime(o bundle.Options, namespace, dir string) *runc.Runc {
	root := o.Root
	if root == "" {
		root = DefaultRuncRoot
	}
	binary := o.BinaryName
	if binary == "" {
		binary = "runc"
	}
	return &runc.Runc{
		Command:       binary,
		Root:          filepath.Join(root, namespace),
		Log:           filepath.Join(dir, bundle.RuncLogFile),
		LogFormat:     runc.JSON,
		SystemdCgroup: o.SystemdCgroup,
		// A runc the shim started must not outlive the shim half-way through an operation.
		PdeathSignal: unix.SIGKILL,
	}
}
