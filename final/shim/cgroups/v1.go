// SPDX-License-Identifier: Apache-2.0

// The cgroup v1 files, read here rather than through containerd/cgroups/v3's cgroup1 package,
// whose cgroup1.Load(...).Stat(cgroup1.IgnoreNotExist) containerd v2.4's shim reports
// (cmd/containerd-shim-runc-v2/task/service.go). That package also drives systemd over D-Bus,
// which linked go-systemd and godbus into a shim that only reads files: 0.22 MB of the stripped
// binary, and so of every shim's resident memory. The metrics are the library's, field for
// field and with its conventions (which files may be missing, which malformed ones fail the
// read, when a part is left nil), which TestV1StatMatchesTheLibrary checks on trees of files.

package cgroups

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"

	stats "github.com/containerd/cgroups/v3/cgroup1/stats"
	"github.com/moby/sys/userns"
)

// v1Controllers are the hierarchies the library's default hierarchy may hold, in its order:
// devices unless in a user namespace, hugetlb when the host has huge pages.
func v1Controllers() []string {
	names := []string{"systemd", "freezer", "pids", "net_cls", "net_prio", "perf_event", "cpuset",
		"cpu", "cpuacct", "memory", "blkio", "rdma"}
	if !userns.RunningInUserNS() {
		names = append(names, "devices")
	}
	if _, ok := v1HugePageSizes(); ok {
		names = append(names, "hugetlb")
	}
	return names
}

// v1Root is the directory holding the v1 hierarchies, each at <v1Root>/<controller>: the
// library takes the parent of the first cgroup v1 mount point in mountinfo, whatever the
// others are (so /sys/fs/cgroup/cpuacct is reached through the cpu,cpuacct symlink).
func v1Root(mountinfo []byte) (string, error) {
	for _, line := range strings.Split(strings.TrimSuffix(string(mountinfo), "\n"), "\n") {
		fields := strings.Split(line, " ")
		if len(fields) < 10 {
			return "", fmt.Errorf("mountinfo: bad entry %q", line)
		}
		if fields[len(fields)-3] == "cgroup" {
			return filepath.Dir(fields[4]), nil
		}
	}
	return "", errors.New("no cgroup v1 mount")
}

// v1Dirs are the directories of a cgroup in each hierarchy below root that has it, as
// cgroup1.Load finds them: a hierarchy missing under root, or lacking the cgroup, is left out;
// one the process is not in is too, except devices, which the library requires.
func v1Dirs(root string, path func(controller string) (string, bool)) (map[string]string, error) {
	dirs := map[string]string{}
	for _, name := range v1Controllers() {
		if _, err := os.Lstat(filepath.Join(root, name)); err != nil {
			continue
		}
		p, ok := path(name)
		if !ok {
			if name == "devices" {
				return nil, errors.New("cgroup v1: the process has no devices cgroup")
			}
			continue
		}
		dir := filepath.Join(root, name, p)
		if _, err := os.Lstat(dir); err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, fmt.Errorf("cgroup v1: %w", err)
		}
		dirs[name] = dir
	}
	if len(dirs) == 0 {
		return nil, errors.New("cgroup v1: the cgroup is in no hierarchy")
	}
	return dirs, nil
}

// v1Stat reads the metrics of the cgroup whose directories are dirs; partitions is
// /proc/partitions, which names the block devices. A controller's missing file ends that
// controller's reading, keeping what it has read, as cgroup1.IgnoreNotExist does.
func v1Stat(dirs map[string]string, partitions string) (*stats.Metrics, error) {
	m := &stats.Metrics{CPU: &stats.CPUStat{Throttling: &stats.Throttle{}, Usage: &stats.CPUUsage{}}}
	for _, c := range []struct {
		name string
		read func(dir string, m *stats.Metrics) error
	}{
		{"pids", v1Pids},
		{"cpu", v1CPU},
		{"cpuacct", v1Cpuacct},
		{"memory", v1Memory},
		{"blkio", func(dir string, m *stats.Metrics) error { return v1Blkio(dir, partitions, m) }},
		{"hugetlb", v1Hugetlb},
		{"rdma", v1Rdma},
	} {
		dir, ok := dirs[c.name]
		if !ok {
			continue
		}
		if err := c.read(dir, m); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("cgroup v1 %s: %w", c.name, err)
		}
	}
	return m, nil
}

