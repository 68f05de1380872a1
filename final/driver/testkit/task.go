// SPDX-License-Identifier: Apache-2.0

// A test container driven through a shim exactly as containerd drives one: bundle, stdio
// FIFOs, the shim's start, Create and Start, and at the end kill, Delete, Shutdown and the
// shim's delete action, with a shim that outlives them failing the test. Mirrors containerd
// v2.4 core/runtime/v2 (TaskManager.Create, shimTask.delete in shim.go).

package testkit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types"
	"github.com/containerd/containerd/api/types/task"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// Buffer is a bytes.Buffer that a copy goroutine may write while the test reads.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TaskOptions describe a test container.
type TaskOptions struct {
	Args []string
	// Overlay mounts the rootfs as an overlay over the busybox rootfs, handed to the shim as
	// CreateTaskRequest.Rootfs the way a snapshotter's mounts are; otherwise the busybox
	// rootfs is the spec's root, read-only, with no mounts.
	Overlay bool
	NullIO  bool // no stdio FIFOs
	// Stdin is written to the task's stdin FIFO, which is opened only after Create returned:
	// the shim must not depend on the writer being there first.
	Stdin string
	// StdinFIFO gives the task a stdin FIFO that the test opens and writes itself
	// (FIFOs.OpenStdin), instead of Stdin.
	StdinFIFO bool
}

// Task is one container driven through a shim exactly as containerd would: a bundle, stdio
// FIFOs read by the test, the shim's start, a ttrpc connection. When the test ends the task is
// killed, deleted and its shim shut down and deleted; a shim that outlives that fails the test.
type Task struct {
	D              *driver.Driver
	ID, Bundle     string
	Conn           *driver.Conn
	FIFOs          *driver.FIFOs
	Stdout, Stderr Buffer
	Mounts         []*types.Mount // the rootfs mounts the Create request carries
	Upper          string         // the overlay's upper directory, with Overlay
	ShimPid        int
	stdin          string
	stdinW         io.WriteCloser
	t              testing.TB // set by NewTask, for the methods that fail the test
	attached       *driver.Attached
	scratch        string // overlay upper and work directories
}

