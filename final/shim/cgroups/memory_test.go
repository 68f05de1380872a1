// SPDX-License-Identifier: Apache-2.0

package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// hybrid is /proc/<pid>/cgroup on a host with v1 controllers beside a cgroup2 hierarchy.
const hybrid = `12:pids:/ns/c1
11:cpu,cpuacct:/ns/c1
4:memory:/ns/c1
1:name=systemd:/ns/c1
0::/ns/c1
`

func TestFindMemory(t *testing.T) {
	for _, c := range []struct {
		name    string
		unified bool
		text    string
		dir     string // "" when not found
	}{
		{"v1 on a hybrid host", false, hybrid, "/r/memory/ns/c1"},
		{"v2 on a private cgroup2 mount", true, hybrid, "/r/ns/c1"},
		{"v2 only", true, "0::/kubepods/pod1/c2\n", "/r/kubepods/pod1/c2"},
		{"v1 co-mounted with another controller", false, "3:memory,hugetlb:/x\n", "/r/memory/x"},
		{"v1 without memory", false, "1:cpu:/x\n0::/x\n", ""},
		{"v2 without the 0:: line", true, "4:memory:/x\n", ""},
		{"controller named like memory", false, "4:memory_x:/x\n", ""},
		{"outside the cgroup namespace", true, "0::/../../x\n", ""},
		{"relative path", true, "0::x\n", ""},
		{"unclean path", false, "4:memory:/a/../b\n", ""},
		{"garbage", false, "no colons here\n\x00\xff::\n", ""},
		{"empty", true, "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			m, err := findMemory("/r", c.unified, []byte(c.text))
			if c.dir == "" {
				if !errors.Is(err, ErrNoMemoryCgroup) {
					t.Errorf("findMemory = %+v, %v; want ErrNoMemoryCgroup", m, err)
				}
				return
			}
			if err != nil || m.Dir != c.dir || m.Unified != c.unified {
				t.Errorf("findMemory = %+v, %v; want %s unified=%v", m, err, c.dir, c.unified)
			}
		})
	}
}

// fakeCgroup writes a memory cgroup's events file into a fresh directory.
func fakeCgroup(t *testing.T, unified bool, content string) Memory {
	t.Helper()
	m := Memory{Dir: t.TempDir(), Unified: unified}
	if content != "" {
		if err := os.WriteFile(m.eventsFile(), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func TestOOMKillsOnFakeTrees(t *testing.T) {
	for _, c := range []struct {
		name    string
		unified bool
		content string
		want    uint64
		ok      bool
	}{
		{"v1", false, "oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", 3, true},
		{"v2", true, "low 0\nhigh 0\nmax 12\noom 2\noom_kill 2\noom_group_kill 0\n", 2, true},
		{"v2 none yet", true, "low 0\nhigh 0\nmax 0\noom 0\noom_kill 0\n", 0, true},
		{"v1 before Linux 4.13", false, "oom_kill_disable 0\nunder_oom 0\n", 0, false},
		{"v2 oom only", true, "oom 4\noom_group_kill 1\n", 0, false},
		{"not a number", true, "oom_kill many\n", 0, false},
		{"negative", false, "oom_kill -1\n", 0, false},
		{"no file", true, "", 0, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			n, err := fakeCgroup(t, c.unified, c.content).OOMKills()
			if c.ok && (err != nil || n != c.want) {
				t.Errorf("OOMKills = %d, %v; want %d", n, err, c.want)
			}
			if !c.ok && err == nil {
				t.Errorf("OOMKills = %d, want an error", n)
			}
		})
	}
}

func TestIsUnified(t *testing.T) {
	if isUnified(t.TempDir()) {
		t.Error("a plain directory is not a cgroup2 mount")
	}
	if isUnified(filepath.Join(t.TempDir(), "missing")) {
		t.Error("a missing directory is not a cgroup2 mount")
	}
}
