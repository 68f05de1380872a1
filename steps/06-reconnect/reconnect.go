// SPDX-License-Identifier: Apache-2.0

// Surviving the caller (since step 06): the init's exit is written to exit.json so that it
// outlives the shim, and the delete action cleans up after a shim that died, from what the
// bundle holds. Mirrors containerd v2.4 cmd/containerd-shim-runc-v2/task/service.go
// (handleProcessExit writes exit.json through runc.WriteExitStatus before TaskExit) and
// manager/manager_linux.go (Stop: runc delete --force, unmount, the exit from exit.json, else
// 128+SIGKILL). containerd 1.x, and 2.x before exit.json was added, always report 137.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	runc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"
)

// exitRecord is exit.json: what containerd must learn about the init's exit even if the shim
// that saw it is gone.
type exitRecord struct {
	Pid        int       `json:"pid"`
	ExitStatus int       `json:"exit_status"`
	ExitedAt   time.Time `json:"exited_at"`
}

// writeExitFile records e in bundle/exit.json, atomically and never through a symlink.
func writeExitFile(bundle string, e exit) error {
	data, err := json.Marshal(exitRecord{Pid: e.pid, ExitStatus: e.status, ExitedAt: e.at})
	if err != nil {
		return fmt.Errorf("encode exit.json: %w", err)
	}
	tracePoint("shim", "", false, "writes exit.json (status %d) before TaskExit", e.status)
	return writeFile(filepath.Join(bundle, "exit.json"), string(data))
}

// recoverExit is the exit the delete action reports: exit.json when the shim saw the exit,
// otherwise the init pid from init.pid and 128+SIGKILL, since runc delete --force killed it.
func recoverExit(bundle string) exitRecord {
	if data, err := os.ReadFile(filepath.Join(bundle, "exit.json")); err == nil {
		var r exitRecord
		if json.Unmarshal(data, &r) == nil && r.Pid > 0 {
			tracePoint("helper", "", false, "reads the exit from exit.json: status %d", r.ExitStatus)
			return r
		}
	}
	r := exitRecord{ExitStatus: 128 + int(unix.SIGKILL), ExitedAt: time.Now()}
	r.Pid, _ = readPid(filepath.Join(bundle, "init.pid"))
	return r
}

// cleanupContainer removes what a dead shim left of its container: the runc state (killing the
// container if it still runs) and the rootfs mount. Each is tried whatever the other did, and
// what failed is returned for the caller to report.
func cleanupContainer(namespace, id, bundle string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r := newRuntime(namespace, bundle)
	mark := logEnd(r.Log)
	var errs []error
	// Only a runc that said the container does not exist leaves nothing to kill.
	if err := r.Delete(ctx, id, &runc.DeleteOpts{Force: true}); err != nil && !strings.Contains(err.Error(), "does not exist") {
		if msg := lastRuncError(r.Log, mark); msg != "" {
			errs = append(errs, fmt.Errorf("runc delete --force: %s", msg))
		} else {
			errs = append(errs, fmt.Errorf("runc delete --force: %w", err))
		}
	}
	if err := unmountAll(filepath.Join(bundle, "rootfs")); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
