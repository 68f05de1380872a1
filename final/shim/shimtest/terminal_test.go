// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// TestResizeWithoutTerminal: ResizePty of a process that has no terminal, the init or an exec,
// succeeds and does nothing, as containerd's shim answers; clients such as ctr send it for
// whatever they attach to.
func TestResizeWithoutTerminal(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "resize-notty", testkit.TaskOptions{Args: []string{"sleep", "600"}})
	k.Run()
	if _, err := k.Conn.Task.Exec(rpcCtx(t, 10*time.Second), &taskapi.ExecProcessRequest{
		ID: k.ID, ExecID: "e", Spec: execSpec(t, "sleep", "600"),
	}); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	for _, execID := range []string{"", "e"} {
		if _, err := k.Conn.Task.ResizePty(rpcCtx(t, 10*time.Second), &taskapi.ResizePtyRequest{ID: k.ID, ExecID: execID, Width: 80, Height: 24}); err != nil {
			t.Errorf("ResizePty of %q, created: %v", execID, err)
		}
	}
	if _, err := k.Conn.Task.Start(rpcCtx(t, 10*time.Second), &taskapi.StartRequest{ID: k.ID, ExecID: "e"}); err != nil {
		t.Fatalf("Start exec: %v", err)
	}
	for _, execID := range []string{"", "e"} {
		if _, err := k.Conn.Task.ResizePty(rpcCtx(t, 10*time.Second), &taskapi.ResizePtyRequest{ID: k.ID, ExecID: execID, Width: 100, Height: 40}); err != nil {
			t.Errorf("ResizePty of %q, running: %v", execID, err)
		}
	}
}
