// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cgroupsv1 "github.com/containerd/cgroups/v3/cgroup1/stats"
	cgroupsv2 "github.com/containerd/cgroups/v3/cgroup2/stats"
	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/runc/options"
	"github.com/containerd/containerd/api/types/task"
	"github.com/containerd/typeurl/v2"
	"golang.org/x/sys/unix"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// requireLayout is testkit.RequireCommand for what the host's cgroups must offer.
func requireLayout(t *testing.T, ok bool, why string) {
	t.Helper()
	if !ok {
		testkit.Missing(t, why)
	}
}

// cgroup2Shim is the shim behind a wrapper that runs every invocation of it (start, and with
// it the long-lived shim; delete) in a private mount namespace with a cgroup2 hierarchy
// mounted on /sys/fs/cgroup. There the shim, runc and the cgroups library see a cgroup v2 host;
// the host's mounts stay as they are. On a hybrid host that hierarchy has no memory or pids
// controller (they are bound to v1), but cgroup.procs, cpu.stat and cgroup.freeze work.
func cgroup2Shim(t *testing.T) string {
	t.Helper()
	testkit.RequireCommand(t, "unshare", "mount")
	shim := shimBinary(t)
	wrapper := filepath.Join(testkit.TempDir(t), filepath.Base(shim))
	script := fmt.Sprintf("#!/bin/sh\nexec unshare --mount --propagation private -- sh -c 'mount -t cgroup2 cgroup2 /sys/fs/cgroup && exec \"$0\" \"$@\"' %q \"$@\"\n", shim)
	testkit.WriteExecutable(t, wrapper, []byte(script))
	return wrapper
}

// hostCgroup2 is where the test's own mount namespace has the cgroup2 hierarchy:
// /sys/fs/cgroup/unified on a hybrid host, /sys/fs/cgroup on a v2 one.
func hostCgroup2(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// The fields after " - " are the file system type, the source and the options.
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if fields := strings.Fields(pre); ok && len(fields) > 4 && strings.HasPrefix(post, "cgroup2 ") {
			return fields[4]
		}
	}
	requireLayout(t, false, "no cgroup2 hierarchy mounted on this host")
	return ""
}

// cgroup2Path is the cgroup v2 path of pid, from its "0::" line.
func cgroup2Path(t *testing.T, pid int) string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			return p
		}
	}
	t.Fatalf("process %d is in no cgroup2 cgroup:\n%s", pid, data)
	return ""
}

// statsOf calls Stats and decodes the metrics, which must be of type M: *cgroupsv1.Metrics or
// *cgroupsv2.Metrics.
func statsOf[M any](t *testing.T, k *testkit.Task) M {
	t.Helper()
	resp, err := k.Conn.Task.Stats(k.Ctx(), &taskapi.StatsRequest{ID: k.ID})
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	v, err := typeurl.UnmarshalAny(resp.GetStats())
	if err != nil {
		t.Fatalf("Stats returned %s: %v", resp.GetStats().GetTypeUrl(), err)
	}
	m, ok := v.(M)
	if !ok {
		t.Fatalf("Stats returned %T (%s), want %T", v, resp.GetStats().GetTypeUrl(), m)
	}
	return m
}

// cpuUsage is the container's CPU time in µs from Stats, which must hold cgroup v2 metrics.
func cpuUsage(t *testing.T, k *testkit.Task) uint64 {
	t.Helper()
	return statsOf[*cgroupsv2.Metrics](t, k).GetCPU().GetUsageUsec()
}

// v1CPUUsage is the container's CPU time in ns from Stats, which must hold cgroup v1 metrics.
func v1CPUUsage(t *testing.T, k *testkit.Task) uint64 {
	t.Helper()
	return statsOf[*cgroupsv1.Metrics](t, k).GetCPU().GetUsage().GetTotal()
}