// v1Join writes pid to the cgroup.procs of cgroup p in each hierarchy below root that has it.
func v1Join(root, p string, pid int) error {
	if pid <= 0 {
		return fmt.Errorf("invalid pid %d", pid)
	}
	dirs, err := v1Dirs(root, func(string) (string, bool) { return p, true })
	if err != nil {
		return err
	}
	// In the library's order, so that a failure leaves the same hierarchies joined.
	for _, name := range v1Controllers() {
		if dir, ok := dirs[name]; ok {
			if err := joinDir(dir, pid); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return nil
}

// v1Uint reads a file of one number, where "max" reads as 0. Like the library it reads at most
// 32 bytes, in one read, and an empty file is an error.
func v1Uint(dir, name string) (uint64, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	b := make([]byte, 32)
	n, err := f.Read(b)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	s := strings.TrimSpace(string(b[:n]))
	if s == "max" {
		return 0, nil
	}
	v, err := parseCount(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return v, nil
}

func v1Pids(dir string, m *stats.Metrics) error {
	current, err := v1Uint(dir, "pids.current")
	if err != nil {
		return err
	}
	limit, err := v1Uint(dir, "pids.max")
	if err != nil {
		return err
	}
	m.Pids = &stats.PidsStat{Current: current, Limit: limit}
	return nil
}

func v1CPU(dir string, m *stats.Metrics) error {
	kv, err := readKV(dir, "cpu.stat")
	if err != nil {
		return err
	}
	m.CPU.Throttling.Periods = kv["nr_periods"]
	m.CPU.Throttling.ThrottledPeriods = kv["nr_throttled"]
	m.CPU.Throttling.ThrottledTime = kv["throttled_time"]
	return nil
}

func v1Cpuacct(dir string, m *stats.Metrics) error {
	kv, err := readKV(dir, "cpuacct.stat")
	if err != nil {
		return err
	}
	user, ok := kv["user"]
	if !ok {
		return errors.New("cpuacct.stat has no user line")
	}
	system, ok := kv["system"]
	if !ok {
		return errors.New("cpuacct.stat has no system line")
	}
	total, err := v1Uint(dir, "cpuacct.usage")
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(dir, "cpuacct.usage_percpu"))
	if err != nil {
		return err
	}
	var perCPU []uint64
	for _, s := range strings.Fields(string(data)) {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			return fmt.Errorf("cpuacct.usage_percpu: %v", err)
		}
		perCPU = append(perCPU, v)
	}
	// USER_HZ is 100 on every Linux the library supports; multiplying first, as it does, keeps
	// the same result when the product overflows.
	const ticks = 100
	m.CPU.Usage.Total = total
	m.CPU.Usage.User = user * 1e9 / ticks
	m.CPU.Usage.Kernel = system * 1e9 / ticks
	m.CPU.Usage.PerCPU = perCPU
	return nil
}

func v1Memory(dir string, m *stats.Metrics) error {
	kv, err := readKV(dir, "memory.stat")
	if err != nil {
		return err
	}
	mem := &stats.MemoryStat{
		Cache:                   kv["cache"],
		RSS:                     kv["rss"],
		RSSHuge:                 kv["rss_huge"],
		MappedFile:              kv["mapped_file"],
		Dirty:                   kv["dirty"],
		Writeback:               kv["writeback"],
		PgPgIn:                  kv["pgpgin"],
		PgPgOut:                 kv["pgpgout"],
		PgFault:                 kv["pgfault"],
		PgMajFault:              kv["pgmajfault"],
		InactiveAnon:            kv["inactive_anon"],
		ActiveAnon:              kv["active_anon"],
		InactiveFile:            kv["inactive_file"],
		ActiveFile:              kv["active_file"],
		Unevictable:             kv["unevictable"],
		HierarchicalMemoryLimit: kv["hierarchical_memory_limit"],
		HierarchicalSwapLimit:   kv["hierarchical_memsw_limit"],
		TotalCache:              kv["total_cache"],
		TotalRSS:                kv["total_rss"],
		TotalRSSHuge:            kv["total_rss_huge"],
		TotalMappedFile:         kv["total_mapped_file"],
		TotalDirty:              kv["total_dirty"],
		TotalWriteback:          kv["total_writeback"],
		TotalPgPgIn:             kv["total_pgpgin"],
		TotalPgPgOut:            kv["total_pgpgout"],
		TotalPgFault:            kv["total_pgfault"],
		TotalPgMajFault:         kv["total_pgmajfault"],
		TotalInactiveAnon:       kv["total_inactive_anon"],
		TotalActiveAnon:         kv["total_active_anon"],
		TotalInactiveFile:       kv["total_inactive_file"],
		TotalActiveFile:         kv["total_active_file"],
		TotalUnevictable:        kv["total_unevictable"],
		Usage:                   &stats.MemoryEntry{},
		Swap:                    &stats.MemoryEntry{},
		Kernel:                  &stats.MemoryEntry{},
		KernelTCP:               &stats.MemoryEntry{},
	}
	m.Memory = mem
	oom, err := readKV(dir, "memory.oom_control")
	if err != nil {
		return err
	}
	m.MemoryOomControl = &stats.MemoryOomControl{
		OomKillDisable: oom["oom_kill_disable"],
		UnderOom:       oom["under_oom"],
		OomKill:        oom["oom_kill"],
	}
	// A kernel without swap accounting has no memsw files: the first one missing ends the
	// reading, so kmem and kmem.tcp then read as 0 too, as in the library.
	for _, e := range []struct {
		prefix string
		entry  *stats.MemoryEntry
	}{
		{"memory.", mem.Usage},
		{"memory.memsw.", mem.Swap},
		{"memory.kmem.", mem.Kernel},
		{"memory.kmem.tcp.", mem.KernelTCP},
	} {
		for _, f := range []struct {
			name string
			v    *uint64
		}{
			{"usage_in_bytes", &e.entry.Usage},
			{"max_usage_in_bytes", &e.entry.Max},
			{"failcnt", &e.entry.Failcnt},
			{"limit_in_bytes", &e.entry.Limit},
		} {
			v, err := v1Uint(dir, e.prefix+f.name)
			if err != nil {
				return err
			}
			*f.v = v
		}
	}
	return nil
}

// v1Blkio reads the recursive blkio files, or where they are absent or empty (the CFQ
// scheduler's files, gone with it) the throttling ones.
func v1Blkio(dir, partitions string, m *stats.Metrics) error {
	b := &stats.BlkIOStat{}
	m.Blkio = b
	var files []v1BlkioFile
	if _, err := os.Lstat(filepath.Join(dir, "blkio.io_serviced_recursive")); err == nil {
		files = []v1BlkioFile{
			{"blkio.sectors_recursive", &b.SectorsRecursive},
			{"blkio.io_service_bytes_recursive", &b.IoServiceBytesRecursive},
			{"blkio.io_serviced_recursive", &b.IoServicedRecursive},
			{"blkio.io_queued_recursive", &b.IoQueuedRecursive},
			{"blkio.io_service_time_recursive", &b.IoServiceTimeRecursive},
			{"blkio.io_wait_time_recursive", &b.IoWaitTimeRecursive},
			{"blkio.io_merged_recursive", &b.IoMergedRecursive},
			{"blkio.time_recursive", &b.IoTimeRecursive},
		}
	}
	devices, err := v1Devices(partitions)
	if err != nil {
		return err
	}
	n := 0
	for _, f := range files {
		if err := v1BlkioRead(dir, f, devices); err != nil {
			return err
		}
		n += len(*f.entries)
	}
	if n > 0 {
		return nil
	}
	for _, f := range []v1BlkioFile{
		{"blkio.throttle.io_serviced", &b.IoServicedRecursive},
		{"blkio.throttle.io_service_bytes", &b.IoServiceBytesRecursive},
	} {
		if err := v1BlkioRead(dir, f, devices); err != nil {
			return err
		}
	}
	return nil
}

type v1BlkioFile struct {
	name    string
	entries *[]*stats.BlkIOEntry
}

// v1BlkioRead appends the lines of a blkio file, "MAJ:MIN [OP] VALUE", skipping "Total N".
func v1BlkioRead(dir string, f v1BlkioFile, devices map[[2]uint64]string) error {
	file, err := os.Open(filepath.Join(dir, f.name))
	if err != nil {
		return err
	}
	defer file.Close()
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		fields := strings.FieldsFunc(sc.Text(), func(r rune) bool { return r == ' ' || r == ':' })
		if len(fields) == 2 && fields[0] == "Total" {
			continue
		}
		if len(fields) < 3 {
			return fmt.Errorf("%s: invalid line %q", f.name, sc.Text())
		}
		e := &stats.BlkIOEntry{}
		if e.Major, err = strconv.ParseUint(fields[0], 10, 64); err != nil {
			return fmt.Errorf("%s: %v", f.name, err)
		}
		if e.Minor, err = strconv.ParseUint(fields[1], 10, 64); err != nil {
			return fmt.Errorf("%s: %v", f.name, err)
		}
		value := fields[2]
		if len(fields) == 4 {
			e.Op, value = fields[2], fields[3]
		}
		if e.Value, err = strconv.ParseUint(value, 10, 64); err != nil {
			return fmt.Errorf("%s: %v", f.name, err)
		}
		e.Device = devices[[2]uint64{e.Major, e.Minor}]
		*f.entries = append(*f.entries, e)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s: %v", f.name, err)
	}
	return nil
}

