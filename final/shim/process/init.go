// SPDX-License-Identifier: Apache-2.0

// A container's init process: its rootfs mounted, its stdio wired and runc create run at
// Create (or the checkpoint recorded, to be restored at Start), then driven through runc, as
// containerd v2.4's runc.NewContainer, process.Init and its states (init_state.go) do.

package process

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/api/types/task"
	runc "github.com/containerd/go-runc"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/shimwalk/shimwalk/final/internal/bundle"
	"github.com/shimwalk/shimwalk/final/shim/cgroups"
	"github.com/shimwalk/shimwalk/final/shim/stdio"
)

// deleted is the status of a process after Delete: it exists for no one any more.
const deleted = task.Status_UNKNOWN

// CreateConfig is what Create needs to make a container's init process.
type CreateConfig struct {
	ID, Bundle, Namespace string
	Rootfs                []*types.Mount
	Stdio                 stdio.Config
	Checkpoint            string // restore from this image directory instead of creating
	ParentCheckpoint      string
	Options               bundle.Options
	// Monitor starts runc and logging binaries so that their exits go to their callers.
	Monitor runc.ProcessMonitor
}

// Init is a container's first process.
type Init struct {
	base
	Bundle    string
	namespace string
	runtime   *runc.Runc
	opts      bundle.Options
	rootfs    string            // where the request's mounts were mounted; "" when there were none
	restore   *runc.RestoreOpts // guarded by mu; the checkpoint Start restores, until it has
	monitor   runc.ProcessMonitor
	cg        *cgroups.Group // guarded by mu; looked up by the first Stats, or at Start
	oom       *oomCount      // guarded by mu; nil without a memory cgroup

	// ops serialises the runc calls that change the container's state, so that, say, a
	// Delete never runs in the middle of a Start. Kill does not take it: it must always get
	// through.
	ops sync.Mutex
}

// NewInit mounts the rootfs, wires stdio and runs runc create (or runc restore). On failure it
// leaves nothing behind: no mount, no runc state, no copy goroutine.
func NewInit(ctx context.Context, cfg CreateConfig) (_ *Init, err error) {
	// The caller has run bundle.Check before writing anything into the bundle; reading a
	// config.json of up to MaxSpecSize twice per Create would buy nothing.
	if err := bundle.PrepareRuncLog(cfg.Bundle); err != nil {
		return nil, err
	}
	p := &Init{
		base:      newBase(cfg.ID, cfg.Stdio, &initRules),
		Bundle:    cfg.Bundle,
		namespace: cfg.Namespace,
		runtime:   newRuntime(cfg.Options, cfg.Namespace, cfg.Bundle),
		opts:      cfg.Options,
		monitor:   cfg.Monitor,
	}
	if len(cfg.Rootfs) > 0 {
		p.rootfs = filepath.Join(cfg.Bundle, bundle.RootfsDir)
		if err := mountRootfs(cfg.Rootfs, p.rootfs); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				_ = unmountAll(p.rootfs)
			}
		}()
	}
	var (
		rio    runc.IO
		socket runc.ConsoleSocket
	)
	if cfg.Stdio.Terminal {
		c, err := stdio.NewConsole(cfg.Stdio, cfg.ID, cfg.Namespace, cfg.Monitor)
		if err != nil {
			return nil, err
		}
		p.console, p.io, socket = c, c, c.Socket()
	} else {
		pipes, err := stdio.Open(cfg.Stdio, cfg.ID, cfg.Namespace, cfg.Options.IoUID, cfg.Options.IoGID, cfg.Monitor)
		if err != nil {
			return nil, err
		}
		p.io, rio = pipes, pipes
	}
	defer func() {
		if err != nil {
			p.io.Close()
		}
	}()

	pidFile := filepath.Join(cfg.Bundle, bundle.InitPidFile)
	if cfg.Checkpoint != "" {
		// As containerd's runc shim does: the checkpoint is recorded now and restored by
		// Start, which containerd calls next and which would refuse a running task. Until
		// then the task is CREATED with no process (pid 0).
		p.restore = &runc.RestoreOpts{
			CheckpointOpts: runc.CheckpointOpts{
				ImagePath: cfg.Checkpoint, WorkDir: p.opts.CriuWorkPath, ParentPath: cfg.ParentCheckpoint,
			},
			IO: rio, PidFile: pidFile, ConsoleSocket: socket, NoPivot: p.opts.NoPivotRoot,
			Detach: true, NoSubreaper: true,
		}
		return p, nil
	}
	pid, err := p.created(ctx, "create", pidFile, "init pid", func() error {
		return p.runtime.Create(ctx, cfg.ID, cfg.Bundle, &runc.CreateOpts{
			IO: rio, PidFile: pidFile, ConsoleSocket: socket,
			NoPivot: p.opts.NoPivotRoot, NoNewKeyring: p.opts.NoNewKeyring,
		})
	})
	if err != nil {
		return nil, err
	}
	p.pid = pid
	// runc init waits in the container's cgroup now: the count from here on is this container's.
	p.oom = newOOMCount(pid)
	return p, nil
}

