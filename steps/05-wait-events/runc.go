// SPDX-License-Identifier: Apache-2.0

// The container's init process, driven through the runc CLI (since step 03). Mirrors containerd
// v2.4 cmd/containerd-shim-runc-v2/process/init.go (Create, Start, Kill, Delete, runtimeError) and
// cmd/containerd-shim-runc-v2/runc/container.go NewContainer, without the state machine that
// final/ adds: runc's own state answers what the shim cannot know yet.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"
	runc "github.com/containerd/go-runc"
	"golang.org/x/sys/unix"
)

const defaultRuncRoot = "/run/shimwalk/runc"

// runcBinary is the runc the shim drives: SHIMWALK_RUNC when set (the BinaryName of containerd's
// runtime options plays this part in final/; the tests put a runc that fails on command there),
// else the first runc on PATH.
func runcBinary() string {
	if b := os.Getenv("SHIMWALK_RUNC"); b != "" {
		return b
	}
	return "runc"
}

// initProcess is the container's first process.
type initProcess struct {
	id, bundle string
	runtime    *runc.Runc
	pid        int
	io         *stdio
	rootfs     string // where the request's mounts were mounted; "" when there were none
	stdin      string
	stdout     string
	stderr     string
	exited     *exit         // guarded by the service's mu; set once, by setExited
	done       chan struct{} // closed by setExited: every Wait wakes at once
	deleting   bool          // guarded by the service's mu: a Delete is under way
}

// setExited records the exit and wakes every waiter. Call it with the service's mu held, once.
func (p *initProcess) setExited(e exit) {
	p.exited = &e
	close(p.done)
}

// newRuntime returns the runc CLI for a namespace. Each namespace gets its own runc root, so
// equal ids in different namespaces do not collide (containerd uses /run/containerd/runc/<ns>).
func newRuntime(namespace, bundle string) *runc.Runc {
	root := os.Getenv("SHIMWALK_RUNC_ROOT")
	if root == "" {
		root = defaultRuncRoot
	}
	return &runc.Runc{
		Command:   runcBinary(),
		Root:      filepath.Join(root, namespace),
		Log:       filepath.Join(bundle, "log.json"),
		LogFormat: runc.JSON,
		// A runc the shim started must not outlive the shim half-way through an operation.
		PdeathSignal: unix.SIGKILL,
	}
}

// createInit mounts the rootfs, wires stdio and runs `runc create`. On failure it leaves
// nothing behind: no mount, no runc state, no copy goroutine.
func createInit(ctx context.Context, namespace string, r *taskapi.CreateTaskRequest) (_ *initProcess, err error) {
	p := &initProcess{
		id: r.ID, bundle: r.Bundle, runtime: newRuntime(namespace, r.Bundle),
		stdin: r.Stdin, stdout: r.Stdout, stderr: r.Stderr, done: make(chan struct{}),
	}
	if len(r.Rootfs) > 0 {
		p.rootfs = filepath.Join(r.Bundle, "rootfs")
		if err := mountRootfs(r.Rootfs, p.rootfs); err != nil {
			return nil, err
		}
		defer func() {
			if err != nil {
				_ = unmountAll(p.rootfs)
			}
		}()
	}
	p.io, err = newStdio(r.Stdin, r.Stdout, r.Stderr)
	if err != nil {
		return nil, err
	}
	pidFile := filepath.Join(r.Bundle, "init.pid")
	opts := &runc.CreateOpts{IO: p.io, PidFile: pidFile}
	mark := logEnd(p.runtime.Log)
	if err := p.runtime.Create(ctx, r.ID, r.Bundle, opts); err != nil {
		cerr := p.runtimeError(err, "runc create", mark)
		// runc may have got as far as leaving state (and a waiting `runc init`) behind.
		_ = p.runtime.Delete(context.WithoutCancel(ctx), r.ID, &runc.DeleteOpts{Force: true})
		p.io.Close()
		return nil, cerr
	}
	pid, err := runc.ReadPidFile(pidFile)
	if err != nil {
		_ = p.runtime.Delete(context.WithoutCancel(ctx), r.ID, &runc.DeleteOpts{Force: true})
		p.io.Close()
		return nil, fmt.Errorf("read init pid: %w", err)
	}
	p.pid = pid
	return p, nil
}

