// SPDX-License-Identifier: Apache-2.0

package cgroups

import (
	"os"
	"path/filepath"
	"testing"
)

// The host's controllers are enabled in the root and each cgroup above the container's, not in
// the container's own: what containerd's runc shim writes at Create on cgroup v2.
func TestEnableControllers(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset cpu io memory pids\n"), 0o644))
	dirs := []string{root, filepath.Join(root, "k8s"), filepath.Join(root, "k8s", "pod"), filepath.Join(root, "k8s", "pod", "ctr")}
	for _, d := range dirs {
		must(os.MkdirAll(d, 0o755))
		must(os.WriteFile(filepath.Join(d, "cgroup.subtree_control"), nil, 0o644))
	}
	must(enableControllers(root, []byte("0::/k8s/pod/ctr\n")))
	for i, d := range dirs {
		got, err := os.ReadFile(filepath.Join(d, "cgroup.subtree_control"))
		must(err)
		want := "+cpuset +cpu +io +memory +pids"
		if i == len(dirs)-1 {
			want = ""
		}
		if string(got) != want {
			t.Errorf("%s: subtree_control %q, want %q", d, got, want)
		}
	}

	// A parent that refuses is forgiven when a deeper cgroup takes the controllers.
	must(os.Remove(filepath.Join(root, "cgroup.subtree_control")))
	if err := enableControllers(root, []byte("0::/k8s/pod/ctr\n")); err != nil {
		t.Errorf("with the root refusing: %v", err)
	}
	// The container's own parent refusing is an error.
	must(os.Remove(filepath.Join(root, "k8s", "pod", "cgroup.subtree_control")))
	if err := enableControllers(root, []byte("0::/k8s/pod/ctr\n")); err == nil {
		t.Error("no error with the container's parent refusing")
	}
	// A process outside the hierarchy names no cgroup below root.
	if err := enableControllers(root, []byte("0::/../elsewhere\n")); err == nil {
		t.Error("no error for a cgroup outside the hierarchy")
	}
}