// Start runs runc start on a created container.
func (p *Init) Start(ctx context.Context) error {
	p.ops.Lock()
	defer p.ops.Unlock()
	p.mu.Lock()
	if err := p.checkLocked(opStart); err != nil {
		p.mu.Unlock()
		return err
	}
	restore := p.restore
	p.mu.Unlock()
	if restore != nil {
		return p.restoreStart(ctx, restore)
	}
	mark := logEnd(p.runtime.Log)
	if err := p.runtime.Start(ctx, p.id); err != nil {
		return p.runtimeError(err, "start", mark)
	}
	p.mu.Lock()
	p.advance(opStart)
	p.mu.Unlock()
	// While the pid still names the init: Stats keeps working after the exit, until Delete.
	_, _ = p.cgroup()
	return nil
}

// created runs call, a runc create or restore, then attaches the terminal and reads the init's
// pid, called pidName in an error. When anything failed, runc may have got as far as leaving
// state (and a waiting runc init) behind: runc delete --force takes it away.
func (p *Init) created(ctx context.Context, op, pidFile, pidName string, call func() error) (int, error) {
	undo := func() { _ = p.runtime.Delete(context.WithoutCancel(ctx), p.id, &runc.DeleteOpts{Force: true}) }
	mark := logEnd(p.runtime.Log)
	if err := call(); err != nil {
		rerr := p.runtimeError(err, op, mark)
		undo()
		return 0, rerr
	}
	if p.console != nil {
		if err := p.console.Attach(); err != nil {
			undo()
			return 0, err
		}
	}
	pid, err := runc.ReadPidFile(pidFile)
	if err != nil {
		undo()
		return 0, fmt.Errorf("read %s: %w", pidName, err)
	}
	return pid, nil
}

// Restoring reports whether the init is still to be restored from a checkpoint by Start: its
// pid is known only once Start has returned.
func (p *Init) Restoring() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.restore != nil
}

// restoreStart runs runc restore for a container created from a checkpoint. A restore that
// fails leaves the task CREATED and, as before it, without runc state.
func (p *Init) restoreStart(ctx context.Context, opts *runc.RestoreOpts) error {
	pid, err := p.created(ctx, "restore", opts.PidFile, "restored init pid", func() error {
		_, err := p.runtime.Restore(ctx, p.id, p.Bundle, opts)
		return err
	})
	if err != nil {
		return err
	}
	oom := newOOMCount(pid)
	p.mu.Lock()
	p.pid, p.oom, p.restore = pid, oom, nil
	p.advance(opStart)
	p.mu.Unlock()
	_, _ = p.cgroup()
	return nil
}

// Kill signals the container's init, or with all every process in it.
func (p *Init) Kill(ctx context.Context, signal uint32, all bool) error {
	o := opKill
	if all {
		// A stopped init may have left processes behind in a PID namespace or cgroup it did
		// not own: they are still the container's to kill.
		o = opKillAll
	}
	if err := p.check(o); err != nil {
		return err
	}
	mark := logEnd(p.runtime.Log)
	if err := p.runtime.Kill(ctx, p.id, int(signal), &runc.KillOpts{All: all}); err != nil {
		return p.killError(err, mark)
	}
	return nil
}

// Pause freezes every process of the container.
func (p *Init) Pause(ctx context.Context) error {
	return p.change(ctx, opPause, func() error {
		return p.runtime.Pause(ctx, p.id)
	})
}

// Resume thaws a paused container.
func (p *Init) Resume(ctx context.Context) error {
	return p.change(ctx, opResume, func() error {
		return p.runtime.Resume(ctx, p.id)
	})
}

// change runs a runc call that moves the container from one state to another.
func (p *Init) change(ctx context.Context, o operation, call func() error) error {
	p.ops.Lock()
	defer p.ops.Unlock()
	if err := p.check(o); err != nil {
		return err
	}
	mark := logEnd(p.runtime.Log)
	if err := call(); err != nil {
		return p.runtimeError(err, opNames[o], mark)
	}
	p.mu.Lock()
	p.advance(o)
	p.mu.Unlock()
	return nil
}

