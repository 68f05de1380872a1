// SPDX-License-Identifier: Apache-2.0

// The driver's state directory and the shim binary's start and delete actions: a bundle per
// task under state/namespace/id, the mounts still below one, the command line and environment
// every shim invocation gets, and the shim's stderr folded into its error. Mirrors containerd
// v2.4 core/runtime/v2/bundle.go (NewBundle), command.go (command) and binary.go (binary.Start,
// binary.Delete).

package driver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
	"google.golang.org/protobuf/proto"
)

// Driver is one containerd, as far as a shim can tell: a state directory holding a bundle per
// task (State/Namespace/ID, like containerd's io.containerd.runtime.v2.task directory), and the
// addresses and environment it hands every shim it launches.
type Driver struct {
	State     string // root of the bundles
	Namespace string
	Shim      string // path of the shim binary
	// Address is passed as -address. containerd passes its gRPC socket; the driver serves no gRPC,
	// so the address only has to be stable.
	Address string
	// TTRPCAddress is exported as TTRPC_ADDRESS: where shims forward events.
	TTRPCAddress string
	// Env is added to the environment of every shim invocation (SHIMWALK_SOCKET_DIR, for one).
	Env   []string
	Debug bool
	// CgroupParent is where NewBundle puts containers' cgroups: CgroupParent/namespace/id.
	CgroupParent string
	// Trace, when set, records the shim's start and delete actions and, through Connect, RPCs.
	Trace *Trace
}

// New returns a driver for state and namespace that launches shim.
func New(state, namespace, shim string) *Driver {
	return &Driver{
		State:        state,
		Namespace:    namespace,
		Shim:         shim,
		Address:      filepath.Join(state, "driver.sock"),
		TTRPCAddress: filepath.Join(state, "events.sock"),
		CgroupParent: "/shimwalk",
	}
}

// Bundle is the directory of task id.
func (d *Driver) Bundle(id string) string {
	return filepath.Join(d.State, d.Namespace, id)
}

// CreateBundle makes the bundle directory of id, refusing an id that would escape the state
// directory and a bundle that exists already.
func (d *Driver) CreateBundle(id string) (string, error) {
	if err := ValidateID("namespace", d.Namespace); err != nil {
		return "", err
	}
	if err := ValidateID("id", id); err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(d.State, d.Namespace), 0o711); err != nil {
		return "", fmt.Errorf("create state directory: %w", err)
	}
	b := d.Bundle(id)
	if err := os.Mkdir(b, 0o711); err != nil {
		return "", fmt.Errorf("create bundle: %w", err)
	}
	return b, nil
}

