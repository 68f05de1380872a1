// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"context"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/runc/options"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/shim/process"
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
	o, err := process.LoadOptions(k.Bundle)
	if err != nil || o.BinaryName != runc.Path {
		t.Errorf("while runc create runs, options.json gives %+v (%v), want the binary %s", o, err, runc.Path)
	}
	runc.Clear(t, "create")
	if err := <-created; err != nil {
		t.Fatalf("Create: %v", err)
	}
}
