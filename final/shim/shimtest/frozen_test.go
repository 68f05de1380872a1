// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

// TestDeleteAfterInitDiedFrozen: an init that dies while its container is being paused leaves
// a frozen cgroup with nobody in it, which runc reports as "paused" and refuses to delete
// without --force. The shim knows the init has exited: its Delete must go through, and leave
// neither runc state nor the cgroup behind.
func TestDeleteAfterInitDiedFrozen(t *testing.T) {
	t.Parallel()
	testkit.RequireRoot(t)
	freezerRoot := "/sys/fs/cgroup/freezer"
	_, err := os.Stat(filepath.Join(freezerRoot, "cgroup.procs"))
	requireLayout(t, err == nil, "no cgroup v1 freezer hierarchy on this host")
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "frozen", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	pid := k.Run()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	var freezer string
	for _, line := range strings.Split(string(data), "\n") {
		if parts := strings.SplitN(line, ":", 3); len(parts) == 3 && parts[1] == "freezer" {
			freezer = filepath.Join(freezerRoot, parts[2])
		}
	}
	if !strings.HasSuffix(freezer, "/"+d.Namespace+"/"+k.ID) {
		t.Fatalf("the container's freezer cgroup is %q, want its own", freezer)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if w := waitExec(t, k, ""); w.ExitStatus != 137 {
		t.Errorf("the init exited %d, want 137", w.ExitStatus)
	}
	// What a Pause racing with the init's death leaves: the empty cgroup frozen.
	if err := os.WriteFile(filepath.Join(freezer, "freezer.state"), []byte("FROZEN"), 0o644); err != nil {
		t.Fatal(err)
	}
	if st := k.State(); st.Status != task.Status_STOPPED {
		t.Errorf("State = %v, want STOPPED", st.Status)
	}
	resp, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID})
	if err != nil {
		t.Fatalf("Delete of a task whose init died frozen: %v", err)
	}
	if int(resp.Pid) != pid || resp.ExitStatus != 137 {
		t.Errorf("Delete = %v, want pid %d, status 137", resp, pid)
	}
	if slices.Contains(testkit.RuncContainers(t, d.Namespace), k.ID) {
		t.Errorf("runc still knows %s", k.ID)
	}
	if _, err := os.Stat(freezer); !os.IsNotExist(err) {
		t.Errorf("the freezer cgroup %s is left: %v", freezer, err)
	}
}
