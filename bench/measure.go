// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	tasks "github.com/containerd/containerd/api/services/tasks/v1"

	"github.com/shimwalk/shimwalk/final/driver"
)

// row is one metric of one containerd generation: samples of both shims, final first.
type row struct {
	metric string
	unit   string // "MiB", "ms", "" for a plain count
	final  []float64
	ref    []float64
	// target is the highest acceptable ratio final/reference of the medians; 0 for a row that
	// only informs.
	target float64
}

// genResult is everything measured under one containerd.
type genResult struct {
	name string
	refs string // the reference shim's binary
	rows []row
	// pss is the PSS summed over the shims of count containers, one shim each, in MiB, per shim
	// (final, reference): the chart's data.
	pss [2]map[int]float64
}

type results struct {
	gens    []genResult
	floor   []floorRow // the skeleton's rows, when o.skeleton is set
	started time.Time
	took    time.Duration
}

// measure runs every scenario under each containerd generation in o.
func measure(ctx context.Context, o options, log io.Writer) (*results, error) {
	// Short: containerd's and the shims' socket paths live below it.
	work, err := os.MkdirTemp("", "b")
	if err != nil {
		return nil, fmt.Errorf("work directory: %w", err)
	}
	defer os.RemoveAll(work)
	rootfs := filepath.Join(work, "rootfs")
	if err := driver.BuildBusyboxRootfs(rootfs); err != nil {
		return nil, err
	}
	res := &results{}
	for _, gen := range o.generations {
		g, err := measureGeneration(ctx, o, gen, work, rootfs, log)
		if err != nil {
			return nil, fmt.Errorf("containerd %s: %w", gen, err)
		}
		res.gens = append(res.gens, g)
	}
	if o.skeleton != "" {
		if res.floor, err = measureSkeleton(ctx, o, work, log); err != nil {
			return nil, err
		}
	}
	return res, nil
}

func measureGeneration(ctx context.Context, o options, gen, work, rootfs string, log io.Writer) (genResult, error) {
	b, err := startBench(o, gen, work, rootfs)
	if err != nil {
		return genResult{}, err
	}
	defer b.stop()
	fmt.Fprintf(log, "bench: %s, final %s, reference %s\n", b.name, b.shims[0].origin, b.shims[1].origin)
	g := genResult{name: b.name, refs: b.shims[1].origin}
	g.pss = [2]map[int]float64{{}, {}}
	mem, err := b.memory(ctx, o, &g, log)
	if err != nil {
		return g, err
	}
	lat, err := b.latencies(ctx, o, work, log)
	if err != nil {
		return g, err
	}
	g.rows = append(mem, lat...)
	var sizes [2][]float64
	for i, s := range b.shims {
		fi, err := os.Stat(s.origin)
		if err != nil {
			return g, fmt.Errorf("binary size: %w", err)
		}
		sizes[i] = []float64{float64(fi.Size()) / (1 << 20)}
	}
	g.rows = append(g.rows, row{metric: "shim binary size", unit: "MiB", final: sizes[0], ref: sizes[1]})
	return g, nil
}

// order is the order the two shims take in round i: A B, then B A, so that neither always goes
// first into a machine that was just busy with the other.
func order(i int) [2]int {
	if i%2 == 0 {
		return [2]int{0, 1}
	}
	return [2]int{1, 0}
}

