// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/api/types/task"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// createAsync runs Create in the background; its result comes on the channel, which the test
// must drain before it ends.
func createAsync(ctx context.Context, k *testkit.Task, req *taskapi.CreateTaskRequest) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := k.Conn.Task.Create(ctx, req)
		done <- err
	}()
	return done
}

// TestOptionsRecordedBeforeRuncCreate: options.json, from which the delete action learns the
// runc binary and root, is in the bundle while runc create runs: a shim that dies then leaves a
// container only that runc, under that root, can find.
func TestOptionsRecordedBeforeRuncCreate(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	runc := testkit.NewFaultyRunc(t)
	k := testkit.NewTask(t, d, "options-first", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	req := k.CreateRequest()
	req.Options = mustAny(t, &options.Options{BinaryName: runc.Path})
	runc.Set(t, "create", testkit.Block)
	t.Cleanup(func() { runc.Clear(t, "create") })
	created := createAsync(k.Ctx(), k, req)
	runc.WaitReached(t, "create", 30*time.Second)
	o, err := bundle.LoadOptions(k.Bundle)
	if err != nil || o.BinaryName != runc.Path {
		t.Errorf("while runc create runs, options.json gives %+v (%v), want the binary %s", o, err, runc.Path)
	}
	runc.Clear(t, "create")
	if err := <-created; err != nil {
		t.Fatalf("Create: %v", err)
	}
}

// createBeingUndone sends a Create of id whose runc create hangs past the caller's deadline,
// and holds the undo that follows in its runc delete until the test clears it.
func createBeingUndone(t *testing.T, id string) (*driver.Driver, *testkit.Task, *testkit.FaultyRunc, *taskapi.CreateTaskRequest) {
	t.Helper()
	d := testkit.NewDriver(t, shimBinary(t))
	runc := testkit.NewFaultyRunc(t)
	k := testkit.NewTask(t, d, id, testkit.TaskOptions{Args: []string{"sleep", "100"}, Overlay: true, NullIO: true})
	req := k.CreateRequest()
	req.Options = mustAny(t, &options.Options{BinaryName: runc.Path})
	runc.Set(t, "create", testkit.Hang)
	runc.Set(t, "delete", testkit.Block)
	t.Cleanup(func() { runc.Clear(t, "create"); runc.Clear(t, "delete") })
	ctx, cancel := context.WithTimeout(context.Background(), rpcDeadline)
	_, err := k.Conn.Task.Create(ctx, req)
	cancel()
	if err == nil {
		t.Fatal("Create succeeded although runc create hangs")
	}
	return d, k, runc, req
}

// TestCreateRetryWaitsForUndo: a Create whose caller's deadline passed is undone after the
// caller has its error. A retry of the same id, as kubelet makes after a timeout, waits for
// that undo (held here in its runc delete) instead of meeting AlreadyExists from a Create that
// will leave nothing, and then creates the container.
func TestCreateRetryWaitsForUndo(t *testing.T) {
	t.Parallel()
	const id = "create-retry"
	d, k, runc, req := createBeingUndone(t, id)
	// The shim killed runc create at the deadline and now undoes it: its runc delete is held.
	runc.WaitReached(t, "delete", 30*time.Second)
	runc.Clear(t, "create")
	// A retry while the undo is held waits for it, to the retry's own deadline.
	ctx, cancel := context.WithTimeout(context.Background(), rpcDeadline)
	_, err := k.Conn.Task.Create(ctx, req)
	cancel()
	// The shim's answer or the caller's own deadline: the two are the same.
	if driver.Code(err) != codes.DeadlineExceeded && !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a retry while the first Create is undone: %v, want it to wait until its deadline", err)
	}
	// Let go, the undo ends and a retry creates the container.
	runc.Clear(t, "delete")
	if _, err := k.Conn.Task.Create(k.Ctx(), req); err != nil {
		t.Fatalf("the retried Create: %v", err)
	}
	k.Start()
	finish(t, k, d, id, 0)
}

// TestShutdownDuringCreateUndo: containerd follows a failed Create with Delete and Shutdown. A
// Shutdown that comes while the Create is still being undone must not be dropped (the shim
// would stay, serving nothing): once the undo leaves no task, the shim ends.
func TestShutdownDuringCreateUndo(t *testing.T) {
	t.Parallel()
	const id = "create-shutdown"
	_, k, runc, _ := createBeingUndone(t, id)
	runc.WaitReached(t, "delete", 30*time.Second)
	if _, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: id}); driver.Code(err) != codes.NotFound {
		t.Errorf("Delete after the failed Create: %v, want NotFound", err)
	}
	// Answered at once; the Create's end decides.
	if _, err := k.Conn.Task.Shutdown(k.Ctx(), &taskapi.ShutdownRequest{ID: id}); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	runc.Clear(t, "delete")
	testkit.ExpectGone(t, k.ShimPid, "the shim with no task")
	if m := testkit.Mounts(t, k.Bundle); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
}

