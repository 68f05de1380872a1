// SPDX-License-Identifier: Apache-2.0

package process

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
	runc "github.com/containerd/go-runc"

	"github.com/shimwalk/shimwalk/final/driver/testkit"
	"github.com/shimwalk/shimwalk/final/internal/bundle"
)

// TestMissingIn classifies what runc 1.1.5 and crun 1.8.1 say, word for word, when they fail
// (measured with `<runtime> --root <dir> --log log.json --log-format json <command>`; crun run
// where only the cgroup v1 hierarchies are mounted, as it refuses a hybrid layout). go-runc
// wraps a runtime's output as "<binary> did not terminate successfully: exit status N: <output>".
func TestMissingIn(t *testing.T) {
	const wrap = "/usr/sbin/runc did not terminate successfully: exit status 1: "
	for _, c := range []struct {
		name string
		out  string // go-runc's error
		log  string // the message of the runtime's log.json
		want missing
	}{
		{"runc kill of an unknown container", wrap + "container does not exist\n", "container does not exist", containerMissing},
		{"runc delete of an unknown container", wrap + "container does not exist\n", "container does not exist", containerMissing},
		{"runc state of an unknown container", wrap + "container does not exist\n", "", containerMissing},
		{"runc kill of a stopped container", wrap + "container not running\n", "container not running", processMissing},
		{"crun kill of a stopped container", wrap + "kill container: No such process\n", "kill container: No such process", processMissing},
		{"a process that exited before os.Process.Signal", "os: process already finished", "", processMissing},
		// crun names a missing file, not a missing container: as containerd's runc shim, the
		// shim takes neither for gone.
		{"crun kill of an unknown container", wrap + "error opening file `/run/crun/nosuch/status`: No such file or directory\n", "error opening file `/run/crun/nosuch/status`: No such file or directory", nothingMissing},
		{"crun delete of an unknown container", wrap + "cannot open directory '/run/crun/nosuch': No such file or directory\n", "cannot open directory '/run/crun/nosuch': No such file or directory", nothingMissing},
		{"crun pause of a stopped container", wrap + "the container `c1` is not running\n", "the container `c1` is not running", nothingMissing},
		{"runc killed", "signal: killed", "", nothingMissing},
		{"runc not installed", `exec: "runc": executable file not found in $PATH`, "", nothingMissing},
		{"a missing container in the log wins over a stopped one", wrap + "container not running\n", "container does not exist", containerMissing},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := missingIn(c.out, c.log); got != c.want {
				t.Errorf("missingIn(%q, %q) = %d, want %d", c.out, c.log, got, c.want)
			}
		})
	}
}

// TestMissingInLive asks the runc and crun installed here about a container they do not know,
// through go-runc as the shim does, so that a runtime whose words changed is noticed.
func TestMissingInLive(t *testing.T) {
	for _, c := range []struct {
		runtime string
		want    missing // for both kill and delete
	}{
		{"runc", containerMissing},
		{"crun", nothingMissing}, // see TestMissingIn
	} {
		t.Run(c.runtime, func(t *testing.T) {
			testkit.RequireCommand(t, c.runtime)
			bin, err := exec.LookPath(c.runtime)
			if err != nil {
				t.Fatal(err)
			}
			dir := t.TempDir()
			r := &runc.Runc{Command: bin, Root: filepath.Join(dir, "root"), Log: filepath.Join(dir, "log.json"), LogFormat: runc.JSON}
			ctx := context.Background()
			for name, call := range map[string]func() error{
				"kill":   func() error { return r.Kill(ctx, "nosuch", 9, nil) },
				"delete": func() error { return r.Delete(ctx, "nosuch", nil) },
			} {
				err := call()
				if err == nil {
					t.Fatalf("%s %s of an unknown container succeeded", c.runtime, name)
				}
				if got := missingIn(err.Error(), lastRuncError(r.Log, 0)); got != c.want {
					t.Errorf("%s %s: %v (log: %q) classified %d, want %d", c.runtime, name, err, lastRuncError(r.Log, 0), got, c.want)
				}
			}
		})
	}
}