// memory measures the shims' memory with containers one shim each, and with a group of
// containers sharing one shim.
func (b *bench) memory(ctx context.Context, o options, g *genResult, log io.Writer) ([]row, error) {
	// Three rows per count, then the group's: row index 3*i (PSS), 3*i+1 (RSS), 3*i+2 (threads).
	rows := make([]row, 0, 3*len(o.counts)+1)
	for _, n := range o.counts {
		rows = append(rows,
			row{metric: fmt.Sprintf("shim PSS per container, %d container(s), one shim each", n), unit: "MiB", target: 0.5},
			row{metric: fmt.Sprintf("shim RSS per container, %d container(s), one shim each", n), unit: "MiB"},
			row{metric: fmt.Sprintf("threads per shim, %d container(s)", n)})
	}
	marginal := row{metric: fmt.Sprintf("shim PSS per added container, %d containers grouped in one shim", o.group), unit: "MiB", target: 0.2}
	var totals [2]map[int][]float64 // PSS summed over the shims, per count, for the chart
	totals[0], totals[1] = map[int][]float64{}, map[int][]float64{}
	turn := 0
	for r := range o.memRounds {
		for i, n := range o.counts {
			for _, k := range order(turn) {
				m, err := b.oneShimEach(ctx, b.shims[k], n, o.settle)
				if err != nil {
					return nil, fmt.Errorf("memory round %d, %d containers, %s shim: %w", r, n, b.shims[k].name, err)
				}
				fmt.Fprintf(log, "bench: %s: %d containers: PSS %.1f MiB, RSS %.1f MiB, %d threads, %s shim\n",
					b.name, n, m.pss, m.rss, m.threads, b.shims[k].name)
				totals[k][n] = append(totals[k][n], m.pss)
				*pick(&rows[3*i], k) = append(*pick(&rows[3*i], k), m.pss/float64(n))
				*pick(&rows[3*i+1], k) = append(*pick(&rows[3*i+1], k), m.rss/float64(n))
				*pick(&rows[3*i+2], k) = append(*pick(&rows[3*i+2], k), float64(m.threads)/float64(n))
			}
			turn++
		}
		for _, k := range order(turn) {
			s := b.shims[k]
			m, err := b.groupMarginal(ctx, s, o)
			if err != nil {
				return nil, fmt.Errorf("memory round %d, group of %d, %s shim: %w", r, o.group, s.name, err)
			}
			fmt.Fprintf(log, "bench: %s: group of %d: %.2f MiB PSS per added container, %s shim\n", b.name, o.group, m, s.name)
			*pick(&marginal, k) = append(*pick(&marginal, k), m)
		}
		turn++
	}
	for k := range totals {
		for n, xs := range totals[k] {
			g.pss[k][n] = median(xs)
		}
	}
	return append(rows, marginal), nil
}

// oneShimEach starts n containers, one shim each, reads the shims' memory, and removes them.
func (b *bench) oneShimEach(ctx context.Context, s shim, n int, settle time.Duration) (shimMem, error) {
	ids := make([]string, n)
	for j := range ids {
		ids[j] = b.id("m" + s.name[:1])
	}
	err := parallel(n, 4, func(j int) error {
		_, err := b.startDetached(ctx, s, ids[j])
		return err
	})
	var m shimMem
	if err == nil {
		m, err = b.readMemory(ctx, s, settle, n)
	}
	if rerr := b.remove(ctx, ids...); err == nil {
		err = rerr
	}
	if err == nil {
		err = b.waitNoShims(ctx)
	}
	return m, err
}

// pick is r's samples of shim k.
func pick(r *row, k int) *[]float64 {
	if k == 0 {
		return &r.final
	}
	return &r.ref
}

// groupMarginal starts o.group containers that ask for one shim, and returns how much PSS each
// container after the first added.
func (b *bench) groupMarginal(ctx context.Context, s shim, o options) (float64, error) {
	// Both shims group on the CRI sandbox annotation (the reference's groupLabels in containerd's
	// cmd/containerd-shim-runc-v2/manager, and bootstrap's in the final shim).
	flag := "io.kubernetes.cri.sandbox-id=" + b.id("pod-"+s.name[:1])
	ids := make([]string, o.group)
	for j := range ids {
		ids[j] = b.id("g" + s.name[:1])
	}
	var first, all shimMem
	err := func() error {
		var err error
		for j, id := range ids {
			if _, err := b.startDetached(ctx, s, id, "--annotation", flag); err != nil {
				return err
			}
			if j == 0 {
				if first, err = b.readMemory(ctx, s, o.settle, 1); err != nil {
					return err
				}
			}
		}
		all, err = b.readMemory(ctx, s, o.settle, 1)
		return err
	}()
	if rerr := b.remove(ctx, ids...); err == nil {
		err = rerr
	}
	if err == nil {
		err = b.waitNoShims(ctx)
	}
	if err != nil {
		return 0, err
	}
	return (all.pss - first.pss) / float64(o.group-1), nil
}

// shimMem is what the shims of one shim kind use together.
type shimMem struct {
	rss, pss float64 // MiB
	threads  int
}

// readMemory waits settle, then sums RSS and PSS over the running shims, which must be want
// processes of s's binary.
func (b *bench) readMemory(ctx context.Context, s shim, settle time.Duration, want int) (shimMem, error) {
	select {
	case <-ctx.Done():
		return shimMem{}, ctx.Err()
	case <-time.After(settle):
	}
	pids, err := b.shimPids(s)
	if err != nil {
		return shimMem{}, err
	}
	if len(pids) != want {
		return shimMem{}, fmt.Errorf("%d %s shims run (%v), want %d", len(pids), s.name, pids, want)
	}
	var m shimMem
	for _, pid := range pids {
		rollup, err := readKB(fmt.Sprintf("/proc/%d/smaps_rollup", pid), "Rss:", "Pss:")
		if err != nil {
			return m, err
		}
		status, err := readKB(fmt.Sprintf("/proc/%d/status", pid), "Threads:")
		if err != nil {
			return m, err
		}
		m.rss += float64(rollup[0]) / 1024
		m.pss += float64(rollup[1]) / 1024
		m.threads += int(status[0])
	}
	return m, nil
}

