// SPDX-License-Identifier: Apache-2.0

// Finding the shims again after the driver restarts: every bundle's shim is reached at its
// recorded address and confirmed over RPC, and a dead one is cleaned up with its delete action.
// Mirrors containerd v2.4 core/runtime/v2/shim_load.go (loadShims, loadShim) and
// cleanupAfterDeadShim in shim.go.

package driver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"google.golang.org/grpc/codes"
)

// TaskInfo is what the driver learned of one task when it reconnected.
type TaskInfo struct {
	ID         string
	ShimPid    int
	TaskPid    int
	Status     string // the task's status, "NO TASK" for a shim without one, "DELETED" for a dead shim cleaned up
	ExitStatus uint32
	ExitedAt   time.Time
}

// Reconnect walks the state directory the way containerd does after a restart
// (core/runtime/v2 loadShims in containerd v2.4): it reaches every shim through the address in
// its bundle and confirms it with real RPCs; a bundle whose shim is dead is cleaned up with the
// shim binary's delete action, which reports the exit it can recover, and removed.
func (d *Driver) Reconnect(ctx context.Context) ([]TaskInfo, error) {
	ids, err := d.Tasks()
	if err != nil {
		return nil, err
	}
	var infos []TaskInfo
	var errs []error
	for _, id := range ids {
		info, err := d.reconnect(ctx, id)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", id, err))
			continue
		}
		infos = append(infos, info)
	}
	return infos, errors.Join(errs...)
}

func (d *Driver) reconnect(ctx context.Context, id string) (TaskInfo, error) {
	info := TaskInfo{ID: id}
	rpc, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := d.Connect(rpc, id)
	if err != nil && !isGone(err) {
		return info, err
	}
	if err == nil {
		defer conn.Close()
		c, err := conn.Task.Connect(rpc, &taskapi.ConnectRequest{ID: id})
		if err != nil {
			return info, fmt.Errorf("shim answers but Connect failed: %w", err)
		}
		info.ShimPid = int(c.ShimPid)
		st, err := conn.Task.State(rpc, &taskapi.StateRequest{ID: id})
		switch {
		case Code(err) == codes.NotFound:
			info.Status = "NO TASK"
		case err != nil:
			return info, fmt.Errorf("state: %w", err)
		default:
			info.TaskPid, info.Status, info.ExitStatus = int(st.Pid), st.Status.String(), st.ExitStatus
			if st.ExitedAt != nil && st.Status.String() == "STOPPED" {
				info.ExitedAt = st.ExitedAt.AsTime()
			}
		}
		return info, nil
	}
	// Nobody listens at the address: the shim died. Its delete action knows how to clean up.
	resp, err := d.DeleteShim(ctx, id)
	if err != nil {
		return info, fmt.Errorf("shim is gone, and its delete failed: %w", err)
	}
	if err := d.RemoveBundle(id); err != nil {
		return info, err
	}
	info.Status, info.TaskPid, info.ExitStatus = "DELETED", int(resp.Pid), resp.ExitStatus
	if resp.ExitedAt != nil {
		info.ExitedAt = resp.ExitedAt.AsTime()
	}
	return info, nil
}

// isGone reports whether a failure to reach a shim means that no shim is there: no address was
// ever recorded, the socket file is gone, or nobody listens on it.
func isGone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
}
