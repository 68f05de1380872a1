// SPDX-License-Identifier: Apache-2.0

// The state machine of init and exec processes as data: which operation each state allows,
// where a successful one leads and the error of a refusal, the rules containerd v2.4's runc
// shim spreads over the state types of process/init_state.go, exec_state.go and
// deleted_state.go.

package process

import (
	"fmt"

	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/errdefs"
)

// operation is one whose permission depends on the process's state.
type operation uint8

const (
	opStart   operation = iota
	opKill              // signal the init, or an exec
	opKillAll           // signal every process of the container (Kill with all)
	opPause
	opResume
	opDelete
	opUpdate
	opCheckpoint
	opExec // prepare an exec in the container
	opPids
	opStats
	opResize
	opExit // the process exited: not a request, but it moves the state like one
	numOps
)

// opNames are the names errors give the operations.
var opNames = [numOps]string{
	opStart: "start", opKill: "kill", opKillAll: "kill", opPause: "pause", opResume: "resume",
	opDelete: "delete", opUpdate: "update", opCheckpoint: "checkpoint", opExec: "exec",
	opPids: "pids", opStats: "stats", opResize: "resize", opExit: "exit",
}

// The statuses a process of the shim's can be in, the keys of the tables; deleted (init.go) is
// the last. PAUSING is not one: an init reports running until runc pause has returned
// (containerd's reports pausing meanwhile), and its other changes wait for the pause to end.
const (
	created = task.Status_CREATED
	running = task.Status_RUNNING
	paused  = task.Status_PAUSED
	stopped = task.Status_STOPPED
)

// verdict is what a state answers an operation.
type verdict uint8

const (
	// refuse: FailedPrecondition, or NotFound once the process is deleted (base.stateError).
	refuse verdict = iota
	// allow: the operation goes ahead; with moves, its success moves the process to next.
	allow
	// finished: NotFound, the answer to signalling a process that has exited (base.finished).
	finished
	// notStarted: FailedPrecondition, the answer to signalling an exec that has no process yet.
	notStarted
)

type rule struct {
	verdict verdict
	moves   bool
	next    task.Status
}

var (
	yes  = rule{verdict: allow}
	gone = rule{verdict: finished}
)

// to allows the operation and moves the process to next once it has succeeded.
func to(next task.Status) rule { return rule{verdict: allow, moves: true, next: next} }

// rules gives, for each operation, the rule of each state. A state an operation's row leaves
// out refuses it (the zero rule), and so do all states for an operation a table leaves out.
type rules [numOps]map[task.Status]rule

// initRules is the init's state machine. Where containerd's runc shim answers otherwise:
//   - its state errors have no class (Unknown); here a refusal is FailedPrecondition, or NotFound
//     for a deleted process, and Unknown is kept for runc's own failures;
//   - Kill of a stopped or deleted init is NotFound without a call to runc, which the reference
//     makes (runc says "container not running" or "does not exist", which it maps to NotFound);
//     with all a stopped init's container still gets runc kill --all, as there;
//   - an init created from a checkpoint is CREATED like any other: the reference's
//     createdCheckpointState refuses an exec, this table allows it;
//   - Pids and Stats are not state methods there; here a deleted init refuses them.
//   - an exit while paused moves to stopped without the reference's runc resume: Delete's
//     runc delete --force thaws the frozen cgroup instead.
//
// The resize of an init's terminal is no state operation: the reference resizes in any state.
var initRules = rules{
	opStart:      {created: to(running)},
	opKill:       {created: yes, running: yes, paused: yes, stopped: gone, deleted: gone},
	opKillAll:    {created: yes, running: yes, paused: yes, stopped: yes, deleted: gone},
	opPause:      {running: to(paused)},
	opResume:     {paused: to(running)},
	opDelete:     {created: to(deleted), stopped: to(deleted)},
	opUpdate:     {created: yes, running: yes, paused: yes},
	opCheckpoint: {running: yes, paused: yes},
	opExec:       {created: yes, running: yes},
	opPids:       {created: yes, running: yes, paused: yes, stopped: yes},
	opStats:      {created: yes, running: yes, paused: yes, stopped: yes},
	opExit:       {created: to(stopped), running: to(stopped), paused: to(stopped), stopped: yes, deleted: yes},
}

// execRules is an exec's state machine. An exec's own status is never PAUSED (Status reports its
// container's), so its rows leave paused out. Where containerd's runc shim answers
// otherwise: state errors have a class, as for the init, and a deleted exec's terminal can
// still be resized (the task service forgets a deleted exec, so no request reaches it).
var execRules = rules{
	opStart:  {created: to(running)},
	opKill:   {created: {verdict: notStarted}, running: yes, stopped: gone, deleted: gone},
	opDelete: {created: to(deleted), stopped: to(deleted)},
	opResize: {created: yes, running: yes, deleted: yes},
	opExit:   {created: to(stopped), running: to(stopped), stopped: yes, deleted: yes},
}

// ruleFor is the rule of the process's current state for o. Call with mu held.
func (p *base) ruleFor(o operation) rule {
	return p.rules[o][p.status]
}

// check returns the error for o in the process's current state, nil when the state allows it.
func (p *base) check(o operation) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.checkLocked(o)
}

// checkLocked is check for a caller that holds mu.
func (p *base) checkLocked(o operation) error {
	name := opNames[o]
	switch p.ruleFor(o).verdict {
	case refuse:
		return p.stateError(name)
	case finished:
		return p.finished(name)
	case notStarted:
		return fmt.Errorf("%s: exec %s has not started: %w", name, p.id, errdefs.ErrFailedPrecondition)
	}
	return nil
}

// advance moves the process to where a successful o leads from the state it is in now, which
// may no longer be the state check saw: a process can exit while runc works on it, and then
// the exit's state stands (a Start does not make a stopped process running) unless o leads on
// from there too (a Delete of a created init that exited meanwhile still deletes it). Call
// with mu held.
func (p *base) advance(o operation) {
	if r := p.ruleFor(o); r.verdict == allow && r.moves {
		p.status = r.next
	}
}

// stateError is a state's refusal of op: NotFound for a deleted process, as in containerd's
// deletedState, else FailedPrecondition.
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
