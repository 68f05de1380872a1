// SPDX-License-Identifier: Apache-2.0

// Creating a task as containerd does: a bundle with a default spec, the shim's start action
// and the Create RPC, and on any failure the task taken down again so that nothing of it is
// left. Mirrors containerd v2.4 core/runtime/v2 TaskManager.Create (task_manager.go) and
// ShimManager.Start (shim_manager.go).

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/typeurl/v2"

	"github.com/shimwalk/shimwalk/final/driver"
)

// cleanupTimeout bounds the teardown of a task that failed half-way, which runs even after the
// command's context was cancelled.
const cleanupTimeout = 30 * time.Second

// createTask does what containerd does for a new task: the bundle, the shim's start action, the
// Create RPC. rootfs "" means the busybox rootfs of the state directory; fifos nil means null
// stdio. It returns the connection to the shim and the init pid. On failure nothing of the task
// is left: no bundle, no shim, no container.
func createTask(ctx context.Context, notes io.Writer, d *driver.Driver, id string, args []string, rootfs string, fifos *driver.FIFOs) (*driver.Conn, uint32, error) {
	return createTaskWith(ctx, notes, d, id, args, createOptions{rootfs: rootfs, fifos: fifos})
}

// createOptions are what a new task may have beyond its command.
type createOptions struct {
	rootfs string        // "" for the busybox rootfs of the state directory
	fifos  *driver.FIFOs // nil for null stdio
	// terminal gives the init a terminal (process.terminal in the spec, Terminal in Create).
	terminal bool
	// runtimeBinary is sent as containerd.runc.v1.Options{BinaryName}: the shim runs it
	// instead of runc.
	runtimeBinary string
	// log, without fifos, is the URI sent as both Stdout and Stderr, as containerd sends a
	// container's log URI (ctr run --log-uri): the shim writes to the file or starts the binary.
	log string
}

// createTaskWith is createTask with every option.
func createTaskWith(ctx context.Context, notes io.Writer, d *driver.Driver, id string, args []string, o createOptions) (*driver.Conn, uint32, error) {
	rootfs, fifos := o.rootfs, o.fifos
	if _, err := os.Stat(d.Bundle(id)); err == nil {
		return nil, 0, fmt.Errorf("task %q exists already in namespace %q (shimctl task delete %s)", id, d.Namespace, id)
	}
	root, err := rootfsDir(d.State, rootfs, notes)
	if err != nil {
		return nil, 0, err
	}
	if err := newBundle(d, id, driver.SpecOptions{Args: args, Rootfs: root, Readonly: true}, o); err != nil {
		// EEXIST: another shimctl made this bundle since the check above; it is not ours.
		if !errors.Is(err, os.ErrExist) {
			_ = d.RemoveBundle(id)
		}
		return nil, 0, err
	}
	cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if _, err := d.StartShim(ctx, id, nil); err != nil {
		// The start action may have got as far as launching the long-lived shim.
		return nil, 0, errors.Join(err, d.RemoveShim(cleanup, nil, id))
	}
	c, err := d.Connect(ctx, id)
	if err != nil {
		return nil, 0, errors.Join(err, d.RemoveShim(cleanup, nil, id))
	}
	req := &taskapi.CreateTaskRequest{ID: id, Bundle: d.Bundle(id), Terminal: o.terminal}
	if o.runtimeBinary != "" {
		if req.Options, err = typeurl.MarshalAnyToProto(&options.Options{BinaryName: o.runtimeBinary}); err != nil {
			return nil, 0, errors.Join(fmt.Errorf("encode runtime options: %w", err), d.ForceDelete(cleanup, c, id))
		}
	}
	if fifos != nil {
		req.Stdin, req.Stdout, req.Stderr = fifos.Stdin, fifos.Stdout, fifos.Stderr
	} else if o.log != "" {
		req.Stdout, req.Stderr = o.log, o.log
	}
	resp, err := c.Task.Create(ctx, req)
	if err != nil {
		// A Create cut short by ctx may still have created the container in the shim.
		return nil, 0, errors.Join(fmt.Errorf("create: %w", err), d.ForceDelete(cleanup, c, id))
	}
	return c, resp.Pid, nil
}

// newBundle is driver.NewBundle for a task whose init may have a terminal, or run under
// another OCI runtime than runc.
func newBundle(d *driver.Driver, id string, so driver.SpecOptions, o createOptions) error {
	if !o.terminal && o.runtimeBinary == "" {
		_, err := d.NewBundle(id, so)
		return err
	}
	bundle, err := d.CreateBundle(id)
	if err != nil {
		return err
	}
	if so.CgroupsPath == "" {
		so.CgroupsPath = path.Join(d.CgroupParent, d.Namespace, id)
	}
	spec := driver.DefaultSpec(d.Namespace, id, so)
	if o.terminal {
		spec.Process.Terminal = true
		spec.Process.Env = append(spec.Process.Env, "TERM=xterm")
	}
	if o.runtimeBinary != "" {
		// Another runtime may know only the 1.0 spec (crun 1.8 refuses any other version),
		// and the default spec uses nothing newer.
		spec.Version = oci10
	}
	return driver.WriteSpec(bundle, spec)
}

// oci10 is the runtime-spec version a bundle for another OCI runtime declares.
const oci10 = "1.0.2"

// rootfsDir is the absolute path of the container's root: dir when given, or else the busybox
// rootfs of the state directory, built on first use.
func rootfsDir(state, dir string, notes io.Writer) (string, error) {
	if dir != "" {
		abs, err := filepath.Abs(dir)
		if err != nil {
			return "", fmt.Errorf("rootfs: %w", err)
		}
		if st, err := os.Stat(abs); err != nil || !st.IsDir() {
			return "", fmt.Errorf("rootfs %s is not a directory", abs)
		}
		return abs, nil
	}
	busybox := filepath.Join(state, "rootfs")
	if _, err := os.Stat(filepath.Join(busybox, "bin", "busybox")); err == nil {
		return busybox, nil
	}
	fmt.Fprintf(notes, "note: building a busybox rootfs in %s (once per state directory)\n", busybox)
	if err := os.MkdirAll(state, 0o711); err != nil {
		return "", fmt.Errorf("create state directory: %w", err)
	}
	// Built aside and renamed into place, so that a rootfs that exists is complete, and two
	// shimctl building at once do not mix their work.
	tmp, err := os.MkdirTemp(state, ".rootfs-")
	if err != nil {
		return "", fmt.Errorf("rootfs: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("rootfs: %w", err)
	}
	if err := driver.BuildBusyboxRootfs(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, busybox); err != nil {
		if _, serr := os.Stat(filepath.Join(busybox, "bin", "busybox")); serr == nil {
			return busybox, nil // the other shimctl won
		}
		return "", fmt.Errorf("rootfs: %w", err)
	}
	return busybox, nil
}
