// SPDX-License-Identifier: Apache-2.0

// options.json: the runtime options a container was created with, kept in its bundle for the
// delete action, as containerd v2.4's runc shim keeps them (WriteOptions and ReadOptions in
// cmd/containerd-shim-runc-v2/runc/container.go).

package bundle

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/shimwalk/shimwalk/final/internal/fsutil"
)

// Options are the runtime options that shape how runc runs (api/types/runc/options.Options).
type Options struct {
	BinaryName    string // the runc-compatible binary: runc, crun, ...
	Root          string // runc's state root, the namespace below it
	SystemdCgroup bool
	NoPivotRoot   bool
	NoNewKeyring  bool
	IoUID, IoGID  int // owner of the stdio pipes
	CriuImagePath string
	CriuWorkPath  string
}

// SaveOptions records o as dir's OptionsFile: the delete action, run when the shim is gone,
// must drive the same runc binary and root as the shim did.
func SaveOptions(dir string, o Options) error {
	data, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("encode options: %w", err)
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, OptionsFile), data, 0o600)
}

// LoadOptions reads the options SaveOptions recorded in dir; none recorded means defaults.
func LoadOptions(dir string) (Options, error) {
	var o Options
	data, err := os.ReadFile(filepath.Join(dir, OptionsFile))
	if errors.Is(err, os.ErrNotExist) {
		return o, nil
	}
	if err != nil {
		return o, fmt.Errorf("read %s: %w", OptionsFile, err)
	}
	if err := json.Unmarshal(data, &o); err != nil {
		return o, fmt.Errorf("%s: %w", OptionsFile, err)
	}
	return o, nil
}
