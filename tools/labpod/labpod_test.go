// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.Main(m)) }

// TestPodGrouping runs the pod lab as make lab-pod does: under containerd 2.x's CRI plugin, a
// pod and two containers started with crictl are served by one shim, the pod's, which is the
// parent of all three processes, and which exits once the pod is removed. containerd connected
// the containers to it (the shim answered version 3, as containerd's runc shim does), as the
// sandbox file in their bundles shows; a shim that answers version 2 is grouped by the
// sandbox-id annotation instead, and one that does neither fails here with three shims.
func TestPodGrouping(t *testing.T) {
	testkit.RequireRoot(t)
	testkit.RequireCommand(t, "runc", "busybox")
	root := testkit.RepoRoot(t)
	shim := testkit.Binary(t, "final/cmd/containerd-shim-shimwalk-v2")
	lab, err := NewLab(root, shim)
	if err != nil {
		testkit.Missing(t, err.Error())
	}
	lab.Dir = testkit.TempDir(t)
	// An empty cgroup of a pod of the node's, in CRI's namespace k8s.io: the lab's containerd
	// must leave it.
	hier := "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(hier, "cgroup.procs")); err != nil {
		hier = "/sys/fs/cgroup/pids"
	}
	nodeNS := filepath.Join(hier, "k8s.io")
	_, err = os.Stat(nodeNS)
	madeNS := os.IsNotExist(err)
	nodePod := filepath.Join(nodeNS, fmt.Sprintf("shimwalk-labtest-node-pod-%d", os.Getpid()))
	if err := os.MkdirAll(nodePod, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = os.Remove(nodePod)
		if madeNS {
			_ = os.Remove(nodeNS)
		}
	})
	var out strings.Builder
	lab.Out = &out
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	res, err := lab.Run(ctx)
	t.Logf("the lab printed:\n%s", out.String())
	if err != nil {
		t.Fatal(err)
	}

	if len(res.Shims) != 1 {
		t.Fatalf("the pod ran on %d shims, want 1: %+v", len(res.Shims), res.Shims)
	}
	shimProc := res.Shims[0]
	if shimProc.ID != res.PodID {
		t.Errorf("the shim was started as instance %q, want the pod's id %q", shimProc.ID, res.PodID)
	}
	for _, what := range []string{"pod", "one", "two"} {
		pid := res.Pids[what]
		if !slices.Contains(shimProc.Children, pid) {
			t.Errorf("%s's process %d is not a child of the pod's shim %d (its children: %v)", what, pid, shimProc.Pid, shimProc.Children)
		}
	}
	for _, name := range []string{"one", "two"} {
		if res.Sandbox[name] != res.PodID {
			t.Errorf("container %s's bundle names sandbox %q, want %q: containerd did not connect it to the pod's shim", name, res.Sandbox[name], res.PodID)
		}
	}
	if _, err := os.Stat(nodePod); err != nil {
		t.Errorf("the node's cgroup %s was removed by the lab: %v", nodePod, err)
	}
	if len(res.ShimsAfter) != 0 {
		t.Errorf("shims left after the pod was removed: %v", res.ShimsAfter)
	}
}