// command builds a shim invocation the way containerd v2.4 core/runtime/v2/command.go command does.
func (d *Driver) command(ctx context.Context, dir string, args ...string) *exec.Cmd {
	self, _ := os.Executable()
	base := []string{"-namespace", d.Namespace, "-address", d.Address, "-publish-binary", self}
	if d.Debug {
		base = append(base, "-debug")
	}
	cmd := exec.CommandContext(ctx, d.Shim, append(base, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"TTRPC_ADDRESS="+d.TTRPCAddress,
		"GRPC_ADDRESS="+d.Address,
		"NAMESPACE="+d.Namespace,
		"MAX_SHIM_VERSION=2",
	)
	cmd.Env = append(cmd.Env, d.Env...)
	// A shim that misbehaves and keeps a child on our pipes must not hang the caller.
	cmd.WaitDelay = time.Second
	return cmd
}

// StartShim runs the shim's start action in the existing bundle of id with options (a
// protobuf Any, may be nil) on stdin, and records the reply in bootstrap.json.
func (d *Driver) StartShim(ctx context.Context, id string, options []byte) (Bootstrap, error) {
	dir := d.Bundle(id)
	if _, err := os.Stat(dir); err != nil {
		return Bootstrap{}, fmt.Errorf("bundle of %s: %w", id, err)
	}
	// The shim binary's path is kept for `delete` after a restart, as containerd does.
	if err := writeFileAtomic(filepath.Join(dir, bundle.ShimBinaryFile), []byte(d.Shim)); err != nil {
		return Bootstrap{}, err
	}
	cmd := d.command(ctx, dir, "-id", id, "start")
	cmd.Stdin = bytes.NewReader(options)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	began := time.Now()
	out, err := cmd.Output()
	d.Trace.Exec("start", cmd.Args, time.Since(began), out, err)
	if err != nil {
		return Bootstrap{}, fmt.Errorf("shim start: %w", shimError(err, stderr.Bytes()))
	}
	b, err := ParseStartReply(out)
	if err != nil {
		return Bootstrap{}, fmt.Errorf("shim start: %w", err)
	}
	if err := bundle.WriteBootstrap(dir, b); err != nil {
		return Bootstrap{}, err
	}
	return b, nil
}

// DeleteShim runs the shim's delete action for id, which stops a live shim and cleans up after
// a dead one, and returns what it reports about the task's exit.
func (d *Driver) DeleteShim(ctx context.Context, id string) (*taskapi.DeleteResponse, error) {
	dir := d.Bundle(id)
	shim := d.Shim
	// The binary that started the shim is the one that knows how to delete it.
	if p, err := os.ReadFile(filepath.Join(dir, bundle.ShimBinaryFile)); err == nil && len(p) > 0 {
		shim = string(p)
	}
	dd := *d
	dd.Shim = shim
	cmd := dd.command(ctx, dir, "-id", id, "-bundle", dir, "delete")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	began := time.Now()
	out, err := cmd.Output()
	d.Trace.Exec("delete", cmd.Args, time.Since(began), out, err)
	if err != nil {
		return nil, fmt.Errorf("shim delete: %w", shimError(err, stderr.Bytes()))
	}
	var resp taskapi.DeleteResponse
	if err := proto.Unmarshal(out, &resp); err != nil {
		return nil, fmt.Errorf("shim delete: reply is not a DeleteResponse: %w", err)
	}
	return &resp, nil
}

// RemoveBundle deletes the bundle of id. It refuses while anything is mounted inside it, so a
// rootfs the shim failed to unmount is never emptied through its mount point.
func (d *Driver) RemoveBundle(id string) error {
	dir := d.Bundle(id)
	mounts, err := MountsUnder(dir)
	if err != nil {
		return err
	}
	if len(mounts) > 0 {
		return fmt.Errorf("bundle %s still has mounts: %s", dir, strings.Join(mounts, ", "))
	}
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove bundle: %w", err)
	}
	return nil
}

// Tasks lists the ids that have a bundle in the driver's namespace.
func (d *Driver) Tasks() ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(d.State, d.Namespace))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list bundles: %w", err)
	}
	var ids []string
	for _, e := range entries {
		if e.IsDir() && ValidateID("id", e.Name()) == nil {
			ids = append(ids, e.Name())
		}
	}
	return ids, nil
}

// MountsUnder lists the mount points at or below dir, from /proc/self/mountinfo.
func MountsUnder(dir string) ([]string, error) {
	return MountsUnderIn("/proc/self/mountinfo", dir)
}

// MountsUnderIn is MountsUnder as a mountinfo file (of another process's mount namespace) tells.
func MountsUnderIn(mountinfo, dir string) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(mountinfo)
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	var found []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		mp := unescapeMountPath(fields[4])
		if mp == abs || strings.HasPrefix(mp, abs+"/") {
			found = append(found, mp)
		}
	}
	return found, sc.Err()
}

// unescapeMountPath undoes the octal escapes (\040 for a space) of mountinfo.
func unescapeMountPath(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var c byte
			if _, err := fmt.Sscanf(s[i+1:i+4], "%03o", &c); err == nil {
				b.WriteByte(c)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// shimError folds a shim's one-line stderr into the error of its exit. A shim that panicked
// printed a stack: its "panic:" line is the one that says what went wrong.
func shimError(err error, stderr []byte) error {
	msg := strings.TrimSpace(string(stderr))
	if msg == "" {
		return err
	}
	lines := strings.Split(msg, "\n")
	msg = lines[len(lines)-1]
	for _, l := range lines {
		if strings.HasPrefix(l, "panic: ") {
			msg = l
			break
		}
	}
	return fmt.Errorf("%s (%w)", msg, err)
}
