// SPDX-License-Identifier: Apache-2.0

package shimtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	taskapi "github.com/containerd/containerd/api/runtime/task/v2"
	"github.com/containerd/containerd/api/types/task"
	"google.golang.org/grpc/codes"

	"github.com/shimwalk/shimwalk/final/driver"
	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// dirState is what a directory holds, name by name, with each file's size and mode: enough to
// tell that nothing was created, removed or written there.
func dirState(t *testing.T, dir string) map[string]string {
	t.Helper()
	state := map[string]string{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		state[e.Name()] = info.Mode().String() + " " + strings.Repeat("#", int(min(info.Size(), 64)))
	}
	return state
}

func sameState(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// running checks that k's container still runs as the same process.
func running(t *testing.T, k *testkit.Task, pid int, after string) {
	t.Helper()
	if st := k.State(); st.Status != task.Status_RUNNING || int(st.Pid) != pid {
		t.Errorf("after %s: State = %v, want RUNNING with pid %d", after, st, pid)
	}
	answers(t, k)
}

// TestCreateRefusesBadBundles: a bundle that is a file, a symlink to a bundle elsewhere, or
// whose config.json is malformed, huge or a symlink is refused with InvalidArgument before the
// shim writes anything anywhere, and the running container is left alone.
func TestCreateRefusesBadBundles(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "badbundles-host", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	pid := k.Run()

	// A complete bundle elsewhere, that runc would run if handed its path.
	target, err := d.NewBundle("target", driver.SpecOptions{Args: []string{"sleep", "100"}, Rootfs: testkit.Rootfs(t), Readonly: true})
	if err != nil {
		t.Fatal(err)
	}
	// An exit.json that a Create in this bundle would remove as stale.
	if err := os.WriteFile(filepath.Join(target, bundle.ExitFile), []byte(`{"pid":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	newBundle := func(id string, write func(dir string) error) string {
		dir, err := d.CreateBundle(id)
		if err != nil {
			t.Fatal(err)
		}
		if err := write(dir); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	file := d.Bundle("file")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	link := d.Bundle("link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	malformed := newBundle("malformed", func(dir string) error {
		return os.WriteFile(filepath.Join(dir, bundle.ConfigFile), []byte(`{"ociVersion": "1.0.2", "process": {`), 0o600)
	})
	huge := newBundle("huge", func(dir string) error {
		// Valid JSON, 20 MiB of it.
		spec := driver.DefaultSpec(d.Namespace, "huge", driver.SpecOptions{Args: []string{"true"}, Rootfs: testkit.Rootfs(t)})
		spec.Annotations = map[string]string{"padding": strings.Repeat("x", 20<<20)}
		return driver.WriteSpec(dir, spec)
	})
	notSpec := newBundle("notspec", func(dir string) error {
		return os.WriteFile(filepath.Join(dir, bundle.ConfigFile), []byte(`["a", "list"]`), 0o600)
	})
	specLink := newBundle("speclink", func(dir string) error {
		return os.Symlink(filepath.Join(target, bundle.ConfigFile), filepath.Join(dir, bundle.ConfigFile))
	})
	cases := []struct{ name, id, bundle string }{
		{"a bundle that is a regular file", "file", file},
		{"a bundle that is a symlink to another", "link", link},
		{"a malformed config.json", "malformed", malformed},
		{"a config.json of 20 MiB", "huge", huge},
		{"a config.json that is not a spec", "notspec", notSpec},
		{"a config.json that is a symlink", "speclink", specLink},
	}
	before := dirState(t, target)
	for _, c := range cases {
		_, err := k.Conn.Task.Create(rpcCtx(t, 30*time.Second), &taskapi.CreateTaskRequest{ID: c.id, Bundle: c.bundle})
		expectCode(t, "Create with "+c.name, err, codes.InvalidArgument)
		if msg := driver.Message(err); err != nil && (len(msg) > 1024 || !strings.Contains(msg, c.bundle)) {
			t.Errorf("Create with %s: message %.200q should name the bundle, briefly", c.name, msg)
		}
	}
	if after := dirState(t, target); !sameState(before, after) {
		t.Errorf("the bundle behind the symlink changed: %v, then %v", before, after)
	}
	for _, c := range cases[2:] {
		if entries, _ := os.ReadDir(c.bundle); len(entries) != 1 {
			t.Errorf("Create with %s left files in its bundle: %d entries", c.name, len(entries))
		}
	}
	known := testkit.RuncContainers(t, d.Namespace)
	for _, c := range cases {
		if slices.Contains(known, c.id) {
			t.Errorf("runc knows %s, refused for %s", c.id, c.name)
		}
	}
	if m := testkit.Mounts(t, d.State); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	running(t, k, pid, "the refused Creates")
}

// TestStdioMustBeFIFOs: stdio paths are FIFOs containerd made. A regular file, a directory, a
// symlink (even to a FIFO) or nothing at all is refused with InvalidArgument, by Create and by
// an exec's Start, before runc runs, and the file named is not touched.
func TestStdioMustBeFIFOs(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "stdio", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	pid := k.Run()

	dir := testkit.TempDir(t)
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	regular := filepath.Join(dir, "regular")
	if err := os.WriteFile(regular, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	subdir := filepath.Join(dir, "dir")
	if err := os.Mkdir(subdir, 0o700); err != nil {
		t.Fatal(err)
	}
	toFIFO, toFile := filepath.Join(dir, "to-fifo"), filepath.Join(dir, "to-file")
	if err := os.Symlink(fifo, toFIFO); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(regular, toFile); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing")
	type stdio struct{ stdin, stdout, stderr string }
	cases := map[string]stdio{
		"stdout a regular file":     {stdout: regular},
		"stderr a regular file":     {stdout: fifo, stderr: regular},
		"stdout a directory":        {stdout: subdir},
		"stdout a symlink to FIFO":  {stdout: toFIFO},
		"stdout a symlink to file":  {stdout: toFile},
		"stdout missing":            {stdout: missing},
		"stdin a regular file":      {stdin: regular, stdout: fifo},
		"stdin a directory":         {stdin: subdir},
		"stdin a symlink to a FIFO": {stdin: toFIFO},
		"stdin missing":             {stdin: missing},
	}
	before := dirState(t, dir)
	n := 0
	for name, io := range cases {
		n++
		id := "bad" + string(rune('a'+n))
		taskDir, err := d.NewBundle(id, driver.SpecOptions{Args: []string{"true"}, Rootfs: testkit.Rootfs(t), Readonly: true})
		if err != nil {
			t.Fatal(err)
		}
		_, err = k.Conn.Task.Create(rpcCtx(t, 30*time.Second), &taskapi.CreateTaskRequest{
			ID: id, Bundle: taskDir, Stdin: io.stdin, Stdout: io.stdout, Stderr: io.stderr,
		})
		expectCode(t, "Create with "+name, err, codes.InvalidArgument)
		if _, err := os.Stat(filepath.Join(taskDir, bundle.InitPidFile)); !os.IsNotExist(err) {
			t.Errorf("Create with %s ran runc create: %v", name, err)
		}
		for _, terminal := range []bool{false, true} {
			if terminal && io.stderr != "" {
				continue // a terminal has no stderr of its own
			}
			execID := id + "-exec"
			if terminal {
				execID = id + "-tty"
			}
			_, err = k.Conn.Task.Exec(rpcCtx(t, 10*time.Second), &taskapi.ExecProcessRequest{
				ID: k.ID, ExecID: execID, Spec: execSpec(t, "true"), Terminal: terminal,
				Stdin: io.stdin, Stdout: io.stdout, Stderr: io.stderr,
			})
			if err != nil {
				t.Fatalf("Exec with %s: %v", name, err)
			}
			_, err = k.Conn.Task.Start(rpcCtx(t, 30*time.Second), &taskapi.StartRequest{ID: k.ID, ExecID: execID})
			expectCode(t, "exec Start with "+name, err, codes.InvalidArgument)
			if _, err := k.Conn.Task.Delete(rpcCtx(t, 10*time.Second), &taskapi.DeleteRequest{ID: k.ID, ExecID: execID}); err != nil {
				t.Errorf("Delete of the refused exec %s: %v", execID, err)
			}
		}
	}
	if after := dirState(t, dir); !sameState(before, after) {
		t.Errorf("the stdio paths changed: %v, then %v", before, after)
	}
	if data, _ := os.ReadFile(regular); string(data) != "keep" {
		t.Errorf("the regular file now holds %q", data)
	}
	known := testkit.RuncContainers(t, d.Namespace)
	if len(known) != 1 || known[0] != k.ID {
		// Other tests of the package share the namespace's root only under other namespaces.
		for _, id := range known {
			if strings.HasPrefix(id, "bad") {
				t.Errorf("runc knows %s", id)
			}
		}
	}
	pids, err := k.Conn.Task.Pids(rpcCtx(t, 10*time.Second), &taskapi.PidsRequest{ID: k.ID})
	if err != nil || len(pids.Processes) != 1 {
		t.Errorf("Pids = %v, %v; want the init alone", pids, err)
	}
	running(t, k, pid, "the refused stdio")
}

// TestIDsCheckedBeforePaths: every RPC that names a task or exec checks the id before it is
// used, so an id like ".." or "a/b" gets InvalidArgument, never NotFound from a lookup or a
// path built from it.
func TestIDsCheckedBeforePaths(t *testing.T) {
	t.Parallel()
	d := testkit.NewDriver(t, shimBinary(t))
	k := testkit.NewTask(t, d, "ids", testkit.TaskOptions{Args: []string{"sleep", "100"}, NullIO: true})
	pid := k.Run()
	svc := k.Conn.Task
	for _, id := range []string{"..", "a/b", "../ids", "nul\x00", strings.Repeat("i", 10<<10), "."} {
		calls := map[string]func() error{
			"Create": func() error {
				_, err := svc.Create(rpcCtx(t, 10*time.Second), &taskapi.CreateTaskRequest{ID: id, Bundle: k.Bundle})
				return err
			},
			"State": func() error {
				_, err := svc.State(rpcCtx(t, 10*time.Second), &taskapi.StateRequest{ID: id})
				return err
			},
			"Start": func() error {
				_, err := svc.Start(rpcCtx(t, 10*time.Second), &taskapi.StartRequest{ID: id})
				return err
			},
			"Kill": func() error {
				_, err := svc.Kill(rpcCtx(t, 10*time.Second), &taskapi.KillRequest{ID: id, Signal: 9})
				return err
			},
			"Delete": func() error {
				_, err := svc.Delete(rpcCtx(t, 10*time.Second), &taskapi.DeleteRequest{ID: id})
				return err
			},
			"Wait": func() error {
				_, err := svc.Wait(rpcCtx(t, 10*time.Second), &taskapi.WaitRequest{ID: id})
				return err
			},
			"Pids": func() error {
				_, err := svc.Pids(rpcCtx(t, 10*time.Second), &taskapi.PidsRequest{ID: id})
				return err
			},
			"Exec": func() error {
				_, err := svc.Exec(rpcCtx(t, 10*time.Second), &taskapi.ExecProcessRequest{ID: k.ID, ExecID: id, Spec: execSpec(t, "true")})
				return err
			},
			"exec State": func() error {
				_, err := svc.State(rpcCtx(t, 10*time.Second), &taskapi.StateRequest{ID: k.ID, ExecID: id})
				return err
			},
			"exec Kill": func() error {
				_, err := svc.Kill(rpcCtx(t, 10*time.Second), &taskapi.KillRequest{ID: k.ID, ExecID: id, Signal: 9})
				return err
			},
		}
		for name, call := range calls {
			expectCode(t, name+" with id "+shorten(id), call(), codes.InvalidArgument)
		}
	}
	if entries, err := os.ReadDir(filepath.Dir(k.Bundle)); err != nil || len(entries) != 1 {
		t.Errorf("the bundles directory holds %d entries (%v), want %s's alone", len(entries), err, k.ID)
	}
	running(t, k, pid, "the refused ids")
}