// TestCreateRefusesSymlinkedRootfs: a bundle whose rootfs is a symlink gets InvalidArgument,
// and nothing is mounted where the link points.
func TestCreateRefusesSymlinkedRootfs(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "rootfs-link", testkit.TaskOptions{Args: []string{"sleep", "100"}, Overlay: true, NullIO: true})
	elsewhere := testkit.TempDir(t)
	rootfs := filepath.Join(k.Bundle, bundle.RootfsDir)
	if err := os.RemoveAll(rootfs); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, rootfs); err != nil {
		t.Fatal(err)
	}
	_, err := k.Conn.Task.Create(k.Ctx(), k.CreateRequest())
	expectCode(t, "Create with a symlinked rootfs", err, codes.InvalidArgument)
	if m := testkit.Mounts(t, elsewhere); len(m) > 0 {
		t.Errorf("mounted through the symlink: %v", m)
	}
}

// TestCreateIDMappedRootfs: an overlay rootfs with uidmap= and gidmap=, as containerd 2.x's
// overlay snapshotter hands over for a user-namespaced pod, is mounted idmapped by the shim
// (whose helper process for the user namespace must not trouble its reaper), and the container
// runs on it.
func TestCreateIDMappedRootfs(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	const id = "idmapped"
	k := testkit.NewTask(t, d, id, testkit.TaskOptions{Args: []string{"sleep", "100"}, Overlay: true, NullIO: true})
	// containerd's mount code idmaps the parent of the lower layers with every mount below it,
	// and refuses (EINVAL) when one of those is a mount that cannot be idmapped. The shared
	// busybox rootfs sits in the test process's work directory, where the other tests mount
	// their overlays; this lower layer gets a parent of its own, as a snapshotter's layers do.
	lower := filepath.Join(testkit.TempDir(t), "layers", "busybox")
	if err := driver.BuildBusyboxRootfs(lower); err != nil {
		t.Fatal(err)
	}
	req := k.CreateRequest()
	m := req.Rootfs[0]
	var opts []string
	for _, o := range m.Options {
		if strings.HasPrefix(o, "lowerdir=") {
			o = "lowerdir=" + lower
		}
		opts = append(opts, o)
	}
	m.Options = append(opts, "uidmap=0:100000:65536", "gidmap=0:100000:65536")
	if _, err := k.Conn.Task.Create(k.Ctx(), req); err != nil {
		t.Fatalf("Create with an idmapped overlay: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(k.Bundle, bundle.RootfsDir, "bin"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Uid != 100000 || st.Gid != 100000 {
		t.Errorf("the rootfs's /bin is owned by %d:%d, want the mapped 100000:100000", st.Uid, st.Gid)
	}
	k.Start()
	k.WaitStatus(task.Status_RUNNING, 10*time.Second)
	finish(t, k, d, id, 0)
}

// TestCreateAfterShutdownIsUndone: containerd sends Shutdown once a Create has failed for it.
// A Create that runc completes after that is undone rather than served: nobody would ever ask
// for its task again, nor for the shim to go. The shim then ends, leaving nothing mounted.
func TestCreateAfterShutdownIsUndone(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	runc := testkit.NewFaultyRunc(t)
	const id = "create-after-shutdown"
	k := testkit.NewTask(t, d, id, testkit.TaskOptions{Args: []string{"sleep", "100"}, Overlay: true, NullIO: true})
	req := k.CreateRequest()
	req.Options = mustAny(t, &options.Options{BinaryName: runc.Path})
	runc.Set(t, "create", testkit.Block)
	t.Cleanup(func() { runc.Clear(t, "create") })
	created := make(chan error, 1)
	go func() {
		// Owned by the test, which waits for it below.
		_, err := k.Conn.Task.Create(k.Ctx(), req)
		created <- err
	}()
	runc.WaitReached(t, "create", 30*time.Second)
	if _, err := k.Conn.Task.Shutdown(k.Ctx(), &taskapi.ShutdownRequest{ID: id}); err != nil {
		t.Errorf("Shutdown: %v", err)
	}
	runc.Clear(t, "create")
	if err := <-created; err == nil {
		t.Error("a Create that ended after Shutdown was served")
	}
	testkit.ExpectGone(t, k.ShimPid, "the shim asked to shut down")
	if m := testkit.Mounts(t, k.Bundle); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
}
