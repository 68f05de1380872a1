// SPDX-License-Identifier: Apache-2.0

// Exit ordering: how reaped pids become process exits, and when each TaskExit may go out.
// The reap loop sees exits in the kernel's order; containerd reads a task's events as its life
// story, so exits are held back here until they fit it:
//   - a TaskExit never comes before its process's TaskStart: an init that exits before runc
//     start has returned (/bin/true) has its exit held by that Start and handled after the
//     TaskStart;
//   - a container's exec exits come before its init's, which containerd takes as the end of
//     the container: the init's TaskExit waits until no exec runs or is being started, and
//     until what the init left behind has been killed;
//   - a pid is known only once runc returns (create, exec, restore), and the process may have
//     been reaped before that: while such a call is in flight, exits of unknown pids are kept
//     for it to claim, and dropped once no call is left. Only within that window can an
//     adopted orphan's exit be taken for a new process that was given its pid.
//
// It mirrors containerd v2.4 cmd/containerd-shim-runc-v2/task/service.go: processExits, preStart
// and the handleStarted it returns, handleInitExit, handleProcessExit, and the state they guard
// with lifecycleMu (running, runningExecs, containerInitExit). Here Service.mu stands for
// lifecycleMu, and each container keeps its own count of running execs and its init's exit.

package task

import (
	"context"
	"time"

	eventstypes "github.com/containerd/containerd/api/events"
	"github.com/containerd/errdefs"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/shimwalk/shimwalk/final/internal/bundle"
	"github.com/shimwalk/shimwalk/final/shim/events"
	"github.com/shimwalk/shimwalk/final/shim/process"
	"github.com/shimwalk/shimwalk/final/shim/reaper"
)

// heldExits are the exits of an init reaped while Starts of it are in flight: each Start
// counts itself in, and the last one out handles them, after its TaskStart.
type heldExits struct {
	starts int
	exits  []reaper.Exit
}

// running is a process whose exit is still to come.
type running struct {
	c    *container
	exec *process.Exec // nil for the init
}

// unlock releases mu, then kills what the inits that exited meanwhile left behind: runc kill
// is too slow to run under mu, and the kill must come before their TaskExit.
func (s *Service) unlock() {
	orphaned := s.orphaned
	s.orphaned = nil
	s.mu.Unlock()
	for _, c := range orphaned {
		s.killOrphans(c)
	}
}

// killOrphans kills what is left in c once its init has exited, unless the init took it down
// with its PID namespace, and then lets the init's TaskExit go.
func (s *Service) killOrphans(c *container) {
	if process.KillAllOnExit(c.init.Bundle) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := c.init.KillAll(ctx); err != nil && !errdefs.IsNotFound(err) {
			s.cfg.Log.Error("kill what the init left", "id", c.id, "err", err)
		}
		cancel()
	}
	s.mu.Lock()
	c.killing = false
	s.finishInit(c)
	s.unlock()
}

// holdExits keeps the exits of the init pid from being handled until releaseExits: they wait
// for the TaskStart of the Start that calls it. A second Start of the same init shares the
// hold, so that neither drops what the other holds. Call with mu held.
func (s *Service) holdExits(pid int) *heldExits {
	held := s.starting[pid]
	if held == nil {
		held = &heldExits{}
		s.starting[pid] = held
	}
	held.starts++
	return held
}

// releaseExits ends one Start's hold on the exits of pid; the last one out handles them. Call
// with mu held, after that Start's TaskStart.
func (s *Service) releaseExits(pid int, held *heldExits) {
	held.starts--
	if held.starts > 0 {
		return
	}
	delete(s.starting, pid)
	for _, x := range held.exits {
		s.handleExit(x)
	}
}

// pidPending counts in a Create, exec Start or restore whose pid is not known yet: until its
// pidKnown, exits of unknown pids are kept for it to claim. Call with mu held.
func (s *Service) pidPending() {
	s.pidless++
}

