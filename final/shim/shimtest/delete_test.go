// SPDX-License-Identifier: Apache-2.0

// The delete action cleans up best-effort and reports the recorded exit, as the Stop of
// containerd's runc shim (cmd/containerd-shim-runc-v2/manager) does.
package shimtest

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// TestDeleteActionIsBestEffort: when runc delete fails, the delete action still unmounts the
// rootfs, says on stderr what failed, and reports the exit exit.json recorded with exit code 0:
// a failure would make containerd report 255 for a task that exited 7, and keep the bundle.
func TestDeleteActionIsBestEffort(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	runc := testkit.NewFaultyRunc(t)
	runc.Set(t, "delete", testkit.Fail)
	if err := bundle.SaveOptions(c.dir, bundle.Options{BinaryName: runc.Path}); err != nil {
		t.Fatal(err)
	}
	exitedAt := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := bundle.WriteExit(c.dir, bundle.ExitRecord{Pid: 4242, ExitStatus: 7, ExitedAt: exitedAt}); err != nil {
		t.Fatal(err)
	}
	rootfs := filepath.Join(c.dir, bundle.RootfsDir)
	if err := os.Mkdir(rootfs, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", rootfs, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(rootfs, unix.MNT_DETACH) })

	r := c.run(nil, nil, c.args("bestEffort", "delete")...)
	if r.Code != 0 {
		t.Fatalf("delete: exit %d, stderr %q; want 0 and the recorded exit", r.Code, r.Stderr)
	}
	if runc.Reached("delete") == 0 {
		t.Fatal("runc delete was never called: the test proves nothing")
	}
	if !strings.Contains(r.Stderr, "delete failing on purpose") || strings.Count(r.Stderr, "\n") != 1 {
		t.Errorf("stderr %q, want one line saying runc delete failed", r.Stderr)
	}
	var resp taskapi.DeleteResponse
	if err := proto.Unmarshal([]byte(r.Stdout), &resp); err != nil {
		t.Fatalf("stdout %q: %v", r.Stdout, err)
	}
	if resp.Pid != 4242 || resp.ExitStatus != 7 || !resp.ExitedAt.AsTime().Equal(exitedAt) {
		t.Errorf("DeleteResponse = %v, want pid 4242, status 7 at %v", &resp, exitedAt)
	}
	if m := testkit.Mounts(t, c.dir); len(m) > 0 {
		t.Errorf("the rootfs is still mounted: %v", m)
	}
}

// TestDeleteActionSaysWhyASilentRuncFailed: a runc delete that dies without logging a word
// (killed, as the OOM killer would) is reported on stderr by how it ended, go-runc's exit
// status, not by an empty message nor by the error an earlier runc call left in log.json.
func TestDeleteActionSaysWhyASilentRuncFailed(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	runc := testkit.NewFaultyRunc(t)
	runc.Set(t, "delete", testkit.Die)
	if err := bundle.SaveOptions(c.dir, bundle.Options{BinaryName: runc.Path}); err != nil {
		t.Fatal(err)
	}
	stale := `{"level":"error","msg":"an earlier call failed","time":"2026-01-02T03:04:05Z"}` + "\n"
	if err := os.WriteFile(filepath.Join(c.dir, bundle.RuncLogFile), []byte(stale), 0o600); err != nil {
		t.Fatal(err)
	}

	r := c.run(nil, nil, c.args("silent", "delete")...)
	if r.Code != 0 {
		t.Fatalf("delete: exit %d, stderr %q; want 0", r.Code, r.Stderr)
	}
	if runc.Reached("delete") == 0 {
		t.Fatal("runc delete was never called: the test proves nothing")
	}
	if !strings.Contains(r.Stderr, "runc delete --force: ") || !strings.Contains(r.Stderr, "exit status") {
		t.Errorf("stderr %q, want it to give the exit status of runc delete --force", r.Stderr)
	}
	if strings.Contains(r.Stderr, "an earlier call failed") {
		t.Errorf("stderr %q speaks of an earlier runc call's error", r.Stderr)
	}
}

// TestRuncRootFromTheEnvironment: with runtime options that name no root, runc keeps the
// container's state under the root SHIMWALK_RUNC_ROOT names, which bootstrap reads once for the
// long-lived shim and once for the delete action; both must find the same state.
func TestRuncRootFromTheEnvironment(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "rooted", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	pid := k.Run()
	if !slices.Contains(testkit.RuncContainers(t, d.Namespace), k.ID) {
		t.Fatalf("runc under %s does not know %s: the shim kept its state elsewhere", testkit.RuncRoot(t), k.ID)
	}
	syscall.Kill(k.ShimPid, syscall.SIGKILL)
	testkit.ExpectGone(t, k.ShimPid, "killed shim")
	if _, err := d.DeleteShim(context.Background(), k.ID); err != nil {
		t.Fatal(err)
	}
	testkit.ExpectGone(t, pid, "container of a deleted task")
	if slices.Contains(testkit.RuncContainers(t, d.Namespace), k.ID) {
		t.Errorf("the delete action left %s in runc's state under %s", k.ID, testkit.RuncRoot(t))
	}
}
