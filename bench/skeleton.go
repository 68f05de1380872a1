// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"

	"github.com/shimwalk/shimwalk/final/driver"
)

// The skeleton is steps/02-ttrpc's shim built as the final shim is: containerd's Task API served
// over ttrpc, the dependencies docs/architecture.md names, and nothing else (no container, no runc, no
// stdio, no events). Any shim built on that transport costs at least what the skeleton costs, so
// its memory says which memory targets a shim of this project can meet at all.

// floorRow is one measurement of the skeleton, held against the target of a generation's row.
type floorRow struct {
	metric  string
	samples []float64 // MiB
	// versus is the metric of the generation row whose target (a share of the reference's
	// median) this row is compared with.
	versus string
}

// measureSkeleton runs o.skeleton without containerd: for each count, that many idle shims with
// one connection each, as containerd keeps; then one shim with o.group connections, for what a
// connection adds, which is what containerd adds to a group's shim for each task it serves.
func measureSkeleton(ctx context.Context, o options, work string, log io.Writer) ([]floorRow, error) {
	dir := filepath.Join(work, "skel")
	// A private copy, as for the shims: no other program's mappings of the binary lower its PSS.
	bin := filepath.Join(dir, "bin", filepath.Base(o.skeleton))
	if err := copyExecutable(o.skeleton, bin); err != nil {
		return nil, err
	}
	d := driver.New(filepath.Join(dir, "state"), "shimbench", bin)
	d.Env = []string{"SHIMWALK_SOCKET_DIR=" + filepath.Join(dir, "s")}
	rows := make([]floorRow, 0, len(o.counts)+1)
	for _, n := range o.counts {
		rows = append(rows, floorRow{
			metric: fmt.Sprintf("skeleton PSS per shim, %d idle shim(s), one connection each", n),
			versus: fmt.Sprintf("shim PSS per container, %d container(s), one shim each", n),
		})
	}
	conns := floorRow{
		metric: fmt.Sprintf("skeleton PSS per added connection, %d connections to one shim", o.group),
		versus: fmt.Sprintf("shim PSS per added container, %d containers grouped in one shim", o.group),
	}
	next := 0
	ids := func(n int) []string {
		s := make([]string, n)
		for i := range s {
			s[i] = fmt.Sprintf("sk%d", next)
			next++
		}
		return s
	}
	for r := range o.memRounds {
		for i, n := range o.counts {
			pss, err := skeletonShims(ctx, d, ids(n), 1, o)
			if err != nil {
				return nil, fmt.Errorf("skeleton round %d, %d shims: %w", r, n, err)
			}
			fmt.Fprintf(log, "bench: skeleton: %d shims: PSS %.1f MiB\n", n, pss[0])
			rows[i].samples = append(rows[i].samples, pss[0]/float64(n))
		}
		pss, err := skeletonShims(ctx, d, ids(1), o.group, o)
		if err != nil {
			return nil, fmt.Errorf("skeleton round %d, %d connections: %w", r, o.group, err)
		}
		m := (pss[1] - pss[0]) / float64(o.group-1)
		fmt.Fprintf(log, "bench: skeleton: %d connections: %.3f MiB PSS per added connection\n", o.group, m)
		conns.samples = append(conns.samples, m)
	}
	return append(rows, conns), nil
}

// skeletonShims starts a skeleton shim for each of ids, each with one connection that has
// called Connect, and reads their summed PSS; with conns > 1 (and one id) it then opens conns-1
// more connections to the shim and reads again. It ends every shim it started.
func skeletonShims(ctx context.Context, d *driver.Driver, ids []string, conns int, o options) (pss []float64, err error) {
	var open []*driver.Conn
	pids := make([]int, len(ids))
	defer func() {
		for _, c := range open[min(len(open), len(ids)):] {
			c.Close()
		}
		for i, id := range ids {
			var c *driver.Conn
			if i < len(open) {
				c = open[i]
			}
			if _, serr := os.Stat(d.Bundle(id)); serr != nil {
				continue // never made
			}
			err = errors.Join(err, d.RemoveShim(ctx, c, id))
		}
	}()
	var address string
	connect := func(id string) (int, error) {
		c, err := driver.Dial(ctx, address)
		if err != nil {
			return 0, err
		}
		open = append(open, c)
		r, err := c.Task.Connect(ctx, &taskapi.ConnectRequest{ID: id})
		if err != nil {
			return 0, fmt.Errorf("connect %s: %w", id, err)
		}
		return int(r.ShimPid), nil
	}
	// One at a time: open's first len(ids) entries are the shims' own connections, in order.
	for i, id := range ids {
		if _, err := d.CreateBundle(id); err != nil {
			return nil, err
		}
		b, err := d.StartShim(ctx, id, nil)
		if err != nil {
			return nil, err
		}
		address = b.Address
		if pids[i], err = connect(id); err != nil {
			return nil, err
		}
	}
	read := func() error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(o.settle):
		}
		var sum float64
		for _, pid := range pids {
			kb, err := readKB(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Pss:")
			if err != nil {
				return err
			}
			sum += float64(kb[0]) / 1024
		}
		pss = append(pss, sum)
		return nil
	}
	if err := read(); err != nil || conns < 2 {
		return pss, err
	}
	for range conns - 1 {
		if _, err := connect(ids[0]); err != nil {
			return nil, err
		}
	}
	return pss, read()
}
