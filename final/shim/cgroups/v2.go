// SPDX-License-Identifier: Apache-2.0

// The cgroup v2 files, read here rather than through containerd/cgroups/v3's cgroup2.Manager,
// whose Stat containerd v2.4's shim calls (cmd/containerd-shim-runc-v2/task/service.go,
// Stats). The Manager's package also creates cgroups and sets device filters, which brings in
// cilium/ebpf: 0.9 MiB of a shim that only reads files, and about 0.5 MiB of PSS per shim
// (bench/NOTES.md). The metrics are the Manager's, field for field and with its conventions
// ("max" reads as the largest uint64, a negative value as 0, a missing file as zero), which
// TestV2StatMatchesTheLibrary checks against the library on trees of files.

package cgroups

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	stats "github.com/containerd/cgroups/v3/cgroup2/stats"
)

// v2Stat reads the metrics of the cgroup v2 directory dir.
func v2Stat(dir string) (*stats.Metrics, error) {
	m := &stats.Metrics{
		Pids: &stats.PidsStat{
			Current: v2Uint(dir, "pids.current"),
			Limit:   v2Uint(dir, "pids.max"),
		},
		Io: &stats.IOStat{Usage: v2IO(dir), PSI: v2PSI(dir, "io.pressure")},
		Rdma: &stats.RdmaStat{
			Current: v2Rdma(dir, "rdma.current"),
			Limit:   v2Rdma(dir, "rdma.max"),
		},
		Hugetlb: v2Hugetlb(dir),
	}
	cpu, err := v2KV(dir, "cpu.stat")
	if err != nil {
		return nil, err
	}
	m.CPU = &stats.CPUStat{
		UsageUsec:     cpu["usage_usec"],
		UserUsec:      cpu["user_usec"],
		SystemUsec:    cpu["system_usec"],
		NrPeriods:     cpu["nr_periods"],
		NrThrottled:   cpu["nr_throttled"],
		ThrottledUsec: cpu["throttled_usec"],
		NrBursts:      cpu["nr_bursts"],
		BurstUsec:     cpu["burst_usec"],
	}
	if cpu != nil {
		m.CPU.PSI = v2PSI(dir, "cpu.pressure")
	}
	mem, err := v2KV(dir, "memory.stat")
	if err != nil {
		return nil, err
	}
	m.Memory = &stats.MemoryStat{}
	if mem != nil {
		m.Memory = &stats.MemoryStat{
			Anon:                  mem["anon"],
			File:                  mem["file"],
			KernelStack:           mem["kernel_stack"],
			Slab:                  mem["slab"],
			Sock:                  mem["sock"],
			Shmem:                 mem["shmem"],
			FileMapped:            mem["file_mapped"],
			FileDirty:             mem["file_dirty"],
			FileWriteback:         mem["file_writeback"],
			AnonThp:               mem["anon_thp"],
			InactiveAnon:          mem["inactive_anon"],
			ActiveAnon:            mem["active_anon"],
			InactiveFile:          mem["inactive_file"],
			ActiveFile:            mem["active_file"],
			Unevictable:           mem["unevictable"],
			SlabReclaimable:       mem["slab_reclaimable"],
			SlabUnreclaimable:     mem["slab_unreclaimable"],
			Pgfault:               mem["pgfault"],
			Pgmajfault:            mem["pgmajfault"],
			WorkingsetRefault:     mem["workingset_refault"],
			WorkingsetActivate:    mem["workingset_activate"],
			WorkingsetNodereclaim: mem["workingset_nodereclaim"],
			Pgrefill:              mem["pgrefill"],
			Pgscan:                mem["pgscan"],
			Pgsteal:               mem["pgsteal"],
			Pgactivate:            mem["pgactivate"],
			Pgdeactivate:          mem["pgdeactivate"],
			Pglazyfree:            mem["pglazyfree"],
			Pglazyfreed:           mem["pglazyfreed"],
			ThpFaultAlloc:         mem["thp_fault_alloc"],
			ThpCollapseAlloc:      mem["thp_collapse_alloc"],
			Usage:                 v2Uint(dir, "memory.current"),
			UsageLimit:            v2Uint(dir, "memory.max"),
			MaxUsage:              v2Uint(dir, "memory.peak"),
			SwapUsage:             v2Uint(dir, "memory.swap.current"),
			SwapLimit:             v2Uint(dir, "memory.swap.max"),
			SwapMaxUsage:          v2Uint(dir, "memory.swap.peak"),
			PSI:                   v2PSI(dir, "memory.pressure"),
		}
	}
	events, err := v2KV(dir, "memory.events")
	if err != nil {
		return nil, err
	}
	if len(events) > 0 {
		m.MemoryEvents = &stats.MemoryEvents{
			Low:          events["low"],
			High:         events["high"],
			Max:          events["max"],
			Oom:          events["oom"],
			OomKill:      events["oom_kill"],
			OomGroupKill: events["oom_group_kill"],
		}
	}
	return m, nil
}

// v2Value is parseCount for a file of one value, where "max" is no limit.
func v2Value(s string) (uint64, error) {
	if s == "max" {
		return math.MaxUint64, nil
	}
	return parseCount(s, 64)
}

// v2Uint reads a file of one number, 0 when it is missing or unreadable.
func v2Uint(dir, name string) uint64 {
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return 0
	}
	v, err := v2Value(string(bytes.TrimSpace(data)))
	if err != nil {
		return 0
	}
	return v
}

