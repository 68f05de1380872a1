// SPDX-License-Identifier: Apache-2.0

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	tasks "github.com/containerd/containerd/api/services/tasks/v1"
	"github.com/containerd/containerd/api/types/task"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/shimwalk/shimwalk/final/driver"
)

// shim is one of the two contestants, as ctr selects it.
type shim struct {
	name   string   // "final" or "reference"
	binary string   // the executable the shim processes must run: a private copy of origin
	origin string   // the binary measured
	flags  []string // ctr run flags that select it
}

// bench is one private containerd with the two shims to compare under it.
type bench struct {
	name    string // "containerd 1.6.20", say
	c       *driver.Containerd
	rootfs  string
	fifoDir string
	shims   [2]shim // final, reference
	conn    *grpc.ClientConn
	tasks   tasks.TasksClient
	// runcRoots hold the runc state of either shim's containers, one directory per namespace.
	runcRoots []string

	mu   sync.Mutex
	next int // for container ids; guarded by mu
}

// ctrTimeout bounds one ctr call: far above any latency measured, so that a hung call ends the
// run with an error instead of hanging it.
const ctrTimeout = 60 * time.Second

// startBench starts the private containerd of generation gen ("1.6" or "2") under work.
func startBench(o options, gen, work, rootfs string) (*bench, error) {
	var version string
	switch gen {
	case "1.6":
	case "2":
		var err error
		if version, err = driver.Containerd2Version(o.repo); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("unknown containerd generation %q", gen)
	}
	cfg, err := driver.ReleaseConfig(version)
	if err != nil {
		return nil, err
	}
	// Short: the shims' sockets are named by a 64-character hash below it.
	cfg.Dir = filepath.Join(work, "c"+strings.ReplaceAll(gen, ".", ""))
	// ctr puts containers in the cgroup /<namespace>/<id>; Stop removes what is left of it.
	cfg.Namespace = fmt.Sprintf("shimbench%s-%d", strings.ReplaceAll(gen, ".", ""), os.Getpid())
	cfg.RuncRoot = filepath.Join(work, "runc")
	cfg.LogLevel = "info"
	// The reference is the runc shim of the same release: Debian's in PATH, or the one
	// scripts/containerd2.sh built beside containerd.
	ref := filepath.Join(filepath.Dir(cfg.Binary), "containerd-shim-runc-v2")
	if version == "" {
		if ref, err = exec.LookPath("containerd-shim-runc-v2"); err != nil {
			return nil, fmt.Errorf("containerd 1.6's runc shim: %w", err)
		}
	} else if _, err := os.Stat(ref); err != nil {
		return nil, fmt.Errorf("containerd %s is not built (scripts/containerd2.sh builds it): %w", version, err)
	}
	// Both shims run from copies of their own: PSS shares a page among every process that maps
	// it, so another program running the same binary meanwhile would lower a shim's reading.
	finalCopy := filepath.Join(cfg.Dir, "final", filepath.Base(o.shim))
	refCopy := filepath.Join(cfg.Dir, "ref", "containerd-shim-runc-v2")
	for from, to := range map[string]string{o.shim: finalCopy, ref: refCopy} {
		if err := copyExecutable(from, to); err != nil {
			return nil, err
		}
	}
	path := os.Getenv("PATH")
	for _, e := range cfg.Env {
		if p, ok := strings.CutPrefix(e, "PATH="); ok {
			path = p
		}
	}
	cfg.Env = append(cfg.Env, "PATH="+filepath.Dir(refCopy)+string(os.PathListSeparator)+path)
	c, err := driver.StartContainerd(cfg)
	if err != nil {
		return nil, err
	}
	b := &bench{c: c, rootfs: rootfs, fifoDir: filepath.Join(cfg.Dir, "fifo"), runcRoots: []string{cfg.RuncRoot, filepath.Join(work, "runc-ref")}}
	b.shims = [2]shim{
		{name: "final", binary: finalCopy, origin: o.shim, flags: []string{"--runtime", finalCopy}},
		// The runtime name, not a path: ctr hands runc options (here, a runc root of the run's
		// own) only to io.containerd.runc.v2, and containerd finds its binary in PATH, which
		// starts with the copy's directory. Which binary ran is checked on every shim.
		{name: "reference", binary: refCopy, origin: ref, flags: []string{"--runtime", "io.containerd.runc.v2", "--runc-root", b.runcRoots[1]}},
	}
	b.conn, err = grpc.NewClient("unix://"+c.Address, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		c.Stop()
		return nil, fmt.Errorf("containerd gRPC client: %w", err)
	}
	b.tasks = tasks.NewTasksClient(b.conn)
	out, err := b.ctr(context.Background(), "version")
	if err != nil {
		b.stop()
		return nil, err
	}
	b.name = "containerd " + serverVersion(out)
	return b, nil
}

