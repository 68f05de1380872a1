// SPDX-License-Identifier: Apache-2.0

// The state machine of init and exec processes: the errors with which a state refuses an
// operation, as containerd v2.4's runc shim answers them from the state types of
// process/init_state.go, exec_state.go and deleted_state.go.

package process

import (
	"fmt"

	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
)

func (p *base) stateError(op string) error {
	switch p.status {
	case task.Status_UNKNOWN:
		return fmt.Errorf("%s: process %s is deleted: %w", op, p.id, errdefs.ErrNotFound)
	case task.Status_STOPPED:
		return fmt.Errorf("%s: process %s has already exited: %w", op, p.id, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("%s: process %s is %s: %w", op, p.id, statusName(p.status), errdefs.ErrFailedPrecondition)
}

// finished is the error for signalling a process that has exited or was deleted: NotFound and
// nothing else, as containerd's runc shim answers ("process already finished"). Callers such as
// CRI's StopContainer take NotFound as "nothing left to stop"; joined with stateError's
// FailedPrecondition, the error would travel as FailedPrecondition, the first class errgrpc finds.
func (p *base) finished(op string) error {
	return fmt.Errorf("%s: process %s has already finished: %w", op, p.id, errdefs.ErrNotFound)
}

func statusName(s task.Status) string {
	switch s {
	case task.Status_CREATED:
		return "created"
	case task.Status_RUNNING:
		return "running"
	case task.Status_PAUSED:
		return "paused"
	case task.Status_PAUSING:
		return "pausing"
	case task.Status_STOPPED:
		return "stopped"
	}
	return "deleted"
}
