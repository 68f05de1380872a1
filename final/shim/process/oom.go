// SPDX-License-Identifier: Apache-2.0

package process

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// oomCounter reads the kernel's count of OOM kills in a container's memory cgroup:
// memory.oom_control on cgroup v1, memory.events on v2, both with an oom_kill line.
//
// containerd's runc shim watches an eventfd (v1) or inotify (v2) and publishes TaskOOM when it
// fires, which can come after the TaskExit of the init the OOM killer ended. Reading the count
// when the init exits orders the two: TaskOOM first.
type oomCounter struct {
	path string
	seen uint64
}

// newOOMCounter finds the memory cgroup of pid and reads its count so far; nil when the host
// has no memory controller for it.
func newOOMCounter(pid int) *oomCounter {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return nil
	}
	var path string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case strings.Contains(","+parts[1]+",", ",memory,"):
			path = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.oom_control")
		case parts[0] == "0" && parts[1] == "" && path == "":
			// cgroup v2, unless a v1 memory line (hybrid hosts) says otherwise.
			path = filepath.Join("/sys/fs/cgroup", parts[2], "memory.events")
		}
	}
	o := &oomCounter{path: path}
	n, ok := o.read()
	if !ok {
		return nil
	}
	o.seen = n
	return o
}

func (o *oomCounter) read() (uint64, bool) {
	data, err := os.ReadFile(o.path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// OOMKilled reports whether the kernel's OOM killer ended a process of the container since the
// container was created or since the last call. Call it when the init has exited, before its
// TaskExit: the cgroup outlives the process until Delete.
func (p *Init) OOMKilled() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.oom == nil {
		return false
	}
	n, ok := p.oom.read()
	if !ok || n <= p.oom.seen {
		return false
	}
	p.oom.seen = n
	return true
}