// v2KV reads a file of "key value" lines; nil when it is missing, an error when a line is not
// a key and a number.
func v2KV(dir, name string) (map[string]uint64, error) {
	kv, err := readKV(dir, name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("cgroup v2 %w", err)
	}
	return kv, nil
}

// v2IO reads io.stat: a line per device, "MAJ:MIN key=value ...". A device number that does not
// parse ends the list there, as the library does.
func v2IO(dir string) []*stats.IOEntry {
	data, err := os.ReadFile(filepath.Join(dir, "io.stat"))
	if err != nil {
		return nil
	}
	var entries []*stats.IOEntry
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Split(line, " ")
		if len(fields) < 2 {
			continue
		}
		maj, min, ok := strings.Cut(fields[0], ":")
		if !ok || strings.Contains(min, ":") {
			continue
		}
		e := &stats.IOEntry{}
		if e.Major, err = strconv.ParseUint(maj, 10, 64); err != nil {
			return entries
		}
		if e.Minor, err = strconv.ParseUint(min, 10, 64); err != nil {
			return entries
		}
		for _, kv := range fields[1:] {
			k, s, ok := strings.Cut(kv, "=")
			if !ok || strings.Contains(s, "=") {
				continue
			}
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "rbytes":
				e.Rbytes = v
			case "wbytes":
				e.Wbytes = v
			case "rios":
				e.Rios = v
			case "wios":
				e.Wios = v
			}
		}
		entries = append(entries, e)
	}
	return entries
}

// v2Rdma reads rdma.current or rdma.max: "DEVICE hca_handle=N hca_object=N" per line.
func v2Rdma(dir, name string) []*stats.RdmaEntry {
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return nil
	}
	var entries []*stats.RdmaEntry
	for _, line := range strings.Split(string(data), "\n") {
		if dev, handles, objects, ok := rdmaLine(line); ok {
			entries = append(entries, &stats.RdmaEntry{Device: dev, HcaHandles: handles, HcaObjects: objects})
		}
	}
	return entries
}

// v2Hugetlb reads the hugetlb files of every huge page size the host has.
func v2Hugetlb(dir string) []*stats.HugeTlbStat {
	sizes := hugePageSizes()
	out := make([]*stats.HugeTlbStat, 0, len(sizes))
	for _, size := range sizes {
		s := &stats.HugeTlbStat{
			Pagesize: size,
			Current:  v2Uint(dir, "hugetlb."+size+".current"),
			Max:      v2Uint(dir, "hugetlb."+size+".max"),
		}
		// The "max" line only: another line that does not parse does not hide it.
		if data, err := os.ReadFile(filepath.Join(dir, "hugetlb."+size+".events")); err == nil {
			for _, line := range strings.Split(string(data), "\n") {
				if f := strings.Fields(line); len(f) == 2 && f[0] == "max" {
					s.Failcnt, _ = parseCount(f[1], 64)
					break
				}
			}
		}
		out = append(out, s)
	}
	return out
}

// hugePageSizes are the host's huge page sizes as the hugetlb controller names them ("2MB",
// "1GB"), from /sys/kernel/mm/hugepages/hugepages-<N>kB; read once, as they never change.
var hugePageSizes = sync.OnceValue(func() []string {
	d, err := os.Open("/sys/kernel/mm/hugepages")
	if err != nil {
		return nil
	}
	defer d.Close()
	// In the directory's order, not sorted: the order the library, and so containerd's shim,
	// reports them in.
	names, err := d.Readdirnames(0)
	if err != nil {
		return nil
	}
	var sizes []string
	for _, n := range names {
		kb, ok := strings.CutPrefix(n, "hugepages-")
		if !ok {
			continue
		}
		if kb, ok = strings.CutSuffix(kb, "kB"); !ok {
			continue
		}
		k, err := strconv.Atoi(kb)
		switch {
		case err != nil:
		case k >= 1<<20:
			sizes = append(sizes, strconv.Itoa(k>>20)+"GB")
		case k >= 1<<10:
			sizes = append(sizes, strconv.Itoa(k>>10)+"MB")
		default:
			sizes = append(sizes, kb+"KB")
		}
	}
	return sizes
})

// v2PSI reads a pressure file ("some avg10=... total=..." and "full ..."); nil when it is
// missing or a value does not parse.
func v2PSI(dir, name string) *stats.PSIStats {
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		return nil
	}
	psi := &stats.PSIStats{}
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		var d *stats.PSIData
		switch fields[0] {
		case "some":
			psi.Some = &stats.PSIData{}
			d = psi.Some
		case "full":
			psi.Full = &stats.PSIData{}
			d = psi.Full
		default:
			continue
		}
		for _, kv := range fields[1:] {
			k, s, ok := strings.Cut(kv, "=")
			if !ok {
				return nil
			}
			var err error
			switch k {
			case "avg10":
				d.Avg10, err = strconv.ParseFloat(s, 64)
			case "avg60":
				d.Avg60, err = strconv.ParseFloat(s, 64)
			case "avg300":
				d.Avg300, err = strconv.ParseFloat(s, 64)
			case "total":
				d.Total, err = strconv.ParseUint(s, 10, 64)
			}
			if err != nil {
				return nil
			}
		}
	}
	return psi
}
