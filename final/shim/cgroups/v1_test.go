// SPDX-License-Identifier: Apache-2.0

package cgroups

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/cgroups/v3/cgroup1"
	stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	"google.golang.org/protobuf/proto"
)

// v1Group is the cgroup every fake v1 tree holds, in each hierarchy that has it.
const v1Group = "/pod/c1"

// v1Partitions is a /proc/partitions: two header lines, then the devices by number.
const v1Partitions = "major minor  #blocks  name\n\n   8        0   52428800 sda\n   8        1   52427776 sda1\n 253        0    1048576 dm-0\n   8        0          1 again\n"

// v1Full is a cgroup as a v1 kernel with every controller writes it; keys are
// "<controller>/<file>".
func v1Full() map[string]string {
	files := map[string]string{
		"pids/pids.current":                "7\n",
		"pids/pids.max":                    "64\n",
		"cpu/cpu.stat":                     "nr_periods 40\nnr_throttled 3\nthrottled_time 5000000\n",
		"cpuacct/cpuacct.stat":             "user 1234\nsystem 567\n",
		"cpuacct/cpuacct.usage":            "912345678\n",
		"cpuacct/cpuacct.usage_percpu":     "500000000 412345678 0 0 \n",
		"memory/memory.oom_control":        "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		"blkio/blkio.throttle.io_serviced": "8:0 Read 9\n8:0 Total 9\nTotal 9\n",
		"rdma/rdma.current":                "mlx4_0 hca_handle=2 hca_object=2000\nocrdma1 hca_handle=3 hca_object=max\n",
		"rdma/rdma.max":                    "mlx4_0 hca_handle=max hca_object=max\nocrdma1 hca_handle=3 hca_object=max\n",
	}
	var stat strings.Builder
	for i, k := range []string{"cache", "rss", "rss_huge", "shmem", "mapped_file", "dirty", "writeback",
		"swap", "pgpgin", "pgpgout", "pgfault", "pgmajfault", "inactive_anon", "active_anon",
		"inactive_file", "active_file", "unevictable", "hierarchical_memory_limit",
		"hierarchical_memsw_limit", "total_cache", "total_rss", "total_rss_huge", "total_shmem",
		"total_mapped_file", "total_dirty", "total_writeback", "total_swap", "total_pgpgin",
		"total_pgpgout", "total_pgfault", "total_pgmajfault", "total_inactive_anon",
		"total_active_anon", "total_inactive_file", "total_active_file", "total_unevictable"} {
		fmt.Fprintf(&stat, "%s %d\n", k, (i+1)*4096)
	}
	files["memory/memory.stat"] = stat.String()
	for i, module := range []string{"memory.", "memory.memsw.", "memory.kmem.", "memory.kmem.tcp."} {
		files["memory/"+module+"usage_in_bytes"] = strconv.Itoa((i+1)<<20) + "\n"
		files["memory/"+module+"max_usage_in_bytes"] = strconv.Itoa((i+2)<<20) + "\n"
		files["memory/"+module+"failcnt"] = strconv.Itoa(i) + "\n"
		files["memory/"+module+"limit_in_bytes"] = "9223372036854771712\n"
	}
	for i, name := range []string{"sectors", "io_service_bytes", "io_serviced", "io_queued",
		"io_service_time", "io_wait_time", "io_merged", "time"} {
		files["blkio/blkio."+name+"_recursive"] = fmt.Sprintf(
			"8:0 Read %d\n8:0 Write 2\n8:0 Sync 3\n8:0 Async 1\n8:0 Discard 0\n8:0 Total 6\n253:0 Read 1\n9:9 Write 4\nTotal %d\n", i, i+7)
	}
	files["blkio/blkio.sectors_recursive"] = "8:0 1024\n253:0 8\n"
	files["blkio/blkio.time_recursive"] = "8:0 77\n"
	sizes, _ := v1HugePageSizes()
	for i, size := range sizes {
		files["hugetlb/hugetlb."+size+".usage_in_bytes"] = strconv.Itoa(i<<21) + "\n"
		files["hugetlb/hugetlb."+size+".max_usage_in_bytes"] = "4194304\n"
		files["hugetlb/hugetlb."+size+".failcnt"] = "1\n"
	}
	return files
}

