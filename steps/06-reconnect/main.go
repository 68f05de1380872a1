// SPDX-License-Identifier: Apache-2.0

// The command line of a runtime-v2 shim and its action dispatch (since step 01).
// Mirrors parseFlags and Run in containerd v2.4 pkg/shim/shim.go, without the plugin registry.
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// options are the flags containerd passes to every shim invocation.
type options struct {
	namespace     string
	id            string
	address       string // containerd's gRPC address
	publishBinary string // containerd's own binary, for the old `containerd publish` path
	bundle        string // given to `delete`; `start` runs with the bundle as its working directory
	debug         bool
	action        string // "start", "delete", or "" for the long-lived shim
}

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	name := filepath.Base(os.Args[0])
	opts, err := parseFlags(args)
	if err == nil {
		err = dispatch(opts)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("shim", flag.ContinueOnError)
	// The flag package prints usage on error; we want a single line on stderr.
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.namespace, "namespace", "", "namespace of the task")
	fs.StringVar(&o.id, "id", "", "id of the task")
	fs.StringVar(&o.address, "address", "", "containerd's gRPC address")
	fs.StringVar(&o.publishBinary, "publish-binary", "", "containerd binary")
	fs.StringVar(&o.bundle, "bundle", "", "bundle directory (delete)")
	fs.BoolVar(&o.debug, "debug", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 1 {
		return o, fmt.Errorf("one action expected, got %q", fs.Args())
	}
	o.action = fs.Arg(0)
	if err := validate(o.namespace, "namespace"); err != nil {
		return o, err
	}
	if err := validate(o.id, "id"); err != nil {
		return o, err
	}
	return o, nil
}

func dispatch(o options) error {
	switch o.action {
	case "start":
		return start(o)
	case "delete":
		return deleteShim(o)
	case "":
		return serve(o)
	default:
		return fmt.Errorf("unknown action %q: want start or delete", o.action)
	}
}

// validate applies containerd's identifier rule (pkg/identifiers): the value becomes part of
// file paths and socket names, so it is checked before anything touches the file system.
func validate(v, what string) error {
	switch {
	case v == "":
		return fmt.Errorf("-%s is required", what)
	case len(v) > 76:
		return fmt.Errorf("%s %.20q... is longer than 76 characters", what, v)
	}
	for i, r := range v {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		sep := r == '.' || r == '_' || r == '-'
		if !alnum && !sep {
			return fmt.Errorf("%s %q: character %q is not allowed", what, v, r)
		}
		// A separator must sit between alphanumerics: this rules out "..", leading dots and the like.
		if sep && (i == 0 || i == len(v)-1 || !isAlnum(v[i-1]) || !isAlnum(v[i+1])) {
			return fmt.Errorf("%s %q: %q must stand between letters or digits", what, v, r)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}