// readKB reads the numbers after keys in a /proc file of "Key: value [kB]" lines.
func readKB(path string, keys ...string) ([]int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read shim memory: %w", err)
	}
	defer f.Close()
	vals := make([]int64, len(keys))
	found := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		for i, k := range keys {
			if fields[0] == k {
				v, err := strconv.ParseInt(fields[1], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("%s: %s %q: %w", path, k, fields[1], err)
				}
				vals[i] = v
				found++
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if found != len(keys) {
		return nil, fmt.Errorf("%s lacks one of %v", path, keys)
	}
	return vals, nil
}

// latencies takes o.rounds samples of each latency for both shims, and of the runc floor.
func (b *bench) latencies(ctx context.Context, o options, work string, log io.Writer) ([]row, error) {
	start := row{metric: "detached start, `ctr run -d` until RUNNING", unit: "ms", target: 1}
	runRm := row{metric: "run to exit, `ctr run --rm ... /bin/true`", unit: "ms", target: 1}
	execR := row{metric: "exec, `ctr task exec ... /bin/true`", unit: "ms", target: 1}
	exit := row{metric: "exit notification, SIGKILL until Wait returns", unit: "ms", target: 1}
	burst := row{metric: fmt.Sprintf("burst, %d parallel `ctr run -d` until all return", o.burstSize), unit: "ms", target: 1}
	var floor *runcFloor
	var floorMs []float64
	for i := range o.rounds {
		for _, k := range order(i) {
			s := b.shims[k]
			id := b.id("l" + s.name[:1])
			d, err := b.startDetached(ctx, s, id)
			if err == nil && floor == nil {
				floor, err = newRuncFloor(b, id, filepath.Join(work, "floor"))
			}
			var e, x time.Duration
			if err == nil {
				*pick(&start, k) = append(*pick(&start, k), ms(d))
				begin := time.Now()
				_, err = b.ctr(ctx, "task", "exec", "--fifo-dir", b.fifoDir, "--exec-id", "x", id, "/bin/true")
				e = time.Since(begin)
			}
			if err == nil {
				x, err = b.exitLatency(ctx, id)
			}
			if rerr := b.remove(ctx, id); err == nil {
				err = rerr
			}
			if err != nil {
				return nil, fmt.Errorf("latency round %d, %s shim: %w", i, s.name, err)
			}
			*pick(&execR, k) = append(*pick(&execR, k), ms(e))
			*pick(&exit, k) = append(*pick(&exit, k), ms(x))
			begin := time.Now()
			if _, err := b.ctr(ctx, append(b.runArgs(s, "--rm"), b.id("r"+s.name[:1]), "/bin/true")...); err != nil {
				return nil, fmt.Errorf("latency round %d, %s shim: %w", i, s.name, err)
			}
			*pick(&runRm, k) = append(*pick(&runRm, k), ms(time.Since(begin)))
		}
		d, err := floor.run(ctx, i)
		if err != nil {
			return nil, err
		}
		floorMs = append(floorMs, ms(d))
		if err := b.waitNoShims(ctx); err != nil {
			return nil, err
		}
	}
	for i := range o.bursts {
		for _, k := range order(i) {
			d, err := b.burst(ctx, b.shims[k], o.burstSize)
			if err != nil {
				return nil, fmt.Errorf("burst %d, %s shim: %w", i, b.shims[k].name, err)
			}
			*pick(&burst, k) = append(*pick(&burst, k), ms(d))
		}
	}
	fmt.Fprintf(log, "bench: %s: latencies done\n", b.name)
	floorRow := row{metric: "floor: `runc run` of the same bundle, /bin/true, no containerd, no shim", unit: "ms", final: floorMs, ref: floorMs}
	over := row{metric: "run to exit above the runc floor (medians)", unit: "ms", target: 0.8,
		final: []float64{median(runRm.final) - median(floorMs)}, ref: []float64{median(runRm.ref) - median(floorMs)}}
	return []row{start, runRm, execR, exit, burst, floorRow, over}, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// exitLatency kills id's init with SIGKILL, as the kernel or an operator would, and measures
// until a Wait that containerd's client had pending returns.
func (b *bench) exitLatency(ctx context.Context, id string) (time.Duration, error) {
	pid, _, err := b.task(ctx, id)
	if err != nil {
		return 0, err
	}
	wctx, cancel := context.WithTimeout(b.nsContext(ctx), ctrTimeout)
	defer cancel()
	type waited struct {
		at     time.Time
		status uint32
		err    error
	}
	done := make(chan waited, 1)
	go func() {
		// Owned by exitLatency: it receives from done on every path, and cancel ends the call.
		r, err := b.tasks.Wait(wctx, &tasks.WaitRequest{ContainerID: id})
		w := waited{at: time.Now(), err: err}
		if err == nil {
			w.status = r.ExitStatus
		}
		done <- w
	}()
	// The Wait must have reached the shim before the kill, or the measurement would include the
	// call's own way there. No reply says it has; this is ample on any machine this runs on.
	time.Sleep(100 * time.Millisecond)
	begin := time.Now()
	if err := syscall.Kill(int(pid), syscall.SIGKILL); err != nil {
		cancel()
		<-done
		return 0, fmt.Errorf("kill %s (pid %d): %w", id, pid, err)
	}
	w := <-done
	if w.err != nil {
		return 0, fmt.Errorf("wait %s: %w", id, w.err)
	}
	if w.status != 128+uint32(syscall.SIGKILL) {
		return 0, fmt.Errorf("wait %s: exit status %d, want %d", id, w.status, 128+syscall.SIGKILL)
	}
	return w.at.Sub(begin), nil
}

// burst starts n containers at once and measures until every `ctr run -d` has returned.
func (b *bench) burst(ctx context.Context, s shim, n int) (time.Duration, error) {
	ids := make([]string, n)
	for j := range ids {
		ids[j] = b.id("b" + s.name[:1])
	}
	begin := time.Now()
	err := parallel(n, n, func(j int) error {
		_, err := b.startDetached(ctx, s, ids[j])
		return err
	})
	took := time.Since(begin)
	if rerr := b.remove(ctx, ids...); err == nil {
		err = rerr
	}
	if err == nil {
		err = b.waitNoShims(ctx)
	}
	return took, err
}

// runcFloor runs the bundle containerd made for a container with runc alone.
type runcFloor struct {
	bundle, root, id string
}

// newRuncFloor copies the OCI spec containerd wrote for id, with /bin/true as the process, to a
// bundle of its own under dir.
func newRuncFloor(b *bench, id, dir string) (*runcFloor, error) {
	data, err := os.ReadFile(filepath.Join(b.c.Bundle(id), "config.json"))
	if err != nil {
		return nil, fmt.Errorf("runc floor: %w", err)
	}
	var spec map[string]any
	if err := json.Unmarshal(data, &spec); err != nil {
		return nil, fmt.Errorf("runc floor: %s: %w", id, err)
	}
	proc, ok1 := spec["process"].(map[string]any)
	linux, ok2 := spec["linux"].(map[string]any)
	if !ok1 || !ok2 {
		return nil, errors.New("runc floor: the container's spec has no process or linux section")
	}
	proc["args"] = []string{"/bin/true"}
	proc["terminal"] = false
	// Below the namespace's cgroup, which the private containerd's Stop removes.
	linux["cgroupsPath"] = "/" + b.c.Namespace + "/runc-floor"
	if data, err = json.Marshal(spec); err != nil {
		return nil, fmt.Errorf("runc floor: %w", err)
	}
	f := &runcFloor{bundle: dir, root: filepath.Join(dir, "state"), id: "floor"}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("runc floor: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		return nil, fmt.Errorf("runc floor: %w", err)
	}
	return f, nil
}

// run runs the floor container once, to its exit, and returns how long runc took.
func (f *runcFloor) run(ctx context.Context, i int) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, ctrTimeout)
	defer cancel()
	id := fmt.Sprintf("%s-%d", f.id, i)
	cmd := exec.CommandContext(ctx, "runc", "--root", f.root, "run", "--bundle", f.bundle, id)
	begin := time.Now()
	out, err := cmd.CombinedOutput()
	took := time.Since(begin)
	if err != nil {
		// A failed run may leave its state; runc delete --force removes it and its process.
		_ = exec.Command("runc", "--root", f.root, "delete", "--force", id).Run()
		return 0, fmt.Errorf("runc floor: runc run: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return took, nil
}
