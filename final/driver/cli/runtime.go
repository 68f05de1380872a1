// SPDX-License-Identifier: Apache-2.0

// Runtime names and step shims. resolveRuntime mirrors BinaryName and BinaryPath in containerd
// v2.4 core/runtime/v2/manager.go (io.containerd.X.vN → containerd-shim-X-vN on PATH); unlike
// containerd it also looks beside shimctl, where `make build` puts every shim.

package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"

	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// runtimeName is containerd's form of a runtime name: io.containerd.<name>.<version>.
var runtimeName = regexp.MustCompile(`^io\.containerd\.([A-Za-z0-9_-]+)\.(v[0-9]+)$`)

// resolveRuntime finds the shim binary of a runtime name such as io.containerd.shimwalk.v2.
func resolveRuntime(name string) (string, error) {
	m := runtimeName.FindStringSubmatch(name)
	if m == nil {
		return "", usageError{fmt.Errorf("runtime %q: want a name like io.containerd.shimwalk.v2", name)}
	}
	bin := "containerd-shim-" + m[1] + "-" + m[2]
	if p, err := exec.LookPath(bin); err == nil {
		return filepath.Abs(p)
	}
	if self, err := os.Executable(); err == nil {
		beside := filepath.Join(filepath.Dir(self), bin)
		if _, err := os.Stat(beside); err == nil {
			return beside, nil
		}
	}
	return "", fmt.Errorf("runtime %s: no %s on PATH or beside shimctl", name, bin)
}

// shimName is the base name of the shim binary a failed command talked to: the one that
// started its task, as the bundle records, or else the one the flags name; "" when there is none.
func (g *globals) shimName() string {
	if g.taskShim != "" {
		return filepath.Base(g.taskShim)
	}
	p, err := g.shimPath()
	if err != nil {
		return ""
	}
	return filepath.Base(p)
}

var (
	// stepShim is the name `make build` gives a step's shim.
	stepShim = regexp.MustCompile(`^containerd-shim-step([0-9]{2})-v2$`)
	// addedIn is how a step shim answers an RPC it lacks: "Create: added in step 03-runc-create"
	// or "Pids: added in final".
	addedIn = regexp.MustCompile(`^(.+?): added in (?:step ([0-9]{2})\S*|(final))`)
)

// describeFor is describe for a shim binary named shim: an RPC that a step shim lacks is named
// with the step that adds it.
func describeFor(shim string, err error) string {
	if driver.Code(err) != codes.Unimplemented {
		return describe(err)
	}
	m := addedIn.FindStringSubmatch(driver.Message(err))
	if m == nil {
		return describe(err)
	}
	who := "this shim"
	if s := stepShim.FindStringSubmatch(shim); s != nil {
		who = "step " + s[1]
	}
	when := "it arrives in step " + m[2]
	if m[3] != "" {
		when = "it arrives in the final shim"
	}
	return fmt.Sprintf("%s does not implement %s yet; %s", who, m[1], when)
}

// noteShim records the shim binary that started task id, for shimName.
func (g *globals) noteShim(d *driver.Driver, id string) {
	if p, err := os.ReadFile(filepath.Join(d.Bundle(id), bundle.ShimBinaryFile)); err == nil {
		g.taskShim = string(p)
	}
}
