// SPDX-License-Identifier: Apache-2.0

// The shim binary's entry: its flags, the choice of action (start, delete, -v, -info, or the
// long-lived shim), and the configuration read from the environment, as containerd v2.4's
// pkg/shim/shim.go does in parseFlags, RunShim and run.

package bootstrap

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/shimwalk/shimwalk/final/internal/bundle"
	"github.com/shimwalk/shimwalk/final/internal/identifiers"
	"github.com/shimwalk/shimwalk/final/shim/process"
	"github.com/shimwalk/shimwalk/final/shim/server"
)

// runtimeName is the runtime operators name in containerd's configuration.
const runtimeName = "io.containerd.shimwalk.v2"

// flags are what containerd passes to every shim invocation.
type flags struct {
	namespace, id, address, publishBinary, bundle string
	debug, version, info                          bool
	action                                        string // "start", "delete", or "" for the server
}

// Main runs the shim binary with args (without the program name) and returns its exit code.
func Main(args []string, version, revision string) int {
	f, err := parseFlags(args)
	if err == nil {
		err = dispatch(f, version, revision)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %s\n", filepath.Base(os.Args[0]), errorLine(err))
		return 1
	}
	return 0
}

// errorLine is err on one line: containerd puts the shim's output into its own error, and
// parts of a message (a type URL, a path) come from the caller and may hold line breaks.
func errorLine(err error) string {
	return strings.NewReplacer("\n", `\n`, "\r", `\r`).Replace(err.Error())
}

func parseFlags(args []string) (flags, error) {
	var f flags
	fs := flag.NewFlagSet("shim", flag.ContinueOnError)
	// The flag package prints usage on error; containerd reads stdout and stderr together.
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.namespace, "namespace", "", "namespace of the task")
	fs.StringVar(&f.id, "id", "", "id of the task")
	fs.StringVar(&f.address, "address", "", "containerd's gRPC address")
	fs.StringVar(&f.publishBinary, "publish-binary", "", "containerd binary")
	fs.StringVar(&f.bundle, "bundle", "", "bundle directory (delete)")
	fs.BoolVar(&f.debug, "debug", false, "debug logging")
	fs.BoolVar(&f.version, "v", false, "print the version and exit")
	fs.BoolVar(&f.info, "info", false, "print the runtime info protobuf and exit")
	if err := fs.Parse(args); err != nil {
		return f, err
	}
	if fs.NArg() > 1 {
		return f, fmt.Errorf("one action expected, got %q", fs.Args())
	}
	f.action = fs.Arg(0)
	if f.version || f.info {
		return f, nil
	}
	if err := identifiers.Validate("-namespace", f.namespace); err != nil {
		return f, err
	}
	if err := identifiers.Validate("-id", f.id); err != nil {
		return f, err
	}
	return f, nil
}

func dispatch(f flags, version, revision string) error {
	switch {
	case f.version:
		fmt.Printf("%s:\n  Version:  %s\n  Revision: %s\n  Runtime:  %s\n", filepath.Base(os.Args[0]), version, revision, runtimeName)
		return nil
	case f.info:
		return printInfo(version, revision)
	}
	switch f.action {
	case "start":
		return start(f)
	case "delete":
		return deleteAction(f)
	case "":
		return serve(f, version)
	}
	return fmt.Errorf("unknown action %q: want start or delete", f.action)
}

// serve is the long-lived shim.
func serve(f flags, version string) error {
	logger, logFile, err := openLog(f.debug)
	if err != nil {
		return err
	}
	defer logFile.Close()
	ln, err := server.InheritedListener()
	if err != nil {
		return err
	}
	return server.Serve(server.Config{
		Namespace: f.namespace, ID: f.id, Version: version, Log: logger, Listener: ln,
		TTRPCAddress: os.Getenv("TTRPC_ADDRESS"), RuncRoot: runcRoot(),
	})
}

// runcRoot is runc's state root for containers whose runtime options name none: the operator's
// SHIMWALK_RUNC_ROOT, or process.DefaultRuncRoot. The long-lived shim and the delete action,
// which containerd starts with the same environment, read it here and nowhere else.
func runcRoot() string {
	if root := os.Getenv("SHIMWALK_RUNC_ROOT"); root != "" {
		return root
	}
	return process.DefaultRuncRoot
}

// openLog returns where the long-lived shim logs: the bundle's `log` FIFO that containerd
// reads, or shim.log in the bundle when nobody created one.
func openLog(debug bool) (*slog.Logger, *os.File, error) {
	f, err := openLogFIFO(bundle.LogFIFO)
	if err != nil {
		f, err = openLogFile(bundle.ShimLogFile)
		if err != nil {
			return nil, nil, err
		}
	}
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(f, &slog.HandlerOptions{Level: level})), f, nil
}

// openLogFile opens the bundle's log file to append, never through a symlink: one found there
// is replaced by the file itself.
func openLogFile(name string) (*os.File, error) {
	open := func() (*os.File, error) {
		return os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
	}
	f, err := open()
	if errors.Is(err, unix.ELOOP) {
		if err := os.Remove(name); err != nil {
			return nil, fmt.Errorf("replace the symlink %s: %w", name, err)
		}
		f, err = open()
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	return f, nil
}
