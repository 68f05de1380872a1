// SPDX-License-Identifier: Apache-2.0

// The delete action, which containerd runs when it cannot reach a task's shim: runc's state and
// the rootfs removed, a dead shim's socket too, and the init's exit reported, as containerd
// v2.4's runc shim does in manager.Stop (cmd/containerd-shim-runc-v2/manager/manager_linux.go).

package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/shimwalk/shimwalk/final/internal/bundle"
	"github.com/shimwalk/shimwalk/final/shim/process"
)

// deleteAction is what containerd runs when it can no longer reach a task's shim: remove the
// container from runc (killing what is left), unmount its rootfs, and report its exit, the
// real one from exit.json when the shim saw it, else 128+SIGKILL. It leaves a live shim alone:
// grouped containers may share it, and containerd shuts shims down with the Shutdown RPC.
func deleteAction(f flags) error {
	dir := f.bundle
	if dir == "" {
		dir = "."
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The runc binary and root the shim used, which the runtime options may have changed.
	opts, err := bundle.LoadOptions(dir)
	if err != nil {
		return err
	}
	if opts.Root == "" {
		opts.Root = runcRoot()
	}
	// A failure to clean up is logged, not returned: containerd takes the exit of a failed
	// delete action for the task's (255), while exit.json knows the real one, and it retries
	// nothing that would do better. containerd logs the delete action's stderr as warnings.
	if err := process.ForceDelete(ctx, opts, f.namespace, f.id, dir); err != nil {
		fmt.Fprintf(os.Stderr, "%s: delete %s: cleanup incomplete, reporting the recorded exit: %s\n",
			filepath.Base(os.Args[0]), f.id, errorLine(err))
	}
	removeStaleSocket(dir)
	x := recoverExit(dir)
	out, err := proto.Marshal(&taskapi.DeleteResponse{
		Pid: uint32(x.Pid), ExitStatus: uint32(x.ExitStatus), ExitedAt: timestamppb.New(x.ExitedAt),
	})
	if err != nil {
		return fmt.Errorf("marshal delete response: %w", err)
	}
	_, err = os.Stdout.Write(out)
	return err
}

// recoverExit is the init's exit as exit.json recorded it, or 128+SIGKILL with the pid of
// init.pid: runc delete --force killed it.
func recoverExit(dir string) bundle.ExitRecord {
	if r, err := bundle.ReadExit(dir); err == nil {
		return r
	}
	r := bundle.ExitRecord{ExitStatus: 128 + int(unix.SIGKILL), ExitedAt: time.Now()}
	if pid, err := bundle.ReadPidFile(filepath.Join(dir, bundle.InitPidFile)); err == nil {
		r.Pid = pid
	}
	return r
}

// removeStaleSocket removes the socket named in the bundle's address file when nobody listens
// on it any more: the shim that owned it died without cleaning up.
func removeStaleSocket(dir string) {
	address, err := bundle.ReadAddress(dir)
	if err != nil {
		return
	}
	path, ok := strings.CutPrefix(address, "unix://")
	if !ok || !filepath.IsAbs(path) {
		return
	}
	// Only a socket: connecting to any other file is refused too, and the address file is no
	// licence to remove whatever it names.
	if st, err := os.Lstat(path); err != nil || st.Mode().Type() != os.ModeSocket {
		return
	}
	conn, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		conn.Close()
		return
	}
	if errors.Is(err, unix.ECONNREFUSED) {
		os.Remove(path)
	}
}