// v1Staters are the controllers of the fake trees: those that have metrics.
var v1Staters = []string{"pids", "cpu", "cpuacct", "memory", "blkio", "hugetlb", "rdma"}

// v1Trees are fake trees: the full one, changed. A value "-" removes a file, a key "<c>/"
// removes controller c's cgroup directory, "partitions" is /proc/partitions.
func v1Trees() map[string]map[string]string {
	edges := map[string]string{
		"pids/pids.current":                  "-3\n",
		"pids/pids.max":                      "max\n",
		"cpu/cpu.stat":                       "nr_periods -1\nnr_throttled 18446744073709551615\nthrottled_time -99999999999999999999\nwait_sum 4\n",
		"cpuacct/cpuacct.stat":               "user 184467440737095516\nsystem 0\nguest 5\n",
		"cpuacct/cpuacct.usage_percpu":       "",
		"memory/memory.stat":                 "cache -4096\nrss 4096\nunknown_key 5\n",
		"memory/memory.limit_in_bytes":       "max\n",
		"memory/memory.failcnt":              "  12  \n",
		"memory/memory.memsw.usage_in_bytes": "-",
		"memory/memory.oom_control":          "oom_kill_disable 1\nunder_oom 1\n",
		"blkio/blkio.io_serviced_recursive":  "8:0 5 extra fields\n8:0:1 Write 6\n",
		"blkio/blkio.io_queued_recursive":    "-",
		"rdma/rdma.current":                  "dev hca_handle=99999999999 hca_object=-1\nshort hca_handle=1\nx y=1 hca_handle=4294967295\nz a=b=c hca_object=+1\n",
		"rdma/rdma.max":                      "a\nb\nc\nd\n",
	}
	sizes, _ := v1HugePageSizes()
	for _, size := range sizes {
		edges["hugetlb/hugetlb."+size+".usage_in_bytes"] = "max\n"
	}
	if len(sizes) > 1 {
		edges["hugetlb/hugetlb."+sizes[1]+".failcnt"] = "-"
	}
	empty := map[string]string{}
	for name := range v1Full() {
		empty[name] = "-"
	}
	trees := map[string]map[string]string{
		"full":  {},
		"empty": empty,
		"edges": edges,
		// Without swap accounting: kmem is not read either.
		"no memsw": {"memory/memory.memsw.usage_in_bytes": "-", "memory/memory.memsw.max_usage_in_bytes": "-",
			"memory/memory.memsw.failcnt": "-", "memory/memory.memsw.limit_in_bytes": "-"},
		"no kmem.tcp":       {"memory/memory.kmem.tcp.limit_in_bytes": "-"},
		"no oom_control":    {"memory/memory.oom_control": "-"},
		"no memory.stat":    {"memory/memory.stat": "-"},
		"no pids.max":       {"pids/pids.max": "-"},
		"no cpuacct.stat":   {"cpuacct/cpuacct.stat": "-"},
		"no percpu":         {"cpuacct/cpuacct.usage_percpu": "-"},
		"no partitions":     {"partitions": "-"},
		"no rdma.max":       {"rdma/rdma.max": "-"},
		"rdma lines differ": {"rdma/rdma.max": "mlx4_0 hca_handle=max hca_object=max\n"},
		// Recursive files all empty (no CFQ): the throttling files are read instead.
		"blkio throttling": {"blkio/blkio.sectors_recursive": "", "blkio/blkio.io_service_bytes_recursive": "",
			"blkio/blkio.io_serviced_recursive": "Total 0\n", "blkio/blkio.io_queued_recursive": "",
			"blkio/blkio.io_service_time_recursive": "", "blkio/blkio.io_wait_time_recursive": "",
			"blkio/blkio.io_merged_recursive": "", "blkio/blkio.time_recursive": "",
			"blkio/blkio.throttle.io_service_bytes": "8:0 Read 4096\n8:0 Write 0\n253:0 Total 4096\nTotal 4096\n"},
		"blkio no recursive":   {"blkio/blkio.io_serviced_recursive": "-"},
		"blkio one missing":    {"blkio/blkio.io_wait_time_recursive": "-"},
		"memory and pids only": {"cpu/": "", "cpuacct/": "", "blkio/": "", "hugetlb/": "", "rdma/": ""},
		// Only the first 32 bytes are read.
		"long zeros": {"cpuacct/cpuacct.usage": "000000000000000000000000000000000012\n"},
		"cpu only":   {"pids/": "", "cpuacct/": "", "memory/": "", "blkio/": "", "hugetlb/": "", "rdma/": ""},
	}
	// Malformed files, which fail the read.
	for name, change := range map[string][2]string{
		"bad cpu.stat":         {"cpu/cpu.stat", "nr_periods 1\nnr_throttled\n"},
		"blank line":           {"cpu/cpu.stat", "nr_periods 1\n\n"},
		"bad cpuacct.stat":     {"cpuacct/cpuacct.stat", "user x\nsystem 1\n"},
		"cpuacct.stat no user": {"cpuacct/cpuacct.stat", "system 1\n"},
		"empty cpuacct.usage":  {"cpuacct/cpuacct.usage", ""},
		"bad cpuacct.usage":    {"cpuacct/cpuacct.usage", "1.5\n"},
		"long cpuacct.usage":   {"cpuacct/cpuacct.usage", "12345678901234567890123456789012345\n"},
		"negative percpu":      {"cpuacct/cpuacct.usage_percpu", "1 -1\n"},
		"bad memory.stat":      {"memory/memory.stat", "cache 1\nrss 1 2\n"},
		"memory.stat max":      {"memory/memory.stat", "hierarchical_memory_limit max\n"},
		"bad oom_control":      {"memory/memory.oom_control", "oom_kill x\n"},
		"bad limit":            {"memory/memory.kmem.limit_in_bytes", "lots\n"},
		"empty usage":          {"memory/memory.usage_in_bytes", ""},
		"plus sign":            {"pids/pids.current", "+5\n"},
		"bad pids.max":         {"pids/pids.max", "none\n"},
		"bad blkio line":       {"blkio/blkio.io_merged_recursive", "8:0\n"},
		"bad blkio major":      {"blkio/blkio.io_merged_recursive", "x:0 Read 1\n"},
		"negative blkio":       {"blkio/blkio.io_merged_recursive", "8:0 Read -1\n"},
		"bad throttle":         {"blkio/blkio.throttle.io_serviced", "8:0 Read x\n"},
		"bad partitions":       {"partitions", "h\n\nx 0 1 sda\n"},
	} {
		trees["malformed: "+name] = map[string]string{change[0]: change[1]}
		if name == "bad throttle" {
			trees["malformed: "+name]["blkio/blkio.io_serviced_recursive"] = "-"
		}
	}
	sizes, _ = v1HugePageSizes()
	if len(sizes) > 0 {
		trees["malformed: bad hugetlb"] = map[string]string{"hugetlb/hugetlb." + sizes[0] + ".failcnt": "many\n"}
	}
	return trees
}