// v1Devices names block devices by number from partitions (/proc/partitions: two header
// lines, then "MAJ MIN BLOCKS NAME"), the first name of a number winning.
func v1Devices(partitions string) (map[[2]uint64]string, error) {
	data, err := os.ReadFile(partitions)
	if err != nil {
		return nil, err
	}
	devices := map[[2]uint64]string{}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	for _, line := range lines[min(2, len(lines)):] {
		fields := strings.Fields(line)
		if len(fields) < 4 {
			return nil, fmt.Errorf("partitions: invalid line %q", line)
		}
		major, err := strconv.Atoi(fields[0])
		if err != nil {
			return nil, fmt.Errorf("partitions: %v", err)
		}
		minor, err := strconv.Atoi(fields[1])
		if err != nil {
			return nil, fmt.Errorf("partitions: %v", err)
		}
		key := [2]uint64{uint64(major), uint64(minor)}
		if _, ok := devices[key]; !ok {
			devices[key] = filepath.Join("/dev", fields[3])
		}
	}
	return devices, nil
}

func v1Hugetlb(dir string, m *stats.Metrics) error {
	sizes, _ := v1HugePageSizes()
	for _, size := range sizes {
		s := &stats.HugetlbStat{Pagesize: size}
		for _, f := range []struct {
			name string
			v    *uint64
		}{
			{"usage_in_bytes", &s.Usage},
			{"max_usage_in_bytes", &s.Max},
			{"failcnt", &s.Failcnt},
		} {
			v, err := v1Uint(dir, "hugetlb."+size+"."+f.name)
			if err != nil {
				return err
			}
			*f.v = v
		}
		m.Hugetlb = append(m.Hugetlb, s)
	}
	return nil
}

