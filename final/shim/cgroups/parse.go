// SPDX-License-Identifier: Apache-2.0

// What the v1 and v2 readers (v1.go, v2.go) parse and write alike: numbers, rdma lines,
// "key value" files, and cgroup.procs to join a cgroup. Mirrors the helpers of
// containerd/cgroups/v3 (cgroup1/utils.go and cgroup2/utils.go: parseUint, parseKV,
// parseRdmaKV), whose conventions the metrics keep.

package cgroups

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// What the v1 and v2 readers (v1.go, v2.go) parse alike.

// parseCount parses a number of a cgroup file as the cgroups library does: a negative one (a
// kernel's signed counter gone below zero) reads as 0.
func parseCount(s string, bits int) (uint64, error) {
	v, err := strconv.ParseUint(s, 10, bits)
	if err == nil {
		return v, nil
	}
	if i, _ := strconv.ParseInt(s, 10, bits); i < 0 {
		return 0, nil
	}
	return 0, err
}

// rdmaLine parses a line of rdma.current or rdma.max, "DEVICE hca_handle=N hca_object=N", where
// N may be "max". ok is false for a line of another shape; a value that does not parse stays 0.
func rdmaLine(line string) (device string, handles, objects uint32, ok bool) {
	fields := strings.Fields(line)
	if len(fields) != 3 {
		return "", 0, 0, false
	}
	for _, kv := range fields[1:] {
		k, s, found := strings.Cut(kv, "=")
		if !found {
			continue
		}
		v := uint64(math.MaxUint32)
		if s != "max" {
			var err error
			if v, err = parseCount(s, 32); err != nil {
				continue
			}
		}
		switch k {
		case "hca_handle":
			handles = uint32(v)
		case "hca_object":
			objects = uint32(v)
		}
	}
	return fields[0], handles, objects, true
}

// readKV reads a file of "key value" lines; every line must be one. A file that cannot be
// opened gives the open's error, so that a caller can tell a missing one.
func readKV(dir, name string) (map[string]uint64, error) {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 2 {
			return nil, fmt.Errorf("%s: line %q is not a key and a value", name, sc.Text())
		}
		v, err := parseCount(fields[1], 64)
		if err != nil {
			// Not %w: a parse error must never read as a missing file.
			return nil, fmt.Errorf("%s: line %q: %v", name, sc.Text(), err)
		}
		out[fields[0]] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", name, err)
	}
	return out, nil
}

// joinDir moves pid into the cgroup whose directory is dir, of either layout. The cgroup must
// exist: cgroup.procs is opened, never created.
func joinDir(dir string, pid int) error {
	f, err := os.OpenFile(filepath.Join(dir, "cgroup.procs"), os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(strconv.Itoa(pid))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