// Delete removes the container from runc, waits for its output to be delivered, unmounts the
// rootfs. The container must be stopped, or created and never started.
func (p *Init) Delete(ctx context.Context) error {
	p.ops.Lock()
	defer p.ops.Unlock()
	p.mu.Lock()
	status := p.status
	if err := p.checkLocked(opDelete); err != nil {
		p.mu.Unlock()
		return err
	}
	// A container created from a checkpoint and never restored has no process: nothing will
	// exit to end its Waits or its output.
	neverRan := p.restore != nil
	p.mu.Unlock()
	// A created container's init still waits in runc init: --force kills it.
	force := status == task.Status_CREATED
	mark := logEnd(p.runtime.Log)
	err := p.runtime.Delete(ctx, p.id, &runc.DeleteOpts{Force: force})
	if err != nil && status == task.Status_STOPPED && !p.notExist(err, mark) {
		// An init that died while its container was paused leaves a frozen cgroup, which runc
		// takes for a paused container and will not delete; --force thaws and removes it.
		mark = logEnd(p.runtime.Log)
		err = p.runtime.Delete(ctx, p.id, &runc.DeleteOpts{Force: true})
	}
	if err != nil && !p.notExist(err, mark) {
		return p.runtimeError(err, "delete", mark)
	}
	if neverRan {
		p.mu.Lock()
		io := p.io
		p.io = nil
		p.release()
		p.mu.Unlock()
		if io != nil {
			io.Close()
		}
	} else {
		p.closeIO()
	}
	if p.rootfs != "" {
		if err := unmountAll(p.rootfs); err != nil {
			return err
		}
	}
	p.mu.Lock()
	p.advance(opDelete)
	p.mu.Unlock()
	return nil
}

// Pids lists the pids of every process in the container. A stopped container lists its init
// until Delete, as the unreaped zombie it stands for: containerd 2.x, reloading its shims after
// a restart, deletes a shim whose task lists no process as leaked, and with it the exit it
// has not learned yet (containerd's own runc shim loses such exits).
func (p *Init) Pids(ctx context.Context) ([]int, error) {
	p.mu.Lock()
	err := p.checkLocked(opPids)
	status, pid := p.status, p.pid
	p.mu.Unlock()
	switch {
	case err != nil:
		return nil, err
	case status == task.Status_STOPPED:
		return []int{pid}, nil
	}
	mark := logEnd(p.runtime.Log)
	pids, err := p.runtime.Ps(ctx, p.id)
	if err != nil {
		return nil, p.runtimeError(err, "ps", mark)
	}
	return pids, nil
}

// Update applies new resource limits to the running container.
func (p *Init) Update(ctx context.Context, r *specs.LinuxResources) error {
	p.ops.Lock()
	defer p.ops.Unlock()
	if err := p.check(opUpdate); err != nil {
		return err
	}
	mark := logEnd(p.runtime.Log)
	if err := p.runtime.Update(ctx, p.id, r); err != nil {
		return p.runtimeError(err, "update", mark)
	}
	return nil
}

// CheckpointConfig is what Checkpoint needs.
type CheckpointConfig struct {
	ImagePath, WorkDir string
	Exit               bool // stop the container after the dump (else it keeps running)
	AllowOpenTCP       bool
	AllowExternalUnix  bool
	AllowTerminal      bool
	FileLocks          bool
	EmptyNamespaces    []string
}

// Checkpoint dumps the container with CRIU through runc checkpoint.
func (p *Init) Checkpoint(ctx context.Context, c CheckpointConfig) error {
	p.ops.Lock()
	defer p.ops.Unlock()
	if err := p.check(opCheckpoint); err != nil {
		return err
	}
	work := c.WorkDir
	if work == "" {
		work = filepath.Join(p.Bundle, "criu-work")
	}
	var actions []runc.CheckpointAction
	if !c.Exit {
		actions = append(actions, runc.LeaveRunning)
	}
	mark := logEnd(p.runtime.Log)
	err := p.runtime.Checkpoint(ctx, p.id, &runc.CheckpointOpts{
		ImagePath: c.ImagePath, WorkDir: work, AllowOpenTCP: c.AllowOpenTCP,
		AllowExternalUnixSockets: c.AllowExternalUnix, AllowTerminal: c.AllowTerminal,
		FileLocks: c.FileLocks, EmptyNamespaces: c.EmptyNamespaces,
	}, actions...)
	if err != nil {
		return fmt.Errorf("%w (see %s)", p.runtimeError(err, "checkpoint", mark), filepath.Join(work, "dump.log"))
	}
	return nil
}
