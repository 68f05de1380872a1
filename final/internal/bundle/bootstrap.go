// SPDX-License-Identifier: Apache-2.0

// bootstrap.json: a shim's start reply, in the JSON form the shim prints it to containerd 1.7
// to 2.2, kept in the bundle by its caller to find the shim again, as containerd v2.4 does
// (writeBootstrapParams and restoreBootstrapParams in core/runtime/v2).

package bundle

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/shimwalk/shimwalk/final/internal/fsutil"
)

// Bootstrap is what a shim's start tells its caller, stored as bootstrap.json in the bundle
// (the format of containerd v2.4 core/runtime/v2/bundle.go and pkg/shim BootstrapParams).
type Bootstrap struct {
	Version  int    `json:"version"`
	Address  string `json:"address"`
	Protocol string `json:"protocol"`
}

// SocketPath is the file system path behind a unix:// address.
func (b Bootstrap) SocketPath() string {
	return strings.TrimPrefix(b.Address, "unix://")
}

// WriteBootstrap stores b as dir/bootstrap.json, atomically.
func WriteBootstrap(dir string, b Bootstrap) error {
	data, err := json.Marshal(b)
	if err != nil {
		return fmt.Errorf("encode bootstrap.json: %w", err)
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, BootstrapFile), data, 0o600)
}