func (p *initProcess) start(ctx context.Context) error {
	mark := logEnd(p.runtime.Log)
	if err := p.runtime.Start(ctx, p.id); err != nil {
		return p.runtimeError(err, "runc start", mark)
	}
	return nil
}

// kill signals the init, or with all every process of the container. Its error wraps errGone
// only when runc said there is nothing left to signal: callers take NotFound from Kill for
// "already gone" and stop trying, so a runc that failed, hung or was killed must not pass for
// that (containerd's checkKillError in process/utils.go draws the same line).
func (p *initProcess) kill(ctx context.Context, signal uint32, all bool) error {
	mark := logEnd(p.runtime.Log)
	if err := p.runtime.Kill(ctx, p.id, int(signal), &runc.KillOpts{All: all}); err != nil {
		kerr := p.runtimeError(err, "runc kill", mark)
		if saidGone(err) {
			return fmt.Errorf("%w: %w", kerr, errGone)
		}
		return kerr
	}
	return nil
}

// errGone marks a kill that found nothing to signal.
var errGone = errors.New("nothing left to signal")

// saidGone reports whether runc refused because the container or its process is gone. Only the
// call's own output counts (go-runc puts runc's stderr in err): runc's log also holds the errors
// of every earlier call, and an old "container not running" must not speak for a runc that died
// without a word.
func saidGone(err error) bool {
	msg := strings.ToLower(err.Error())
	for _, gone := range []string{"container not running", "does not exist", "no such process", "process already finished"} {
		if strings.Contains(msg, gone) {
			return true
		}
	}
	return false
}

// status asks runc, for what the shim cannot know by itself: created, running or paused.
func (p *initProcess) status(ctx context.Context) (task.Status, error) {
	mark := logEnd(p.runtime.Log)
	c, err := p.runtime.State(ctx, p.id)
	if err != nil {
		return task.Status_UNKNOWN, p.runtimeError(err, "runc state", mark)
	}
	switch c.Status {
	case "created":
		return task.Status_CREATED, nil
	case "running":
		return task.Status_RUNNING, nil
	case "paused", "pausing":
		return task.Status_PAUSED, nil
	case "stopped":
		return task.Status_STOPPED, nil
	}
	return task.Status_UNKNOWN, nil
}

// delete removes the container from runc, waits for its output to be delivered and unmounts
// the rootfs. The container must have stopped (or never started).
func (p *initProcess) delete(ctx context.Context) error {
	// A container runc no longer knows (deleted by hand, say) is as deleted as can be; failing
	// here would leave a task that can never be removed. Only this call's own output says so.
	mark := logEnd(p.runtime.Log)
	if err := p.runtime.Delete(ctx, p.id, nil); err != nil && !strings.Contains(err.Error(), "does not exist") {
		return p.runtimeError(err, "runc delete", mark)
	}
	// Every process of the container is gone, so the pipes are at EOF; the bound only guards
	// against a process that escaped the container with a copy of the pipe.
	done := make(chan struct{})
	go func() { p.io.wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	p.io.Close()
	if p.rootfs != "" {
		if err := unmountAll(p.rootfs); err != nil {
			return err
		}
	}
	return nil
}

// runtimeError prefers runc's own last error message, from its JSON log, over the bare exit
// status go-runc reports: "exec: \"nosuch\": executable file not found in $PATH" says more
// than "exit status 1". Only what the failed call wrote counts, from mark (logEnd before the
// call) on: the log keeps every earlier call's errors, which say nothing about this one.
func (p *initProcess) runtimeError(err error, what string, mark int64) error {
	if msg := lastRuncError(p.runtime.Log, mark); msg != "" {
		return fmt.Errorf("%s: %s", what, msg)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// logEnd is the size of runc's log: where the next call's lines will begin.
func logEnd(logPath string) int64 {
	st, err := os.Stat(logPath)
	if err != nil {
		return 0
	}
	return st.Size()
}

// lastRuncError is the message of the last error runc logged at logPath from offset from on.
func lastRuncError(logPath string, from int64) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return ""
	}
	var msg string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		var entry struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
		}
		if json.Unmarshal(sc.Bytes(), &entry) == nil && (entry.Level == "error" || entry.Level == "fatal") {
			msg = entry.Msg
		}
	}
	return strings.TrimSpace(msg)
}

var errNotCreated = errors.New("no task has been created")