// TestCgroupV1PauseFreezes is TestCgroupV2InPrivateMount on the host's v1 hierarchies: Pause
// sets the v1 freezer to FROZEN and the container's CPU time stands still, Resume continues
// it, Delete removes its cgroups.
func TestCgroupV1PauseFreezes(t *testing.T) {
	t.Parallel()
	testkit.RequireRoot(t)
	freezerRoot := "/sys/fs/cgroup/freezer"
	_, err := os.Stat(filepath.Join(freezerRoot, "cgroup.procs"))
	requireLayout(t, err == nil, "no cgroup v1 freezer hierarchy on this host")
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "cgroup1", testkit.TaskOptions{Args: []string{"/bin/sh", "-c", "while :; do :; done"}, NullIO: true})
	pid := k.Run()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	var freezer, memory string
	for _, line := range strings.Split(string(data), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && parts[1] == "freezer" {
			freezer = filepath.Join(freezerRoot, parts[2])
		}
		if len(parts) == 3 && parts[1] == "memory" {
			memory = filepath.Join("/sys/fs/cgroup/memory", parts[2])
		}
	}
	if !strings.HasSuffix(freezer, "/"+d.Namespace+"/"+k.ID) || !strings.HasSuffix(memory, "/"+d.Namespace+"/"+k.ID) {
		t.Fatalf("container's v1 cgroups: freezer %q, memory %q; want its own", freezer, memory)
	}

	testkit.Eventually(t, 10*time.Second, "Stats never showed CPU time for a busy container", func() bool {
		return v1CPUUsage(t, k) > 0
	})
	if _, err := k.Conn.Task.Pause(k.Ctx(), &taskapi.PauseRequest{ID: k.ID}); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if st := k.State(); st.Status != task.Status_PAUSED {
		t.Errorf("State after Pause: %v, want PAUSED", st.Status)
	}
	if state, err := os.ReadFile(filepath.Join(freezer, "freezer.state")); err != nil || strings.TrimSpace(string(state)) != "FROZEN" {
		t.Errorf("freezer.state = %q, %v; want FROZEN", state, err)
	}
	thawAndDelete(t, k, func() uint64 { return v1CPUUsage(t, k) })
	for _, dir := range []string{freezer, memory} {
		if _, err := os.Stat(dir); !os.IsNotExist(err) {
			t.Errorf("the container's cgroup %s is left after Delete: %v", dir, err)
		}
	}
}

// TestCgroupV2InPrivateMount runs a busy container under a shim that sees cgroup v2 only: runc
// makes its cgroup in the v2 hierarchy, Stats returns v2 metrics with CPU time, Pause freezes
// it through cgroup.freeze (its CPU time stands still), Resume thaws it, and Delete removes its
// cgroup. The host's own /sys/fs/cgroup is not touched.
func TestCgroupV2InPrivateMount(t *testing.T) {
	t.Parallel()
	testkit.RequireRoot(t)
	host := hostCgroup2(t)
	var before unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &before); err != nil {
		t.Fatal(err)
	}
	d := testkit.NewDriver(t, cgroup2Shim(t))
	k := testkit.NewTask(t, d, "cgroup2", testkit.TaskOptions{Args: []string{"/bin/sh", "-c", "while :; do :; done"}, NullIO: true})
	pid := k.Run()

	group := cgroup2Path(t, pid)
	dir := filepath.Join(host, group)
	if !strings.HasSuffix(group, "/"+d.Namespace+"/"+k.ID) {
		t.Fatalf("container in cgroup2 %s, want its own cgroup ending in /%s/%s: runc did not run in v2 mode", group, d.Namespace, k.ID)
	}
	// runc in v1 mode would have made the container a cgroup of its own in every v1
	// hierarchy too; in v2 mode it never touches them, and only the 0:: line names its cgroup.
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		t.Fatal(err)
	}
	own := 0
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasSuffix(line, "/"+d.Namespace+"/"+k.ID) {
			own++
		}
	}
	if own != 1 {
		t.Errorf("the container has %d cgroups of its own, want 1 (v2): runc ran in v1 mode:\n%s", own, data)
	}
	if procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err != nil || !strings.Contains(" "+strings.Join(strings.Fields(string(procs)), " ")+" ", fmt.Sprintf(" %d ", pid)) {
		t.Fatalf("%s/cgroup.procs = %q, %v; want the init %d in it", dir, procs, err, pid)
	}

	testkit.Eventually(t, 10*time.Second, "Stats never showed CPU time for a busy container", func() bool {
		return cpuUsage(t, k) > 0
	})

	if _, err := k.Conn.Task.Pause(k.Ctx(), &taskapi.PauseRequest{ID: k.ID}); err != nil {
		t.Fatalf("Pause: %v", err)
	}
	if st := k.State(); st.Status != task.Status_PAUSED {
		t.Errorf("State after Pause: %v, want PAUSED", st.Status)
	}
	if freeze, err := os.ReadFile(filepath.Join(dir, "cgroup.freeze")); err != nil || strings.TrimSpace(string(freeze)) != "1" {
		t.Errorf("cgroup.freeze = %q, %v; want 1", freeze, err)
	}
	testkit.Eventually(t, 10*time.Second, "cgroup.events never said frozen", func() bool {
		events, _ := os.ReadFile(filepath.Join(dir, "cgroup.events"))
		return strings.Contains(string(events), "frozen 1")
	})
	thawAndDelete(t, k, func() uint64 { return cpuUsage(t, k) })
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("the container's cgroup %s is left after Delete: %v", dir, err)
	}
	var after unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &after); err != nil || after.Type != before.Type {
		t.Errorf("the host's /sys/fs/cgroup changed: type %#x, then %#x (%v)", before.Type, after.Type, err)
	}
}

