// SPDX-License-Identifier: Apache-2.0

package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/cgroups/v3/cgroup1"
	cgroupsv2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	"github.com/containerd/errdefs"
	"github.com/containerd/typeurl/v2"
)

// TestV2MetricsOnFakeTree reads the metrics of a fake cgroup2 cgroup with the controllers this
// host's private cgroup2 mount lacks (memory, pids), found through a /proc/<pid>/cgroup text,
// and checks they reach containerd under the v2 type.
func TestV2MetricsOnFakeTree(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "ns", "c1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"memory.current": "4194304\n",
		"memory.max":     "33554432\n",
		"memory.stat":    "anon 3145728\nfile 1048576\n",
		"memory.events":  "low 0\nhigh 0\nmax 7\noom 2\noom_kill 2\noom_group_kill 0\n",
		"pids.current":   "3\n",
		"pids.max":       "max\n",
		"cpu.stat":       "usage_usec 1234\nuser_usec 1000\nsystem_usec 234\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	g, err := LoadV2(root, []byte(hybrid))
	if err != nil {
		t.Fatal(err)
	}
	v, err := g.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	m, ok := v.(*cgroupsv2.Metrics)
	if !ok {
		t.Fatalf("Metrics = %T, want cgroup v2 metrics", v)
	}
	if got := m.GetMemory(); got.GetUsage() != 4<<20 || got.GetUsageLimit() != 32<<20 || got.GetAnon() != 3<<20 || got.GetFile() != 1<<20 {
		t.Errorf("memory = %v", got)
	}
	if got := m.GetMemoryEvents(); got.GetOomKill() != 2 || got.GetMax() != 7 {
		t.Errorf("memory events = %v", got)
	}
	if got := m.GetPids(); got.GetCurrent() != 3 {
		t.Errorf("pids = %v", got)
	}
	if got := m.GetCPU(); got.GetUsageUsec() != 1234 || got.GetSystemUsec() != 234 {
		t.Errorf("cpu = %v", got)
	}
	a, err := typeurl.MarshalAnyToProto(v)
	if err != nil || a.GetTypeUrl() != "io.containerd.cgroups.v2.Metrics" {
		t.Errorf("as an Any: %q, %v; want io.containerd.cgroups.v2.Metrics", a.GetTypeUrl(), err)
	}
	// The OOM counter reads the same tree.
	mem, err := findMemory(root, true, []byte(hybrid))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := mem.OOMKills(); err != nil || n != 2 {
		t.Errorf("OOMKills = %d, %v; want 2", n, err)
	}
}

func TestLoadV2RefusesPathsOutsideTheHierarchy(t *testing.T) {
	for _, text := range []string{"", "4:memory:/x\n", "0::/../x\n", "0::relative\n"} {
		if _, err := LoadV2(t.TempDir(), []byte(text)); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("LoadV2(%q) = %v, want not found", text, err)
		}
	}
}

// TestV1PathMatchesTheLibrary compares v1Path with cgroup1.PidPath for this test's own
// process, on the host's real /proc: every controller, and a name no host has.
func TestV1PathMatchesTheLibrary(t *testing.T) {
	if isUnified(Root) {
		t.Fatalf("%s is a cgroup2 mount: this test is for hosts with cgroup v1 hierarchies", Root)
	}
	procCgroup, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	ours, err := v1Path(procCgroup, mountinfo)
	if err != nil {
		t.Fatal(err)
	}
	theirs := cgroup1.PidPath(os.Getpid())
	names := append(cgroup1.Subsystems(), cgroup1.SystemdDbus, "systemd", "no-such-controller")
	found := 0
	for _, n := range names {
		got, ok := ours.of(string(n))
		want, werr := theirs(n)
		if got != want || ok != (werr == nil) {
			t.Errorf("%s: v1Path %q, %v; library %q, %v", n, got, ok, want, werr)
		}
		if ok {
			found++
		}
	}
	if found < 3 {
		t.Errorf("only %d controllers found: the comparison says little", found)
	}
}

// TestV1PathInACgroupNamespace: a controller mounted with a root below the hierarchy's (as in a
// cgroup namespace) yields paths relative to that root, and a controller the process lists but
// no mount has is an error, as in the library.
func TestV1PathInACgroupNamespace(t *testing.T) {
	mountinfo := []byte("30 25 0:26 /kubepods/pod1 /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n" +
		"31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct\n" +
		"32 25 0:28 /kubepods/pod1/c1 /sys/fs/cgroup/pids rw,nosuid - cgroup cgroup rw,pids\n" +
		"33 25 0:29 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n")
	path, err := v1Path([]byte("7:memory:/kubepods/pod1/c1\n6:cpu,cpuacct:/c2\n5:pids:/kubepods/pod1/c1\n0::/c1\n"), mountinfo)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"memory": "/c1", "cpu": "/c2", "cpuacct": "/c2", "pids": "/kubepods/pod1/c1"} {
		if got, ok := path.of(name); got != want || !ok {
			t.Errorf("%s: %q, %v; want %q", name, got, ok, want)
		}
	}
	if p, ok := path.of("blkio"); ok {
		t.Errorf("blkio: %q, want not active", p)
	}
	if _, err := v1Path([]byte("8:blkio:/c1\n"), mountinfo); err == nil {
		t.Error("a controller without a mount was accepted")
	}
	if _, err := v1Path([]byte("garbage\n"), mountinfo); err == nil {
		t.Error("a malformed /proc/<pid>/cgroup was accepted")
	}
}
