// SPDX-License-Identifier: Apache-2.0

package cgroups

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/cgroups/v3/cgroup2"
	"google.golang.org/protobuf/proto"
)

// v2Trees are cgroup v2 directories as files: what a kernel writes, what an older kernel
// lacks, and values at the edges of the format.
func v2Trees() map[string]map[string]string {
	full := map[string]string{
		"pids.current": "7\n",
		"pids.max":     "max\n",
		"cpu.stat": "usage_usec 912345\nuser_usec 800000\nsystem_usec 112345\nnr_periods 40\n" +
			"nr_throttled 3\nthrottled_usec 5000\nnr_bursts 1\nburst_usec 20\n",
		"cpu.pressure":        "some avg10=0.50 avg60=0.25 avg300=0.10 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=678\n",
		"memory.current":      "33554432\n",
		"memory.max":          "67108864\n",
		"memory.peak":         "40000000\n",
		"memory.pressure":     "some avg10=1.00 avg60=2.00 avg300=3.00 total=4\nfull avg10=5.00 avg60=6.00 avg300=7.00 total=8\n",
		"memory.events":       "low 1\nhigh 2\nmax 3\noom 4\noom_kill 5\noom_group_kill 6\n",
		"memory.swap.current": "0\n",
		"memory.swap.max":     "max\n",
		"io.stat": "8:0 rbytes=1024 wbytes=2048 rios=3 wios=4 dbytes=0 dios=0\n" +
			"253:1 rbytes=10 wbytes=20 rios=1 wios=2\n",
		"io.pressure":  "some avg10=0.00 avg60=0.00 avg300=0.00 total=9\n",
		"rdma.current": "mlx4_0 hca_handle=2 hca_object=2000\n",
		"rdma.max":     "mlx4_0 hca_handle=max hca_object=max\nocrdma1 hca_handle=3 hca_object=max\n",
	}
	var stat strings.Builder
	for i, k := range []string{"anon", "file", "kernel_stack", "slab", "sock", "shmem", "file_mapped",
		"file_dirty", "file_writeback", "anon_thp", "inactive_anon", "active_anon", "inactive_file",
		"active_file", "unevictable", "slab_reclaimable", "slab_unreclaimable", "pgfault", "pgmajfault",
		"workingset_refault", "workingset_activate", "workingset_nodereclaim", "pgrefill", "pgscan",
		"pgsteal", "pgactivate", "pgdeactivate", "pglazyfree", "pglazyfreed", "thp_fault_alloc",
		"thp_collapse_alloc", "percpu", "zswap"} {
		stat.WriteString(k + " " + strconv.Itoa((i+1)*4096) + "\n")
	}
	full["memory.stat"] = stat.String()
	for i, size := range hugePageSizes() {
		full["hugetlb."+size+".current"] = "2097152\n"
		full["hugetlb."+size+".max"] = []string{"max\n", "4194304\n"}[i%2]
		full["hugetlb."+size+".events"] = "max 3\n"
	}
	edges := map[string]string{
		"pids.current":    "-1\n", // a counter gone below zero reads as 0
		"memory.current":  "garbage\n",
		"memory.stat":     "anon -5\nfile 9\n",
		"memory.events":   "",
		"cpu.stat":        "usage_usec 1\n",
		"cpu.pressure":    "some avg10=x avg60=0 avg300=0 total=1\n",
		"memory.pressure": "some avg10=1.00\nbogus 1 2\n",
		"io.stat":         "8:0 rbytes=1 wbytes==2 rios=x\n8:1:2 rbytes=5\n\nx:1 rbytes=3\n9:0 rbytes=4\n",
		"rdma.current":    "dev hca_handle=99999999999 hca_object=-1\nshort hca_handle=1\n",
	}
	for _, size := range hugePageSizes() {
		edges["hugetlb."+size+".events"] = "junk\nmax x\n"
	}
	return map[string]map[string]string{"full": full, "empty": {}, "edges": edges}
}

func writeTree(t *testing.T, files map[string]string) (root, group string) {
	t.Helper()
	root, group = t.TempDir(), "/pod/c1"
	dir := filepath.Join(root, group)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, group
}

// TestV2StatMatchesTheLibrary reads each tree with v2Stat and with containerd/cgroups/v3's
// cgroup2.Manager, whose Stat containerd's own shim reports: the metrics must be the same.
func TestV2StatMatchesTheLibrary(t *testing.T) {
	for name, files := range v2Trees() {
		t.Run(name, func(t *testing.T) {
			root, group := writeTree(t, files)
			m, err := cgroup2.Load(group, cgroup2.WithMountpoint(root))
			if err != nil {
				t.Fatal(err)
			}
			want, err := m.Stat()
			if err != nil {
				t.Fatalf("library: %v", err)
			}
			got, err := v2Stat(filepath.Join(root, group))
			if err != nil {
				t.Fatalf("v2Stat: %v", err)
			}
			if !proto.Equal(got, want) {
				t.Errorf("v2Stat differs from the library:\n got  %v\n want %v", got, want)
			}
		})
	}
	if len(hugePageSizes()) == 0 {
		t.Log("this host has no huge page sizes: the hugetlb part compared empty lists")
	}
}

// TestV2StatRefusesMalformedCounters: a line of cpu.stat, memory.stat or memory.events that
// is not a key and a count fails the read, in the library and here.
func TestV2StatRefusesMalformedCounters(t *testing.T) {
	for _, file := range []string{"cpu.stat", "memory.stat", "memory.events"} {
		for _, line := range []string{"usage_usec\n", "a 1 2\n", "a max\n", "a x\n", "\n"} {
			root, group := writeTree(t, map[string]string{file: "ok 1\n" + line})
			m, err := cgroup2.Load(group, cgroup2.WithMountpoint(root))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := m.Stat(); err == nil {
				t.Fatalf("%s %q: the library accepts it; the test's premise is wrong", file, line)
			}
			if _, err := v2Stat(filepath.Join(root, group)); err == nil || !strings.Contains(err.Error(), file) {
				t.Errorf("%s %q: v2Stat error %v, want one naming the file", file, line, err)
			}
		}
	}
}

func TestJoinDirNeedsAnExistingCgroup(t *testing.T) {
	dir := t.TempDir()
	if err := joinDir(dir, os.Getpid()); err == nil {
		t.Fatal("joined a directory that has no cgroup.procs")
	}
	if _, err := os.Stat(filepath.Join(dir, "cgroup.procs")); !os.IsNotExist(err) {
		t.Errorf("joinDir created cgroup.procs: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := joinDir(dir, 4242); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs")); string(data) != "4242" {
		t.Errorf("cgroup.procs = %q, want 4242", data)
	}
}