// TestCallersOfMissingIn: each caller takes from missingIn what it may. Kill is NotFound for a
// missing process or container, said by this very call; Delete and ForceDelete are done when
// runc no longer knows the container, said by the call or logged.
func TestCallersOfMissingIn(t *testing.T) {
	// fails makes a stand-in for runc that fails with msg in its log and, with stderr, on
	// stderr too, as runc does (says); logs writes it to the log alone.
	fails := func(msg string, stderr bool) string {
		script := "#!/bin/sh\nwhile [ $# -gt 0 ]; do [ \"$1\" = --log ] && log=$2; shift; done\n" +
			"printf '{\"level\":\"error\",\"msg\":\"%s\"}\\n' '" + msg + "' >>\"$log\"\n"
		if stderr {
			script += "echo '" + msg + "' >&2\n"
		}
		return writeFakeRunc(t, script+"exit 1\n")
	}
	says := func(msg string) string { return fails(msg, true) }
	logs := func(msg string) string { return fails(msg, false) }
	f := newStateFixture(t)
	ctx := context.Background()
	for _, c := range []struct {
		name     string
		runc     string
		oldLog   string // an earlier call's error, already in log.json
		notFound bool
	}{
		{"kill of a stopped container", says("container not running"), "", true},
		{"kill of a container runc does not know", says("container does not exist"), "", true},
		{"kill that fails otherwise", says("permission denied"), "", false},
		{"kill that only logs it", logs("container not running"), "", false},
		{"kill that fails silently after an old error", writeFakeRunc(t, "#!/bin/sh\nexit 1\n"), "container not running", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := f.init(running)
			p.runtime.Command = c.runc
			if c.oldLog != "" {
				writeLog(t, p.runtime.Log, c.oldLog)
			}
			err := p.Kill(ctx, 9, false)
			if err == nil || errdefs.IsNotFound(err) != c.notFound {
				t.Errorf("Kill: %v, want an error that is NotFound: %v", err, c.notFound)
			}
		})
	}
	for _, c := range []struct {
		name string
		runc string
		done bool
	}{
		{"delete of a container runc does not know", says("container does not exist"), true},
		{"delete of a container runc only logs it does not know", logs("container does not exist"), true},
		{"delete that fails otherwise", says("container not running"), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p := f.init(stopped)
			p.runtime.Command = c.runc
			err := p.Delete(ctx)
			if (err == nil) != c.done {
				t.Errorf("Delete: %v, want done: %v", err, c.done)
			}
			dir := t.TempDir()
			err = ForceDelete(ctx, bundle.Options{BinaryName: c.runc, Root: t.TempDir()}, "ns", "c1", dir)
			if (err == nil) != c.done {
				t.Errorf("ForceDelete: %v, want done: %v", err, c.done)
			}
		})
	}
}

// writeLog writes msg to path as runc logs an error.
func writeLog(t *testing.T, path, msg string) {
	t.Helper()
	line := `{"level":"error","msg":"` + msg + `","time":"2026-01-01T00:00:00Z"}` + "\n"
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestOnlyTheCallsOwnLogCounts: runc's log keeps the errors of every earlier call. A call that
// failed without a word must be neither described nor classified by one of them: an old
// "container does not exist" would have Delete report a container gone that runc still has.
func TestOnlyTheCallsOwnLogCounts(t *testing.T) {
	silent := writeFakeRunc(t, "#!/bin/sh\nexit 1\n")
	f := newStateFixture(t)
	ctx := context.Background()
	t.Run("delete", func(t *testing.T) {
		p := f.init(stopped)
		p.runtime.Command = silent
		writeLog(t, p.runtime.Log, "container does not exist")
		if err := p.Delete(ctx); err == nil {
			t.Errorf("Delete that failed silently after an old error: no error, state %s", p.Status())
		}
	})
	t.Run("force delete", func(t *testing.T) {
		dir := t.TempDir()
		writeLog(t, filepath.Join(dir, bundle.RuncLogFile), "container does not exist")
		if err := ForceDelete(ctx, bundle.Options{BinaryName: silent, Root: t.TempDir()}, "ns", "c1", dir); err == nil {
			t.Error("ForceDelete that failed silently after an old error: no error")
		}
	})
	t.Run("error text", func(t *testing.T) {
		p := f.init(running)
		p.runtime.Command = silent
		writeLog(t, p.runtime.Log, "an earlier call's error")
		err := p.Pause(ctx)
		if err == nil || strings.Contains(err.Error(), "an earlier call's error") {
			t.Errorf("Pause that failed silently after an old error: %v", err)
		}
	})
}