// writeV1Tree writes the full tree changed by change under a new root; it returns the root and
// the path of its /proc/partitions.
func writeV1Tree(t *testing.T, change map[string]string) (root, partitions string) {
	t.Helper()
	root = t.TempDir()
	partitions = filepath.Join(t.TempDir(), "partitions")
	files := v1Full()
	files["partitions"] = v1Partitions
	for name, content := range change {
		files[name] = content
	}
	for _, c := range v1Staters {
		if _, gone := change[c+"/"]; gone {
			if err := os.MkdirAll(filepath.Join(root, c), 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Join(root, c, v1Group), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for name, content := range files {
		c, file, _ := strings.Cut(name, "/")
		dst := filepath.Join(root, c, v1Group, file)
		if name == "partitions" {
			dst = partitions
		} else if _, gone := change[c+"/"]; gone || file == "" {
			continue
		}
		if content == "-" {
			continue
		}
		if err := os.WriteFile(dst, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, partitions
}

// libraryHierarchy is the library's default hierarchy below root, as cgroup1.Default builds
// it below the host's: every controller whose directory exists.
func libraryHierarchy(root, partitions string) cgroup1.Hierarchy {
	return func() ([]cgroup1.Subsystem, error) {
		all := []cgroup1.Subsystem{
			cgroup1.NewNamed(root, "systemd"), cgroup1.NewFreezer(root), cgroup1.NewPids(root),
			cgroup1.NewNetCls(root), cgroup1.NewNetPrio(root), cgroup1.NewPerfEvent(root),
			cgroup1.NewCpuset(root), cgroup1.NewCpu(root), cgroup1.NewCpuacct(root),
			cgroup1.NewMemory(root), cgroup1.NewBlkio(root, cgroup1.ProcRoot(filepath.Dir(partitions))),
			cgroup1.NewRdma(root), cgroup1.NewDevices(root),
		}
		if h, err := cgroup1.NewHugetlb(root); err == nil {
			all = append(all, h)
		}
		var out []cgroup1.Subsystem
		for _, s := range all {
			if _, err := os.Lstat(filepath.Join(root, string(s.Name()))); err == nil {
				out = append(out, s)
			}
		}
		return out, nil
	}
}

// TestV1StatMatchesTheLibrary reads each tree with v1Dirs and v1Stat, and with
// containerd/cgroups/v3's cgroup1.Load and Stat(cgroup1.IgnoreNotExist), which containerd's
// own shim reports: the same metrics, or both an error.
func TestV1StatMatchesTheLibrary(t *testing.T) {
	for name, change := range v1Trees() {
		t.Run(name, func(t *testing.T) {
			root, partitions := writeV1Tree(t, change)
			var want *stats.Metrics
			cg, werr := cgroup1.Load(cgroup1.StaticPath(v1Group), cgroup1.WithHierarchy(libraryHierarchy(root, partitions)))
			if werr == nil {
				want, werr = cg.Stat(cgroup1.IgnoreNotExist)
			}
			var got *stats.Metrics
			dirs, gerr := v1Dirs(root, func(string) (string, bool) { return v1Group, true })
			if gerr == nil {
				got, gerr = v1Stat(dirs, partitions)
			}
			if (gerr == nil) != (werr == nil) {
				t.Fatalf("error %v; the library's %v", gerr, werr)
			}
			if strings.HasPrefix(name, "malformed") && werr == nil {
				t.Fatal("the library accepts it; the test's premise is wrong")
			}
			if !proto.Equal(got, want) {
				t.Errorf("v1Stat differs from the library:\n got  %v\n want %v", got, want)
			}
		})
	}
	if sizes, _ := v1HugePageSizes(); len(sizes) == 0 {
		t.Log("this host has no huge page sizes: the hugetlb part compared empty lists")
	}
}

// TestV1StatFullTree pins some values of the full tree, so that the comparison above is not
// between two empty results.
func TestV1StatFullTree(t *testing.T) {
	root, partitions := writeV1Tree(t, nil)
	dirs, err := v1Dirs(root, func(string) (string, bool) { return v1Group, true })
	if err != nil {
		t.Fatal(err)
	}
	m, err := v1Stat(dirs, partitions)
	if err != nil {
		t.Fatal(err)
	}
	if m.GetPids().GetCurrent() != 7 || m.GetPids().GetLimit() != 64 {
		t.Errorf("pids = %v", m.GetPids())
	}
	if u := m.GetCPU().GetUsage(); u.GetTotal() != 912345678 || u.GetUser() != 12340000000 || u.GetKernel() != 5670000000 || len(u.GetPerCPU()) != 4 {
		t.Errorf("cpu usage = %v", u)
	}
	if mem := m.GetMemory(); mem.GetUsage().GetUsage() != 1<<20 || mem.GetSwap().GetFailcnt() != 1 || mem.GetKernelTCP().GetMax() != 5<<20 || mem.GetTotalUnevictable() == 0 {
		t.Errorf("memory = %v", mem)
	}
	if m.GetMemoryOomControl().GetOomKill() != 2 {
		t.Errorf("oom control = %v", m.GetMemoryOomControl())
	}
	if e := m.GetBlkio().GetIoServicedRecursive(); len(e) != 8 || e[0].GetDevice() != "/dev/sda" || e[6].GetDevice() != "/dev/dm-0" || e[7].GetDevice() != "" {
		t.Errorf("blkio io_serviced_recursive = %v", e)
	}
	if r := m.GetRdma(); len(r.GetLimit()) != 2 || r.GetLimit()[0].GetHcaHandles() != 1<<32-1 {
		t.Errorf("rdma = %v", r)
	}
}

// TestV1DirsSkipsWhatTheLibrarySkips: a hierarchy without the cgroup is left out, a cgroup in
// no hierarchy is refused, and so is a process outside the mounted devices hierarchy.
func TestV1DirsSkipsWhatTheLibrarySkips(t *testing.T) {
	root, _ := writeV1Tree(t, map[string]string{"cpu/": ""})
	dirs, err := v1Dirs(root, func(string) (string, bool) { return v1Group, true })
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := dirs["cpu"]; ok || dirs["memory"] != filepath.Join(root, "memory", v1Group) {
		t.Errorf("dirs = %v", dirs)
	}
	if _, err := v1Dirs(root, func(string) (string, bool) { return "/other", true }); err == nil {
		t.Error("a cgroup in no hierarchy was loaded")
	}
	if err := os.MkdirAll(filepath.Join(root, "devices", v1Group), 0o755); err != nil {
		t.Fatal(err)
	}
	only := func(c string) (string, bool) { return v1Group, c == "memory" }
	if _, err := v1Dirs(root, only); err == nil {
		t.Error("a process outside the devices hierarchy was loaded")
	}
	if _, err := cgroup1.Load(func(c cgroup1.Name) (string, error) {
		if p, ok := only(string(c)); ok {
			return p, nil
		}
		return "", cgroup1.ErrControllerNotActive
	}, cgroup1.WithHierarchy(libraryHierarchy(root, ""))); err == nil {
		t.Error("the library loads it; the test's premise is wrong")
	}
}

func TestV1Root(t *testing.T) {
	line := func(id int, mnt, fs, opts string) string {
		return fmt.Sprintf("%d 25 0:%d / %s rw,nosuid - %s %s rw,%s\n", id, id, mnt, fs, fs, opts)
	}
	for _, c := range []struct{ mountinfo, want string }{
		{line(1, "/", "ext4", "x") + line(2, "/sys/fs/cgroup/unified", "cgroup2", "x") +
			line(3, "/sys/fs/cgroup/cpu,cpuacct", "cgroup", "cpu,cpuacct") + line(4, "/elsewhere/memory", "cgroup", "memory"),
			"/sys/fs/cgroup"},
		{line(1, "/", "ext4", "x"), ""},
		{"short line\n" + line(3, "/sys/fs/cgroup/pids", "cgroup", "pids"), ""},
	} {
		got, err := v1Root([]byte(c.mountinfo))
		if got != c.want || (err == nil) != (c.want != "") {
			t.Errorf("v1Root(%q) = %q, %v; want %q", c.mountinfo, got, err, c.want)
		}
	}
}

// TestV1StatOnTheRealKernel reads a shell child of the test in a cgroup of its own in each
// hierarchy, both ways, on this host's v1 hierarchies, and compares what does not change
// between two reads.
func TestV1StatOnTheRealKernel(t *testing.T) {
	if isUnified(Root) {
		t.Fatalf("%s is a cgroup2 mount: this test is for hosts with cgroup v1 hierarchies", Root)
	}
	mountinfo, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	root, err := v1Root(mountinfo)
	if err != nil {
		t.Fatal(err)
	}
	group := fmt.Sprintf("/shimwalk-v1-test-%d", os.Getpid())
	var procs []string
	for _, c := range []string{"memory", "pids", "cpu", "cpuacct", "blkio"} {
		dir := filepath.Join(root, c, group)
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(dir) })
		procs = append(procs, filepath.Join(dir, "cgroup.procs"))
	}
	if err := os.WriteFile(filepath.Join(root, "memory", group, "memory.limit_in_bytes"), []byte("268435456"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "pids", group, "pids.max"), []byte("64"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The shell joins the cgroups, then grows its heap there (memory charged to the cgroup),
	// says so and waits on its stdin.
	cmd := exec.Command("sh", "-c", `for f in "$@"; do echo $$ > "$f" || exit 1; done; x=$(seq 100000); echo ready; read y`, "sh")
	cmd.Args = append(cmd.Args, procs...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		cmd.Process.Kill()
		cmd.Wait()
	})
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("child: %q, %v", line, err)
	}
	pid := cmd.Process.Pid

	g, err := Load(pid)
	if err != nil {
		t.Fatal(err)
	}
	lib, err := cgroup1.Load(cgroup1.PidPath(pid))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, s := range lib.Subsystems() {
		p, err := cgroup1.PidPath(pid)(s.Name())
		if err != nil {
			t.Fatal(err)
		}
		want[string(s.Name())] = s.(interface{ Path(string) string }).Path(p)
	}
	if fmt.Sprint(g.v1) != fmt.Sprint(want) {
		t.Errorf("directories:\n got  %v\n want %v", g.v1, want)
	}
	if g.v1["memory"] != filepath.Join(root, "memory", group) {
		t.Errorf("memory directory %q, want the test's cgroup", g.v1["memory"])
	}
	v, err := g.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	got := v.(*stats.Metrics)
	theirs, err := lib.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"pids limit", got.GetPids().GetLimit(), theirs.GetPids().GetLimit()},
		{"memory limit", got.GetMemory().GetUsage().GetLimit(), theirs.GetMemory().GetUsage().GetLimit()},
		{"swap limit", got.GetMemory().GetSwap().GetLimit(), theirs.GetMemory().GetSwap().GetLimit()},
		{"kmem limit", got.GetMemory().GetKernel().GetLimit(), theirs.GetMemory().GetKernel().GetLimit()},
		{"kmem.tcp limit", got.GetMemory().GetKernelTCP().GetLimit(), theirs.GetMemory().GetKernelTCP().GetLimit()},
		{"hierarchical limit", got.GetMemory().GetHierarchicalMemoryLimit(), theirs.GetMemory().GetHierarchicalMemoryLimit()},
		{"hierarchical swap limit", got.GetMemory().GetHierarchicalSwapLimit(), theirs.GetMemory().GetHierarchicalSwapLimit()},
		{"oom_kill_disable", got.GetMemoryOomControl().GetOomKillDisable(), theirs.GetMemoryOomControl().GetOomKillDisable()},
		{"cpus", len(got.GetCPU().GetUsage().GetPerCPU()), len(theirs.GetCPU().GetUsage().GetPerCPU())},
		{"hugetlb sizes", len(got.GetHugetlb()), len(theirs.GetHugetlb())},
		{"pids present", got.Pids != nil, theirs.Pids != nil},
		{"memory present", got.Memory != nil, theirs.Memory != nil},
		{"oom control present", got.MemoryOomControl != nil, theirs.MemoryOomControl != nil},
		{"blkio present", got.Blkio != nil, theirs.Blkio != nil},
		{"rdma present", got.Rdma != nil, theirs.Rdma != nil},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v, the library's %v", c.name, c.got, c.want)
		}
	}
	if got.GetPids().GetLimit() != 64 || got.GetMemory().GetUsage().GetLimit() != 256<<20 {
		t.Errorf("limits: pids %d, memory %d; want the test's 64 and 256 MiB", got.GetPids().GetLimit(), got.GetMemory().GetUsage().GetLimit())
	}
	if got.GetPids().GetCurrent() < 1 || got.GetMemory().GetUsage().GetUsage() == 0 {
		t.Errorf("pids current %d, memory usage %d: want the shell counted", got.GetPids().GetCurrent(), got.GetMemory().GetUsage().GetUsage())
	}
}