// v1HugePageSizes are the host's huge page sizes as the library names them for cgroup v1
// ("1GB", "2MB"), in the order of their directory names; ok is false when the host has none
// (no /sys/kernel/mm/hugepages), which leaves hugetlb out of the hierarchies. Read once.
var v1HugePageSizes = sync.OnceValues(func() ([]string, bool) {
	d, err := os.Open("/sys/kernel/mm/hugepages")
	if err != nil {
		return nil, false
	}
	defer d.Close()
	names, err := d.Readdirnames(0)
	if err != nil {
		return nil, false
	}
	sort.Strings(names)
	var sizes []string
	for _, n := range names {
		kb, ok := strings.CutPrefix(n, "hugepages-")
		if !ok {
			continue
		}
		if kb, ok = strings.CutSuffix(kb, "kB"); !ok {
			continue
		}
		k, err := strconv.ParseUint(kb, 10, 64)
		if err != nil {
			continue
		}
		size, unit := float64(k)*1024, 0
		for size >= 1024 && unit < 5 {
			size /= 1024
			unit++
		}
		sizes = append(sizes, strconv.FormatFloat(size, 'g', -1, 64)+[]string{"B", "KB", "MB", "GB", "TB", "PB"}[unit])
	}
	return sizes, true
})

// v1Rdma reads rdma.current and rdma.max, "DEVICE hca_handle=N hca_object=N" per line; when
// the two have different line counts (a device came or went between the reads) it reports
// nothing, as the library does.
func v1Rdma(dir string, m *stats.Metrics) error {
	current, err := os.ReadFile(filepath.Join(dir, "rdma.current"))
	if err != nil {
		return err
	}
	limit, err := os.ReadFile(filepath.Join(dir, "rdma.max"))
	if err != nil {
		return err
	}
	cur, max := strings.Split(string(current), "\n"), strings.Split(string(limit), "\n")
	if len(cur) != len(max) {
		return nil
	}
	m.Rdma = &stats.RdmaStat{Current: v1RdmaEntries(cur), Limit: v1RdmaEntries(max)}
	return nil
}

func v1RdmaEntries(lines []string) []*stats.RdmaEntry {
	var entries []*stats.RdmaEntry
	for _, line := range lines {
		if dev, handles, objects, ok := rdmaLine(line); ok {
			entries = append(entries, &stats.RdmaEntry{Device: dev, HcaHandles: handles, HcaObjects: objects})
		}
	}
	return entries
}
