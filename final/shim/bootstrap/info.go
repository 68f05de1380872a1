// SPDX-License-Identifier: Apache-2.0

// `shim -info`, as containerd v2.4's runc shim answers it (cmd/containerd-shim-runc-v2/manager
// manager_linux.go, Info). containerd 2.x asks each runtime handler for it, and decides from
// the features in it whether to offer recursive read-only mounts and user namespaces there.

package bootstrap

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"time"

	apitypes "github.com/containerd/containerd/api/types"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"github.com/opencontainers/runtime-spec/specs-go/features"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/shimwalk/shimwalk/final/internal/bundle"
	"github.com/shimwalk/shimwalk/final/shim/process"
)

// featuresURL is the type URL containerd registers for the OCI features document
// (core/runtime/typeurl.go), whose Any holds it as JSON.
var featuresURL = "types.containerd.io/opencontainers/runtime-spec/" + strconv.Itoa(specs.VersionMajor) + "/features/Features"

// printInfo reads the runtime options on stdin and writes a RuntimeInfo to stdout.
func printInfo(version, revision string) error {
	in, err := io.ReadAll(io.LimitReader(os.Stdin, 1<<20))
	if err != nil {
		return fmt.Errorf("read options: %w", err)
	}
	info := &apitypes.RuntimeInfo{
		Name:    runtimeName,
		Version: &apitypes.RuntimeVersion{Version: version, Revision: revision},
	}
	var o bundle.Options
	if len(in) > 0 {
		var opts anypb.Any
		if err := proto.Unmarshal(in, &opts); err != nil {
			return fmt.Errorf("options are not an Any: %w", err)
		}
		if o, _, err = process.ParseOptions(&opts); err != nil {
			return err
		}
		info.Options = &opts
	}
	binary := o.BinaryName
	if binary == "" {
		binary = "runc"
	}
	path, err := exec.LookPath(binary)
	if err != nil {
		return fmt.Errorf("runtime %s: %w", binary, err)
	}
	// A runtime without the command (runc before 1.1, crun before 1.9, youki) has no features
	// to report: containerd's shim answers without them too.
	if f, err := runtimeFeatures(path); err == nil {
		info.Features = f
	}
	out, err := proto.Marshal(info)
	if err != nil {
		return fmt.Errorf("runtime info: %w", err)
	}
	if _, err := os.Stdout.Write(out); err != nil {
		return fmt.Errorf("write runtime info: %w", err)
	}
	return nil
}

// runtimeFeatures is what `RUNTIME features` prints, checked to be a features document, as the
// Any containerd reads.
func runtimeFeatures(runtime string) (*anypb.Any, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, runtime, "features").Output()
	if err != nil {
		return nil, fmt.Errorf("%s features: %w", runtime, err)
	}
	var f features.Features
	if err := json.Unmarshal(out, &f); err != nil {
		return nil, fmt.Errorf("%s features: %w", runtime, err)
	}
	data, err := json.Marshal(&f)
	if err != nil {
		return nil, fmt.Errorf("%s features: %w", runtime, err)
	}
	return &anypb.Any{TypeUrl: featuresURL, Value: data}, nil
}