// claim handles the exit of pid if it was reaped while its pid was not known yet. Call with
// mu held.
func (s *Service) claim(pid int) {
	for i, x := range s.unclaimed {
		if x.Pid == pid {
			s.unclaimed = append(s.unclaimed[:i], s.unclaimed[i+1:]...)
			s.handleExit(x)
			return
		}
	}
}

// pidKnown ends one Create or exec Start in flight. Call with mu held.
func (s *Service) pidKnown() {
	s.pidless--
	if s.pidless == 0 {
		s.unclaimed = nil // whatever is left was an orphan the shim adopted
	}
}

// HandleExits turns reaped pids into process exits until ctx ends.
func (s *Service) HandleExits(ctx context.Context, q *reaper.Queue) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-q.Ready():
		}
		for _, x := range q.Take() {
			s.mu.Lock()
			if held := s.starting[x.Pid]; held != nil {
				held.exits = append(held.exits, x)
			} else {
				s.handleExit(x)
			}
			s.unlock()
		}
	}
}

// handleExit records x for the process it belongs to. Call with mu held.
func (s *Service) handleExit(x reaper.Exit) {
	r, ok := s.running[x.Pid]
	if !ok {
		if s.pidless > 0 {
			s.unclaimed = append(s.unclaimed, x)
		}
		return
	}
	delete(s.running, x.Pid)
	c := r.c
	if r.exec != nil {
		s.publishOOM(c)
		s.exited(c, r.exec.ID(), x, r.exec.SetExited)
		c.runningExecs--
		s.finishInit(c)
		return
	}
	c.initExit = &x
	// Its TaskExit waits for what it leaves: processes in a PID namespace it did not own, to be
	// killed once mu is released, and execs, whose exits containerd expects first. Execs die
	// with the init's PID namespace; the kill is for those that do not share that fate.
	c.killing = true
	s.orphaned = append(s.orphaned, c)
	for _, e := range c.execs {
		_ = e.Kill(context.Background(), 9) // refused for an exec that is not running
	}
}

// finishInit sends the init's TaskExit once nothing holds it any more. Call with mu held.
func (s *Service) finishInit(c *container) {
	if c.initExit == nil || c.exitSent || c.killing || c.runningExecs > 0 {
		return
	}
	c.exitSent = true
	s.initExited(c, *c.initExit)
}

func (s *Service) initExited(c *container, x reaper.Exit) {
	s.publishOOM(c)
	// Before the event: whoever learns of the exit may delete the task at once, and the record
	// must already be there should the shim die in between.
	if err := bundle.WriteExit(c.init.Bundle, bundle.ExitRecord{Pid: x.Pid, ExitStatus: x.Status, ExitedAt: x.At}); err != nil {
		s.cfg.Log.Error("record exit", "id", c.id, "err", err)
	}
	s.exited(c, c.id, x, c.init.SetExited)
}

// publishOOM publishes TaskOOM if the kernel OOM-killed in c's cgroup since the last report.
// Call with mu held: the check and the publish must not be split by an exit's TaskExit.
func (s *Service) publishOOM(c *container) bool {
	if !c.init.OOMKilled() {
		return false
	}
	s.cfg.Log.Info("oom", "id", c.id)
	s.cfg.Events.Publish(events.TopicOOM, &eventstypes.TaskOOM{ContainerID: c.id})
	return true
}

// CheckOOM is the OOM watcher's cgroups.Notify: it publishes TaskOOM for a kill in container
// id not reported yet, and reports whether it did or the container is gone.
func (s *Service) CheckOOM(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.containers[id]
	if !ok {
		return true
	}
	return s.publishOOM(c)
}

func (s *Service) exited(c *container, id string, x reaper.Exit, set func(int, time.Time)) {
	set(x.Status, x.At)
	s.cfg.Log.Info("exited", "id", c.id, "process", id, "pid", x.Pid, "status", x.Status)
	s.cfg.Events.Publish(events.TopicExit, &eventstypes.TaskExit{
		ContainerID: c.id, ID: id, Pid: uint32(x.Pid), ExitStatus: uint32(x.Status), ExitedAt: timestamppb.New(x.At),
	})
}