// NewTask prepares task id and starts its shim; it does not Create the task. Everything is
// taken down when the test ends.
func NewTask(t testing.TB, d *driver.Driver, id string, o TaskOptions) *Task {
	t.Helper()
	k, err := OpenTask(d, id, Rootfs(t), o)
	if k != nil {
		k.t = t
		t.Cleanup(func() {
			if err := k.Close(); err != nil {
				t.Error(err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// OpenTask is NewTask for goroutines that may not call t.Fatal: it returns errors, and the
// caller closes the task. rootfs is the busybox rootfs (Rootfs). On error, a non-nil task
// still has to be closed.
func OpenTask(d *driver.Driver, id, rootfs string, o TaskOptions) (*Task, error) {
	k := &Task{D: d, ID: id, stdin: o.Stdin}
	spec := driver.SpecOptions{Args: o.Args, Rootfs: rootfs, Readonly: true}
	if o.Overlay {
		spec.Rootfs, spec.Readonly = "", false
		scratch, err := os.MkdirTemp(filepath.Dir(d.State), "overlay-")
		if err != nil {
			return nil, err
		}
		k.scratch = scratch
		k.Upper = filepath.Join(scratch, "upper")
		work := filepath.Join(scratch, "work")
		for _, dir := range []string{k.Upper, work} {
			if err := os.Mkdir(dir, 0o755); err != nil {
				return k, err
			}
		}
		k.Mounts = []*types.Mount{{
			Type: "overlay", Source: "overlay",
			Options: []string{"lowerdir=" + rootfs, "upperdir=" + k.Upper, "workdir=" + work},
		}}
	}
	dir, err := d.NewBundle(id, spec)
	if err != nil {
		return k, err
	}
	k.Bundle = dir
	if !o.NullIO {
		if k.FIFOs, err = d.NewFIFOs(id, o.Stdin != "" || o.StdinFIFO); err != nil {
			return k, err
		}
		if k.attached, err = k.FIFOs.Attach(context.Background(), nil, &k.Stdout, &k.Stderr); err != nil {
			return k, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := d.StartShim(ctx, id, nil); err != nil {
		return k, err
	}
	if k.ShimPid, err = bundle.ReadPidFile(filepath.Join(k.Bundle, bundle.ShimPidFile)); err != nil {
		return k, err
	}
	if k.Conn, err = d.Connect(ctx, id); err != nil {
		return k, err
	}
	return k, nil
}

// Ctx is a context for one RPC, bounded so that a hung shim fails the test instead of hanging it.
func (k *Task) Ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	k.t.Cleanup(cancel)
	return ctx
}

// CreateRequest is the request containerd would send for this task.
func (k *Task) CreateRequest() *taskapi.CreateTaskRequest {
	r := &taskapi.CreateTaskRequest{ID: k.ID, Bundle: k.Bundle, Rootfs: k.Mounts}
	if k.FIFOs != nil {
		r.Stdin, r.Stdout, r.Stderr = k.FIFOs.Stdin, k.FIFOs.Stdout, k.FIFOs.Stderr
	}
	return r
}

// Create sends the Create RPC and returns the init pid.
func (k *Task) Create() int {
	k.t.Helper()
	resp, err := k.Conn.Task.Create(k.Ctx(), k.CreateRequest())
	if err != nil {
		k.t.Fatalf("Create: %v", err)
	}
	if k.stdin != "" {
		w, err := k.FIFOs.OpenStdin(context.Background())
		if err != nil {
			k.t.Fatal(err)
		}
		k.stdinW = w
		conn := k.Conn
		go func() {
			// Ends once the shim has taken the input, or when Close closes w. Then, as ctr
			// does, CloseIO: the shim keeps a writer of the FIFO open until it is told.
			io.WriteString(w, k.stdin)
			w.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn.Task.CloseIO(ctx, &taskapi.CloseIORequest{ID: k.ID, Stdin: true})
		}()
	}
	return int(resp.Pid)
}

// Start sends the Start RPC.
func (k *Task) Start() {
	k.t.Helper()
	if _, err := k.Conn.Task.Start(k.Ctx(), &taskapi.StartRequest{ID: k.ID}); err != nil {
		k.t.Fatalf("Start: %v", err)
	}
}

// Run creates and starts the task and returns its init pid.
func (k *Task) Run() int {
	k.t.Helper()
	pid := k.Create()
	k.Start()
	return pid
}

// State sends the State RPC.
func (k *Task) State() *taskapi.StateResponse {
	k.t.Helper()
	st, err := k.Conn.Task.State(k.Ctx(), &taskapi.StateRequest{ID: k.ID})
	if err != nil {
		k.t.Fatalf("State: %v", err)
	}
	return st
}

// WaitStatus polls State until the task has status want.
func (k *Task) WaitStatus(want task.Status, timeout time.Duration) *taskapi.StateResponse {
	k.t.Helper()
	var st *taskapi.StateResponse
	Eventually(k.t, timeout, "task "+k.ID+" never became "+want.String(), func() bool {
		st = k.State()
		return st.Status == want
	})
	return st
}

// WaitOutput waits until the task's stdout and stderr are closed: all output has arrived.
func (k *Task) WaitOutput(timeout time.Duration) {
	k.t.Helper()
	done := make(chan struct{})
	go func() { k.attached.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(timeout):
		k.t.Fatalf("output of %s not closed after %v; so far %q / %q", k.ID, timeout, k.Stdout.String(), k.Stderr.String())
	}
}

// Close takes the task down the way containerd does, whatever state it is in: kill, wait for
// the stop, Delete, Shutdown, then the shim's delete action. A shim still alive after that is
// an error.
func (k *Task) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var errs []error
	if k.Conn != nil {
		svc := k.Conn.Task
		if _, err := svc.Kill(ctx, &taskapi.KillRequest{ID: k.ID, Signal: 9, All: true}); err == nil {
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				st, err := svc.State(ctx, &taskapi.StateRequest{ID: k.ID})
				if err != nil || st.Status == task.Status_STOPPED {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		svc.Delete(ctx, &taskapi.DeleteRequest{ID: k.ID})
		svc.Shutdown(ctx, &taskapi.ShutdownRequest{ID: k.ID})
		k.Conn.Close()
	}
	if _, err := os.Stat(k.Bundle); k.Bundle != "" && err == nil {
		if _, err := k.D.DeleteShim(ctx, k.ID); err != nil {
			errs = append(errs, fmt.Errorf("shim delete %s: %w", k.ID, err))
		}
	}
	if k.ShimPid != 0 {
		deadline := time.Now().Add(10 * time.Second)
		for driver.Alive(k.ShimPid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if driver.Alive(k.ShimPid) {
			syscall.Kill(k.ShimPid, syscall.SIGKILL)
			errs = append(errs, fmt.Errorf("shim of %s (pid %d) outlived its delete", k.ID, k.ShimPid))
		}
	}
	if k.attached != nil {
		k.attached.Close()
	}
	if k.stdinW != nil {
		k.stdinW.Close()
	}
	if k.FIFOs != nil {
		k.FIFOs.Remove()
	}
	if _, err := os.Stat(k.Bundle); k.Bundle != "" && err == nil {
		if err := k.D.RemoveBundle(k.ID); err != nil {
			errs = append(errs, err)
		}
	}
	if k.scratch != "" {
		os.RemoveAll(k.scratch)
	}
	return errors.Join(errs...)
}