// TestShimCgroupV2InPrivateMount: with ShimCgroup in its runtime options, a shim that sees
// cgroup v2 moves itself into that cgroup of the v2 hierarchy.
func TestShimCgroupV2InPrivateMount(t *testing.T) {
	t.Parallel()
	testkit.RequireRoot(t)
	host := hostCgroup2(t)
	d := testkit.NewDriver(t, cgroup2Shim(t))
	group := "/shimwalk-test/" + filepath.Base(testkit.WorkDir(t)) + "/shim-v2"
	if err := os.MkdirAll(filepath.Join(host, group), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The shim is gone by now (cleanups run last first): the cgroup is empty.
		if err := os.Remove(filepath.Join(host, group)); err != nil {
			t.Errorf("remove %s: %v", group, err)
		}
	})
	const id = "shimcg2"
	if _, err := d.NewBundle(id, driver.SpecOptions{Args: []string{"/bin/true"}, Rootfs: testkit.Rootfs(t), Readonly: true}); err != nil {
		t.Fatal(err)
	}
	b, err := d.StartShim(rpcCtx(t, 30*time.Second), id, marshal(t, mustAny(t, &options.Options{ShimCgroup: group})))
	if err != nil {
		t.Fatalf("start with ShimCgroup %s: %v", group, err)
	}
	pid := testkit.ReadPid(t, filepath.Join(d.Bundle(id), bundle.ShimPidFile))
	t.Cleanup(func() { shutdownAt(t, b.Address, pid) })
	if got := cgroup2Path(t, pid); got != group {
		t.Errorf("the shim is in the v2 cgroup %s, want %s", got, group)
	}
	procs, err := os.ReadFile(filepath.Join(host, group, "cgroup.procs"))
	if err != nil || !slices.Contains(strings.Fields(string(procs)), fmt.Sprint(pid)) {
		t.Errorf("%s/cgroup.procs = %q, %v; want the shim %d", group, procs, err, pid)
	}
}

// thawAndDelete takes a paused busy container the rest of the way on either layout: its CPU
// time (usage) stands still while it is frozen (300 ms is the window watched, not a wait for
// something to happen), advances again after Resume, and then it is killed and deleted.
func thawAndDelete(t *testing.T, k *testkit.Task, usage func() uint64) {
	t.Helper()
	frozen := usage()
	time.Sleep(300 * time.Millisecond)
	if now := usage(); now != frozen {
		t.Errorf("CPU time of a frozen container went from %d to %d", frozen, now)
	}
	if _, err := k.Conn.Task.Resume(k.Ctx(), &taskapi.ResumeRequest{ID: k.ID}); err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if st := k.State(); st.Status != task.Status_RUNNING {
		t.Errorf("State after Resume: %v, want RUNNING", st.Status)
	}
	testkit.Eventually(t, 10*time.Second, "the container's CPU time did not advance after Resume", func() bool {
		return usage() > frozen
	})
	if _, err := k.Conn.Task.Kill(k.Ctx(), &taskapi.KillRequest{ID: k.ID, Signal: 9}); err != nil {
		t.Fatal(err)
	}
	waitExec(t, k, "")
	if _, err := k.Conn.Task.Delete(k.Ctx(), &taskapi.DeleteRequest{ID: k.ID}); err != nil {
		t.Fatalf("Delete: %v", err)
	}
}
