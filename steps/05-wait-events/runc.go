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
		Command:   "runc",
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
	if err := p.runtime.Create(ctx, r.ID, r.Bundle, opts); err != nil {
		cerr := p.runtimeError(err, "runc create")
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
	if err := p.runtime.Start(ctx, p.id); err != nil {
		return p.runtimeError(err, "runc start")
	}
	return nil
}

func (p *initProcess) kill(ctx context.Context, signal uint32, all bool) error {
	if err := p.runtime.Kill(ctx, p.id, int(signal), &runc.KillOpts{All: all}); err != nil {
		return p.runtimeError(err, "runc kill")
	}
	return nil
}

// status asks runc, for what the shim cannot know by itself: created, running or paused.
func (p *initProcess) status(ctx context.Context) (task.Status, error) {
	c, err := p.runtime.State(ctx, p.id)
	if err != nil {
		return task.Status_UNKNOWN, p.runtimeError(err, "runc state")
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
	// here would leave a task that can never be removed.
	if err := p.runtime.Delete(ctx, p.id, nil); err != nil && !strings.Contains(lastRuncError(p.runtime.Log)+err.Error(), "does not exist") {
		return p.runtimeError(err, "runc delete")
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
// than "exit status 1".
func (p *initProcess) runtimeError(err error, what string) error {
	if msg := lastRuncError(p.runtime.Log); msg != "" {
		return fmt.Errorf("%s: %s", what, msg)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func lastRuncError(logPath string) string {
	f, err := os.Open(logPath)
	if err != nil {
		return ""
	}
	defer f.Close()
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
