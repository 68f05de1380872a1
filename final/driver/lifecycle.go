// SPDX-License-Identifier: Apache-2.0

// Taking a task down. Mirrors shimTask.delete and shim.Delete in containerd v2.4
// core/runtime/v2/shim.go (Delete, then Shutdown, then the bundle). containerd runs the shim
// binary's delete action from the connection's close callback (cleanupAfterDeadShim), so after
// every shim it takes down, not only after one that died; the driver runs it every time too, in
// line rather than from a callback: it is idempotent, and it stops a shim that ignored Shutdown.

package driver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/ttrpc"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
	"google.golang.org/grpc/codes"
)

// shimExitGrace bounds how long RemoveShim lets a shim that accepted Shutdown exit by itself.
const shimExitGrace = 5 * time.Second

// DeleteTask deletes the stopped (or never started) task id through c and then removes its shim
// and bundle with RemoveShim. A task the shim refuses to delete, because it still runs, is left
// alone: its shim and bundle stay.
func (d *Driver) DeleteTask(ctx context.Context, c *Conn, id string) (*taskapi.DeleteResponse, error) {
	resp, err := c.Task.Delete(ctx, &taskapi.DeleteRequest{ID: id})
	if err != nil {
		return nil, fmt.Errorf("delete %s: %w", id, err)
	}
	if err := d.RemoveShim(ctx, c, id); err != nil {
		return resp, err
	}
	return resp, nil
}

// RemoveShim ends the shim of id once it serves no task: the Shutdown RPC (when c is not nil),
// the shim's delete action, and the bundle. It closes c.
func (d *Driver) RemoveShim(ctx context.Context, c *Conn, id string) error {
	var errs []error
	if c != nil {
		shimPid, _ := bundle.ReadPidFile(filepath.Join(d.Bundle(id), bundle.ShimPidFile))
		// A shim may close the connection before its reply leaves (the steps' shims do, and
		// containerd's runc shim may): that is a shutdown too, as containerd reads it.
		_, err := c.Task.Shutdown(ctx, &taskapi.ShutdownRequest{ID: id})
		// Closed at once, as containerd closes its client after Shutdown: the final shim
		// waits for its clients to hang up before it exits.
		c.Close()
		if err != nil && !errors.Is(err, ttrpc.ErrClosed) {
			errs = append(errs, fmt.Errorf("shutdown %s: %w", id, err))
		} else if shimPid > 0 && Listening(d.TTRPCAddress) {
			// A shim that is shutting down forwards its last events, TaskDelete among them,
			// before it exits; the delete action would stop it half-way. With nobody listening
			// there is nothing to wait for: the events are lost either way.
			waitExit(ctx, shimPid, shimExitGrace)
		}
	}
	if _, err := d.DeleteShim(ctx, id); err != nil {
		// The bundle holds shim.pid: without it a shim that is still alive could not be found
		// again, so it stays for the next attempt.
		return errors.Join(append(errs, err)...)
	}
	if err := d.RemoveBundle(id); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ForceDelete takes task id down whatever state it is in, for a caller that gives up on it: it
// kills every process of the task, waits (up to 10s) for it to stop, and deletes it as
// DeleteTask does. A task that does not exist in the shim is no error.
func (d *Driver) ForceDelete(ctx context.Context, c *Conn, id string) error {
	_, err := c.Task.Kill(ctx, &taskapi.KillRequest{ID: id, Signal: 9, All: true})
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, _ = PollStopped(wctx, c, id, 20*time.Millisecond)
		cancel()
	}
	var errs []error
	if _, err := c.Task.Delete(ctx, &taskapi.DeleteRequest{ID: id}); err != nil && Code(err) != codes.NotFound {
		errs = append(errs, fmt.Errorf("delete %s: %w", id, err))
	}
	if err := d.RemoveShim(ctx, c, id); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// PollStopped asks for the State of id every interval until it is STOPPED, and returns that
// state. It is how a caller learns of an exit from a shim that has no Wait.
func PollStopped(ctx context.Context, c *Conn, id string, interval time.Duration) (*taskapi.StateResponse, error) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		st, err := c.Task.State(ctx, &taskapi.StateRequest{ID: id})
		if err != nil {
			return nil, fmt.Errorf("state %s: %w", id, err)
		}
		if st.Status == task.Status_STOPPED {
			return st, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%s did not stop: %w", id, ctx.Err())
		case <-tick.C:
		}
	}
}

// Listening reports whether something accepts connections on the unix socket at path.
func Listening(path string) bool {
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}

// waitExit waits, up to grace or the end of ctx, for process pid to exit. The shim is not the
// driver's child, so /proc is where its exit shows; a zombie has exited.
func waitExit(ctx context.Context, pid int, grace time.Duration) {
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if p, err := ReadProc(pid); err != nil || p.State == 'Z' {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
