// SPDX-License-Identifier: Apache-2.0

// exit.json: the init's exit, recorded by the shim when it sees it and reported by the delete
// action when the shim is gone, as containerd v2.4's runc shim does with runc.WriteExitStatus
// (task/service.go handleProcessExit) and runc.ReadExitStatus (manager Stop), both in
// cmd/containerd-shim-runc-v2.

package bundle

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/shimwalk/shimwalk/final/internal/fsutil"
)

// ExitRecord is exit.json: what containerd must learn of the init's exit even if the shim that
// saw it is gone.
type ExitRecord struct {
	Pid        int       `json:"pid"`
	ExitStatus int       `json:"exit_status"`
	ExitedAt   time.Time `json:"exited_at"`
}

// WriteExit records r as dir's exit.json.
func WriteExit(dir string, r ExitRecord) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(filepath.Join(dir, ExitFile), data, 0o600)
}

// ReadExit reads dir's exit.json. A record that names no pid is an error: it cannot be the
// exit of a process that ran.
func ReadExit(dir string) (ExitRecord, error) {
	var r ExitRecord
	data, err := os.ReadFile(filepath.Join(dir, ExitFile))
	if err != nil {
		return r, err
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return ExitRecord{}, fmt.Errorf("%s: %w", ExitFile, err)
	}
	if r.Pid <= 0 {
		return ExitRecord{}, fmt.Errorf("%s names no pid: %q", ExitFile, data)
	}
	return r, nil
}

// RemoveExit removes dir's exit.json, if there is one: an earlier task's record must not pass
// for the next one's.
func RemoveExit(dir string) error {
	if err := os.Remove(filepath.Join(dir, ExitFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