// serverVersion picks the server's version out of `ctr version`.
func serverVersion(out string) string {
	_, server, _ := strings.Cut(out, "Server:")
	for _, line := range strings.Split(server, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "Version:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "(unknown version)"
}

// stop removes every container left and stops containerd, which kills the shims left.
func (b *bench) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := b.ctr(ctx, "container", "ls", "-q"); err == nil {
		b.remove(ctx, strings.Fields(out)...)
	}
	b.conn.Close()
	b.c.Stop()
	// A container whose delete failed outlives its shim, which Stop killed: runc removes it.
	for _, root := range b.runcRoots {
		dir := filepath.Join(root, b.c.Namespace)
		out, err := exec.CommandContext(ctx, "runc", "--root", dir, "list", "-q").Output()
		if err != nil {
			continue // no state directory: nothing ran there
		}
		for _, id := range strings.Fields(string(out)) {
			_ = exec.CommandContext(ctx, "runc", "--root", dir, "delete", "--force", id).Run()
		}
	}
}

// id is a fresh container id.
func (b *bench) id(prefix string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.next++
	return fmt.Sprintf("%s-%d", prefix, b.next)
}

// ctr runs ctr against the private containerd and returns its stdout; a non-zero exit is an
// error carrying stderr. containerd 2.x's ctr warns on stderr, so only stdout is read.
func (b *bench) ctr(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, ctrTimeout)
	defer cancel()
	cmd := b.c.CtrCommand(ctx, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// runArgs is `ctr run` with s and flags, all before --rootfs, whose path is positional.
func (b *bench) runArgs(s shim, flags ...string) []string {
	args := append([]string{"run", "--fifo-dir", b.fifoDir}, s.flags...)
	args = append(args, flags...)
	return append(args, "--rootfs", b.rootfs)
}

// workload is every long-running container's command: a line on stdout and one on stderr, as
// a container that logs writes, then sleep. A shim's copy of an output stream touches its
// buffer only once something passes through it.
var workload = []string{"/bin/sh", "-c", "echo started; echo started >&2; exec sleep 1000000"}

// startDetached runs a long-running container under s and returns how long `ctr run -d` took.
func (b *bench) startDetached(ctx context.Context, s shim, id string, flags ...string) (time.Duration, error) {
	args := append(append(b.runArgs(s, append([]string{"-d"}, flags...)...), id), workload...)
	begin := time.Now()
	if _, err := b.ctr(ctx, args...); err != nil {
		return 0, err
	}
	took := time.Since(begin)
	if _, status, err := b.task(ctx, id); err != nil {
		return 0, err
	} else if status != task.Status_RUNNING {
		return 0, fmt.Errorf("%s is %v after ctr run -d returned, not RUNNING", id, status)
	}
	return took, nil
}

// task asks containerd for the pid and status of id's init.
func (b *bench) task(ctx context.Context, id string) (uint32, task.Status, error) {
	ctx, cancel := context.WithTimeout(b.nsContext(ctx), ctrTimeout)
	defer cancel()
	r, err := b.tasks.Get(ctx, &tasks.GetRequest{ContainerID: id})
	if err != nil {
		return 0, 0, fmt.Errorf("get task %s: %w", id, err)
	}
	return r.Process.Pid, r.Process.Status, nil
}

func (b *bench) nsContext(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "containerd-namespace", b.c.Namespace)
}

// remove kills and deletes the tasks and containers ids, whatever their state.
func (b *bench) remove(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	// Containers without a task make task delete fail; the container delete below is what counts.
	_, _ = b.ctr(ctx, append([]string{"task", "delete", "--force"}, ids...)...)
	if _, err := b.ctr(ctx, append([]string{"container", "delete"}, ids...)...); err != nil {
		return err
	}
	return nil
}

// shimPids lists the running shims and checks that each runs s's binary: a reference resolved
// to some other containerd-shim-runc-v2 would make the comparison meaningless.
func (b *bench) shimPids(s shim) ([]int, error) {
	pids := b.c.Shims("")
	for _, pid := range pids {
		exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
		if err != nil {
			return nil, fmt.Errorf("shim %d: %w", pid, err)
		}
		if exe != s.binary {
			return nil, fmt.Errorf("shim %d runs %s, not the %s shim %s", pid, exe, s.name, s.binary)
		}
	}
	return pids, nil
}

// waitNoShims waits until the shims of removed containers are gone, so that the next reading
// counts only its own.
func (b *bench) waitNoShims(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		pids := b.c.Shims("")
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("shims %v outlived their containers by 30s", pids)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// parallel runs fn(0..n-1) on at most workers goroutines and returns the first error.
func parallel(n, workers int, fn func(i int) error) error {
	var wg sync.WaitGroup
	errs := make([]error, n)
	sem := make(chan struct{}, workers)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = fn(i)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// copyExecutable copies the program from to the new file to, with its directories.
func copyExecutable(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return fmt.Errorf("copy %s: %w", from, err)
	}
	in, err := os.Open(from)
	if err != nil {
		return fmt.Errorf("copy %s: %w", from, err)
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return fmt.Errorf("copy %s: %w", from, err)
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copy %s: %w", from, err)
	}
	if err := out.Close(); err != nil {
		return fmt.Errorf("copy %s: %w", from, err)
	}
	return nil
}