// TestV1JoinMatchesTheLibrary joins a fake tree both ways: the pid lands in the cgroup.procs
// of every hierarchy that has the cgroup, one without it is skipped, and nothing is created.
func TestV1JoinMatchesTheLibrary(t *testing.T) {
	tree := func() string {
		root := t.TempDir()
		for _, c := range []string{"systemd", "memory", "pids", "cpu", "freezer"} {
			dir := filepath.Join(root, c, v1Group)
			if c == "cpu" {
				dir = filepath.Join(root, c, "other")
			}
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), nil, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return root
	}
	read := func(root string) map[string]string {
		files := map[string]string{}
		err := filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
			if err == nil && !info.IsDir() {
				data, rerr := os.ReadFile(p)
				files[strings.TrimPrefix(p, root)] = string(data)
				err = rerr
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return files
	}
	ours, theirs := tree(), tree()
	if err := v1Join(ours, v1Group, 4242); err != nil {
		t.Fatal(err)
	}
	cg, err := cgroup1.Load(cgroup1.StaticPath(v1Group), cgroup1.WithHierarchy(libraryHierarchy(theirs, "")))
	if err != nil {
		t.Fatal(err)
	}
	if err := cg.AddProc(4242); err != nil {
		t.Fatal(err)
	}
	got, want := read(ours), read(theirs)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("after v1Join:\n got  %v\n want %v", got, want)
	}
	if got["/memory"+v1Group+"/cgroup.procs"] != "4242" || got["/cpu/other/cgroup.procs"] != "" {
		t.Errorf("after v1Join: %v", got)
	}

	// A cgroup in no hierarchy: both refuse.
	if err := v1Join(ours, "/nowhere", 4242); err == nil {
		t.Error("joined a cgroup in no hierarchy")
	}
	if _, err := cgroup1.Load(cgroup1.StaticPath("/nowhere"), cgroup1.WithHierarchy(libraryHierarchy(theirs, ""))); err == nil {
		t.Error("the library loads a cgroup in no hierarchy; the test's premise is wrong")
	}
	// A directory without cgroup.procs (no cgroup file system): refused, and not created,
	// where the library would create the file.
	bare := t.TempDir()
	if err := os.MkdirAll(filepath.Join(bare, "memory", v1Group), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := v1Join(bare, v1Group, 4242); err == nil {
		t.Error("joined a directory without cgroup.procs")
	}
	if files := read(bare); len(files) != 0 {
		t.Errorf("v1Join created %v", files)
	}
	if err := v1Join(tree(), v1Group, 0); err == nil {
		t.Error("joined pid 0")
	}
}

func TestJoinRefusesUncleanPaths(t *testing.T) {
	for _, p := range []string{"", "pod/c1", "/pod/../c1", "/pod/c1/"} {
		if err := Join(p, os.Getpid()); err == nil || !strings.Contains(err.Error(), "not an absolute, clean") {
			t.Errorf("Join(%q) = %v, want a refusal", p, err)
		}
	}
}
